"""web_gen_env: generated form tasks in web_form_env's browser, with its observation, tools and rewards.

A task is a seed, a split and a layout (its template): `spec_of(task)` draws its FormSpec (spec.py) and
`_load` builds that form in the one page this package ships (form.html + form.js, a file URL: no network), so
everything else is WebFormEnv's: the element list the agent reads (observe.py), the tools (actions.py), the
episode's end (the form's own submit button, a submit/done call, a reply without a tool call, max_steps, a dead
browser) and the rewards: the page's raw reward is 1.0 when every widget holds its expected state (and a popup
was answered as the instruction says), else -1.0, MiniWoB's convention; the environment's reward is 1.0 for a
success, else 0.0, and with `partial_credit` the `field_filled` term pays each target text or select field as its
value shows on the page.

Splits (built-in task i of a split: layout i % n of the split's layouts, seed SEED_BASE[split] + i):
- train (100,000): the layouts column-above, column-left, columns-above, columns-left; train labels and phrasings;
- test (500): the same layouts, every field labelled with held-out label synonyms and concepts (vocab.py);
- test_families (300): held-out layouts (a table; placeholders only, no labels), held-out labels and phrasings.

A task from a file or `options["task"]`: its template names a layout ("" draws one), `checker["seed"]` its seed
(absent: a stable hash of its task_id), `checker["split"]` the vocabulary's split (default the task's split).
"""
from __future__ import annotations

import zlib
from pathlib import Path

from envs.core.task_suite import Suite, builtin_id
from envs.core.tasks import FAMILY_SPLIT, SPLITS, Task
from envs.web import browser as browsers
from envs.web.env import WebFormEnv
from envs.web.generated.spec import HELD_OUT_LAYOUTS, LAYOUTS, FormSpec, draw

ENV = "web_gen_env"
COUNTS = {"train": 100_000, "test": 500, FAMILY_SPLIT: 300}
SEED_BASE = {"train": 0, "test": 1_000_000, FAMILY_SPLIT: 2_000_000}  # train and held-out seeds never meet
FORM_URL = Path(__file__).with_name("form.html").resolve().as_uri()
# null when the tab shows something else (a page navigated away)
BUILD_JS = "return typeof buildForm === 'function' ? buildForm(arguments[0]) : null;"


def generate(split: str, index: int, template: str) -> Task:
    """Built-in task `index` of a split; cheap (the spec is drawn when the task is loaded)."""
    seed = SEED_BASE[split] + index
    return Task(task_id=builtin_id(ENV, split, index),
                instruction=f"Generated form ({template} layout, seed {seed}): the page states the task.",
                checker={"generator": "form", "seed": seed, "split": split}, env=ENV, split=split,
                template=template, slots={"seed": str(seed)}, source="builtin")


def suite() -> Suite:
    return Suite(ENV, dict(COUNTS), generate, template_names=LAYOUTS + HELD_OUT_LAYOUTS, held_out=HELD_OUT_LAYOUTS)


def spec_of(task: Task) -> FormSpec:
    """The FormSpec a task stands for (see the module docstring for tasks that are not built in)."""
    seed = task.checker.get("seed")
    if seed is None:
        seed = zlib.crc32(task.task_id.encode())
    return draw(int(seed), task.checker.get("split", task.split), task.template or None)


def validate_task(task: Task) -> tuple[str, str] | None:
    """(field, message) when a task does not describe a generated form."""
    if task.checker.get("generator", "form") != "form":
        return ("generator", f"expected 'form', got {task.checker.get('generator')!r}")
    if task.template and task.template not in LAYOUTS + HELD_OUT_LAYOUTS:
        return ("template", f"expected a layout ({', '.join(LAYOUTS + HELD_OUT_LAYOUTS)}) or none, "
                            f"got {task.template!r}")
    seed = task.checker.get("seed", 0)
    if isinstance(seed, bool) or not isinstance(seed, int):
        return ("seed", f"expected an integer, got {seed!r}")
    if task.checker.get("split", task.split) not in SPLITS:
        return ("split", f"expected one of {', '.join(SPLITS)}, got {task.checker.get('split')!r}")
    return None


class WebGenEnv(WebFormEnv):
    """Generated form tasks (see the module docstring); WebFormEnv with its page hooks overridden."""

    env_name = ENV
    spec: FormSpec | None = None

    @classmethod
    def builtin_suite(cls) -> Suite:
        return suite()

    def validate_task(self, task: Task) -> tuple[str, str] | None:
        return validate_task(task)

    def _page_url(self, task: Task) -> str:
        return FORM_URL

    def _load(self, task: Task) -> None:
        """The form of the task's spec in the leased tab: the page is loaded once per tab and rebuilt in place each
        episode (buildForm bumps the episode number, so the last episode's refs go stale)."""
        self.spec = spec_of(task)
        self.page.goto(FORM_URL)
        if self.page.run(BUILD_JS, self.spec.as_dict()) is not True:
            self.page.url = ""  # the next try (WebFormEnv._start_page) loads the page afresh
            raise browsers.PageError(f"{FORM_URL} did not load its form script")

    def _task_fields(self, task: Task, utterance: str) -> dict[str, str]:
        return self.spec.fields() if self.spec is not None else {}

    def _fill_keys(self) -> list[str]:
        return [k for k, v in self.fields.items() if v]

    def _detail(self) -> dict:
        return {"generator": "form", "seed": self.spec.seed, "layout": self.spec.layout,
                "rules": list(self.spec.rules)}
