#!/usr/bin/python3
"""test_portal.py - the tenant page (GET /portal#TOKEN) in a real headless chromium (TAP).

Starts a fresh database (`pgpace migrate`), the test webhook receiver (one path throttles like a
rate-limited API, one answers 404), a second receiver in this process that answers 500 with a
recognisable body (pgpace-receiver's rules send no body) until told to answer 200, and
`pgpace run`. Tenant A (acme) has two endpoints made with the CLI: orders (order.*, throttled by
its receiver) and billing (invoice.*, --max-attempts 1, failing); tenant B (globex) a receiver of
its own that answers 404. Then it opens A's link (`pgpace portal-link`) in chromium and checks,
through the DOM contract at the top of src/portal/portal.html: the token leaves the address bar;
A's endpoints with their subscriptions, rates, throttling and health; A's events, an event's
deliveries with each attempt's receiver status and answer (as text); details kept open across
polls; payloads hidden until the operator's portal_show_payloads setting is on; adding an
endpoint (a webhook_url at 169.254.169.254 refused next to its field), editing it with If-Match
(a change made meanwhile answered 412 and the form reloaded), rotating its secret (shown once),
sending a test event, replaying a dead delivery; that A's link shows and reaches nothing of B's
(404 for B's event and B's dead delivery); that tampered, expired, read-only (403 on a change)
and revoked links behave; that no secret or token reaches the page; and that the browser reports
no Content-Security-Policy violation, no uncaught exception and no request off the origin.
A screenshot is saved only when asked, with --screenshot PATH ($PGPACE_SCREENSHOT is the status
page test's: not read here).

Environment (as meson gives every integration test): PGPACE_BIN, PGPACE_RECEIVER_BIN, and
libpq's PGHOST/PGPORT/PGUSER for a running PostgreSQL. Every wait has a deadline; everything
started is stopped and the database dropped in every outcome.
"""

import os
import sys

# `meson test --setup valgrind` wraps every test command in valgrind, this interpreter too: leave
# it at once (see test_status_page.py).
if "vgpreload" in os.environ.get("LD_PRELOAD", ""):
    os.execv(sys.executable, [sys.executable] + sys.argv)

import base64
import hashlib
import hmac
import http.server
import json
import re
import secrets
import threading
import time

sys.dont_write_bytecode = True  # importing cdp must leave no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cdp import Browser, CDPError  # noqa: E402
from harness import (FINAL_CHECKS, Abort, Stack, Tap, http_get, http_request,  # noqa: E402
                     num, run_tests)

A, B = "acme", "globex"
ORDERS, BILLING, NEW = "orders", "billing", "crm"
ORDER_EVENTS = 120  # at 120/min against a receiver allowing 20/min: throttled for minutes
INVOICE_EVENTS = 4  # to billing, which answers 500: each dead after its one attempt
B_EVENTS = 3
POLL_WAIT_S = 20  # the page polls every 3 s
THROTTLE_WAIT_S = 60
REPLAY_WAIT_S = 40

CHECKS = [
    "setup: database, receivers, tenants A and B with endpoints and events",
    "dispatcher leads: admin port from its log, /readyz says leader",
    "portal-link prints links; A's overview lists A's endpoints alone",
    "page loads with A's link; the token leaves the address bar; a first poll renders",
    "A's endpoints listed with their subscriptions and rates; the failing one's health",
    "the throttled endpoint's effective rate shown below its configured rate",
    "events listed; an event's delivery shows each attempt's HTTP status and answer, as text",
    "an event's details stay open across polls",
    "payloads hidden by default; shown once portal_show_payloads is on",
    "add endpoint: 169.254.169.254 refused next to the URL field; then added, secret shown once",
    "edit endpoint: a change made meanwhile answers 412 and reloads the form; event types saved",
    "rotate secret: the new secret shown once, and it is the endpoint's newest",
    "a test event sent from the page is listed with its delivery",
    "replaying a dead delivery: its status changes from dead to delivered",
    "isolation: A's page shows nothing of B; A's token gets 404 for B's event and B's replay",
    "tampered links (payload part, signature part) answer 401; the page says not valid",
    "an expired link answers 401; the page says it expired",
    "read-only link: no forms or buttons; a POST or PATCH with it answers 403",
    "no signing secret or token in the pages' DOM or address bar",
    "revoked link: the open page shows the revoked message and stops polling; 401 for its API",
    "strict CSP sent; no CSP violation, exception or request off the origin",
    "screenshot saved when asked (--screenshot PATH), else none",
] + FINAL_CHECKS


class FailingReceiver:
    """A receiver in this process: 500 with a recognisable body (with markup in it, which the
    page must show as text) while self.fail, else 200."""

    def __init__(self, body):
        self.fail = True
        self.body = body.encode()
        self.count = 0
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self):
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                outer.count += 1
                status, answer = (500, outer.body) if outer.fail else (200, b"thanks")
                self.send_response(status)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


class World(Stack):
    def __init__(self):
        super().__init__("portal")
        self.marker_a = "payload-a-" + secrets.token_hex(8)
        self.marker_b = "payload-b-" + secrets.token_hex(8)
        self.refusal = "billing-down-" + secrets.token_hex(6)
        self.failing = None
        self.links = {}

    def start_receivers(self):
        recv = self.start_receiver(["--throttle", f"/a/{ORDERS}:token-bucket:20:1:429:retry-after=none",
                                    "--rule", "/b/:404"])
        self.failing = FailingReceiver(f"{self.refusal}: ledger locked <b data-xss>now</b>")
        self.cleanups.append(self.failing.stop)
        return recv

    def make_tenants(self, recv):
        self.cli("customer", "set", A, "--rate", "600")
        self.cli("endpoint", "add", A, ORDERS, "--url", f"{recv}/a/{ORDERS}", "--rate", "120",
                 "--events", "order.*")
        self.cli("endpoint", "add", A, BILLING, "--url", f"{self.failing.url}/a/{BILLING}",
                 "--rate", "600", "--events", "invoice.*")
        self.cli("endpoint", "set", A, BILLING, "--max-attempts", "1")
        self.cli("customer", "set", B, "--rate", "600", "--url", f"{recv}/b/hooks",
                 "--max-attempts", "1")
        self.psql(
            f"SELECT count(pgpace.enqueue('{A}', jsonb_build_object('n', i, 'note', "
            f"'{self.marker_a}'), kind => 'order.created')) FROM generate_series(1, {ORDER_EVENTS}) i",
            f"SELECT count(pgpace.enqueue('{A}', jsonb_build_object('n', i, 'note', "
            f"'{self.marker_a}'), kind => 'invoice.paid')) FROM generate_series(1, {INVOICE_EVENTS}) i",
            f"SELECT count(pgpace.enqueue('{B}', jsonb_build_object('n', i, 'note', "
            f"'{self.marker_b}'), kind => 'order.created')) FROM generate_series(1, {B_EVENTS}) i")

    def configure(self):
        self.write_config("""[dispatcher]
instance_name = portaltest
drain_timeout_ms = 3000
[delivery]
; the receivers are on loopback, which SSRF protection refuses unless allowed
allow_cidrs = 127.0.0.0/8, ::1/128
; a failing receiver opens the breaker soon, and it tries again soon
breaker_failures = 3
breaker_cooldown_ms = 1000
breaker_cooldown_max_ms = 2000
[http]
listen = 127.0.0.1:0
[log]
level = info
""")

    def link(self, customer, *opts):
        out = self.cli("portal-link", customer, "--base-url", self.base, *opts).stdout.strip()
        if not re.fullmatch(re.escape(self.base) + r"/portal#[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+", out):
            raise Abort(f"portal-link {customer} printed {out!r}")
        return out

    def api(self, token, method, path, body=None, headers=None):
        """(status, JSON or None) of /v1/portal... with token."""
        hdrs = {"Authorization": f"Bearer {token}", **(headers or {})}
        status, _, text = http_request(method, self.base + path, hdrs, body)
        try:
            return status, json.loads(text) if text else None
        except ValueError:
            return status, text

    def sql_one(self, query):
        return self.psql(query).strip()


def token_of(link):
    return link.split("#", 1)[1]


def forge(w, customer, expires, mode="w"):
    """A token signed with the database's own key (as pgpace.portal_token signs): here to make
    one that expired a minute ago without waiting for one to."""
    key = bytes.fromhex(w.sql_one("SELECT encode(key, 'hex') FROM pgpace.portal_key"))
    gen = w.sql_one("SELECT g.generation FROM pgpace.portal_generation g JOIN pgpace.customer c "
                    f"ON c.id = g.customer_id WHERE c.name = '{customer}'")
    payload = "\n".join(["v1", customer, str(int(expires)), mode, gen, secrets.token_hex(16)]).encode()

    def b64(b):
        return base64.urlsafe_b64encode(b).decode().rstrip("=")

    return b64(payload) + "." + b64(hmac.new(key, payload, hashlib.sha256).digest())


def tamper(part):
    """part with one character in its middle changed (not the last: its low bits may not count)."""
    i = len(part) // 2
    return part[:i] + ("A" if part[i] != "A" else "B") + part[i + 1:]


def open_page(w, link):
    page = w.browser.new_page()
    w.pages.append(page)
    page.navigate(link)
    return page


def polls(page):
    return page.evaluate("Number(document.body.dataset.polls || 0)")


def next_poll(page, what="the next poll"):
    n = polls(page)
    page.wait_for(f"Number(document.body.dataset.polls) > {n}", POLL_WAIT_S, what)


def js(template, **values):
    """A JS expression with values put in as JSON (safe in any position)."""
    for k, v in values.items():
        template = template.replace("$" + k, json.dumps(v))
    return template


ENDPOINT_JS = """(name => { const tr = document.querySelector(`#endpoints tr[data-endpoint="${name}"]`);
  if (!tr) return null;
  const f = k => tr.querySelector(`td[data-field="${k}"]`);
  return {state: tr.dataset.state, breaker: tr.dataset.breaker, failing: tr.dataset.failingSince,
          throttled: tr.dataset.throttled, types: tr.dataset.eventTypes,
          url: f('webhook_url').textContent, subscription: f('subscription').textContent,
          rate: f('rate').dataset.value, effective: f('effective_rate').dataset.value,
          below: f('effective_rate').classList.contains('below'), in_flight: f('in_flight').dataset.value,
          due: f('due').dataset.value, dead: f('dead').dataset.value, health: f('state').textContent}; })"""

DELIVERY_JS = """(id => { const d = document.querySelector(`[data-delivery="${id}"]`);
  return d && {status: d.dataset.status, endpoint: d.dataset.endpoint, attempts: d.dataset.attempts,
    replay: !!d.querySelector('button[data-action=replay]'),
    rows: [...d.querySelectorAll('tr[data-attempt]')].map(r => ({n: r.dataset.attempt,
      http: r.dataset.httpStatus, outcome: r.dataset.outcome,
      excerpt: r.querySelector('td[data-field=response_excerpt]').textContent}))}; })"""


def ep(page, name):
    return page.evaluate(js(f"({ENDPOINT_JS})($n)", n=name))


def expand(page, event_id):
    """Opens an event's details (unless open) and waits for its deliveries to render."""
    page.evaluate(js("""(() => { const b = document.querySelector(
        `#events tr[data-event="${$id}"] button[data-action=toggle]`);
        if (b && b.getAttribute('aria-expanded') !== 'true') b.click(); })()""", id=str(event_id)))
    return page.wait_for(js("""(() => { const d = document.querySelector(`tr[data-detail-for="${$id}"]`);
        return d && (d.querySelector('[data-delivery]') || d.querySelector('[data-payload-hidden]')
                     || d.querySelector('pre[data-payload]')) ? d.textContent : null; })()""",
                            id=str(event_id)), POLL_WAIT_S, f"event {event_id}'s details")


def fill_and_submit(page, form, values):
    page.evaluate(js("""(() => { const f = document.getElementById($form);
        for (const [k, v] of Object.entries($values)) {
          const el = f.elements.namedItem(k);
          if (el.type === 'checkbox') el.checked = v; else el.value = v;
        }
        f.querySelector('button[type=submit]').click(); })()""", form=form, values=values))


def tests(tap, w):
    tap.check("setup")
    try:
        w.create_database()
        w.configure()  # first: the CLI checks endpoint URLs against its allow_cidrs
        recv = w.start_receivers()
        w.make_tenants(recv)
    except Abort as e:
        tap.require(False, str(e))
    tap.result(True, f"database {w.db}; receiver {recv}; failing receiver {w.failing.url}")

    tap.check("dispatcher leads")
    try:
        w.start_dispatcher()
    except Abort as e:
        tap.require(False, str(e))
    tap.result(True, f"admin port {w.port}")

    tap.check("portal-link prints links")
    w.links["a"] = w.link(A, "--ttl", "1h")
    w.links["b"] = w.link(B)
    ta = token_of(w.links["a"])
    status, doc = w.api(ta, "GET", "/v1/portal")
    names = [e.get("name") for e in (doc or {}).get("endpoints", [])] if status == 200 else None
    tap.require(status == 200 and doc["customer"] == A and doc["read_only"] is False
                and names == [BILLING, ORDERS] and doc["show_payloads"] is False
                and B not in json.dumps(doc), f"{status}: {json.dumps(doc)[:1500]}")

    tap.check("page loads")
    w.browser = Browser(timeout=30)
    tap.diag(f"browser {w.browser.version}")
    page = open_page(w, w.links["a"])
    try:
        page.wait_for("Number(document.body.dataset.polls) >= 1", POLL_WAIT_S, "a first poll")
        got = page.evaluate("""({href: location.href, hash: location.hash, state: document.body.dataset.state,
            customer: document.body.dataset.customer, ro: document.body.dataset.readOnly,
            error: document.body.dataset.error})""")
        doc_status = page.http_status.get(w.base + "/portal")
        tap.require(doc_status == 200 and got["hash"] == "" and ta not in got["href"]
                    and got["href"] == w.base + "/portal" and got["state"] == "ok"
                    and got["customer"] == A and got["ro"] == "false" and got["error"] == "",
                    f"document {doc_status}; {json.dumps(got)}")
    except CDPError as e:
        tap.require(False, str(e))

    tap.check("A's endpoints listed")
    try:
        got = page.wait_for(js(f"""(() => {{ const o = ({ENDPOINT_JS})($o), b = ({ENDPOINT_JS})($b);
            const names = [...document.querySelectorAll('#endpoints tr[data-endpoint]')].map(t => t.dataset.endpoint);
            return o && b && b.failing && /failing since/.test(b.health) && b.breaker !== 'closed'
              && {{names, orders: o, billing: b}}; }})()""", o=ORDERS, b=BILLING),
                            POLL_WAIT_S + 20, "billing failing, with its breaker, and orders listed")
        o, b = got["orders"], got["billing"]
        ok = (got["names"] == [BILLING, ORDERS] and o["types"] == "order.*" and "order.*" in o["subscription"]
              and b["types"] == "invoice.*" and num(o["rate"]) == 120 and num(b["rate"]) == 600
              and o["url"].endswith(f"/a/{ORDERS}") and o["state"] == b["state"] == "active"
              and b["breaker"] in ("open", "half_open") and re.search(r"breaker open|half open", b["health"])
              and num(b["dead"]) is not None)
        tap.result(ok, json.dumps(got))
    except CDPError as e:
        tap.result(False, f"{e}; now {json.dumps(ep(page, BILLING))}")

    tap.check("the throttled endpoint")
    try:
        got = page.wait_for(js(f"""(() => {{ const o = ({ENDPOINT_JS})($o);
            return o && o.throttled === 'true' && o.below && Number(o.effective) < Number(o.rate)
              && o.due !== '' && o.in_flight !== '' && /throttled/.test(o.health) ? o : null; }})()""",
                               o=ORDERS), THROTTLE_WAIT_S, "orders' effective rate below 120")
        tap.result(True, json.dumps(got))
    except CDPError as e:
        tap.result(False, f"{e}; now {json.dumps(ep(page, ORDERS))}")

    # The invoice events (each one delivery to billing, dead after its 500), from SQL.
    invoice_ids = [int(x) for x in w.psql(
        f"SELECT i.id FROM pgpace.item i JOIN pgpace.customer c ON c.id = i.customer_id "
        f"WHERE c.name = '{A}' AND i.kind = 'invoice.paid' AND i.event_id IS NULL ORDER BY i.id").split()]
    inv = invoice_ids[-1]
    tap.check("events listed")
    try:
        listed = page.wait_for(js("""(() => { const rows = [...document.querySelectorAll('#events tr[data-event]')];
            const r = document.querySelector(`#events tr[data-event="${$inv}"]`);
            return r && r.dataset.status === 'failed' && {n: rows.length, first: rows[0].dataset.event,
              kinds: [...new Set(rows.map(x => x.dataset.kind))].sort()}; })()""", inv=str(inv)),
                               POLL_WAIT_S, f"invoice event {inv} listed as failed")
        expand(page, inv)
        d = page.wait_for(js(f"""(() => {{ const d = document.querySelector(`tr[data-detail-for="${{$inv}}"] [data-delivery]`);
            return d && d.dataset.status === 'dead' ? ({DELIVERY_JS})(d.dataset.delivery) : null; }})()""",
                             inv=str(inv)), POLL_WAIT_S, "its dead delivery with its attempt")
        injected = page.evaluate("document.querySelectorAll('[data-xss]').length")
        row = d["rows"][0] if d["rows"] else {}
        ok = (listed["first"] == str(inv) and listed["kinds"] == ["invoice.paid", "order.created"]
              and d["endpoint"] == BILLING and d["attempts"] == "1" and len(d["rows"]) == 1
              and row["http"] == "500" and w.refusal in row["excerpt"]
              and "<b data-xss>" in row["excerpt"] and injected == 0 and d["replay"])
        tap.result(ok, f"list {json.dumps(listed)}; delivery {json.dumps(d)}; injected elements {injected}")
    except CDPError as e:
        tap.result(False, str(e))

    tap.check("an event's details stay open")
    try:
        page.evaluate(js("document.querySelector(`tr[data-detail-for=\"${$inv}\"]`)._probe = 1", inv=str(inv)))
        next_poll(page)
        next_poll(page)
        kept = page.evaluate(js("""(() => { const d = document.querySelector(`tr[data-detail-for="${$inv}"]`);
            const b = document.querySelector(`#events tr[data-event="${$inv}"] button[data-action=toggle]`);
            return {row: !!d, same: !!d && d._probe === 1, expanded: b && b.getAttribute('aria-expanded'),
                    deliveries: d ? d.querySelectorAll('[data-delivery]').length : 0}; })()""", inv=str(inv)))
        tap.result(kept == {"row": True, "same": True, "expanded": "true", "deliveries": 1}, json.dumps(kept))
    except CDPError as e:
        tap.result(False, str(e))

    tap.check("payloads hidden by default")
    try:
        hidden = page.evaluate(js("""(() => { const d = document.querySelector(`tr[data-detail-for="${$inv}"]`);
            return {note: !!d.querySelector('[data-payload-hidden]'), pre: !!d.querySelector('pre[data-payload]'),
                    marker: document.documentElement.outerHTML.includes($m),
                    flag: document.body.dataset.showPayloads}; })()""", inv=str(inv), m=w.marker_a))
        _, before = w.api(ta, "GET", f"/v1/portal/events/{inv}")
        p = w.cli("setting", "set", "portal_show_payloads", "on", check=False)
        how = "pgpace setting set"
        if p.returncode != 0:
            tap.diag(f"`pgpace setting set portal_show_payloads on` refused ({p.stderr.strip()}): set with psql")
            w.psql("INSERT INTO pgpace.setting VALUES ('portal_show_payloads', 'on') "
                   "ON CONFLICT (name) DO UPDATE SET value = EXCLUDED.value")
            how = "psql"
        shown = page.wait_for(js("""(() => { const p = document.querySelector(`tr[data-detail-for="${$inv}"] pre[data-payload]`);
            return p && document.body.dataset.showPayloads === 'true' && p.textContent.includes($m)
              && !document.querySelector(`tr[data-detail-for="${$inv}"] [data-payload-hidden]`) ? p.textContent : null; })()""",
                                  inv=str(inv), m=w.marker_a), POLL_WAIT_S, "the payload shown")
        _, after = w.api(ta, "GET", f"/v1/portal/events/{inv}")
        ok = (hidden == {"note": True, "pre": False, "marker": False, "flag": "false"}
              and "payload" not in before and (after.get("payload") or {}).get("note") == w.marker_a)
        tap.result(ok, f"before {json.dumps(hidden)}, API keys {sorted(before)}; set with {how}; "
                       f"shown {json.dumps(shown)}")
    except CDPError as e:
        tap.result(False, str(e))

    tap.check("add endpoint")
    first_secret = None
    try:
        fill_and_submit(page, "add-form", {"name": NEW, "webhook_url": "http://169.254.169.254/",
                                           "rate_per_minute": "60", "event_types": "customer.*"})
        refused = page.wait_for("""(() => { const f = document.getElementById('add-form');
            const e = f.querySelector('[data-error-for="webhook_url"]');
            return f.dataset.error === 'webhook_url' && e.textContent && {error: e.textContent,
              invalid: f.elements.namedItem('webhook_url').getAttribute('aria-invalid')}; })()""",
                                POLL_WAIT_S, "the refusal next to the URL field")
        none = w.cli("endpoint", "list", A).stdout
        fill_and_submit(page, "add-form", {"webhook_url": f"{recv}/a/{NEW}"})
        shown = page.wait_for(js("""(() => { const s = document.getElementById('secret');
            const c = s.querySelector('code[data-secret]');
            return !s.hidden && s.dataset.secretFor === $n && /^whsec_/.test(c.textContent)
              && document.querySelector(`#endpoints tr[data-endpoint="${$n}"]`)
              && {secret: c.textContent, text: s.textContent,
                  cleared: document.getElementById('add-form').elements.namedItem('name').value === '',
                  error: document.getElementById('add-form').dataset.error}; })()""", n=NEW),
                              POLL_WAIT_S, "the new endpoint's secret and row")
        first_secret = shown["secret"]
        _, ov = w.api(ta, "GET", "/v1/portal")
        stored = w.cli("endpoint", "get", A, NEW, "--show-secrets").stdout
        ok = ("SSRF" in refused["error"] or "refused" in refused["error"]) and refused["invalid"] == "true" \
            and NEW not in none and shown["cleared"] and shown["error"] == "" \
            and "not shown again" in shown["text"] and first_secret in stored \
            and first_secret not in json.dumps(ov)
        tap.result(ok, f"refused: {json.dumps(refused)}; shown: {shown['text'][:200]!r}")
    except CDPError as e:
        tap.result(False, str(e))

    tap.check("edit endpoint")
    try:
        page.evaluate(js("document.querySelector(`#endpoints tr[data-endpoint=\"${$n}\"] button[data-action=edit]`).click()", n=NEW))
        page.wait_for(js("document.getElementById('edit-form').dataset.editing === $n && "
                         "!document.getElementById('edit-panel').hidden", n=NEW), 5, "the edit form open")
        w.cli("endpoint", "set", A, NEW, "--rate", "30")  # someone else, meanwhile
        fill_and_submit(page, "edit-form", {"event_types": "customer.*, pgpace.test"})
        conflict = page.wait_for("""(() => { const f = document.getElementById('edit-form');
            const e = f.querySelector('[data-error-for="form"]');
            return f.dataset.error === 'form' && /changed/.test(e.textContent)
              && f.elements.namedItem('rate_per_minute').value === '30'
              && {error: e.textContent, types: f.elements.namedItem('event_types').value}; })()""",
                                 POLL_WAIT_S, "the 412 message and the form reloaded")
        fill_and_submit(page, "edit-form", {"event_types": "customer.*, pgpace.test"})
        saved = page.wait_for(js(f"""(() => {{ const e = ({ENDPOINT_JS})($n);
            return document.getElementById('edit-panel').hidden && e && e.types === 'customer.*,pgpace.test'
              && e; }})()""", n=NEW), POLL_WAIT_S, "the row with the new subscription")
        tap.result(conflict["types"] == "customer.*" and num(saved["rate"]) == 30,
                   f"412: {json.dumps(conflict)}; saved: {json.dumps(saved)}")
    except CDPError as e:
        tap.result(False, str(e))

    tap.check("rotate secret")
    try:
        page.evaluate("document.getElementById('secret-close').click()")
        page.evaluate(js("document.querySelector(`#endpoints tr[data-endpoint=\"${$n}\"] button[data-action=rotate]`).click()", n=NEW))
        rotated = page.wait_for(js("""(() => { const s = document.getElementById('secret');
            const c = s.querySelector('code[data-secret]').textContent;
            return !s.hidden && s.dataset.secretFor === $n && /^whsec_/.test(c) && c !== $old ? c : null; })()""",
                                   n=NEW, old=first_secret), POLL_WAIT_S, "the rotated secret")
        stored = w.cli("endpoint", "get", A, NEW, "--show-secrets").stdout
        newest = re.findall(r"whsec_[A-Za-z0-9+/=]+", stored)
        _, ov = w.api(ta, "GET", "/v1/portal")
        page.evaluate("document.getElementById('secret-close').click()")
        gone = page.evaluate(js("!document.documentElement.outerHTML.includes($s)", s=rotated))
        tap.result(bool(newest) and newest[0] == rotated and rotated not in json.dumps(ov) and gone,
                   f"secrets stored (newest first): {len(newest)}; gone from the page after Done: {gone}")
    except CDPError as e:
        tap.result(False, str(e))

    tap.check("a test event")
    try:
        fill_and_submit(page, "test-form", {"kind": "pgpace.test"})
        sent = page.wait_for("""(() => { const n = document.getElementById('notice');
            return !n.hidden && n.dataset.tone === 'ok' && n.dataset.sentEvent
              && {id: n.dataset.sentEvent, text: n.textContent}; })()""", POLL_WAIT_S, "the notice")
        listed = page.wait_for(js("""(() => { const r = document.querySelector(`#events tr[data-event="${$id}"]`);
            return r && r.dataset.kind === 'pgpace.test' && r.dataset.status === 'delivered'
              && {status: r.dataset.status, deliveries: r.querySelector('td[data-field=delivery_count]').textContent}; })()""",
                                   id=sent["id"]), POLL_WAIT_S, "the test event listed, delivered")
        d = expand(page, sent["id"])
        tap.result(listed["deliveries"] == "1" and f"to {NEW}" in d,
                   f"{json.dumps(sent)}; {json.dumps(listed)}")
    except CDPError as e:
        tap.result(False, str(e))

    tap.check("replaying a dead delivery")
    try:
        w.failing.fail = False
        did = page.evaluate(js("document.querySelector(`tr[data-detail-for=\"${$inv}\"] [data-delivery]`).dataset.delivery",
                               inv=str(inv)))
        page.evaluate(js("document.querySelector(`[data-delivery=\"${$d}\"] button[data-action=replay]`).click()", d=did))
        seen = set()

        def probe():
            v = page.evaluate(js(f"({DELIVERY_JS})($d)", d=did))
            if v:
                seen.add(v["status"])
            row = page.evaluate(js("document.querySelector(`#events tr[data-event=\"${$inv}\"]`).dataset.status",
                                   inv=str(inv)))
            return v if v and v["status"] == "delivered" and row == "delivered" else None

        end = time.monotonic() + REPLAY_WAIT_S
        done = None
        while done is None and time.monotonic() < end:
            done = probe()
            if done is None:
                w.browser.pump_for(0.2)
        note = page.evaluate("document.getElementById('notice').textContent")
        row = page.evaluate(js("document.querySelector(`#events tr[data-event=\"${$inv}\"]`).dataset.status", inv=str(inv)))
        ok = (done is not None and done["rows"][-1]["http"] == "200" and done["rows"][0]["http"] == "500"
              and not done["replay"] and row == "delivered" and "queued again" in note)
        tap.result(ok, f"delivery {did}: statuses seen {sorted(seen)}; now {json.dumps(done)}; "
                       f"event {row}; notice {note!r}")
    except CDPError as e:
        tap.result(False, str(e))

    # For the screenshot, when asked: an event with a replayed delivery open.
    shot = page.screenshot(screenshot_target(), full_page=True) if screenshot_target() else None

    tap.check("isolation")
    b_events = w.psql(f"SELECT i.id FROM pgpace.item i JOIN pgpace.customer c ON c.id = i.customer_id "
                      f"WHERE c.name = '{B}'").split()
    b_dead = w.sql_one(f"SELECT d.item_id FROM pgpace.dead_letter d JOIN pgpace.customer c "
                       f"ON c.id = d.customer_id WHERE c.name = '{B}' LIMIT 1")
    try:
        problems = []
        if not b_dead:
            b_dead = deadline_dead(w)
        html = page.evaluate("document.documentElement.outerHTML")
        for needle in (B, w.marker_b, "/b/hooks"):
            if needle in html:
                problems.append(f"{needle!r} in A's page")
        shown_b = page.evaluate(js("$ids.filter(id => document.querySelector(`[data-event=\"${id}\"]`))",
                                   ids=b_events))
        if shown_b:
            problems.append(f"B's events {shown_b} in A's page")
        answers = {
            "GET B's event": w.api(ta, "GET", f"/v1/portal/events/{b_events[0]}")[0],
            "replay B's dead": w.api(ta, "POST", f"/v1/portal/deliveries/{b_dead}/replay")[0],
            "B's event via the page's fetch": page.evaluate(js(
                "fetch(`/v1/portal/events/${$id}`, {headers: {Authorization: 'Bearer ' + $t}}).then(r => r.status)",
                id=b_events[0], t=ta)),
        }
        problems += [f"{k}: {v}, expected 404" for k, v in answers.items() if v != 404]
        still_dead = w.sql_one(f"SELECT count(*) FROM pgpace.dead_letter WHERE item_id = {b_dead}")
        if still_dead != "1":
            problems.append(f"B's dead delivery {b_dead} touched: {still_dead} dead letters")
        pb = open_page(w, w.links["b"])
        b_view = pb.wait_for("""Number(document.body.dataset.polls) >= 1 && {customer: document.body.dataset.customer,
            endpoints: [...document.querySelectorAll('#endpoints tr[data-endpoint]')].map(t => t.dataset.endpoint),
            events: [...document.querySelectorAll('#events tr[data-event]')].map(t => t.dataset.event).sort(),
            html: document.documentElement.outerHTML}""", POLL_WAIT_S, "B's page")
        if (b_view["customer"] != B or b_view["endpoints"] != ["default"]
                or b_view["events"] != sorted(b_events) or A in b_view["html"] or w.marker_a in b_view["html"]):
            problems.append(f"B's page: {b_view['customer']}, {b_view['endpoints']}, {b_view['events']}")
        pb.close()
        tap.result(not problems, "\n".join(problems) or json.dumps(answers))
    except CDPError as e:
        tap.result(False, str(e))

    tap.check("tampered links")
    payload_part, sig_part = ta.split(".")
    problems = []
    for label, tok in (("payload", tamper(payload_part) + "." + sig_part),
                       ("signature", payload_part + "." + tamper(sig_part))):
        status, doc = w.api(tok, "GET", "/v1/portal")
        if status != 401 or "signature" not in (doc or {}).get("detail", ""):
            problems.append(f"{label}: {status} {doc}")
        try:
            p = open_page(w, f"{w.base}/portal#{tok}")
            got = p.wait_for("document.body.dataset.state === 'gone' && {reason: document.getElementById('gone').dataset.reason, "
                             "text: document.getElementById('gone').textContent, polls: document.body.dataset.polls}",
                             POLL_WAIT_S, f"the {label}-tampered link refused")
            if got["reason"] != "invalid" or got["polls"] != "0" or "new one" not in got["text"]:
                problems.append(f"{label} page: {json.dumps(got)}")
            p.close()
        except CDPError as e:
            problems.append(str(e))
    tap.result(not problems, "\n".join(problems))

    tap.check("an expired link")
    problems = []
    fresh, old = forge(w, A, time.time() + 600), forge(w, A, time.time() - 60)
    s_fresh, _ = w.api(fresh, "GET", "/v1/portal")
    s_old, d_old = w.api(old, "GET", "/v1/portal")
    if s_fresh != 200 or s_old != 401 or "expired" not in (d_old or {}).get("detail", ""):
        problems.append(f"forged fresh {s_fresh}; expired {s_old} {d_old}")
    try:
        p = open_page(w, f"{w.base}/portal#{old}")
        got = p.wait_for("document.body.dataset.state === 'gone' && {reason: document.getElementById('gone').dataset.reason, "
                         "title: document.getElementById('gone-title').textContent, "
                         "detail: document.getElementById('gone-detail').textContent, app: document.getElementById('app').hidden}",
                         POLL_WAIT_S, "the expired link refused")
        if got["reason"] != "expired" or "expired" not in got["title"] or not got["app"] \
                or "ask for a new link" not in got["detail"]:
            problems.append(json.dumps(got))
        p.close()
    except CDPError as e:
        problems.append(str(e))
    tap.result(not problems, "\n".join(problems) or f"expired: {d_old['detail']!r}")

    tap.check("read-only link")
    problems = []
    ro_link = w.link(A, "--read-only", "--ttl", "10m")
    tro = token_of(ro_link)
    try:
        ro = open_page(w, ro_link)
        ro.wait_for("Number(document.body.dataset.polls) >= 1 && document.body.dataset.readOnly === 'true'",
                    POLL_WAIT_S, "the read-only page")
        dead_event = invoice_ids[0]
        expand(ro, dead_event)
        got = ro.evaluate("""({forms: [...document.forms].filter(f => f.getClientRects().length).map(f => f.id),
            buttons: [...document.querySelectorAll('button[data-action=edit], button[data-action=rotate], button[data-action=replay]')]
              .filter(b => b.getClientRects().length).length,
            write: [...document.querySelectorAll('[data-write]')].filter(e => !e.hidden).length,
            endpoints: document.querySelectorAll('#endpoints tr[data-endpoint]').length,
            dead: [...document.querySelectorAll('[data-delivery]')].map(d => d.dataset.status),
            access: document.getElementById('access').textContent})""")
        if got["forms"] or got["buttons"] or got["write"] or got["endpoints"] != 3 \
                or "dead" not in got["dead"] or got["access"] != "read-only":
            problems.append(f"page: {json.dumps(got)}")
    except CDPError as e:
        problems.append(str(e))
    writes = {"POST test-event": w.api(tro, "POST", "/v1/portal/test-event", {}),
              "PATCH endpoint": w.api(tro, "PATCH", f"/v1/portal/endpoints/{NEW}", {"rate_per_minute": 5},
                                      {"If-Match": "*"}),
              "POST replay": w.api(tro, "POST", f"/v1/portal/deliveries/{b_dead}/replay")}
    problems += [f"{k}: {s} {d}" for k, (s, d) in writes.items() if s != 403]
    tap.result(not problems, "\n".join(problems) or json.dumps({k: v[0] for k, v in writes.items()}))

    tap.check("no signing secret or token")
    stored = {}
    for name in (ORDERS, BILLING, NEW):
        for i, s in enumerate(re.findall(r"whsec_[A-Za-z0-9+/=]+",
                                         w.cli("endpoint", "get", A, name, "--show-secrets").stdout)):
            stored[f"{name} secret {i}"] = s
    needles = dict(stored, **{"A's token": ta, "A's signature": ta.split(".")[1],
                              "read-only token": tro, "B's token": token_of(w.links["b"])})
    leaks = []
    for p in [x for x in w.pages if x.session in w.browser._pages]:
        seen = p.evaluate("document.documentElement.outerHTML + '\\n' + location.href + '\\n' + document.title")
        leaks += [f"{k} in {p.target_id[:8]}" for k, v in needles.items() if v in seen]
    tap.result(not leaks and len(stored) >= 4, "\n".join(leaks) or f"{len(needles)} strings checked")

    tap.check("revoked link")
    problems = []
    try:
        before = sum(1 for u in page.requests if "/v1/portal" in u)
        w.cli("portal-link", A, "--revoke")
        got = page.wait_for("document.body.dataset.state === 'gone' && {reason: document.getElementById('gone').dataset.reason, "
                            "title: document.getElementById('gone-title').textContent, "
                            "detail: document.getElementById('gone-detail').textContent}",
                            POLL_WAIT_S, "the page showing the link revoked")
        if got["reason"] != "revoked" or "revoked" not in got["title"] or "ask for a new link" not in got["detail"]:
            problems.append(json.dumps(got))
        at_gone = sum(1 for u in page.requests if "/v1/portal" in u)
        w.browser.pump_for(8)  # more than two poll periods: the page must ask nothing more
        after = sum(1 for u in page.requests if "/v1/portal" in u)
        if after != at_gone:
            problems.append(f"{after - at_gone} requests after the revoked message")
        for label, tok in (("read-write", ta), ("read-only", tro)):
            status, doc = w.api(tok, "GET", "/v1/portal")
            if status != 401 or "revoked" not in (doc or {}).get("detail", ""):
                problems.append(f"{label} link: {status} {doc}")
        s_new, _ = w.api(token_of(w.link(A)), "GET", "/v1/portal")
        if s_new != 200:
            problems.append(f"a link made after the revoke: {s_new}")
        tap.result(not problems, "\n".join(problems) or f"{json.dumps(got)}; requests {before} -> {at_gone} -> {after}")
    except CDPError as e:
        tap.result(False, "\n".join(problems + [str(e)]))

    tap.check("strict CSP")
    _, hdrs, _ = http_get(f"{w.base}/portal")
    csp = hdrs.get("Content-Security-Policy", "")
    problems, others = [], []
    if not ("default-src 'none'" in csp and "'unsafe-inline'" not in csp and "connect-src 'self'" in csp
            and "script-src 'sha256-" in csp and "style-src 'sha256-" in csp
            and hdrs.get("Referrer-Policy") == "no-referrer"):
        problems.append(f"headers: {csp!r}, Referrer-Policy {hdrs.get('Referrer-Policy')!r}")
    for p in w.pages:
        violations = p.csp_violations()
        problems += [f"CSP: {m['text']}" for m in violations]
        problems += [f"exception: {e}" for e in p.exceptions]
        problems += [f"request off the origin: {u}" for u in p.requests
                     if not (u.startswith(w.base + "/") or u.startswith("data:") or u == "about:blank")]
        # 401s of the refused links are expected: the browser logs them as network errors
        others += [f"{m['source']}/{m['level']}: {m['text']}" for m in p.console
                   if m not in violations and "401" not in m["text"]]
    tap.result(not problems, "\n".join(problems + [f"console: {o}" for o in others[:20]]))

    tap.check("screenshot")
    if shot is None:
        tap.result(True, "not asked for: none taken")
    else:
        path = screenshot_target()
        with open(path, "rb") as f:
            head = f.read(8)
        tap.result(head == b"\x89PNG\r\n\x1a\n" and shot > 10000, f"{path} ({shot} bytes)")


def screenshot_target():
    """--screenshot PATH, or None: no screenshot (never into the source tree by default)."""
    if "--screenshot" in sys.argv[1:-1]:
        return sys.argv[sys.argv.index("--screenshot") + 1]
    return None


def deadline_dead(w):
    """B's first dead letter (its receiver answers 404: dead after the one attempt)."""
    end = time.monotonic() + POLL_WAIT_S
    while time.monotonic() < end:
        got = w.sql_one(f"SELECT d.item_id FROM pgpace.dead_letter d JOIN pgpace.customer c "
                        f"ON c.id = d.customer_id WHERE c.name = '{B}' LIMIT 1")
        if got:
            return got
        time.sleep(0.2)
    raise Abort(f"no dead letter of {B} within {POLL_WAIT_S} s")


def main():
    return run_tests(Tap(CHECKS), World(), tests)


if __name__ == "__main__":
    sys.exit(main())
