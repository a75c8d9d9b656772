#!/usr/bin/python3
"""test_status_page.py - the live status page (GET /) in a real headless chromium (TAP).

Starts what a deployment has: a fresh PostgreSQL database (migrated by `pgpace migrate`), the
test webhook receiver (one customer's path throttles like a rate-limited API, one answers
400 to every 5th request, one 404 to every request, one answers slowly), six customers of the
three modes and a carrier
made with the CLI, a backlog enqueued from a file, and `pgpace run` with a status token. Then
it opens the page in chromium (tests/browser/cdp.py) and checks what the page renders, through
the DOM contract the page promises (data-* attributes): every customer listed with its mode
and rate, numbers changing from one poll to the next, the throttled customer's effective rate
shown below its configured rate, the carrier and dead-letter count, the failing customer's
health in the State column (failing since when, the disable estimate) and first by state,
filtering and sorting (server side, state kept across a reload), a customer with endpoints
(migration 0018) as one row that expands to its endpoints' rows and collapses again, and that no
signing secret, token or payload ever reaches the page or /v1/status. The browser must report
no Content-Security-Policy violation, no uncaught exception and no request outside the
dispatcher's origin. It saves a screenshot
(the README's picture): $PGPACE_SCREENSHOT, else --screenshot PATH (meson gives one in the
build directory), never in the source tree.

Environment (as meson gives every integration test): PGPACE_BIN, PGPACE_RECEIVER_BIN, and
libpq's PGHOST/PGPORT/PGUSER for a running PostgreSQL (tests/run starts one).
Every wait has a deadline; everything started is stopped and the database dropped in every
outcome.
"""

import os
import sys

# `meson test --setup valgrind` wraps every test command in valgrind, this interpreter too.
# Valgrind checks our C, not CPython (whose allocator it flags falsely), and follows no exec:
# so leave it at once. PGPACE_BIN stays the setup's wrapper, so the dispatcher this test
# starts still runs under memcheck.
if "vgpreload" in os.environ.get("LD_PRELOAD", ""):
    os.execv(sys.executable, [sys.executable] + sys.argv)

import base64
import json
import re
import secrets
import time

sys.dont_write_bytecode = True  # importing cdp must leave no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cdp import Browser, CDPError  # noqa: E402
from harness import (FINAL_CHECKS, Abort, Stack, Tap, file_text, http_get,  # noqa: E402
                     num, run, run_tests, screenshot_path)

INSTANCE = "browsertest"
POLL_WAIT_S = 20  # a poll is due every poll_ms (2 s by default); this allows for a slow CI
THROTTLE_WAIT_S = 30
DEAD_WAIT_S = 45  # the dead-letter total is refreshed every ~10 s
# name -> (mode, rate, receiver behaviour for the diagnostics)
CUSTOMERS = {
    "acme-orders": ("spaced", 120, "200"),
    "acme-billing": ("spaced", 60, "400 to every 5th request (dead letters)"),
    "globex": ("batch", 12, "200"),
    "initech": ("unlimited", 1, "200 after 250 ms, through carrier 'bulk'"),
    "umbrella": ("spaced", 60, "429 without Retry-After beyond 20/min (token bucket)"),
    "hooli": ("spaced", 60, "404 to every request (failing)"),
}
THROTTLED = "umbrella"
# acme-billing's items carry order keys and it holds a key whose head is dead-lettered
# (--order-on-dead hold): each refused request stops its key, whose later items then wait
# behind it (blocked keys, counted by the leader every 15 s).
BLOCKED = "acme-billing"
ORDER_KEYS = 100
BLOCKED_WAIT_S = 45
FAILING = "hooli"
FAILING_WAIT_S = 30  # breaker_failures (5) failed requests at 60/min, then a poll
CARRIER = ("bulk", 5, 4)  # name, max_per_round, max_in_flight
HOST = ("hooks.example.net", ("100/s", "5000/min"))  # a receiver host's limit
ITEMS = {"acme-orders": 600, "acme-billing": 300, "globex": 1500, "initech": 4000,
         "umbrella": 300, "hooli": 300}
NUMERIC_FIELDS = ("rate", "effective_rate", "observed", "due", "in_flight", "delayed", "dead",
                  "oldest_due")
# A customer with endpoints (0018), made in SQL (pgpace.endpoint_add): no receiver of its own,
# a limit over its endpoints, two endpoints each with its own rate, and events for both.
GROUP = "stark"
GROUP_RATE = 100
GROUP_ENDPOINTS = {"bill": 30, "crm": 60}  # name -> rate per minute
GROUP_EVENTS = 300
ALL = sorted(list(CUSTOMERS) + [GROUP])

CHECKS = [
    "setup: database migrated, receiver, customers, carrier and backlog",
    "dispatcher leads: admin port from its log, /readyz says leader",
    "status needs the token: 401 without (Basic challenge for /, Bearer for the polls), "
    "200 with Bearer or Basic",
    "/v1/status lists every customer as configured",
    "page loads in chromium and renders a first poll without error",
    "every customer listed with its mode and configured rate",
    "a customer with endpoints is one row that expands to its endpoints' rows and collapses",
    "this instance shown as leader",
    "carrier row, receiver host limit row and dead-letter count shown",
    "numbers change between two polls",
    "sparkline drawn from the sent requests' gaps",
    "throttled customer's effective rate shown below its configured rate",
    "order keys waiting behind a held head shown as blocked, with the longest wait",
    "dead letters counted once the receiver refused items",
    "failing customer's State shows since when and the disable estimate; first by state",
    "filter narrows the rows to the matching customers (server side)",
    "filter kept across a reload (state in location.hash)",
    "sorting by rate orders the rows by rate, descending first",
    "logging in with Basic (any user, the token): the page prompts once and its polls work",
    "no secret, token or payload in the page or in /v1/status",
    "strict CSP sent; no CSP violation, exception or request off the origin",
    "screenshot saved",
] + FINAL_CHECKS


# One read of the DOM contract: the body's data-*, every customer row with its cells.
READ_DOM = r"""(() => {
  const b = document.body;
  const rows = [];
  for (const tr of document.querySelectorAll('#customers tr[data-customer]')) {
    const cells = {};
    for (const td of tr.querySelectorAll('td[data-field]')) {
      cells[td.dataset.field] = {value: td.hasAttribute('data-value') ? td.dataset.value : null,
                                 text: td.textContent.trim(), cls: td.className};
    }
    const svg = tr.querySelector('td[data-field="spark"] svg');
    rows.push({name: tr.dataset.customer, cells,
               spark: svg ? svg.getAttribute('data-points') : null});
  }
  return {polls: Number(b.dataset.polls || 0), generatedAt: b.dataset.generatedAt || '',
          error: b.dataset.error || '', rows};
})()"""


def rows_by_name(dom):
    return {r["name"]: r for r in dom["rows"]}


def cell(row, field):
    return num(row["cells"].get(field, {}).get("value"))


class World(Stack):
    """Everything the test starts (harness.Stack), and what it made: the status token, the
    payload marker, the customers' signing secrets."""

    def __init__(self):
        super().__init__("browser")
        self.token = "st_" + secrets.token_hex(16)
        self.marker = "payload-marker-" + secrets.token_hex(8)
        self.secrets = {}

    # -- setup ----------------------------------------------------------------------------------

    def start_receiver(self):
        return super().start_receiver([
            "--throttle", f"/c/{THROTTLED}:token-bucket:20:1:429:retry-after=none",
            "--rule", "/c/acme-billing:400:every=5",
            "--rule", "/c/initech:200:delay=250",
            "--rule", f"/c/{FAILING}:404"])

    def make_customers(self, receiver_url):
        for name, (mode, rate, _) in CUSTOMERS.items():
            self.cli("customer", "set", name, "--mode", mode, "--rate", str(rate),
                     "--url", f"{receiver_url}/c/{name}",
                     *(["--order-on-dead", "hold"] if name == BLOCKED else []))
            out = self.cli("customer", "get", name, "--show-secrets").stdout
            found = re.findall(r"whsec_[A-Za-z0-9+/=]+", out)
            if not found:
                raise Abort(f"no whsec_ secret in `customer get {name} --show-secrets`:\n{out}")
            self.secrets[name] = found
        sql = [f"SELECT pgpace.customer_set('{GROUP}', rate_per_minute => {GROUP_RATE})"]
        for ep, rate in GROUP_ENDPOINTS.items():
            sql.append(f"SELECT pgpace.endpoint_add('{GROUP}', '{ep}', "
                       f"'{receiver_url}/c/{GROUP}-{ep}', {rate})")
        sql.append(f"SELECT count(pgpace.enqueue('{GROUP}', jsonb_build_object('n', i, 'note', "
                   f"'{self.marker}'), kind => 'order.created')) "
                   f"FROM generate_series(1, {GROUP_EVENTS}) i")
        run(["psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", self.db]
            + [a for s in sql for a in ("-c", s)])
        self.cli("carrier", "set", CARRIER[0], "--max-per-round", str(CARRIER[1]),
                 "--max-in-flight", str(CARRIER[2]))
        # A receiver host's own limit (0019): no customer of this test is on it, so it paces
        # nothing here; the page lists it with its windows.
        self.cli("host", "set", HOST[0], *[a for w in HOST[1] for a in ("--limit", w)])
        items = os.path.join(self.tmp, "items.jsonl")
        with open(items, "w") as f:
            for name, count in ITEMS.items():
                for i in range(count):
                    line = {"customer": name, "payload": {"n": i, "note": self.marker}}
                    if name == "initech":
                        line["carrier"] = CARRIER[0]
                    if name == BLOCKED:
                        line["order_key"] = f"order-{i % ORDER_KEYS}"
                    f.write(json.dumps(line) + "\n")
        self.cli("enqueue", "--file", items)

    def start_dispatcher(self):
        super().start_dispatcher(f"""[dispatcher]
instance_name = {INSTANCE}
; short ticks, so a batch customer's numbers move within a poll or two
batch_tick_ms = 2000
drain_timeout_ms = 3000
[delivery]
; the receiver is on loopback, which SSRF protection refuses unless allowed
allow_cidrs = 127.0.0.0/8
[http]
listen = 127.0.0.1:0
status_token = {self.token}
[log]
level = info
""")

    def auth(self):
        return {"Authorization": f"Bearer {self.token}"}


def main():
    return run_tests(Tap(CHECKS), World(), tests)


def tests(tap, w):
    # 1. setup
    tap.check("setup")
    try:
        w.create_database()
        receiver_url = w.start_receiver()
        w.make_customers(receiver_url)
    except Abort as e:
        tap.require(False, str(e))
    tap.result(True, f"database {w.db}; receiver {receiver_url}; customers: " + "; ".join(
        f"{n} {m} {r}/{'tick' if m == 'batch' else 'min'}, {ITEMS[n]} items, receiver {b}"
        for n, (m, r, b) in CUSTOMERS.items())
        + f"; {GROUP} (no receiver of its own, {GROUP_RATE}/min over its endpoints "
        + ", ".join(f"{e} {r}/min" for e, r in GROUP_ENDPOINTS.items())
        + f"), {GROUP_EVENTS} events")

    # 2. dispatcher
    tap.check("dispatcher leads")
    try:
        w.start_dispatcher()
    except Abort as e:
        tap.require(False, str(e))
    tap.result(True, f"admin port {w.port}")

    # 3. the token guards the page and the JSON
    tap.check("status needs the token")
    answers = {}
    basic = base64.b64encode(f"anyone:{w.token}".encode()).decode()
    for label, path, headers in (
            ("/ without token", "/", {}),
            ("/v1/status without token", "/v1/status", {}),
            ("/v1/status wrong token", "/v1/status", {"Authorization": "Bearer st_wrong"}),
            ("/v1/status Bearer", "/v1/status", w.auth()),
            ("/v1/status Basic", "/v1/status", {"Authorization": f"Basic {basic}"}),
            ("/ Bearer", "/", w.auth())):
        status, hdrs, _ = http_get(w.base + path, headers)
        answers[label] = (status, hdrs.get("WWW-Authenticate", ""))
    # The page's 401 asks for Basic, so a browser prompts for the token; the polls' names
    # Bearer, which no browser prompts for (a fetch answered with a Basic challenge would wait
    # for a prompt that headless chromium never shows).
    refused = {"/ without token": "Basic", "/v1/status without token": "Bearer",
               "/v1/status wrong token": "Bearer"}
    ok = (all(answers[k][0] == 401 and answers[k][1].startswith(scheme)
              and "Basic" not in answers[k][1][len(scheme):] for k, scheme in refused.items())
          and all(answers[k][0] == 200 for k in answers if k not in refused))
    tap.result(ok, "" if ok else json.dumps(answers))

    # 4. the JSON itself
    tap.check("/v1/status lists")
    status, _, body = http_get(f"{w.base}/v1/status?limit=500", w.auth())
    try:
        doc = json.loads(body)
        listed = {c["name"]: c for c in doc.get("customers") or []}
        ok = (status == 200 and set(listed) == set(ALL)
              and all(listed[n]["mode"] == m and listed[n]["rate"] == r
                      and listed[n]["endpoints"] == []
                      for n, (m, r, _) in CUSTOMERS.items())
              and listed[GROUP]["rate"] == GROUP_RATE
              and [(e["name"], e["endpoint"], e["rate"]) for e in listed[GROUP]["endpoints"]]
              == [(f"{GROUP}/{e}", e, r) for e, r in sorted(GROUP_ENDPOINTS.items())]
              and doc.get("role") == "leader" and doc.get("instance") == INSTANCE)
        diag = "" if ok else f"status {status}: {body[:1500]}"
        poll_ms = doc.get("poll_ms")
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        ok, diag, poll_ms = False, f"status {status}, {e}: {body[:1500]}", None
    tap.result(ok, diag)
    tap.diag(f"poll_ms {poll_ms}")

    # 5. the page in chromium
    tap.check("page loads")
    w.browser = Browser(timeout=30)
    tap.diag(f"browser {w.browser.version}")
    page = w.browser.new_page()
    w.pages.append(page)
    page.set_extra_headers(w.auth())
    nav_status = page.navigate(w.base + "/")
    first = page.wait_for("Number(document.body.dataset.polls || 0) >= 1", POLL_WAIT_S,
                          "a first poll rendered")
    dom = page.evaluate(READ_DOM)
    tap.require(nav_status == 200 and first and dom["error"] == "",
                f"document status {nav_status}, polls {dom['polls']}, "
                f"error {dom['error']!r}")

    # 6. customers listed
    tap.check("every customer listed")
    rows = rows_by_name(dom)
    problems = []
    if set(rows) != set(ALL):
        problems.append(f"rows {sorted(rows)}, expected {ALL}")
    for name, (mode, rate, _) in CUSTOMERS.items():
        if name not in rows:
            continue
        r = rows[name]
        missing = [f for f in ("name", "mode", "rate", "effective_rate", "observed", "spark",
                               "due", "in_flight", "delayed", "dead", "oldest_due", "state",
                               "last_error") if f not in r["cells"]]
        if missing:
            problems.append(f"{name}: no td[data-field] for {missing}")
        if name not in r["cells"].get("name", {}).get("text", ""):
            problems.append(f"{name}: name cell {r['cells'].get('name')}")
        if mode not in r["cells"].get("mode", {}).get("text", "").lower():
            problems.append(f"{name}: mode cell {r['cells'].get('mode')}, expected {mode}")
        if cell(r, "rate") != rate:
            problems.append(f"{name}: rate data-value {cell(r, 'rate')}, expected {rate}")
    tap.result(not problems, "\n".join(problems))

    # 6b. the customer with endpoints: one row, its toggle shows its endpoints' rows after it
    tap.check("a customer with endpoints")
    group_js = f"""(() => {{
        const tr = document.querySelector('#customers tr[data-customer="{GROUP}"]');
        if (!tr) return null;
        const t = tr.querySelector('button.toggle');
        const eps = [];
        for (let n = tr.nextElementSibling; n && n.dataset.endpoint; n = n.nextElementSibling) {{
          const v = f => {{ const td = n.querySelector(`td[data-field="${{f}}"]`);
                           return td ? td.dataset.value : null; }};
          eps.push({{name: n.dataset.endpoint, parent: n.dataset.parent,
                    shown: n.querySelector('td[data-field="name"]').textContent.trim(),
                    rate: v('rate'), due: v('due'),
                    state: n.querySelector('td[data-field="state"]').dataset.state}});
        }}
        const toggles = [...document.querySelectorAll('#customers tr[data-customer] button.toggle')]
            .filter(b => !b.hidden).map(b => b.closest('tr').dataset.customer);
        return {{expanded: t ? t.getAttribute('aria-expanded') : null,
                endpoints: tr.dataset.endpoints,
                rate: tr.querySelector('td[data-field="rate"]').dataset.value,
                name: tr.querySelector('td[data-field="name"]').textContent.trim(),
                rows: eps, all: document.querySelectorAll('#customers tr[data-endpoint]').length,
                toggles, hash: location.hash}};
    }})()"""
    toggle_js = (f"document.querySelector('#customers tr[data-customer=\"{GROUP}\"] "
                 f"button.toggle').click()")
    want_eps = json.dumps([f"{GROUP}/{e}" for e in sorted(GROUP_ENDPOINTS)]).replace(" ", "")
    try:
        before = page.evaluate(group_js)
        closed = (before is not None and before["expanded"] == "false" and before["all"] == 0
                  and before["endpoints"] == str(len(GROUP_ENDPOINTS))
                  and before["toggles"] == [GROUP] and num(before["rate"]) == GROUP_RATE)
        page.evaluate(toggle_js)
        opened = page.wait_for(
            f"""(() => {{ const v = {group_js};
            return v && v.expanded === 'true'
              && JSON.stringify(v.rows.map(r => r.name)) === {json.dumps(want_eps)}
              && v.all === {len(GROUP_ENDPOINTS)}
              && v.rows.every(r => r.parent === '{GROUP}' && r.rate !== '' && r.state)
              && /expand={GROUP}/.test(v.hash) ? v : null; }})()""",
            POLL_WAIT_S, f"{GROUP}'s endpoints' rows after its row")
        rates = {r["name"]: num(r["rate"]) for r in opened["rows"]}
        shown = [r["shown"] for r in opened["rows"]]
        polls = page.evaluate("Number(document.body.dataset.polls)")
        # Kept open across polls (the rows are updated in place).
        page.wait_for(f"Number(document.body.dataset.polls) > {polls} && "
                      f"document.querySelectorAll('#customers tr[data-endpoint]').length === "
                      f"{len(GROUP_ENDPOINTS)}", POLL_WAIT_S,
                      "the endpoints' rows after the next poll")
        page.evaluate(toggle_js)
        page.wait_for(f"""(() => {{ const v = {group_js};
            return v && v.expanded === 'false' && v.all === 0; }})()""",
                      POLL_WAIT_S, f"{GROUP}'s endpoints' rows gone")
        ok = (closed and rates == {f"{GROUP}/{e}": r for e, r in GROUP_ENDPOINTS.items()}
              and shown == sorted(GROUP_ENDPOINTS))
        tap.result(ok, f"closed {json.dumps(before)}; opened {json.dumps(opened)}")
    except CDPError as e:
        tap.result(False, f"{e}; now {json.dumps(page.evaluate(group_js))}")

    # 7. instances
    tap.check("this instance")
    inst = page.evaluate("""[...document.querySelectorAll('#instances [data-instance]')]
        .map(e => [e.dataset.instance, e.dataset.role])""")
    tap.result(inst == [[INSTANCE, "leader"]], f"#instances: {inst}")

    # 8. carrier and dead letters
    tap.check("carrier row, receiver host")
    car = page.evaluate("""(() => {
        const tr = document.querySelector('#carriers tr[data-carrier="%s"]');
        const dl = document.querySelector('#dead-letters');
        const v = f => { const td = tr && tr.querySelector(`td[data-field="${f}"]`);
                         return td ? td.dataset.value : null; };
        return {row: !!tr, max_per_round: v('max_per_round'), max_in_flight: v('max_in_flight'),
                in_flight: v('in_flight'),
                dead: dl ? dl.getAttribute('data-value') : null,
                dead_text: dl ? dl.textContent.trim() : null};
    })()""" % CARRIER[0])
    car["host"] = page.evaluate("""(() => {
        const tr = document.querySelector('#hosts tr[data-host="%s"]');
        const t = f => { const td = tr && tr.querySelector(`td[data-field="${f}"]`);
                         return td ? td.textContent.trim() : null; };
        return tr ? {limits: t('limits'), used: t('used'), customers: t('customers')} : null;
    })()""" % HOST[0])
    ok = (car["host"] is not None and car["host"]["limits"] == ", ".join(HOST[1])
          and car["host"]["customers"] == "0"
          and car["host"]["used"] == "0 of 100/s, 0 of 5,000/min")
    ok = (ok and car["row"] and num(car["max_per_round"]) == CARRIER[1]
          and num(car["max_in_flight"]) == CARRIER[2] and num(car["in_flight"]) is not None
          and 0 <= num(car["in_flight"]) <= CARRIER[2] and car["dead"] is not None
          and (car["dead"] == "" or num(car["dead"]) is not None))
    tap.result(ok, json.dumps(car))

    # 9. two polls, numbers change
    tap.check("numbers change")
    before = page.evaluate(READ_DOM)
    page.wait_for(f"Number(document.body.dataset.polls) > {before['polls']} && "
                  f"document.body.dataset.generatedAt !== {json.dumps(before['generatedAt'])}",
                  POLL_WAIT_S, "the next poll")
    after = page.evaluate(READ_DOM)
    b_rows, a_rows = rows_by_name(before), rows_by_name(after)
    changes = []
    for name in CUSTOMERS:
        if name not in b_rows or name not in a_rows:
            continue
        for f in NUMERIC_FIELDS:
            x, y = cell(b_rows[name], f), cell(a_rows[name], f)
            if x != y:
                changes.append(f"{name}.{f}: {x} -> {y}")
        if b_rows[name]["spark"] != a_rows[name]["spark"]:
            changes.append(f"{name}.spark points: {b_rows[name]['spark']} -> "
                           f"{a_rows[name]['spark']}")
    tap.result(bool(changes) and after["error"] == "",
               f"polls {before['polls']} -> {after['polls']} "
               f"({before['generatedAt']} -> {after['generatedAt']}): "
               + ("; ".join(changes) if changes else "nothing changed")
               + (f"; error {after['error']!r}" if after["error"] else ""))

    # 10. the spark line of a busy spaced customer
    tap.check("sparkline")
    try:
        points = page.wait_for(
            """(() => { const s = document.querySelector(
                 '#customers tr[data-customer="acme-orders"] td[data-field="spark"] svg');
               return s && Number(s.getAttribute('data-points')) >= 2
                 && s.getAttribute('data-points'); })()""", POLL_WAIT_S,
            "acme-orders's spark with >= 2 points")
        tap.result(True, f"acme-orders spark data-points {points}")
    except CDPError as e:
        tap.result(False, str(e))

    # 11. the throttled customer
    tap.check("throttled customer")
    probe = f"""(() => {{
        const tr = document.querySelector('#customers tr[data-customer="{THROTTLED}"]');
        if (!tr) return null;
        const eff = tr.querySelector('td[data-field="effective_rate"]');
        const rate = tr.querySelector('td[data-field="rate"]');
        const e = eff && eff.dataset.value !== '' ? Number(eff.dataset.value) : NaN;
        const r = rate && rate.dataset.value !== '' ? Number(rate.dataset.value) : NaN;
        return {{eff: e, rate: r, below: !!eff && eff.classList.contains('below'),
                text: eff ? eff.textContent.trim() : null,
                state: (tr.querySelector('td[data-field="state"]') || {{}}).textContent}};
    }})()"""
    try:
        got = page.wait_for(f"(() => {{ const v = {probe}; "
                            f"return v && v.eff < v.rate && v.below ? v : null; }})()",
                            THROTTLE_WAIT_S, f"{THROTTLED}'s effective rate below its rate")
        # The others are not throttled: their effective rate cell must not say "below".
        others = page.evaluate("""[...document.querySelectorAll(
            '#customers tr[data-customer] td[data-field="effective_rate"].below')]
            .map(td => td.closest('tr').dataset.customer)""")
        throttle_shown = others == [THROTTLED]
        tap.result(throttle_shown, f"{THROTTLED}: {json.dumps(got)}; rows marked below: {others}")
    except CDPError as e:
        throttle_shown = False
        tap.result(False, f"{e}; now {json.dumps(page.evaluate(probe))}")
    throttled_429 = sum(1 for line in file_text(w.receiver_out).splitlines()
                        if f" /c/{THROTTLED} " in line and line.endswith(" 429"))
    tap.diag(f"the receiver answered {THROTTLED} 429 {throttled_429} times so far")

    # 11b. blocked order keys: a badge after acme-billing's State, its title naming the key
    # waiting longest; /v1/status says the same.
    tap.check("order keys waiting behind a held head")
    blocked_js = f"""(() => {{
        const td = document.querySelector('#customers tr[data-customer="{BLOCKED}"] td[data-field="state"]');
        const b = td && [...td.querySelectorAll('.badge')].find(x => /blocked/.test(x.textContent));
        return td && {{state: td.dataset.state, blocked: td.dataset.blocked || null,
                       text: td.textContent.trim(), title: b ? b.title : null}}; }})()"""
    try:
        got = page.wait_for(f"""(() => {{ const v = {blocked_js};
            return v && v.blocked && /^\\d+ keys? blocked$/.test(v.blocked)
              && /the longest, key order-\\d+, for /.test(v.title)
              && !v.state.split(' ').includes('blocked_keys') ? v : null; }})()""",
                            BLOCKED_WAIT_S, f"{BLOCKED}'s State cell with blocked keys")
        # The JSON the page read, fetched again (a queue-gauge pass may land in between: polled
        # until it shows a blocked key too).
        deadline = time.monotonic() + BLOCKED_WAIT_S
        while True:
            status, _, body = http_get(f"{w.base}/v1/status?filter={BLOCKED}", w.auth())
            c = json.loads(body)["customers"][0]
            fields = {k: c[k] for k in ("waiting", "blocked_keys", "blocked_oldest_s",
                                        "blocked_oldest_key")}
            ok = (status == 200 and isinstance(c["blocked_keys"], int)
                  and 1 <= c["blocked_keys"] <= ORDER_KEYS
                  and re.fullmatch(r"order-\d+", c["blocked_oldest_key"] or "") is not None
                  and isinstance(c["waiting"], int) and c["waiting"] >= 0)
            if ok or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        tap.result(ok, f"{BLOCKED}: {json.dumps(got)}; /v1/status {json.dumps(fields)}")
    except CDPError as e:
        tap.result(False, f"{e}; now {json.dumps(page.evaluate(blocked_js))}")

    # 12. dead letters
    tap.check("dead letters counted")
    try:
        got = page.wait_for(
            """(() => { const dl = document.querySelector('#dead-letters');
               const tr = document.querySelector(
                 '#customers tr[data-customer="acme-billing"] td[data-field="dead"]');
               const d = dl && dl.getAttribute('data-value');
               const c = tr && tr.dataset.value;
               return d && Number(d) >= 1 && c && Number(c) >= 1
                 && {total: d, total_text: dl.textContent.trim(), billing: c}; })()""",
            DEAD_WAIT_S, "#dead-letters and acme-billing's dead cell >= 1")
        tap.result(True, json.dumps(got))
    except CDPError as e:
        tap.result(False, str(e))

    # 12b. the failing customer: its State, and sort=state puts it first
    tap.check("failing customer")
    state_js = f"""(() => {{
        const td = document.querySelector('#customers tr[data-customer="{FAILING}"] td[data-field="state"]');
        return td && {{keys: td.dataset.state, text: td.textContent.trim(),
                       title: (td.querySelector('.badge') || {{}}).title || ''}}; }})()"""
    try:
        got = page.wait_for(f"""(() => {{ const v = {state_js};
            return v && v.keys.split(' ').includes('failing') && /failing since/.test(v.text)
              && /disabled in ~/.test(v.text) ? v : null; }})()""",
                            FAILING_WAIT_S, f"{FAILING}'s State cell saying failing")
        status, _, body = http_get(f"{w.base}/v1/status?filter={FAILING}", w.auth())
        health = json.loads(body)["customers"][0]["health"]
        shown = (health["state"] == "failing" and health["failing_since"]
                 and health["expected_disable_at"])
        tap.diag(f"{FAILING}: {json.dumps(got)}; /v1/status health {json.dumps(health)}")
        order_js = """[...document.querySelectorAll('#customers tr[data-customer]')].map(tr =>
            [tr.dataset.customer, tr.querySelector('td[data-field="state"]').dataset.state])"""
        page.evaluate("document.querySelector('th[data-sort=\"state\"]').click()")
        # Problems first: the failing one (the worst here), then any other problem, then ok.
        order = page.wait_for(f"""(() => {{ const o = {order_js};
            const th = document.querySelector('th[data-sort="state"]');
            const ok = o.map(x => x[1] === 'ok');
            return th.getAttribute('aria-sort') === 'ascending' && o.length === {len(ALL)}
              && o[0][0] === '{FAILING}' && ok.every((x, i) => i === 0 || !ok[i - 1] || x) && o; }})()""",
                              POLL_WAIT_S, "rows by state, problems first")
        tap.result(bool(shown), f"by state: {json.dumps(order)}")
    except CDPError as e:
        tap.result(False, f"{e}; now {json.dumps(page.evaluate(state_js))}")

    # 13. filter
    tap.check("filter narrows")
    names_js = ("JSON.stringify([...document.querySelectorAll('#customers tr[data-customer]')]"
                ".map(tr => tr.dataset.customer).sort())")
    want = json.dumps(sorted(n for n in CUSTOMERS if "acme" in n)).replace(" ", "")
    polls_before = page.evaluate("Number(document.body.dataset.polls)")
    page.evaluate("""(() => { const f = document.getElementById('filter');
        f.value = 'ACME'; f.dispatchEvent(new Event('input', {bubbles: true})); })()""")
    try:
        page.wait_for(f"{names_js} === {json.dumps(want)} && "
                      f"Number(document.body.dataset.polls) > {polls_before}",
                      POLL_WAIT_S, "only the acme rows")
        # Server side: the JSON the page asked for was filtered, not only the rows hidden.
        status, _, body = http_get(f"{w.base}/v1/status?filter=ACME", w.auth())
        names = sorted(c["name"] for c in json.loads(body).get("customers") or [])
        tap.result(json.dumps(names).replace(" ", "") == want,
                   f"rows {page.evaluate(names_js)}; /v1/status?filter=ACME: {status} {names}; "
                   f"hash {page.evaluate('location.hash')!r}")
    except CDPError as e:
        tap.result(False, f"{e}; rows {page.evaluate(names_js)}")

    # 14. reload keeps it
    tap.check("filter kept across a reload")
    page.reload()
    try:
        page.wait_for(f"Number(document.body.dataset.polls || 0) >= 1 && {names_js} === "
                      f"{json.dumps(want)} && document.getElementById('filter').value === 'ACME'",
                      POLL_WAIT_S, "filtered rows and the filter box after a reload")
        tap.result(True, f"hash {page.evaluate('location.hash')!r}")
    except CDPError as e:
        box = page.evaluate("document.getElementById('filter').value")
        tap.result(False, f"{e}; rows {page.evaluate(names_js)}, filter {box!r}")

    # 15. sort
    tap.check("sorting by rate")
    page.evaluate("""(() => { const f = document.getElementById('filter');
        f.value = ''; f.dispatchEvent(new Event('input', {bubbles: true})); })()""")
    page.wait_for(f"{names_js} === {json.dumps(json.dumps(ALL).replace(' ', ''))}",
                  POLL_WAIT_S, "all rows again after clearing the filter")
    order_js = """[...document.querySelectorAll('#customers tr[data-customer]')].map(tr => {
        const td = tr.querySelector('td[data-field="rate"]');
        return [tr.dataset.customer, td ? td.dataset.value : null]; })"""
    page.evaluate("document.querySelector('th[data-sort=\"rate\"]').click()")
    try:
        page.wait_for(
            f"""(() => {{ const th = document.querySelector('th[data-sort="rate"]');
                const o = {order_js};
                const v = o.map(x => x[1] === '' || x[1] === null ? -Infinity : Number(x[1]));
                return th.getAttribute('aria-sort') === 'descending'
                  && o.length === {len(ALL)} && v.every((x, i) => i === 0 || v[i - 1] >= x)
                  && o[0][0] === 'acme-orders'; }})()""",
            POLL_WAIT_S, "rows by rate, descending, and aria-sort")
        tap.result(True, f"order {page.evaluate(order_js)}")
    except CDPError as e:
        th = page.evaluate("document.querySelector('th[data-sort=\"rate\"]')"
                           ".getAttribute('aria-sort')")
        tap.result(False, f"{e}; order {page.evaluate(order_js)}; aria-sort {th!r}")

    # 16. A person's way in: no header set, the browser's Basic prompt answered once.
    tap.check("logging in with Basic")
    login = w.browser.new_page()
    w.pages.append(login)
    login.login("ops", w.token)
    try:
        login_status = login.navigate(w.base + "/")
        login.wait_for("Number(document.body.dataset.polls || 0) >= 2", POLL_WAIT_S,
                       "two polls rendered after logging in")
        state = login.evaluate("""({error: document.body.dataset.error,
            rows: document.querySelectorAll('#customers tr[data-customer]').length})""")
        schemes = sorted({c[0].lower() for c in login.auth_challenges})
        page_challenged = any(c[2] == w.base + "/" for c in login.auth_challenges)
        polls_challenged = [c for c in login.auth_challenges if "/v1/status" in c[2]]
        tap.result(login_status == 200 and state["error"] == ""
                   and state["rows"] == len(ALL) and schemes == ["basic"]
                   and page_challenged and not polls_challenged and not w.browser.post_errors,
                   f"document {login_status}; {json.dumps(state)}; challenges "
                   f"{login.auth_challenges}; errors {w.browser.post_errors}")
    except CDPError as e:
        tap.result(False, f"{e}; challenges {login.auth_challenges}; "
                          f"errors {w.browser.post_errors}")
    login.close()

    # Back to the default view (no hash) for the secrets check and the screenshot.
    page.navigate(w.base + "/")
    page.wait_for(f"Number(document.body.dataset.polls || 0) >= 2 && {names_js} === "
                  f"{json.dumps(json.dumps(ALL).replace(' ', ''))}",
                  POLL_WAIT_S, "the default view after navigating to / again")
    # For the screenshot (check 6b asserted it): the customer with endpoints expanded.
    try:
        page.evaluate(f"document.querySelector('#customers tr[data-customer=\"{GROUP}\"] "
                      f"button.toggle').click()")
        page.wait_for("document.querySelectorAll('#customers tr[data-endpoint]').length === "
                      f"{len(GROUP_ENDPOINTS)}", POLL_WAIT_S, f"{GROUP} expanded")
    except CDPError as e:
        tap.diag(str(e))
    if throttle_shown:
        # For the screenshot only (check 11 asserted it): show the throttled customer.
        try:
            sel = f'#customers tr[data-customer="{THROTTLED}"] td[data-field="effective_rate"]'
            page.wait_for(f"!!document.querySelector('{sel}.below')", POLL_WAIT_S,
                          "the throttled customer marked below in the default view")
        except CDPError as e:
            tap.diag(str(e))

    # 16. secrets
    tap.check("no secret")
    html = page.evaluate("document.documentElement.outerHTML")
    _, _, raw = http_get(f"{w.base}/v1/status?limit=500", w.auth())
    _, _, source = http_get(f"{w.base}/", w.auth())
    needles = {"payload marker": w.marker, "status token": w.token}
    for name, found in w.secrets.items():
        for i, s in enumerate(found):
            needles[f"{name} secret {i}"] = s
            needles[f"{name} secret {i} (base64 part)"] = s[len("whsec_"):]
    leaks = [f"{what} in {where}" for what, needle in needles.items()
             for where, text in (("page DOM", html), ("/v1/status", raw), ("page source", source))
             if needle in text]
    sane = w.marker in file_text(os.path.join(w.tmp, "items.jsonl")) and len(html) > 1000
    tap.result(not leaks and sane,
               "; ".join(leaks) if leaks else f"{len(needles)} strings checked in "
               f"{len(html)} bytes of DOM and {len(raw)} of JSON")

    # 17. CSP and the browser's reports
    tap.check("strict CSP")
    status, hdrs, _ = http_get(f"{w.base}/", w.auth())
    csp = hdrs.get("Content-Security-Policy", "")
    csp_ok = ("default-src 'none'" in csp and "'unsafe-inline'" not in csp
              and "connect-src 'self'" in csp)
    problems, others = [], []
    if not csp_ok:
        problems.append(f"Content-Security-Policy: {csp!r}")
    for p in w.pages:
        violations = p.csp_violations()
        problems += [f"CSP: {m['text']}" for m in violations]
        problems += [f"exception: {e}" for e in p.exceptions]
        problems += [f"request off the origin: {u}" for u in p.requests
                     if not (u.startswith(w.base + "/") or u.startswith("data:"))]
        others += [f"{m['source']}/{m['level']}: {m['text']}" for m in p.console
                   if m not in violations]
    tap.result(not problems, "\n".join(problems + [f"console: {o}" for o in others[:20]]))

    # 18. screenshot
    tap.check("screenshot")
    path = screenshot_path("status_page.png")
    size = page.screenshot(path, full_page=True)
    with open(path, "rb") as f:
        head = f.read(24)
    ok = head[:8] == b"\x89PNG\r\n\x1a\n" and size > 10000
    tap.result(ok, f"{path} ({size} bytes, {int.from_bytes(head[16:20], 'big')}x"
                   f"{int.from_bytes(head[20:24], 'big')})")


if __name__ == "__main__":
    sys.exit(main())
