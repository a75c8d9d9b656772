"""harness.py - what the browser tests share (stdlib only): TAP output, deadlines, HTTP, and a
Stack that starts a fresh database, the test webhook receiver and `pgpace run`, and tears them
all down in every outcome.

Contract:
  Tap(names) prints the plan; result() one line per check, in order; require() aborts the rest
  (Abort) after a failed check; finish() reports the checks not reached as failed (never
  skipped). check(prefix) asserts the code is at the check it means.
  deadline_wait() polls a probe until it answers or its deadline passes (Abort).
  Stack: PGPACE_BIN, PGPACE_RECEIVER_BIN and libpq's PG* from the environment; a database of
  its own (dropped by teardown), a temporary directory (removed), the receiver and the
  dispatcher (stopped). run_tests(tap, stack, tests) runs tests(tap, stack), reports what was
  not reached, then the two final checks every browser test ends with (the dispatcher stops on
  SIGTERM with exit status 0; the browser left no process and no profile), and tears down,
  also on SIGTERM (meson's timeout). Returns the exit status.
"""

import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

# The last two checks of every browser test (run_tests reports them).
FINAL_CHECKS = [
    "dispatcher stops on SIGTERM with exit status 0",
    "browser closed; no chromium process and no profile left",
]


class Abort(Exception):
    """The current check failed in a way later checks cannot run without. reported: its
    TAP line (and diagnostics) is out already."""

    def __init__(self, message, reported=False):
        super().__init__(message)
        self.reported = reported


class Tap:
    def __init__(self, names):
        self.names = names
        self.n = 0
        self.failed = 0
        print(f"1..{len(names)}", flush=True)

    def diag(self, text):
        for line in str(text).splitlines() or [""]:
            print(f"# {line}", flush=True)

    def result(self, ok, diag=None):
        name = self.names[self.n]
        self.n += 1
        if diag is not None and (not ok or diag):
            self.diag(diag)
        print(f"{'ok' if ok else 'not ok'} {self.n} - {name}", flush=True)
        if not ok:
            self.failed += 1
        return ok

    def require(self, ok, diag=None):
        if not self.result(ok, diag):
            raise Abort(self.names[self.n - 1], reported=True)

    def check(self, name_prefix):
        """Asserts the next check is the one the code means (keeps CHECKS and code in step)."""
        if not self.names[self.n].startswith(name_prefix):
            raise AssertionError(f"check {self.n + 1} is {self.names[self.n]!r}, "
                                 f"not {name_prefix!r}")

    def finish(self, reason, upto=None):
        """Reports the checks not run yet (up to index upto) as failed: never skipped."""
        while self.n < (len(self.names) if upto is None else upto):
            self.result(False, f"not reached: {reason}")


def deadline_wait(what, timeout, probe, interval=0.1):
    """Calls probe() until it returns a truthy value (returned) or timeout seconds pass
    (raising Abort with what and the last value). probe may raise to end the wait at once."""
    end = time.monotonic() + timeout
    last = None
    while True:
        last = probe()
        if last:
            return last
        if time.monotonic() >= end:
            raise Abort(f"{what}: not within {timeout} s (last: {str(last)[:300]})")
        time.sleep(interval)


def http_request(method, url, headers=None, body=None, timeout=5):
    """(status, headers, body text) of a request; body (not None) is sent as JSON. HTTP errors
    are answers, not exceptions. No proxy from the environment."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    headers = dict(headers or {})
    data = None
    if body is not None:
        data = json.dumps(body).encode()
        headers.setdefault("Content-Type", "application/json")
    req = urllib.request.Request(url, data=data, headers=headers, method=method)
    try:
        with opener.open(req, timeout=timeout) as resp:
            return resp.status, resp.headers, resp.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as e:
        return e.code, e.headers, e.read().decode("utf-8", "replace")


def http_get(url, headers=None, timeout=5):
    return http_request("GET", url, headers, timeout=timeout)


def run(args, env=None, timeout=60, check=True):
    p = subprocess.run(args, capture_output=True, text=True, env=env, timeout=timeout)
    if check and p.returncode != 0:
        raise Abort(f"{' '.join(args[:4])}... exited {p.returncode}: {p.stderr.strip()[:800]}")
    return p


def file_text(path):
    try:
        with open(path, "rb") as f:
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""


def num(v):
    if v is None or v == "":
        return None
    try:
        return float(v)
    except ValueError:
        return None


def screenshot_path(default_name):
    """$PGPACE_SCREENSHOT, else --screenshot PATH, else the build's meson-logs (never the
    source tree)."""
    if os.environ.get("PGPACE_SCREENSHOT"):
        return os.environ["PGPACE_SCREENSHOT"]
    if "--screenshot" in sys.argv[1:-1]:
        return sys.argv[sys.argv.index("--screenshot") + 1]
    # Run by hand: next to the binary's build directory's logs, as meson would put it.
    build = os.path.dirname(os.path.dirname(os.path.abspath(os.environ["PGPACE_BIN"])))
    return os.path.join(build, "meson-logs", default_name)


class Stack:
    """Everything a browser test starts, so that teardown can stop what exists."""

    def __init__(self, prefix):
        self.pgpace = os.environ["PGPACE_BIN"]
        self.receiver_bin = os.environ["PGPACE_RECEIVER_BIN"]
        self.tmp = tempfile.mkdtemp(prefix=f"pgpace-{prefix}-test-")
        self.db = f"t_{prefix}_{os.getpid()}_{secrets.token_hex(3)}"
        self.db_created = False
        self.receiver = None
        self.dispatcher = None
        self.dispatcher_log = os.path.join(self.tmp, "pgpace.log")
        self.receiver_out = os.path.join(self.tmp, "received.log")
        self.receiver_err = os.path.join(self.tmp, "receiver.err")
        self.config = None  # the configuration file, once written (the CLI reads it then)
        self.port = None
        self.browser = None
        self.pages = []  # every tab opened: the CSP/exception check covers them all
        self.cleanups = []  # more to stop at teardown (callables), last first

    def cli(self, *args, check=True):
        where = ["--config", self.config] if self.config else ["--db", f"dbname={self.db}"]
        return run([self.pgpace, *where, *args], check=check)

    def psql(self, *statements, check=True):
        """Runs the statements in the test's database; returns psql's unaligned output."""
        return run(["psql", "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-d", self.db]
                   + [a for s in statements for a in ("-c", s)], check=check).stdout

    # -- setup ----------------------------------------------------------------------------------

    def create_database(self):
        run(["psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", "postgres", "-c",
             f"CREATE DATABASE {self.db} TEMPLATE template0"])
        self.db_created = True
        self.cli("migrate")

    def start_receiver(self, args):
        """Starts pgpace-receiver with args; returns its base URL (http://127.0.0.1:PORT)."""
        with open(self.receiver_out, "wb") as out, open(self.receiver_err, "wb") as err:
            self.receiver = subprocess.Popen([self.receiver_bin, *args], stdin=subprocess.DEVNULL,
                                             stdout=out, stderr=err)

        def url():
            if self.receiver.poll() is not None:
                raise Abort(f"the receiver exited {self.receiver.returncode}: "
                            + file_text(self.receiver_err))
            m = re.search(r"listening on (http://127\.0\.0\.1:\d+)/", file_text(self.receiver_err))
            return m and m.group(1)

        return deadline_wait("the receiver's listening line", 10, url)

    def write_config(self, config_rest):
        """Writes the configuration: its [database] section, then config_rest. The CLI reads
        it from then on."""
        config = os.path.join(self.tmp, "pgpace.ini")
        with open(config, "w") as f:
            f.write(f"[database]\nconninfo = dbname={self.db}\n{config_rest}")
        self.config = config

    def start_dispatcher(self, config_rest=None):
        """Writes the configuration (unless config_rest is None: written before), starts
        `pgpace run` and waits for its admin port (from its log) and for it to lead."""
        if config_rest is not None:
            self.write_config(config_rest)
        with open(self.dispatcher_log, "wb") as log:
            self.dispatcher = subprocess.Popen([self.pgpace, "--config", self.config, "run"],
                                               stdin=subprocess.DEVNULL,
                                               stdout=subprocess.DEVNULL, stderr=log)

        def port():
            if self.dispatcher.poll() is not None:
                raise Abort(f"pgpace run exited {self.dispatcher.returncode}:\n"
                            + self.log_tail())
            m = re.search(r"event=admin_http_listening\b.*?\bport=(\d+)",
                          file_text(self.dispatcher_log))
            return m and int(m.group(1))

        self.port = deadline_wait("the admin_http_listening log line", 15, port)

        def leader():
            if self.dispatcher.poll() is not None:
                raise Abort(f"pgpace run exited {self.dispatcher.returncode}:\n"
                            + self.log_tail())
            status, _, body = http_get(f"{self.base}/readyz")
            try:
                return status == 200 and json.loads(body).get("role") == "leader"
            except ValueError:
                return False

        deadline_wait("/readyz role leader", 20, leader)

    @property
    def base(self):
        return f"http://127.0.0.1:{self.port}"

    def log_tail(self, lines=30):
        return "\n".join(file_text(self.dispatcher_log).splitlines()[-lines:])

    # -- teardown -------------------------------------------------------------------------------

    def stop_dispatcher(self, timeout=20):
        """SIGTERM, then wait; returns the exit status (None if it had to be killed)."""
        if self.dispatcher is None:
            return None
        p, self.dispatcher = self.dispatcher, None
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
        try:
            return p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
            return None

    def teardown(self, tap):
        if self.browser is not None:
            self.browser.close()
            self.browser = None
        status = self.stop_dispatcher()
        if status not in (None, 0):
            tap.diag(f"pgpace run exited {status}")
        if self.receiver is not None:
            self.receiver.send_signal(signal.SIGTERM)
            try:
                self.receiver.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.receiver.kill()
                self.receiver.wait()
            self.receiver = None
        while self.cleanups:
            try:
                self.cleanups.pop()()
            except Exception as e:  # noqa: BLE001 - the rest must still be torn down
                tap.diag(f"cleanup: {type(e).__name__}: {e}")
        if self.db_created:
            p = run(["psql", "-X", "-q", "-d", "postgres", "-c",
                     f"DROP DATABASE IF EXISTS {self.db} WITH (FORCE)"], check=False)
            if p.returncode != 0:
                tap.diag(f"dropping {self.db}: {p.stderr.strip()}")
            self.db_created = False
        shutil.rmtree(self.tmp, ignore_errors=True)


class Terminated(BaseException):
    """SIGTERM (meson's timeout): leave at once, but through the teardown."""


def on_sigterm(signum, frame):
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # one teardown, not interrupted again
    raise Terminated()


def final_checks(tap, w):
    # the dispatcher stops cleanly (under ASan: no report at exit either)
    tap.check("dispatcher stops")
    if w.browser is not None:
        w.browser.close()  # first, so that its polls end before the dispatcher drains
    if w.dispatcher is None:
        tap.result(False, "not reached: the dispatcher was not started")
    else:
        status = w.stop_dispatcher()
        log = file_text(w.dispatcher_log)
        tap.result(status == 0 and "event=stopped" in log
                   and "ERROR: AddressSanitizer" not in log and "runtime error:" not in log,
                   f"exit status {status}" + ("" if status == 0 else "\n" + w.log_tail(60)))

    # the browser is gone
    tap.check("browser closed")
    if w.browser is None:
        tap.result(False, "not reached: the browser was not started")
    else:
        browser, w.browser = w.browser, None
        left = browser.leftover_pids
        tap.result(not left and not os.path.exists(browser.tmpdir),
                   f"left: {left}, profile dir exists: {os.path.exists(browser.tmpdir)}")


def run_tests(tap, w, tests):
    """Runs tests(tap, w), then the final checks, and tears down in every outcome. The checks
    must end with FINAL_CHECKS. Returns the exit status."""
    started = time.monotonic()
    signal.signal(signal.SIGTERM, on_sigterm)
    last = len(tap.names) - len(FINAL_CHECKS)
    try:
        try:
            tests(tap, w)
        except Abort as e:
            if not e.reported:
                tap.diag(str(e))
                if tap.n < last:
                    tap.result(False)
            tap.finish(f"stopped after: {e}", upto=last)
        except Exception as e:  # noqa: BLE001 - CDPError or a bug: a failure, then torn down
            tap.diag(f"{type(e).__name__}: {e}")
            if tap.n < last:
                tap.result(False)
            tap.finish(f"{type(e).__name__}: {e}", upto=last)
        if tap.failed and w.dispatcher is not None and w.dispatcher.poll() is None:
            tap.diag("dispatcher log (last lines):\n" + w.log_tail())
        final_checks(tap, w)  # whatever happened before: they report on the teardown
    except Terminated:
        tap.diag("terminated (SIGTERM): tearing down")
    finally:
        w.teardown(tap)
        tap.finish("teardown failed or terminated")
    tap.diag(f"took {time.monotonic() - started:.1f} s")
    return 1 if tap.failed else 0
