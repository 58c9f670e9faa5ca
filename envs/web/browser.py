"""Headless Chromium as a component this process starts, owns and ends: browsers, their pages, and the pool.

- `Browser`: one Chromium driven by the local chromedriver (Selenium with `Service(path)` and the manager's
  offline mode, so nothing is downloaded), headless, with a fresh profile folder. Chromedriver starts in a
  session of its own, so the driver, the browser and every helper it forks share one process group that
  `close()` kills; each of those processes also carries the tag `LACHESIS_WEB_TAG=<profile folder>` in its
  environment, so one that left the group is still found. A watchdog process (watchdog.py) ends every browser
  of this process after it exits, crashes or is killed. `memory()` reports the browser's resident memory.
- `Page`: one tab of a browser, leased by one environment. Every command takes the browser's lock and switches
  to the tab; a browser that hangs (a command past `command_timeout_s`) or has died raises `BrowserGone` with a
  one-line reason, after the browser was ended: the pool starts a fresh one on the next lease.
  `command_timeout_s` is a deadline on every command (the step timeout of a web environment): chromedriver's
  page-load and script timeouts end a hung page a little before it, and the HTTP client's read timeout (one try,
  no retries) ends the wait for a driver or browser that is stopped (SIGSTOP) or hung at it; the browser's start
  alone has START_TIMEOUT_S (a busy machine's Chromium takes longer than a step). A browser ended for a
  fault is killed (SIGKILL ends stopped processes too), never asked to quit; a stopped browser is not `alive`.
- `BrowserPool`: up to `max_browsers` browsers per process, each with up to `max_pages` tabs. An environment
  leases a page at reset and returns it at close; an idle tab is reused, preferably one already showing the
  wanted page (a navigation costs more than a MiniWoB reset). `pool()` is the process-wide pool, sized by
  LACHESIS_WEB_BROWSERS and LACHESIS_WEB_PAGES; a browser whose memory passes `memory_limit_mb` is ended once
  its pages are idle.

Nothing here imports Selenium before a browser starts, so `import envs` works on a machine without it;
`missing()` says in one line what such a machine lacks.
"""
from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from envs.core.contract import EnvironmentFault
from envs.web import watchdog
from ground.errors import UserError

PACKAGES_HINT = ("web_form_env needs Chromium and its driver: `apt-get install chromium chromium-driver` "
                 "(Debian/Ubuntu; scripts/bootstrap.sh does it as root) and `pip install miniwob selenium`")
# A browser's start (chromedriver's new session: Chromium's start) may take this long: over 10 s on 2 cores beside
# other work, where a step's deadline would call a healthy browser unavailable
START_TIMEOUT_S = 60.0
CHROMIUM_CANDIDATES = ("/usr/bin/chromium", "/usr/bin/chromium-browser", "/usr/bin/google-chrome")
DRIVER_CANDIDATES = ("/usr/bin/chromedriver", "/usr/lib/chromium/chromedriver")
# Flags: headless without a GPU or sandbox (containers run as root), no network traffic of the browser's own
# (updates, sync, safe browsing), no crash reporter (its handler would leave our process group), and no
# throttling of background tabs (the pool's tabs all run at once).
FLAGS = ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run", "--no-default-browser-check",
         "--disable-extensions", "--disable-dev-shm-usage", "--disable-crash-reporter", "--disable-breakpad",
         "--disable-renderer-backgrounding", "--disable-background-timer-throttling",
         "--disable-backgrounding-occluded-windows", "--js-flags=--max-old-space-size=256",
         "--window-size=800,600")


class BrowserUnavailable(UserError, RuntimeError):
    """This machine cannot start a browser (one line naming what to install); a command ends with it as `error:`."""


class BrowserGone(EnvironmentFault):
    """The page's browser died or hung; it has been ended (the message is one line)."""


class PageError(EnvironmentFault):
    """The page itself failed a command (a JavaScript exception such as a task script that did not load, an
    alert in the way): the browser lives on, the tab is marked for a reload (one line)."""


def _first(paths: tuple[str, ...], env_var: str) -> str | None:
    chosen = os.environ.get(env_var)
    if chosen:
        return chosen if os.access(chosen, os.X_OK) else None
    return next((p for p in paths if os.access(p, os.X_OK)), None) or shutil.which(Path(paths[0]).name)


def chromium_path() -> str | None:
    return _first(CHROMIUM_CANDIDATES, "LACHESIS_CHROMIUM")


def driver_path() -> str | None:
    return _first(DRIVER_CANDIDATES, "LACHESIS_CHROMEDRIVER")


def missing() -> str | None:
    """None when a browser can start here, else one line naming what is missing and the packages to install."""
    lacks = []
    if chromium_path() is None:
        lacks.append("chromium")
    if driver_path() is None:
        lacks.append("chromedriver")
    for module in ("selenium", "miniwob"):
        try:
            __import__(module)
        except ImportError:
            lacks.append(f"the Python package {module}")
    return f"no {', '.join(lacks)}: {PACKAGES_HINT}" if lacks else None


# ------------------------------------------------------------------ the watchdog

# Every browser this process started, as (process group, tag): what tests check for leftover processes.
STARTED: list[tuple[int, str]] = []
_watchdog: subprocess.Popen | None = None
_watchdog_lock = threading.Lock()


def _tell_watchdog(line: str) -> None:
    global _watchdog
    with _watchdog_lock:
        if _watchdog is None or _watchdog.poll() is not None:
            # In a session of its own: a signal to our process group (Ctrl-C, a test runner's kill) spares it.
            _watchdog = subprocess.Popen([sys.executable, "-I", watchdog.__file__], stdin=subprocess.PIPE,
                                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                         start_new_session=True, close_fds=True)
        try:
            _watchdog.stdin.write(line.encode() + b"\n")
            _watchdog.stdin.flush()
        except (BrokenPipeError, OSError):
            pass


# ------------------------------------------------------------------ processes and memory

def group_pids(pgid: int) -> list[int]:
    """Live (not zombie) processes of a process group."""
    return [pid for pid, _ in watchdog.group(pgid)]


def group_stopped(pgid: int) -> bool:
    """Whether a process of the group is stopped (SIGSTOP, SIGTSTP, a tracer): it answers nothing until resumed."""
    return any(state in "Tt" for _, state in watchdog.group(pgid))


def _status_kb(pid: int, path: str, key: str) -> int:
    try:
        with open(f"/proc/{pid}/{path}") as f:
            for line in f:
                if line.startswith(key):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def memory_of(pids: list[int]) -> dict:
    """{processes, rss_mb (summed: counts shared pages once per process), pss_mb (shared pages split: the
    browser's real share of memory)}."""
    rss = sum(_status_kb(p, "status", "VmRSS:") for p in pids)
    pss = sum(_status_kb(p, "smaps_rollup", "Pss:") for p in pids)
    return {"processes": len(pids), "rss_mb": round(rss / 1024, 1), "pss_mb": round(pss / 1024, 1)}


# ------------------------------------------------------------------ one browser

@dataclass(eq=False)
class Browser:
    """One headless Chromium and its chromedriver (see the module docstring)."""

    command_timeout_s: float = 10.0
    driver: object = None
    service: object = None  # selenium's Service: the chromedriver process this browser started
    pgid: int = 0
    tag: str = ""
    lock: threading.RLock = field(default_factory=threading.RLock)
    current: str = ""  # the window handle the driver is switched to
    handles: list[str] = field(default_factory=list)  # every tab, leased or idle
    started_s: float = 0.0

    def start(self) -> "Browser":
        reason = missing()
        if reason:
            raise BrowserUnavailable(reason)
        os.environ.setdefault("SE_OFFLINE", "true")  # the manager's offline mode: never download a driver
        from selenium import webdriver
        from selenium.common.exceptions import WebDriverException
        from selenium.webdriver.chrome.service import Service
        from urllib3.exceptions import HTTPError

        t0 = time.perf_counter()
        self.tag = tempfile.mkdtemp(prefix="lachesis-web-")
        options = webdriver.ChromeOptions()
        options.binary_location = chromium_path()
        for flag in (*FLAGS, f"--user-data-dir={self.tag}"):
            options.add_argument(flag)
        env = {**os.environ, watchdog.TAG_VAR: self.tag}
        service = Service(driver_path(), env=env, popen_kw={"start_new_session": True})
        try:
            service.start()  # selenium stops a driver that starts but never answers
        except (WebDriverException, OSError) as exc:
            shutil.rmtree(self.tag, ignore_errors=True)
            raise BrowserUnavailable(f"chromedriver did not start ({_one_line(exc)}); {PACKAGES_HINT}") from None
        connection, config = self._connection(service.service_url)
        try:
            self.driver = webdriver.Remote(command_executor=connection, options=options)
        except (WebDriverException, OSError, HTTPError) as exc:  # the browser failed to start: end what did start
            watchdog.end_browser(service.process.pid, self.tag)
            shutil.rmtree(self.tag, ignore_errors=True)
            raise BrowserUnavailable(f"chromium did not start ({_one_line(exc)}); {PACKAGES_HINT}") from None
        config.timeout = self.command_timeout_s  # started: from now on every command has the step's deadline
        self.service = service
        self.pgid = service.process.pid  # start_new_session: the driver leads its own group
        STARTED.append((self.pgid, self.tag))
        _tell_watchdog(f"add {self.pgid} {self.tag}")
        # A renderer that hangs answers chromedriver's page-load and script timeouts, a little before the deadline;
        # the client's read timeout is the deadline for a driver or browser that stops answering at all (stopped)
        self.driver.set_page_load_timeout(self.driver_timeout_s)
        self.driver.set_script_timeout(self.driver_timeout_s)
        self.current = self.driver.current_window_handle
        self.handles = [self.current]
        self.started_s = time.perf_counter() - t0
        return self

    @property
    def driver_timeout_s(self) -> float:
        """chromedriver's page-load and script timeouts: under the deadline, so a hung page is its answer."""
        return self.command_timeout_s - min(1.0, 0.2 * self.command_timeout_s)

    def _connection(self, url: str):
        """(connection, its config): the client side of chromedriver. Every HTTP request answers within the
        config's timeout or raises urllib3's ReadTimeoutError, tried once (urllib3 retries a GET or DELETE three
        times by default, and selenium's own read timeout is 120 s); no proxy (the driver is on loopback). The
        timeout starts at START_TIMEOUT_S, for the new session (Chromium's start, which takes over 10 s on a busy
        machine), and `start` sets it to `command_timeout_s` once the browser is up (selenium reads it on each
        request). Selenium's public ClientConfig, given to the connection webdriver.Chrome would build itself
        (vendor "goog"); the pool arguments nest under their own name, as selenium reads them."""
        from selenium.webdriver.chromium.remote_connection import ChromiumRemoteConnection
        from selenium.webdriver.remote.client_config import ClientConfig

        config = ClientConfig(remote_server_addr=url, keep_alive=True,
                              timeout=max(START_TIMEOUT_S, self.command_timeout_s),
                              init_args_for_pool_manager={"init_args_for_pool_manager": {"retries": False}})
        return ChromiumRemoteConnection(url, vendor_prefix="goog", browser_name="chrome", ignore_proxy=True,
                                        client_config=config), config

    @property
    def alive(self) -> bool:
        """Started, not ended, and none of its processes gone or stopped."""
        if self.driver is None:
            return False
        group = watchdog.group(self.pgid)
        return bool(group) and not any(state in "Tt" for _, state in group)

    def memory(self) -> dict:
        """The resident memory of the driver, the browser and its helpers (see memory_of)."""
        pids = set(group_pids(self.pgid)) | set(watchdog.tagged_pids(self.tag)) if self.tag else set()
        return memory_of(sorted(pids))

    def close(self, polite: bool = True) -> None:
        """End the browser: a polite quit (not after a fault, nor when a process of it is stopped: it would wait
        for an answer that never comes), then SIGKILL to every process of its group and its tag, then its
        profile."""
        with self.lock:
            driver, self.driver = self.driver, None
            if driver is not None and polite and group_pids(self.pgid) and not group_stopped(self.pgid):
                from selenium.common.exceptions import WebDriverException  # imported by start() already
                from urllib3.exceptions import HTTPError

                driver.command_executor.client_config.timeout = 3  # a hung driver must not hold close() up
                try:
                    driver.quit()
                except (WebDriverException, OSError, HTTPError):
                    pass  # the processes are killed next whatever the driver answered
            if self.pgid:
                watchdog.end_browser(self.pgid, self.tag)
                _tell_watchdog(f"del {self.pgid} {self.tag}")
            service, self.service = self.service, None
            if service is not None:  # reap the killed driver (no zombie per fault in a long rollout)
                try:
                    service.process.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    pass
            self.handles = []


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    msg = text[0] if text else type(exc).__name__
    return msg.removeprefix("Message: ")[:200]


# ------------------------------------------------------------------ pages

@dataclass(eq=False)
class Page:
    """One tab of a pool browser, leased by one environment (see the module docstring)."""

    browser: Browser
    handle: str
    url: str = ""
    released: bool = False

    def call(self, fn, *args):
        """fn(driver, *args) on this tab, under the browser's lock; BrowserGone if the browser died or hung."""
        from selenium.common.exceptions import TimeoutException, WebDriverException

        b = self.browser
        with b.lock:
            if b.driver is None:
                raise BrowserGone("the browser was closed")
            try:
                if b.current != self.handle:
                    b.driver.switch_to.window(self.handle)
                    b.current = self.handle
                return fn(b.driver, *args)
            except TimeoutException as exc:
                b.close(polite=False)
                raise BrowserGone(f"the page did not answer within {b.command_timeout_s:g} s ({_one_line(exc)}); "
                                  "the browser was ended") from None
            except WebDriverException as exc:
                if _is_gone(exc) or not b.alive:
                    b.close(polite=False)
                    raise BrowserGone(f"the browser is gone ({_one_line(exc)})") from None
                self.url = ""  # whatever the tab shows is suspect: the next goto loads the page afresh
                raise PageError(f"the page failed ({type(exc).__name__}: {_one_line(exc)})") from None
            except (OSError, ConnectionError) as exc:  # the driver's HTTP port closed: it was killed
                b.close(polite=False)
                raise BrowserGone(f"the browser is gone ({_one_line(exc)})") from None
            except Exception as exc:  # urllib3 errors (the driver stopped answering) are not OSError subclasses
                if type(exc).__module__.startswith("urllib3"):
                    stopped = group_stopped(b.pgid)
                    b.close(polite=False)
                    if type(exc).__name__ == "ReadTimeoutError":  # the deadline passed: stopped or hung
                        raise BrowserGone(f"the browser did not answer within {b.command_timeout_s:g} s ("
                                          f"{'stopped' if stopped else 'hung'}); the browser was ended") from None
                    raise BrowserGone(f"the browser is gone ({_one_line(exc)})") from None
                raise

    def run(self, script: str, *args):
        """Execute JavaScript in the tab (see call)."""
        return self.call(lambda d: d.execute_script(script, *args))

    def screenshot(self) -> bytes:
        """The tab's viewport as PNG bytes."""
        return self.call(lambda d: d.get_screenshot_as_png())

    def goto(self, url: str) -> None:
        if url != self.url:
            self.call(lambda d: d.get(url))
            self.url = url


_GONE_MARKERS = ("invalid session id", "no such window", "disconnected", "session deleted", "chrome not reachable",
                 "target window already closed", "tab crashed", "target crashed", "not connected to devtools")


def _is_gone(exc: Exception) -> bool:
    text = str(exc).lower()
    return any(m in text for m in _GONE_MARKERS)


# ------------------------------------------------------------------ the pool

class PoolFull(RuntimeError):
    """Every tab of every browser the pool may start is leased (the message says which setting raises it)."""


class BrowserPool:
    """Browsers and their tabs, leased to environments (see the module docstring)."""

    def __init__(self, max_browsers: int = 1, max_pages: int = 128, memory_limit_mb: float = 2048.0,
                 command_timeout_s: float = 10.0):
        if max_browsers < 1 or max_pages < 1:
            raise ValueError("a browser pool needs max_browsers >= 1 and max_pages >= 1")
        self.max_browsers, self.max_pages = max_browsers, max_pages
        self.memory_limit_mb, self.command_timeout_s = memory_limit_mb, command_timeout_s
        self.browsers: list[Browser] = []
        self.leased: dict[Browser, int] = {}
        self.idle: dict[Browser, list[Page]] = {}
        self.started = 0  # browsers started over the pool's life (restarts included)
        self.peak_leased = 0  # the most tabs leased at once (what a caller that bounds its episodes holds)
        self._lock = threading.Lock()

    def lease(self, url: str) -> Page:
        """A tab showing `url`: an idle one (same page first), else a new tab, else a new browser."""
        with self._lock:
            self._drop_dead()
            best: tuple[Browser, Page] | None = None
            for b in self.browsers:
                for p in self.idle.get(b, []):
                    if best is None or (p.url == url and best[1].url != url):
                        best = (b, p)
            if best is not None:
                b, page = best
                self.idle[b].remove(page)
            elif len(self.browsers) < self.max_browsers and all(self.leased.get(b, 0) for b in self.browsers):
                # every browser is busy: spread the environments over a new one (parallel runs use them all)
                b = Browser(command_timeout_s=self.command_timeout_s).start()
                self.started += 1
                self.browsers.append(b)
                self.idle[b] = []
                page = Page(b, b.current)
            else:
                b = min((b for b in self.browsers if len(b.handles) < self.max_pages),
                        key=lambda b: (self.leased.get(b, 0), len(b.handles)), default=None)
                if b is None:
                    raise PoolFull(f"all {self.max_browsers * self.max_pages} browser tabs are leased "
                                   f"(LACHESIS_WEB_BROWSERS={self.max_browsers}, LACHESIS_WEB_PAGES="
                                   f"{self.max_pages}); close environments or raise those")
                page = self._new_tab(b)
            self.leased[b] = self.leased.get(b, 0) + 1
            self.peak_leased = max(self.peak_leased, sum(self.leased.values()))
            page.released = False
        page.goto(url)
        return page

    def _new_tab(self, b: Browser) -> Page:
        """A new tab of `b` (a browser that died or hangs meanwhile: BrowserGone, as any command of a page)."""
        def open_tab(driver):
            driver.switch_to.new_window("tab")
            b.current = driver.current_window_handle
            b.handles.append(b.current)
            return b.current

        return Page(b, Page(b, b.current).call(open_tab))

    def release(self, page: Page) -> None:
        """Give a tab back (idempotent); a browser over its memory limit is ended once none of its tabs is leased."""
        with self._lock:
            if page.released:
                return
            page.released = True
            b = page.browser
            if b not in self.leased:
                return
            self.leased[b] -= 1
            if b.driver is None:
                return
            self.idle[b].append(page)
            if self.leased[b] == 0 and b.memory()["pss_mb"] > self.memory_limit_mb:
                self._forget(b)
                b.close()

    def _drop_dead(self) -> None:
        for b in list(self.browsers):
            if b.driver is None or not b.alive:
                self._forget(b)
                b.close()

    def _forget(self, b: Browser) -> None:
        self.browsers.remove(b)
        self.idle.pop(b, None)
        self.leased.pop(b, None)

    def stats(self) -> dict:
        with self._lock:
            return {"browsers": len(self.browsers), "started": self.started,
                    "tabs": sum(len(b.handles) for b in self.browsers),
                    "leased": sum(self.leased.values()),
                    "memory": [b.memory() for b in self.browsers]}

    def shutdown(self) -> None:
        """End every browser of the pool (the environments' pages become BrowserGone)."""
        with self._lock:
            browsers, self.browsers = self.browsers, []
            self.idle.clear()
            self.leased.clear()
        for b in browsers:
            b.close()


def _int_env(name: str, default: int) -> int:
    raw = os.environ.get(name, "")
    if not raw:
        return default
    if not raw.isdigit() or int(raw) < 1:
        raise ValueError(f"{name} must be a positive integer, got {raw!r}")
    return int(raw)


_POOL: BrowserPool | None = None
_POOL_LOCK = threading.Lock()


def pool() -> BrowserPool:
    """The process-wide pool (LACHESIS_WEB_BROWSERS browsers, default 1; LACHESIS_WEB_PAGES tabs each, default
    128), ended at exit."""
    global _POOL
    with _POOL_LOCK:
        if _POOL is None:
            _POOL = BrowserPool(_int_env("LACHESIS_WEB_BROWSERS", 1), _int_env("LACHESIS_WEB_PAGES", 128))
            atexit.register(_POOL.shutdown)
        return _POOL


def leftovers(started: list[tuple[int, str]] | None = None) -> list[int]:
    """Live processes of browsers this process started (their groups and tags) that are still running."""
    pids: set[int] = set()
    for pgid, tag in STARTED if started is None else started:
        pids.update(group_pids(pgid))
        pids.update(watchdog.tagged_pids(tag))
    return sorted(pids)
