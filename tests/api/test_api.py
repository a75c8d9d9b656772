#!/usr/bin/python3
"""test_api.py - the management API under /v1 and the tenant page's API, over real HTTP (TAP).

Starts what a deployment has: a fresh PostgreSQL database (`pgpace migrate`), the test webhook
receiver (one path answers 500 with a recognisable body), and `pgpace run` with its admin
listener. Tokens are made with `pgpace token create`. Then it drives the API as a client would:
- tokens and scopes: no token, a wrong one, a revoked one, one without the scope, the
  configuration's enqueue token: 401/403 and nothing changed;
- customers, endpoints, carriers and hosts: create (201, Location, ETag, the signing secret once),
  read, list with cursors, change with If-Match (428 without, 412 stale), delete; every error a
  problem document naming the field; the SSRF rules on webhook_url;
- Idempotency-Key: the same request twice makes one change and gets one answer; the key with
  another request is a 422;
- events and deliveries after an HTTP enqueue: by id with each attempt's status and the
  receiver's answer excerpt, listed newest first with filters and cursors; dead letters listed,
  replayed and purged; recover's dry run; stats;
- every write recorded as an api_write event naming the token;
- tenant page links: a link reads its own customer only (another's event is a 404), a tampered,
  revoked or read-only link is refused (401/403) and changes nothing; payloads only with
  portal_show_payloads on.
Every answer received is recorded and checked against the OpenAPI document the dispatcher serves
(GET /v1/openapi.json, which must equal src/api/openapi.json) by tests/api/openapi_check.py.

Environment (as meson gives every integration test): PGPACE_BIN, PGPACE_RECEIVER_BIN,
PGPACE_SOURCE_ROOT, and libpq's PGHOST/PGPORT/PGUSER for a running PostgreSQL (tests/run starts
one). Every wait has a deadline; everything started is stopped and the database dropped in
every outcome.
"""

import os
import sys

# Under `meson test --setup valgrind` this interpreter is wrapped too: leave valgrind at once
# (the dispatcher it starts still runs under memcheck through PGPACE_BIN).
if "vgpreload" in os.environ.get("LD_PRELOAD", ""):
    os.execv(sys.executable, [sys.executable] + sys.argv)

import json
import re
import secrets
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request

sys.dont_write_bytecode = True  # importing openapi_check must leave no __pycache__ behind
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import openapi_check  # noqa: E402

WAIT_S = 30


class Abort(Exception):
    pass


def deadline_wait(what, timeout, probe, interval=0.1):
    end = time.monotonic() + timeout
    while True:
        got = probe()
        if got:
            return got
        if time.monotonic() > end:
            raise Abort(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)


def run(args, check=True, timeout=60):
    p = subprocess.run(args, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                       timeout=timeout)
    if check and p.returncode != 0:
        raise Abort(f"{' '.join(args[:4])}... exited {p.returncode}: {p.stderr.strip()}")
    return p


class Tap:
    def __init__(self):
        self.n = 0
        self.failed = 0

    def ok(self, cond, name, diag=None):
        self.n += 1
        if not cond:
            self.failed += 1
        print(f"{'ok' if cond else 'not ok'} {self.n} - {name}", flush=True)
        if not cond and diag:
            for line in str(diag).splitlines()[:40]:
                print(f"# {line}", flush=True)
        return cond


class World:
    def __init__(self):
        self.pgpace = os.environ["PGPACE_BIN"]
        self.receiver_bin = os.environ["PGPACE_RECEIVER_BIN"]
        self.source = os.environ.get("PGPACE_SOURCE_ROOT",
                                     os.path.dirname(os.path.dirname(os.path.dirname(
                                         os.path.abspath(__file__)))))
        self.tmp = tempfile.mkdtemp(prefix="pgpace-api-")
        self.db = "pgpace_api_" + secrets.token_hex(4)
        self.db_created = False
        self.receiver = self.dispatcher = None
        self.exchanges = []
        self.log = os.path.join(self.tmp, "dispatcher.log")
        self.enqueue_token = "enq-" + secrets.token_hex(12)

    def cli(self, *args, check=True):
        return run([self.pgpace, "--db", f"dbname={self.db}", *args], check=check)

    def sql(self, query):
        return run(["psql", "-X", "-q", "-At", "-v", "ON_ERROR_STOP=1", "-d", self.db, "-c",
                    query]).stdout.strip()

    def setup(self):
        run(["psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", "postgres", "-c",
             f"CREATE DATABASE {self.db} TEMPLATE template0"])
        self.db_created = True
        self.cli("migrate")
        err = os.path.join(self.tmp, "receiver.err")
        with open(os.path.join(self.tmp, "receiver.out"), "wb") as out, open(err, "wb") as e:
            self.receiver = subprocess.Popen(
                [self.receiver_bin, "--rule", "/fail:500"], stdin=subprocess.DEVNULL,
                stdout=out, stderr=e)

        def url():
            with open(err) as f:
                m = re.search(r"listening on (http://127\.0\.0\.1:\d+)/", f.read())
            return m and m.group(1)

        self.receiver_url = deadline_wait("the receiver's address", 10, url)
        config = os.path.join(self.tmp, "pgpace.ini")
        with open(config, "w") as f:
            f.write(f"""[database]
conninfo = dbname={self.db}
[dispatcher]
instance_name = apitest
drain_timeout_ms = 3000
[delivery]
allow_cidrs = 127.0.0.0/8
[http]
listen = 127.0.0.1:0
enqueue_token = {self.enqueue_token}
""")
        with open(self.log, "wb") as log:
            self.dispatcher = subprocess.Popen([self.pgpace, "--config", config, "run"],
                                               stdin=subprocess.DEVNULL,
                                               stdout=subprocess.DEVNULL, stderr=log)

        def port():
            if self.dispatcher.poll() is not None:
                raise Abort(f"pgpace run exited {self.dispatcher.returncode}")
            with open(self.log) as f:
                m = re.search(r"event=admin_http_listening\b.*?\bport=(\d+)", f.read())
            return m and int(m.group(1))

        self.base = f"http://127.0.0.1:{deadline_wait('the listener', 15, port)}"

    def teardown(self):
        for p in (self.dispatcher, self.receiver):
            if p and p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
        if self.db_created:
            run(["psql", "-X", "-q", "-d", "postgres", "-c",
                 f"DROP DATABASE IF EXISTS {self.db} WITH (FORCE)"], check=False)
        shutil.rmtree(self.tmp, ignore_errors=True)

    def token(self, name, scopes):
        return self.cli("token", "create", name, "--scope", scopes).stdout.strip()

    def call(self, method, path, token=None, body=None, headers=None, raw=None, record=True):
        """One request: (status, headers with lower-case names, parsed body or None)."""
        h = dict(headers or {})
        if token:
            h["Authorization"] = f"Bearer {token}"
        data = raw
        if body is not None:
            data = json.dumps(body).encode()
        if data is not None:
            h.setdefault("Content-Type", "application/json")
        req = urllib.request.Request(self.base + path, data=data, method=method, headers=h)
        try:
            with urllib.request.urlopen(req, timeout=15) as r:
                status, hdrs, text = r.status, r.headers, r.read()
        except urllib.error.HTTPError as e:
            status, hdrs, text = e.code, e.headers, e.read()
        lower = {k.lower(): v for k, v in hdrs.items()}
        parsed = json.loads(text) if text else None
        if record:
            self.exchanges.append({"method": method, "path": path, "status": status,
                                   "content_type": lower.get("content-type", ""),
                                   "headers": lower, "body": parsed})
        return status, lower, parsed


def problem(status, body, want_status, field=None):
    """Whether an answer is the problem document expected."""
    return (status == want_status and isinstance(body, dict) and body.get("status") == want_status
            and isinstance(body.get("detail"), str)
            and (field is None or body.get("field") == field))


def tests(tap, w):
    ops = w.token("ops", "read,write")
    reader = w.token("dash", "read")
    enq = w.token("producer", "enqueue")
    doomed = w.token("doomed", "read,write")

    def wait_token(tok):
        deadline_wait("the listener to take the tokens", WAIT_S,
                      lambda: w.call("GET", "/v1/customers", tok, record=False)[0] == 200)

    wait_token(ops)
    wait_token(reader)

    # -- tokens and scopes ------------------------------------------------------------------
    s, h, b = w.call("GET", "/v1/customers")
    tap.ok(problem(s, b, 401) and "bearer" in h.get("www-authenticate", "").lower()
           and h.get("content-type") == "application/problem+json",
           "no token: 401 problem with a Bearer challenge", (s, h, b))
    s, _, b = w.call("GET", "/v1/customers", "pgp_wrong")
    tap.ok(problem(s, b, 401), "an unknown token: 401", (s, b))
    s, _, b = w.call("POST", "/v1/customers", reader, {"name": "nope", "rate_per_minute": 1})
    tap.ok(problem(s, b, 403) and "write" in b["detail"], "a read token cannot write: 403",
           (s, b))
    s, _, b = w.call("GET", "/v1/customers", enq)
    tap.ok(problem(s, b, 403), "an enqueue token cannot read the API: 403", (s, b))
    s, _, b = w.call("GET", "/v1/customers", w.enqueue_token)
    tap.ok(problem(s, b, 403) and "token create" in b["detail"],
           "the configuration's enqueue token does not open the API: 403 saying why", (s, b))
    w.cli("token", "revoke", "doomed")
    deadline_wait("the revoked token refused", WAIT_S,
                  lambda: w.call("GET", "/v1/customers", doomed, record=False)[0] == 401)
    s, _, b = w.call("POST", "/v1/customers", doomed, {"name": "nope", "rate_per_minute": 1})
    tap.ok(problem(s, b, 401) and w.sql("SELECT count(*) FROM pgpace.customer "
                                        "WHERE name = 'nope'") == "0",
           "a revoked token: 401, and nothing was created", (s, b))

    # -- customers ------------------------------------------------------------------------------
    url = w.receiver_url
    s, h, b = w.call("POST", "/v1/customers", ops,
                     {"name": "acme", "webhook_url": f"{url}/acme", "rate_per_minute": 600})
    tap.ok(s == 201 and h.get("location") == "/v1/customers/acme" and h.get("etag")
           and b.get("signing_secret", "").startswith("whsec_") and b["rate_per_minute"] == 600,
           "create a customer: 201 with Location, ETag and its signing secret", (s, h, b))
    secret = b.get("signing_secret", "")
    s, h, b = w.call("GET", "/v1/customers/acme", ops)
    etag = h.get("etag")
    tap.ok(s == 200 and "signing_secret" not in b and secret not in json.dumps(b)
           and b["signing_secrets"] == 1 and etag,
           "read it: no secret in the representation, only their count", (s, b))
    s, _, b = w.call("POST", "/v1/customers", ops,
                     {"name": "acme", "webhook_url": f"{url}/x", "rate_per_minute": 1})
    tap.ok(problem(s, b, 409, "name"), "create it again: 409 naming name", (s, b))
    for body, field, what in (
            ({"name": "b1", "rate_per_minute": "fast"}, "rate_per_minute", "a string rate"),
            ({"name": "b1", "rate_per_minute": -1, "webhook_url": f"{url}/b"},
             "rate_per_minute", "a negative rate"),
            ({"name": "b1", "rate_per_minute": 1, "webhook_url": "ftp://x/"}, "webhook_url",
             "an ftp URL"),
            ({"name": "b 1", "rate_per_minute": 1}, "name", "a bad name"),
            ({"name": "b1", "rate": 1}, "rate", "an unknown member"),
            ({"name": "b1", "webhook_url": "http://10.1.2.3/x", "rate_per_minute": 1},
             "webhook_url", "a private address (SSRF)"),
            ({"name": "b1", "webhook_url": "http://169.254.169.254/", "rate_per_minute": 1},
             "webhook_url", "the cloud metadata address (SSRF)")):
        s, _, b = w.call("POST", "/v1/customers", ops, body)
        tap.ok(problem(s, b, 400, field), f"create with {what}: 400 naming {field}", (s, b))
    s, _, b = w.call("POST", "/v1/customers", ops, raw=b'{"name":"b1","name":"b2"}')
    tap.ok(problem(s, b, 400, "name") and "twice" in b["detail"],
           "a body naming a member twice: 400 naming it", (s, b))
    s, _, b = w.call("POST", "/v1/customers", ops, raw=b'{"name":')
    tap.ok(problem(s, b, 400), "a body that is not JSON: 400", (s, b))
    s, _, b = w.call("POST", "/v1/customers", ops, raw=b"name=x",
                     headers={"Content-Type": "application/x-www-form-urlencoded"})
    tap.ok(problem(s, b, 415), "a body that is not application/json: 415", (s, b))
    tap.ok(w.sql("SELECT count(*) FROM pgpace.customer WHERE name IN ('b1', 'b2', 'b 1')") == "0",
           "none of the refused creates left a customer")

    s, _, b = w.call("PATCH", "/v1/customers/acme", ops, {"rate_per_minute": 300})
    tap.ok(problem(s, b, 428, "If-Match"), "change without If-Match: 428", (s, b))
    s, _, b = w.call("PATCH", "/v1/customers/acme", ops, {"rate_per_minute": 300},
                     headers={"If-Match": '"stale"'})
    tap.ok(problem(s, b, 412, "If-Match"), "change with a stale ETag: 412", (s, b))
    s, h, b = w.call("PATCH", "/v1/customers/acme", ops,
                     {"rate_per_minute": 300, "max_in_flight": 4, "request_timeout_ms": 5000},
                     headers={"If-Match": etag})
    tap.ok(s == 200 and b["rate_per_minute"] == 300 and b["max_in_flight"] == 4
           and h.get("etag") and h["etag"] != etag,
           "change with the current ETag: 200 and a new ETag", (s, h, b))
    s, _, b = w.call("PATCH", "/v1/customers/acme", ops, {"rate_per_minute": 1},
                     headers={"If-Match": etag})
    tap.ok(problem(s, b, 412) and w.sql("SELECT rate_per_minute FROM pgpace.customer "
                                        "WHERE name = 'acme'") == "300",
           "a second operator with the first ETag cannot overwrite blindly: 412, unchanged",
           (s, b))
    s, _, b = w.call("PATCH", "/v1/customers/acme", ops, {"max_in_flight": None},
                     headers={"If-Match": "*"})
    tap.ok(s == 200 and b["max_in_flight"] is None, "If-Match: * and null clears a setting",
           (s, b))

    names = [f"page{i}" for i in range(5)]
    for n in names:
        w.call("POST", "/v1/customers", ops, {"name": n, "rate_per_minute": 60})
    seen, cursor, pages = [], None, 0
    while pages < 10:
        q = "/v1/customers?limit=2" + (f"&cursor={cursor}" if cursor else "")
        s, _, b = w.call("GET", q, reader)
        if s != 200:
            break
        seen += [c["name"] for c in b["items"]]
        cursor, pages = b["next_cursor"], pages + 1
        if not cursor:
            break
    tap.ok(seen == sorted(["acme"] + names) and pages == 3,
           "list customers two at a time: every one once, in order, 3 pages", (seen, pages))
    s, _, b = w.call("GET", "/v1/customers?cursor=bogus", reader)
    tap.ok(problem(s, b, 400, "cursor"), "a cursor that is not one: 400 naming cursor", (s, b))
    s, _, b = w.call("GET", "/v1/customers?limit=2&limit=3", reader)
    tap.ok(problem(s, b, 400), "a query parameter given twice: 400", (s, b))
    s, _, b = w.call("GET", "/v1/customers?sort=name", reader)
    tap.ok(problem(s, b, 400, "sort"), "an unknown query parameter: 400 naming it", (s, b))
    s, h, _ = w.call("GET", "/v1/customers/page0", ops)
    s, _, b = w.call("DELETE", "/v1/customers/page0", ops, headers={"If-Match": h["etag"]})
    s2, _, b2 = w.call("GET", "/v1/customers/page0", ops)
    tap.ok(s == 204 and b is None and problem(s2, b2, 404),
           "delete with If-Match: 204, then 404", (s, b, s2, b2))
    s, h, b = w.call("PUT", "/v1/customers/acme", ops, {})
    tap.ok(problem(s, b, 405) and "PATCH" in h.get("allow", ""), "PUT: 405 with Allow", (s, h))

    # -- endpoints ------------------------------------------------------------------------------
    w.call("POST", "/v1/customers", ops, {"name": "shop", "rate_per_minute": 600})
    s, h, b = w.call("POST", "/v1/customers/shop/endpoints", ops,
                     {"name": "crm", "webhook_url": f"{url}/crm", "rate_per_minute": 600,
                      "event_types": ["order.*"]})
    tap.ok(s == 201 and b["name"] == "crm" and b["event_types"] == ["order.*"]
           and b.get("signing_secret", "").startswith("whsec_")
           and h.get("location") == "/v1/customers/shop/endpoints/crm",
           "add an endpoint: 201 with its secret once", (s, h, b))
    s, _, b = w.call("POST", "/v1/customers/shop/endpoints", ops,
                     {"name": "bad", "webhook_url": f"{url}/bad", "rate_per_minute": 60,
                      "event_types": ["a**"]})
    tap.ok(problem(s, b, 400, "event_types"), "a bad subscription: 400 naming event_types",
           (s, b))
    w.call("POST", "/v1/customers/shop/endpoints", ops,
           {"name": "ledger", "webhook_url": f"{url}/fail", "rate_per_minute": 600,
            "event_types": ["order.*"], "max_attempts": 1})
    s, h, b = w.call("GET", "/v1/customers/shop/endpoints/crm", reader)
    s, h2, b = w.call("PATCH", "/v1/customers/shop/endpoints/crm", ops,
                      {"event_types": ["order.*", "refund.created"]},
                      headers={"If-Match": h["etag"]})
    tap.ok(s == 200 and b["event_types"] == ["order.*", "refund.created"],
           "change an endpoint's subscription with If-Match", (s, b))
    s, _, b = w.call("POST", "/v1/customers/shop/endpoints/crm/rotate-secret", ops)
    tap.ok(s == 200 and b["signing_secrets"] == 2 and b["signing_secret"].startswith("whsec_"),
           "rotate its secret: the new one shown once, the old kept", (s, b))
    s, _, b = w.call("POST", "/v1/customers/shop/endpoints/crm/pause", ops)
    s2, _, b2 = w.call("POST", "/v1/customers/shop/endpoints/crm/resume", ops)
    tap.ok(s == 200 and b["state"] == "paused" and s2 == 200 and b2["state"] == "active",
           "pause and resume an endpoint", (b, b2))
    s, _, b = w.call("GET", "/v1/customers/shop/endpoints", reader)
    tap.ok(s == 200 and [e["name"] for e in b["items"]] == ["crm", "ledger"],
           "list a customer's endpoints", b)

    # -- carriers and hosts ---------------------------------------------------------------------
    s, h, b = w.call("POST", "/v1/carriers", ops, {"name": "sms", "max_per_round": 5})
    s2, h2, b2 = w.call("PATCH", "/v1/carriers/sms", ops, {"max_per_round": None},
                        headers={"If-Match": h.get("etag", "")})
    s3, _, _ = w.call("DELETE", "/v1/carriers/sms", ops, headers={"If-Match": h2.get("etag", "")})
    tap.ok(s == 201 and b["max_per_round"] == 5 and s2 == 200 and b2["max_per_round"] is None
           and s3 == 204, "a carrier: create, clear its cap, delete", (s, b, s2, b2, s3))
    s, h, b = w.call("POST", "/v1/hosts", ops, {"host": "Hooks.Example.COM:443",
                                                 "limits": ["10/s", "600/min"]})
    s2, _, b2 = w.call("POST", "/v1/hosts", ops, {"host": "x.example", "limits": ["10/fortnight"]})
    tap.ok(s == 201 and b["host"] == "hooks.example.com:443" and problem(s2, b2, 400, "limits"),
           "a host's limits: created normalised; a bad window 400 naming limits", (b, b2))

    # -- Idempotency-Key ------------------------------------------------------------------------
    key = {"Idempotency-Key": "create-mail-1"}
    a = w.call("POST", "/v1/carriers", ops, {"name": "mail", "max_in_flight": 3}, headers=key)
    a2 = w.call("POST", "/v1/carriers", ops, {"name": "mail", "max_in_flight": 3}, headers=key)
    tap.ok(a[0] == 201 and a2[0] == 201 and a[2] == a2[2] and a[1].get("etag") == a2[1].get("etag"),
           "the same POST twice with one Idempotency-Key: one answer, given twice", (a, a2))
    s, _, b = w.call("POST", "/v1/carriers", ops, {"name": "mail2"}, headers=key)
    tap.ok(problem(s, b, 422, "Idempotency-Key")
           and w.sql("SELECT count(*) FROM pgpace.carrier WHERE name = 'mail2'") == "0",
           "the key with another request: 422, nothing done", (s, b))

    # -- events, deliveries, attempts -----------------------------------------------------------
    s, _, b = w.call("POST", "/v1/items", enq,
                     {"customer": "shop", "kind": "order.created", "payload": {"n": 1}})
    event_id = b and b.get("id")
    tap.ok(s == 201 and event_id and b.get("deliveries") == 2,
           "enqueue an event with an enqueue-scope token: two deliveries", (s, b))
    s, _, b = w.call("POST", "/v1/items", enq, raw=b'{"customer":"shop","customer":"acme",'
                                                   b'"payload":{}}')
    tap.ok(s == 400 and "customer" in json.dumps(b), "an enqueue naming customer twice: 400",
           (s, b))
    for i in range(3):
        w.call("POST", "/v1/items", enq, {"customer": "acme", "payload": {"i": i}})

    def settled():
        s, _, b = w.call("GET", f"/v1/events/{event_id}", reader, record=False)
        d = {x["endpoint"]: x for x in (b or {}).get("deliveries", [])}
        return (s == 200 and d.get("crm", {}).get("status") == "delivered"
                and d.get("ledger", {}).get("status") == "dead") and b

    ev = deadline_wait("the event's deliveries to settle", WAIT_S, settled)
    s, _, ev = w.call("GET", f"/v1/events/{event_id}", reader)
    d = {x["endpoint"]: x for x in ev["deliveries"]}
    att = d["ledger"]["attempts"]
    tap.ok(ev["status"] == "failed" and ev["payload"] == {"n": 1} and len(att) == 1
           and att[0]["http_status"] == 500 and att[0]["outcome"] == "dead"
           and att[0]["response_excerpt"] is not None,
           "an event by id: each delivery's status and attempts, the receiver's status and "
           "answer excerpt", ev)
    s, _, b = w.call("GET", f"/v1/deliveries/{d['crm']['id']}/attempts", reader)
    tap.ok(s == 200 and b["items"][-1]["outcome"] == "success"
           and b["items"][-1]["http_status"] == 200, "a delivery's attempts", b)
    s, _, b = w.call("GET", "/v1/events?customer=acme&limit=2", reader)
    s2, _, b2 = w.call("GET", f"/v1/events?customer=acme&limit=2&cursor={b['next_cursor']}",
                       reader)
    ids = [e["id"] for e in b["items"] + b2["items"]]
    tap.ok(s == 200 and len(ids) == 3 and ids == sorted(ids, reverse=True)
           and b2["next_cursor"] is None, "events newest first, two pages", (b, b2))
    s, _, b = w.call("GET", "/v1/events?customer=shop&status=failed", reader)
    s2, _, b2 = w.call("GET", "/v1/events?customer=shop&status=delivered", reader)
    tap.ok([e["id"] for e in b["items"]] == [event_id] and b2["items"] == [],
           "events filtered by status", (b, b2))
    s, _, b = w.call("GET", "/v1/deliveries?customer=shop&endpoint=ledger&status=dead", reader)
    tap.ok(s == 200 and [x["id"] for x in b["items"]] == [d["ledger"]["id"]],
           "deliveries filtered by endpoint and status", b)
    s, _, b = w.call("GET", "/v1/deliveries?customer=shop&kind=order.created", reader)
    s2, _, b2 = w.call("GET", "/v1/deliveries?customer=shop&kind=refund.created", reader)
    tap.ok(s == 200 and sorted(x["id"] for x in b["items"]) == sorted(
        [d["crm"]["id"], d["ledger"]["id"]]) and b2["items"] == [],
           "deliveries filtered by their event's kind", (b, b2))
    s, _, b = w.call("GET", "/v1/events/12345", reader)
    tap.ok(problem(s, b, 404), "an unknown event: 404", (s, b))

    # -- dead letters, recover, stats ----------------------------------------------------------
    s, _, b = w.call("GET", "/v1/dead-letters?customer=shop", reader)
    tap.ok(s == 200 and [x["item_id"] for x in b["items"]] == [d["ledger"]["id"]]
           and b["items"][0]["endpoint"] == "ledger", "the dead letter is listed", b)
    s, _, b = w.call("POST", f"/v1/dead-letters/{d['ledger']['id']}/replay", ops)
    tap.ok(s == 200 and b["replayed"] == 1, "replay it", (s, b))
    deadline_wait("the replayed delivery to die again", WAIT_S, lambda: w.call(
        "GET", f"/v1/deliveries/{d['ledger']['id']}", reader, record=False)[2].get(
            "attempt_count") == 2 and w.call("GET", f"/v1/deliveries/{d['ledger']['id']}",
                                             reader, record=False)[2].get("status") == "dead")
    s, _, b = w.call("POST", "/v1/dead-letters/purge", ops, {})
    tap.ok(problem(s, b, 400), "purge without a filter: 400 (all: true says everything)", (s, b))
    s, _, b = w.call("POST", "/v1/dead-letters/purge", ops, {"customer": "shop",
                                                            "endpoint": "ledger"})
    tap.ok(s == 200 and b["purged"] == 1 and w.sql("SELECT count(*) FROM pgpace.dead_letter")
           == "0", "purge by customer and endpoint", (s, b))
    s, _, b = w.call("POST", "/v1/customers/acme/recover", ops,
                     {"since": "2000-01-01T00:00:00Z", "failed_only": False, "dry_run": True})
    tap.ok(s == 200 and b["dry_run"] is True and isinstance(b["counts"], list),
           "recover's dry run", (s, b))
    s, _, b = w.call("GET", "/v1/stats?customer=shop", reader)
    tap.ok(s == 200 and {x["endpoint"] for x in b["items"]} >= {"crm", "ledger"}, "stats", b)

    # -- the audit ------------------------------------------------------------------------------
    out = w.cli("events", "--kind", "api_write", "--limit", "1000").stdout
    tap.ok('"actor": "token:ops"' in out and "/v1/customers/acme" in out and "PATCH" in out
           and "token:dash" not in out,
           "every write is an api_write event naming the token (pgpace events)", out[-2000:])

    # -- tenant page links ----------------------------------------------------------------------
    link = w.cli("portal-link", "shop", "--base-url", w.base).stdout.strip()
    tok = link.split("#", 1)[1]
    other = w.cli("portal-link", "acme", "--base-url", w.base).stdout.strip().split("#", 1)[1]
    ro = w.cli("portal-link", "shop", "--read-only", "--base-url", w.base).stdout.strip()
    ro = ro.split("#", 1)[1]
    s, _, b = w.call("GET", "/v1/portal", tok)
    tap.ok(link.startswith(w.base + "/portal#") and s == 200 and b["customer"] == "shop"
           and [e["name"] for e in b["endpoints"]] == ["crm", "ledger"],
           "a link reads its own customer", (link, b))
    s, _, b = w.call("GET", f"/v1/portal/events/{event_id}", tok)
    tap.ok(s == 200 and "payload" not in b, "payloads are hidden by default", b)
    w.cli("setting", "set", "portal_show_payloads", "on")
    s, _, b = w.call("GET", f"/v1/portal/events/{event_id}", tok)
    tap.ok(s == 200 and b.get("payload") == {"n": 1}, "and shown with portal_show_payloads on", b)
    s, _, b = w.call("GET", f"/v1/portal/events/{event_id}", other)
    tap.ok(problem(s, b, 404), "another customer's link cannot read the event: 404", (s, b))
    before = w.sql("SELECT count(*) FROM pgpace.customer")
    s, _, b = w.call("POST", "/v1/portal/endpoints", ro,
                     {"name": "x", "webhook_url": f"{url}/x", "rate_per_minute": 1})
    tap.ok(problem(s, b, 403) and w.sql("SELECT count(*) FROM pgpace.customer") == before,
           "a read-only link cannot add an endpoint: 403", (s, b))
    payload, sig = tok.split(".")
    tampered = payload[:-2] + ("A" if payload[-2] != "A" else "B") + payload[-1] + "." + sig
    s, _, b = w.call("GET", "/v1/portal", tampered)
    tap.ok(problem(s, b, 401), "a tampered link: 401", (s, b))
    s, _, b = w.call("POST", "/v1/portal/endpoints", tok,
                     {"name": "ops", "webhook_url": "http://192.168.1.1/", "rate_per_minute": 1})
    tap.ok(problem(s, b, 400, "webhook_url"), "a link cannot add a private address: 400", (s, b))
    s, _, b = w.call("POST", "/v1/portal/endpoints", tok,
                     {"name": "ops", "webhook_url": f"{url}/ops", "rate_per_minute": 60})
    tap.ok(s == 201 and b["customer"] == "shop" and b["signing_secret"].startswith("whsec_"),
           "a link adds an endpoint to its own customer", (s, b))
    w.cli("portal-link", "shop", "--revoke")
    s, _, b = w.call("GET", "/v1/portal", tok)
    s2, _, b2 = w.call("POST", "/v1/portal/test-event", tok, {})
    tap.ok(problem(s, b, 401) and "revoked" in b["detail"] and problem(s2, b2, 401),
           "after --revoke the link reads and changes nothing: 401", (s, b, s2))

    # -- the OpenAPI document -------------------------------------------------------------------
    s, _, served = w.call("GET", "/v1/openapi.json", record=False)
    with open(os.path.join(w.source, "src", "api", "openapi.json")) as f:
        kept = json.load(f)
    tap.ok(s == 200 and served == kept, "GET /v1/openapi.json serves the kept document")
    doc_problems = openapi_check.check_document(kept)
    tap.ok(not doc_problems, "the document is well formed", "\n".join(doc_problems))
    mismatches = []
    for ex in w.exchanges:
        mismatches += [f"{ex['method']} {ex['path']} {ex['status']}: {m}"
                       for m in openapi_check.check_exchange(kept, ex)]
    tap.ok(not mismatches, f"all {len(w.exchanges)} answers match the OpenAPI document",
           "\n".join(mismatches))


def main():
    tap = Tap()
    w = World()

    def on_term(signum, frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_term)
    try:
        w.setup()
        tests(tap, w)
    except (Abort, KeyboardInterrupt, Exception) as e:  # noqa: BLE001 - reported as a failure
        tap.ok(False, f"the run stopped: {type(e).__name__}: {e}")
        try:
            with open(w.log) as f:
                for line in f.read().splitlines()[-20:]:
                    print(f"# {line}")
        except OSError:
            pass
    finally:
        w.teardown()
    print(f"1..{tap.n}")
    sys.exit(1 if tap.failed else 0)


if __name__ == "__main__":
    main()
