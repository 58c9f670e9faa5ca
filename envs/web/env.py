"""web_form_env: MiniWoB++ form and widget tasks in a real headless Chromium, as a ToolEnv.

reset() leases a tab from the browser pool (browser.py), loads the task's MiniWoB page from the installed
package if the tab shows another one, seeds MiniWoB's generator with the task's seed and starts an episode
with MiniWoB's timer out of the way (a model may think for longer than MiniWoB's 10 s; the step limit bounds
an episode instead). The observation is MiniWoB's instruction and the page's element list (observe.py); each
step is ToolEnv.step (one step loop for every environment) with this environment's hooks: the calls run on the
page (actions.py, at most MAX_CALLS_PER_STEP; submit and done end the episode), `after_calls` reads the page back,
and the observation is their results and the page as it is now.

The episode ends when the page ends it (its Submit button, a final click: MiniWoB's own judgement), when the
agent calls submit/done or replies without a tool call, after max_steps, or when the browser dies or hangs
(a one-line observation; the next reset gets a fresh browser). Reward: MiniWoB's raw reward is in [-1, 1] and
a task counts as solved when it is positive (MiniWoB's success criterion); the environment's reward is 1.0 for
a success, else 0.0, as in the other environments, and the final info's checks carry MiniWoB's raw reward and
reason. With reward weights (envs/core/rewards.py): the step terms of every environment (a well-formed call, a
malformed one, a call that failed on the page: no such ref, a covered element, typing into a checkbox), and
with `partial_credit` a `field_filled` term on every step that changes how many of the task's fields hold their
value (FILL in suite.py; negative when one is wiped), paid as it happens; the final term is the other
environments' final reward less what the field terms already paid, so an episode's return is theirs.

With `screenshots` (a folder), the page as the episode ends is saved there as a PNG (`<task>-<id>.png`) and
its path is a file reference in the final info's checks (`details[0]["screenshot"]`), so the lake row's
metadata points at it; an episode whose browser died has none.
"""
from __future__ import annotations

import time
import uuid
from pathlib import Path

import gymnasium

from envs.core.base import ToolEnv
from envs.core.checks import CheckReport
from envs.core.contract import EnvironmentFault, ResetInfo, ResetOptions
from envs.core.rewards import RewardWeights
from envs.core.tasks import Task
from envs.web import browser as browsers
from envs.web.actions import END_TOOLS, TOOLS, perform
from envs.web.observe import SNAPSHOT_JS, render
from envs.web.suite import CLICK_ENV, ENV, FILL, FILL_ENV, builtin_suite, page_of, page_url, validate_task

MAX_CALLS_PER_STEP = 10
START_TRIES = 3  # loads of a task's page at reset before its fault ends the reset
# MiniWoB covers a finished task with its START div (the next episode's start button); the task's last state is
# still under it, and reset() starts the next episode without the cover
UNCOVER_JS = "var c = document.getElementById('sync-task-cover'); if (c) { c.style.display = 'none'; }"
SYSTEM_PROMPT = ("You operate a web page. Each element is listed as [ref] tag text. Use click, type, select and "
                 "press with a ref; the page's own submit button finishes the task.")

START_JS = """
window.__lachesisEpisode = (window.__lachesisEpisode || 0) + 1;
core.EPISODE_MAX_TIME = 1e9;  // the step limit bounds an episode, not MiniWoB's wall-clock timer
Math.seedrandom(arguments[0]);
core.setDataMode(arguments[1]);
core.startEpisodeReal();
return WOB_TASK_READY;
"""


class WebFormEnv(ToolEnv):
    env_name = ENV
    system_prompt = SYSTEM_PROMPT
    tools = TOOLS
    end_tools = END_TOOLS
    max_calls_per_step = MAX_CALLS_PER_STEP
    reply_tokens = 384  # the experts fill a form in one reply of up to 10 calls (envs/README.md, "Reply budget")

    def __init__(self, split: str = "train", tasks=None, max_steps: int = 10, limits=None,
                 render_mode: str | None = None, templates: list[str] | None = None,
                 reward_weights: RewardWeights | None = None, pool: browsers.BrowserPool | None = None,
                 screenshots: str | Path | None = None):
        super().__init__(split=split, tasks=tasks, max_steps=max_steps, limits=limits, render_mode=render_mode,
                         templates=templates, reward_weights=reward_weights)
        self._pool = pool
        self.screenshots = Path(screenshots) if screenshots is not None else None
        self.screenshot_failures = 0  # screenshots that could not be written (each a warning, never an error)
        self.screenshot_error = ""  # the last one's reason
        self.page: browsers.Page | None = None
        self.fields: dict[str, str] = {}
        self._paid_share = 0.0
        self._share = 0.0
        self._snapshot: dict = {}

    @classmethod
    def builtin_suite(cls):
        return builtin_suite(cls.env_name)

    def validate_task(self, task: Task) -> tuple[str, str] | None:
        return validate_task(task, self.env_name)

    # ------------------------------------------------------------ the page

    @property
    def pool(self) -> browsers.BrowserPool:
        return self._pool if self._pool is not None else browsers.pool()

    def _start_page(self, task: Task) -> dict:
        """Load the task's page in a tab and start its episode; the page's first snapshot. A browser that died or
        hung is replaced and a page that failed (a script that did not load under load, an exception) is loaded
        afresh, up to START_TRIES tries; the last fault is raised."""
        for attempt in range(START_TRIES):
            try:
                if self.page is None or self.page.browser.driver is None:
                    self._release()
                    self.page = self.pool.lease(self._page_url(task))
                self._load(task)
                return self.page.run(SNAPSHOT_JS)
            except EnvironmentFault as exc:
                if isinstance(exc, browsers.BrowserGone):
                    self._release()
                if attempt == START_TRIES - 1:
                    raise
        raise AssertionError("unreachable")

    def _page_url(self, task: Task) -> str:
        """Hook: the address of the task's page (a file of the installed packages, never the network)."""
        return page_url(page_of(task))

    def _load(self, task: Task) -> None:
        """Hook: show the task's page in self.page (a leased tab) and start its episode, so that SNAPSHOT_JS reads
        the instruction (#query), the elements and the episode state (WOB_DONE_GLOBAL, WOB_RAW_REWARD_GLOBAL,
        WOB_REWARD_REASON). Here: MiniWoB's page, seeded, in the split's data mode."""
        self.page.goto(self._page_url(task))
        ready = self.page.run(START_JS, task.checker.get("seed", 0), task.checker.get("mode", "train"))
        for _ in range(40):  # a task that builds its page asynchronously says when it is ready
            if ready:
                break
            time.sleep(0.025)
            ready = self.page.run("return WOB_TASK_READY;")

    def _release(self) -> None:
        if self.page is not None:
            self.pool.release(self.page)
            self.page = None

    # ------------------------------------------------------------ gymnasium API

    def reset(self, *, seed: int | None = None, options: ResetOptions | None = None) -> tuple[str, ResetInfo]:
        gymnasium.Env.reset(self, seed=seed)
        t0 = time.perf_counter()
        task = self.pick_task(options or {})
        reason = browsers.missing()
        if reason:
            raise browsers.BrowserUnavailable(reason)
        snap = self._start_page(task)
        self.task = task
        self._snapshot = snap
        self.fields = self._task_fields(task, snap["utterance"])
        self._paid_share = self._share = self._fill_share(snap)
        self._steps = 0
        self._done = False
        observation = render(snap, with_instruction=True)
        self._transcript = [observation]
        info = self._info(task)
        info["template"] = page_of(task)  # a task file's task names its page in `miniwob`: the experts read this
        info["instruction"] = observation
        info["fields"] = dict(self.fields)
        self.timings["reset_s"] = time.perf_counter() - t0
        return observation, info

    # ------------------------------------------------------------ step hooks (ToolEnv.step runs the step)

    def call_tool(self, box, call) -> str:
        """A call on the page (actions.py); a dead browser or a failed page raises EnvironmentFault."""
        return perform(self.page, call)

    def after_calls(self, fault: str) -> tuple[bool, str]:
        """The page as the calls left it: ended by the page itself (its submit button, a final click: MiniWoB's
        own judgement), or a fault (the browser gone: its tab is given back and the episode ends)."""
        snap = self._snapshot
        if not fault:
            try:
                snap = self.page.run(SNAPSHOT_JS)
            except EnvironmentFault as exc:
                fault = str(exc)
        if fault:
            self._release()
            snap = {**self._snapshot, "done": False}
        self._snapshot = snap
        self._share = self._fill_share(snap)
        return bool(snap.get("done")), fault

    def more_step_terms(self, fault: str) -> dict[str, float]:
        """With partial_credit, `field_filled`: paid as the share of the task's fields holding their value changes."""
        pc = self.reward_weights.partial_credit
        term = 0.0 if pc is None or fault else pc * (self._share - self._paid_share)
        if pc is not None and not fault:
            self._paid_share = self._share
        return {"field_filled": term}

    def paid_before_final(self) -> float:
        pc = self.reward_weights.partial_credit
        return pc * self._paid_share if pc is not None else 0.0

    def final_report(self, *, answer: str | None, fault: str) -> CheckReport:
        report = self._report(self._snapshot, self._share, fault)
        shot = self._screenshot() if self.screenshots is not None and not fault else None
        if shot:
            report.details[0]["screenshot"] = shot
        elif self.screenshot_error:
            report.details[0]["screenshot_error"] = self.screenshot_error
        return report

    def closing_lines(self, results: list[str], report: CheckReport, reward: float, *, ended: bool,
                      fault: str) -> list[str]:
        if ended:
            return [f"The page ended the task: {'success' if report.success else 'failure'} "
                    f"(MiniWoB reward {float(self._snapshot.get('raw_reward') or 0):.2f})."]
        return [] if fault else [f"submitted: reward {reward:.2f}"]

    def progress_lines(self) -> list[str]:
        return [render(self._snapshot, with_instruction=False)]

    def _screenshot(self) -> str | None:
        """The page as it is now, saved as a PNG in the screenshots folder; its absolute path (None: the browser
        went away before it answered)."""
        try:
            self.page.run(UNCOVER_JS)
            png = self.page.screenshot()
        except EnvironmentFault:
            return None
        self.screenshot_error = ""
        path = (self.screenshots / f"{self.task.task_id.replace(':', '-')}-{uuid.uuid4().hex[:8]}.png").resolve()
        try:
            self.screenshots.mkdir(parents=True, exist_ok=True)
            path.write_bytes(png)
        except OSError as exc:  # a full disk or a folder taken away: this episode has no picture, the run goes on
            self.screenshot_failures += 1
            self.screenshot_error = f"screenshot not saved: {exc.strerror or exc} ({self.screenshots})"
            return None
        return str(path)

    # ------------------------------------------------------------ scoring (hooks a page family overrides:
    # _task_fields, _fill_keys, _detail)

    def _task_fields(self, task: Task, utterance: str) -> dict[str, str]:
        """The task's fields (name -> wanted value) read from its instruction: what partial credit counts."""
        return _fields(task, utterance)

    def _fill_keys(self) -> list[str]:
        """The task's fields that a correct page shows as some field's value (what partial credit counts): here
        MiniWoB's own fields of the task that FILL lists."""
        return [k for k in FILL.get(page_of(self.task) if self.task else "", ()) if self.fields.get(k)]

    def _detail(self) -> dict:
        """What the final checks name of the task's page, before its verdict (MiniWoB's task)."""
        return {"miniwob": page_of(self.task)}

    def _fill_share(self, snap: dict) -> float:
        keys = self._fill_keys()
        if not keys:
            return 0.0
        values = {str(e.get("value", "")).strip().lower() for e in snap.get("elements", ()) if "value" in e}
        return sum(1 for k in keys if self.fields[k].strip().lower() in values) / len(keys)

    def _report(self, snap: dict, share: float, gone: str) -> CheckReport:
        raw = float(snap.get("raw_reward") or 0.0) if snap.get("done") else 0.0
        success = bool(snap.get("done")) and raw > 0
        keys = self._fill_keys()
        total = len(keys) or 1
        passed = total if success else round(share * len(keys))
        detail = {**self._detail(), "raw_reward": raw, "reason": snap.get("reason"),
                  "page_done": bool(snap.get("done")), "fields": dict(self.fields)}
        if gone:
            detail["browser"] = gone
        return CheckReport(reward=1.0 if success else 0.0, passed=passed, total=total, details=[detail])

    def close(self) -> None:
        self._release()

    def browser_memory(self) -> dict:
        """The resident memory of the browser this environment's tab lives in (browser.memory_of)."""
        return self.page.browser.memory() if self.page is not None else {}


def _fields(task: Task, utterance: str) -> dict[str, str]:
    """MiniWoB's own fields of the instruction (miniwob.fields); {} where its extractor does not parse it."""
    from miniwob.fields import get_field_extractor

    try:
        return {str(k): str(v) for k, v in get_field_extractor(page_of(task))(utterance)}
    except (KeyError, ValueError):
        return {}


class WebClickEnv(WebFormEnv):
    """web_form_env's click tasks only (suite.GROUPS): a transfer source or target of its own."""
    env_name = CLICK_ENV


class WebFillEnv(WebFormEnv):
    """web_form_env's field-filling tasks only (suite.GROUPS): a transfer source or target of its own."""
    env_name = FILL_ENV
