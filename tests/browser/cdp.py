"""cdp.py - a minimal Chrome DevTools Protocol client for the browser tests (stdlib only).

Contract:
  Browser(timeout=...) starts Debian's headless chromium with --remote-debugging-pipe: the
  browser reads commands on its fd 3 and writes answers and events on its fd 4, each message
  one JSON object ended by a NUL byte. No port is opened, so nothing else on the machine can
  reach the browser and no port can collide. The profile lives in a fresh temporary directory
  (also the browser's HOME, so nothing is written to the real one).
  Browser.close() (also on leaving a `with` block, and from __del__ as a last resort) asks the
  browser to close, then terminates and kills its whole process group, waits for every process
  of the group to be gone and removes the temporary directory: called in every outcome, it
  leaves no chromium process and no file behind. It never raises.
  Browser.new_page() opens a tab (Target.createTarget) and attaches to it with a flattened
  session, so every command names its session and one pipe serves all.
  Every wait has a deadline: a command not answered in time, a condition not met in time, or
  the browser exiting raises CDPError with what was waited for.
  Page.login(user, password) answers the page's HTTP authentication challenges (Fetch domain)
  as a person at the browser's prompt would; headless chromium shows no prompt.
  Each Page records the console (Runtime.consoleAPICalled), the browser's own log
  (Log.entryAdded: network errors, Content-Security-Policy violations) and uncaught exceptions
  (Runtime.exceptionThrown); Page.csp_violations() and Page.exceptions let a test fail on them.
"""

import base64
import errno
import fcntl
import json
import os
import select
import shutil
import signal
import subprocess
import tempfile
import time


class CDPError(Exception):
    """A command failed, a wait ran out of time, or the browser went away."""


def _find_chromium():
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    raise CDPError("no chromium found on PATH (tests/tools/install-deps.sh installs Debian's)")


def _group_members(pgid):
    """Pids of the live (non-zombie) processes in process group pgid, read from /proc."""
    members = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read().decode("ascii", "replace")
        except OSError:
            continue
        # The command name (field 2) is in parentheses and may contain spaces.
        fields = stat[stat.rfind(")") + 2:].split()
        if len(fields) > 2 and fields[0] != "Z" and int(fields[2]) == pgid:
            members.append(int(entry))
    return members


def _children_named(prefix):
    """(pid, state) of this process's children whose command name starts with prefix."""
    found = []
    me = os.getpid()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read().decode("ascii", "replace")
        except OSError:
            continue
        comm = stat[stat.find("(") + 1:stat.rfind(")")]
        fields = stat[stat.rfind(")") + 2:].split()
        if len(fields) > 1 and int(fields[1]) == me and comm.startswith(prefix):
            found.append((int(entry), fields[0]))
    return found


def _become_subreaper():
    """Makes orphaned descendants (chromium's crash handler detaches into its own session)
    children of this process rather than of init, so close() can wait for them and reap them
    instead of leaving zombies where init does not reap (a container)."""
    try:
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        PR_SET_CHILD_SUBREAPER = 36
        libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except (OSError, AttributeError):
        pass  # then init adopts them: they still exit, only unreaped


class Browser:
    def __init__(self, timeout=30.0, window_size=(1400, 1000), binary=None, extra_args=()):
        self.timeout = timeout
        self.window_size = window_size
        self.proc = None
        self.tmpdir = None
        self.pgid = None
        self._cmd_w = None
        self._ev_r = None
        self._buf = b""
        self._next_id = 0
        self._answers = {}
        self._posted = set()  # ids of commands sent by post(): their answers are dropped
        self.post_errors = []
        self._pages = {}  # sessionId -> Page
        self.browser_events = []  # events without a session, e.g. Target.*
        self.stderr_path = None
        self.leftover_pids = []  # processes still there after close(): a test may fail on them
        self._start(binary or _find_chromium(), window_size, extra_args)

    # -- lifecycle ------------------------------------------------------------------------------

    def _start(self, binary, window_size, extra_args):
        _become_subreaper()
        self.tmpdir = tempfile.mkdtemp(prefix="pgpace-chromium-")
        # Commands: we write cmd_w, the browser reads its fd 3. Answers: the browser writes its
        # fd 4, we read ev_r. The browser's ends are copied above fd 10 first, so that moving
        # them onto 3 and 4 in the child cannot overwrite one with the other.
        cmd_r, cmd_w = os.pipe()
        ev_r, ev_w = os.pipe()
        hi_r = fcntl.fcntl(cmd_r, fcntl.F_DUPFD_CLOEXEC, 10)
        hi_w = fcntl.fcntl(ev_w, fcntl.F_DUPFD_CLOEXEC, 10)
        # All four pipe ends are open now, so fds 3 and 4 are taken in this process (they were
        # either taken before or are among the lowest free numbers the pipes got): pass_fds may
        # name them, and subprocess's own error pipe cannot land on them.

        def child_fds():
            os.dup2(hi_r, 3)  # dup2 leaves the copies inheritable
            os.dup2(hi_w, 4)

        args = [binary, "--headless", "--disable-gpu", "--remote-debugging-pipe",
                f"--user-data-dir={self.tmpdir}/profile", "--no-first-run",
                "--no-default-browser-check", f"--window-size={window_size[0]},{window_size[1]}",
                # Loopback only: no proxy from the environment, no background traffic.
                "--no-proxy-server", "--disable-background-networking",
                "--disable-component-update", "--disable-sync", "--disable-extensions",
                "--disable-default-apps", "--disable-breakpad", "--disable-dev-shm-usage",
                "--mute-audio", "--password-store=basic", "--hide-scrollbars"]
        if os.geteuid() == 0:
            args.append("--no-sandbox")  # chromium's sandbox refuses to run as root
        args += list(extra_args) + ["about:blank"]
        env = dict(os.environ, HOME=self.tmpdir, XDG_CONFIG_HOME=f"{self.tmpdir}/config",
                   XDG_CACHE_HOME=f"{self.tmpdir}/cache")
        self.stderr_path = f"{self.tmpdir}/chromium.log"
        try:
            with open(self.stderr_path, "wb") as err:
                self.proc = subprocess.Popen(
                    args, stdin=subprocess.DEVNULL, stdout=err, stderr=err, env=env,
                    pass_fds=(3, 4), preexec_fn=child_fds, start_new_session=True)
            self.pgid = self.proc.pid  # start_new_session: the browser leads its own group
        finally:
            for fd in (cmd_r, ev_w, hi_r, hi_w):
                os.close(fd)
        self._cmd_w = cmd_w
        self._ev_r = ev_r
        os.set_blocking(ev_r, False)
        version = self.send("Browser.getVersion")
        self.version = version.get("product", "?")

    def close(self):
        """Closes the browser and removes its files, whatever state it is in. Never raises."""
        if self.proc is None:
            return
        try:
            if self.proc.poll() is None:
                try:
                    self.send("Browser.close", timeout=5)
                except (CDPError, OSError):
                    pass
                try:
                    self.proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    pass
            # The browser's helpers (zygote, renderer, GPU, crashpad) share its process group.
            for sig, grace in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
                if not _group_members(self.pgid) and self.proc.poll() is not None:
                    break
                try:
                    os.killpg(self.pgid, sig)
                except ProcessLookupError:
                    pass
                deadline = time.monotonic() + grace
                while time.monotonic() < deadline:
                    if self.proc.poll() is not None and not _group_members(self.pgid):
                        break
                    time.sleep(0.05)
            if self.proc.poll() is None:
                self.proc.wait(timeout=5)
            self.leftover_pids = _group_members(self.pgid)
            # Orphans adopted by this process (see _become_subreaper): the zygotes, and the
            # crash handler, which runs in a session of its own (so killpg missed it) and
            # leaves by itself once the browser is gone. Wait for that, kill what does not
            # leave, and reap them all.
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline:
                if all(state == "Z" for _, state in _children_named("chrom")):
                    break
                time.sleep(0.05)
            for pid, state in _children_named("chrom"):
                if state != "Z":
                    self.leftover_pids.append(pid)
                    os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
        except Exception as e:  # noqa: BLE001 - close() must not hide the test's own error
            self.leftover_pids = self.leftover_pids or [f"close failed: {e}"]
        finally:
            for fd in (self._cmd_w, self._ev_r):
                if fd is not None:
                    try:
                        os.close(fd)
                    except OSError:
                        pass
            self._cmd_w = self._ev_r = None
            self.proc = None
            shutil.rmtree(self.tmpdir, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __del__(self):
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown may have torn modules down
            pass

    def stderr_tail(self, lines=20):
        try:
            with open(self.stderr_path, "rb") as f:
                text = f.read().decode("utf-8", "replace")
        except (OSError, TypeError):
            return ""
        return "\n".join(text.splitlines()[-lines:])

    # -- protocol -------------------------------------------------------------------------------

    def _write(self, data):
        view = memoryview(data)
        while view:
            try:
                n = os.write(self._cmd_w, view)
            except InterruptedError:
                continue
            except BrokenPipeError:
                raise CDPError("the browser closed its command pipe (exited?)") from None
            view = view[n:]

    def _pump(self, deadline):
        """Reads what the browser sent, waiting at most until deadline; dispatches it.
        Returns False when the deadline passed with nothing read."""
        if self.proc is None:
            raise CDPError("the browser is closed")
        wait = max(0.0, deadline - time.monotonic())
        ready, _, _ = select.select([self._ev_r], [], [], wait)
        if not ready:
            if self.proc.poll() is not None:
                raise CDPError(f"the browser exited ({self.proc.returncode}); its log:\n"
                               + self.stderr_tail())
            return False
        while True:
            try:
                chunk = os.read(self._ev_r, 1 << 20)
            except BlockingIOError:
                break
            except OSError as e:
                if e.errno == errno.EINTR:
                    continue
                raise
            if not chunk:
                raise CDPError("the browser closed its event pipe; its log:\n"
                               + self.stderr_tail())
            self._buf += chunk
        *messages, self._buf = self._buf.split(b"\0")
        for raw in messages:
            if raw:
                self._dispatch(json.loads(raw))
        return True

    def _dispatch(self, msg):
        if "id" in msg:
            if msg["id"] in self._posted:
                self._posted.discard(msg["id"])
                if "error" in msg:
                    self.post_errors.append(msg["error"].get("message", ""))
            else:
                self._answers[msg["id"]] = msg
            return
        page = self._pages.get(msg.get("sessionId"))
        if page is not None:
            page._event(msg["method"], msg.get("params", {}))
        else:
            self.browser_events.append(msg)

    def _command(self, method, params, session):
        self._next_id += 1
        msg = {"id": self._next_id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        self._write(json.dumps(msg).encode() + b"\0")
        return self._next_id

    def post(self, method, params=None, session=None):
        """Sends a command without waiting for its answer (for answering an event while
        events are being dispatched); a failure lands in post_errors."""
        self._posted.add(self._command(method, params, session))

    def send(self, method, params=None, session=None, timeout=None):
        """Sends one command and waits for its answer; returns its result or raises CDPError."""
        msg_id = self._command(method, params, session)
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        while msg_id not in self._answers:
            if time.monotonic() >= deadline:
                raise CDPError(f"{method}: no answer within "
                               f"{self.timeout if timeout is None else timeout} s")
            self._pump(deadline)
        answer = self._answers.pop(msg_id)
        if "error" in answer:
            raise CDPError(f"{method}: {answer['error'].get('message')} "
                           f"({answer['error'].get('data', '')})")
        return answer.get("result", {})

    def pump_for(self, seconds):
        """Processes events for up to `seconds` (returns early once nothing is pending)."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and self._pump(deadline):
            pass

    def new_page(self):
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.send("Target.attachToTarget",
                            {"targetId": target, "flatten": True})["sessionId"]
        page = Page(self, target, session)
        self._pages[session] = page
        for domain in ("Page", "Runtime", "Log", "Network"):
            page.send(f"{domain}.enable")
        # The window size includes room for (invisible) browser UI; pin the page's own
        # viewport so screenshots have the asked size.
        page.send("Emulation.setDeviceMetricsOverride",
                  {"width": self.window_size[0], "height": self.window_size[1],
                   "deviceScaleFactor": 1, "mobile": False})
        return page


class Page:
    def __init__(self, browser, target_id, session_id):
        self.browser = browser
        self.target_id = target_id
        self.session = session_id
        self.console = []  # {"source", "level", "text", "url"}
        self.exceptions = []  # exception descriptions
        self.loads = 0  # Page.loadEventFired count
        self.http_status = {}  # URL of each document/fetch response -> its status
        self.requests = []  # URL of every request the page made
        self._credentials = None  # (user, password) for HTTP authentication, see login()
        self.auth_challenges = []  # (scheme, realm, URL) of each challenge answered

    def send(self, method, params=None, timeout=None):
        return self.browser.send(method, params, session=self.session, timeout=timeout)

    def _event(self, method, params):
        if method == "Runtime.consoleAPICalled":
            text = " ".join(str(a.get("value", a.get("description", a.get("type", ""))))
                            for a in params.get("args", []))
            self.console.append({"source": "console-api", "level": params.get("type", ""),
                                 "text": text, "url": ""})
        elif method == "Log.entryAdded":
            e = params.get("entry", {})
            self.console.append({"source": e.get("source", ""), "level": e.get("level", ""),
                                 "text": e.get("text", ""), "url": e.get("url", "")})
        elif method == "Runtime.exceptionThrown":
            d = params.get("exceptionDetails", {})
            desc = d.get("exception", {}).get("description") or d.get("text", "")
            self.exceptions.append(f"{desc} (line {d.get('lineNumber')}, "
                                   f"column {d.get('columnNumber')})")
        elif method == "Fetch.requestPaused":
            self.browser.post("Fetch.continueRequest", {"requestId": params["requestId"]},
                              self.session)
        elif method == "Fetch.authRequired":
            c = params.get("authChallenge", {})
            self.auth_challenges.append((c.get("scheme", ""), c.get("realm", ""),
                                         params.get("request", {}).get("url", "")))
            user, password = self._credentials
            self.browser.post("Fetch.continueWithAuth", {
                "requestId": params["requestId"],
                "authChallengeResponse": {"response": "ProvideCredentials",
                                          "username": user, "password": password}},
                self.session)
        elif method == "Page.loadEventFired":
            self.loads += 1
        elif method == "Network.requestWillBeSent":
            self.requests.append(params.get("request", {}).get("url", ""))
        elif method == "Network.responseReceived":
            r = params.get("response", {})
            self.http_status[r.get("url", "")] = r.get("status")

    def csp_violations(self):
        """Log lines reporting a Content-Security-Policy refusal. Chromium reports them with
        source "security" ("Executing inline script violates the following Content Security
        Policy directive ... The action has been blocked."); older versions began with
        "Refused to ...". Any of these counts."""
        return [m for m in self.console
                if m["source"] == "security" or "Content Security Policy" in m["text"]
                or "Refused to" in m["text"]]

    def navigate(self, url, timeout=None):
        """Loads url and waits for its load event; returns the document's HTTP status."""
        timeout = self.browser.timeout if timeout is None else timeout
        deadline = time.monotonic() + timeout
        loads = self.loads
        result = self.send("Page.navigate", {"url": url}, timeout=timeout)
        if result.get("errorText"):
            raise CDPError(f"navigating to {url}: {result['errorText']}")
        if "loaderId" not in result:
            return None  # same document (only the fragment changed): no load event comes
        while self.loads == loads:
            if time.monotonic() >= deadline:
                raise CDPError(f"navigating to {url}: no load event within {timeout} s")
            self.browser._pump(deadline)
        return self.http_status.get(url)

    def reload(self, timeout=None):
        timeout = self.browser.timeout if timeout is None else timeout
        deadline = time.monotonic() + timeout
        loads = self.loads
        self.send("Page.reload", {"ignoreCache": True}, timeout=timeout)
        while self.loads == loads:
            if time.monotonic() >= deadline:
                raise CDPError(f"reload: no load event within {timeout} s")
            self.browser._pump(deadline)

    def evaluate(self, expression, timeout=None):
        """Evaluates a JS expression in the page (awaiting a promise) and returns its value as
        JSON; a thrown exception raises CDPError with its description."""
        result = self.send("Runtime.evaluate",
                           {"expression": expression, "returnByValue": True,
                            "awaitPromise": True, "userGesture": True}, timeout=timeout)
        if "exceptionDetails" in result:
            d = result["exceptionDetails"]
            desc = d.get("exception", {}).get("description") or d.get("text", "")
            raise CDPError(f"evaluating {expression[:80]!r}: {desc}")
        return result.get("result", {}).get("value")

    def wait_for(self, expression, timeout, what=None, interval=0.1):
        """Evaluates expression until it is truthy (returning its value) or timeout seconds
        pass (raising CDPError naming `what` and the last value). Between tries the browser's
        events are processed for `interval` seconds, so console output is not lost."""
        deadline = time.monotonic() + timeout
        last = None
        while True:
            last = self.evaluate(expression, timeout=max(1.0, deadline - time.monotonic()))
            if last:
                return last
            if time.monotonic() >= deadline:
                raise CDPError(f"{what or expression[:80]}: not within {timeout} s "
                               f"(last value {json.dumps(last)[:300]})")
            self.browser.pump_for(min(interval, max(0.0, deadline - time.monotonic())))

    def login(self, user, password):
        """Answers every HTTP authentication challenge of this page with these credentials,
        as a person typing them into the browser's prompt would (headless chromium shows no
        prompt: an unanswered challenge would wait for ever). Challenges are recorded in
        auth_challenges."""
        self._credentials = (user, password)
        self.send("Fetch.enable", {"handleAuthRequests": True,
                                   "patterns": [{"urlPattern": "*"}]})

    def close(self):
        """Closes the tab (its timers and polls end with it)."""
        self.browser.send("Target.closeTarget", {"targetId": self.target_id})
        self.browser._pages.pop(self.session, None)

    def set_extra_headers(self, headers):
        """Headers sent with every request of this page (navigation and fetch alike)."""
        self.send("Network.setExtraHTTPHeaders", {"headers": headers})

    def screenshot(self, path, full_page=False, max_height=4000):
        """Writes a PNG to path (the viewport, or with full_page the page's content up to
        max_height CSS pixels); returns its size in bytes."""
        params = {"format": "png"}
        if full_page:
            # The content's height (the body's bottom and margin), not the document's, which
            # is at least the viewport's: a short page gives a short picture.
            height = self.evaluate("""(() => { const b = document.body;
                return Math.ceil(b.getBoundingClientRect().bottom + window.scrollY
                                 + parseFloat(getComputedStyle(b).marginBottom || '0')); })()""")
            params.update(captureBeyondViewport=True,
                          clip={"x": 0, "y": 0, "width": self.browser.window_size[0],
                                "height": min(max(int(height or 0), 1), max_height),
                                "scale": 1})
        data = base64.b64decode(self.send("Page.captureScreenshot", params)["data"])
        directory = os.path.dirname(os.path.abspath(path))
        os.makedirs(directory, exist_ok=True)
        tmp = f"{path}.tmp"
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
        return len(data)
