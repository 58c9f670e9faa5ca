"""The web task suite: which MiniWoB++ tasks, and how a (split, index) becomes a task.

31 of MiniWoB++'s ~125 tasks, forms and widgets only: 25 whose episodes make up the train and test splits and 6
held out whole as the test_families split (other layouts or orderings of the same fields, a popup in the
middle of a login, a case rule, tasks whose train and test problems MiniWoB draws differently). The rest of
MiniWoB stays untouched, so what a model does on tasks nobody chose can be measured later.

A task is one MiniWoB page and one seed: built-in task i of a split is template (MiniWoB task) i % n of that
split, with the seed `SEED_BASE[split] + i`; train and test seeds never meet, and the page is put in MiniWoB's
own data mode of the split ("train" or "test": the -transfer tasks draw other problems in test). The
instruction is MiniWoB's (it phrases each problem itself); the Task's `instruction` names the page and seed
until the page is loaded, and the observation after reset carries the real one. `FILL` lists, per task,
the fields (MiniWoB's own field names, miniwob.fields) whose values a correct form holds in some field: the
fine-grained reward counts them.

Two groups of the suite's tasks are environments of their own, so that one can be the source of a transfer and
the other its target (the guide's pattern: a source task and a related target, `rl_transfer_init
--source_env=web_click_env --target_env=web_fill_env`): web_click_env, pick the named widget and click it (14
click tasks, 2 held out), and web_fill_env, put the given values into fields and submit (11 tasks, 4 held out).
Together they are the suite: the same pages, seeds drawn the same way, rows and task ids under their own name.
"""
from __future__ import annotations

from pathlib import Path

from envs.core.task_suite import Suite, builtin_id
from envs.core.tasks import FAMILY_SPLIT, Task

ENV = "web_form_env"
TRAIN_TASKS, TEST_TASKS, FAMILY_TASKS = 3000, 250, 300  # 10 test seeds per task, 50 per held-out task
SEED_BASE = {"train": 0, "test": 1_000_000, FAMILY_SPLIT: 2_000_000}

TRAIN_FAMILIES = (
    "click-button", "click-button-sequence", "click-checkboxes", "click-checkboxes-large", "click-collapsible",
    "click-dialog", "click-dialog-2", "click-link", "click-option", "click-tab", "click-tab-2", "click-test",
    "click-test-2", "click-widget", "enter-password", "enter-text", "enter-text-dynamic", "focus-text",
    "focus-text-2", "login-user", "choose-list", "use-autocomplete-nodelay", "form-sequence-2", "enter-date",
    "enter-time",
)
HELD_OUT = ("multi-layouts", "multi-orderings", "login-user-popup", "enter-text-2", "click-checkboxes-transfer",
            "click-test-transfer")
TASKS = TRAIN_FAMILIES + HELD_OUT

CLICK_ENV, FILL_ENV = "web_click_env", "web_fill_env"
CLICK_TASKS = tuple(t for t in TASKS if t.startswith("click-"))
GROUPS = {ENV: TASKS, CLICK_ENV: CLICK_TASKS, FILL_ENV: tuple(t for t in TASKS if t not in CLICK_TASKS)}
TEST_PER_TASK, FAMILY_PER_TASK = TEST_TASKS // len(TRAIN_FAMILIES), FAMILY_TASKS // len(HELD_OUT)

# The fields a correct page holds as some field's value (the rest are clicks, counts or rules).
FILL = {
    "enter-password": ("target",), "enter-text": ("target",), "enter-text-dynamic": ("target",),
    "login-user": ("username", "password"), "login-user-popup": ("username", "password"),
    "choose-list": ("target",), "form-sequence-2": ("textbox text",),
    "multi-layouts": ("genre", "director", "year"), "multi-orderings": ("genre", "director", "year"),
}


def page_of(task: Task) -> str:
    """The MiniWoB task a web task plays: its `miniwob` field (a task file's), else its template (a built-in's)."""
    return task.checker.get("miniwob") or task.template


def html_dir() -> Path:
    """MiniWoB's task pages, from the installed package (never the network)."""
    import miniwob

    return Path(miniwob.__file__).parent / "html" / "miniwob"


def page_url(name: str) -> str:
    return (html_dir() / f"{name}.html").as_uri()


def data_mode(split: str) -> str:
    return "train" if split == "train" else "test"


def generate(split: str, index: int, template: str, env: str = ENV) -> Task:
    seed = SEED_BASE[split] + index
    return Task(task_id=builtin_id(env, split, index),
                instruction=f"MiniWoB++ {template} (seed {seed}): the page states the task.",
                checker={"miniwob": template, "seed": seed, "mode": data_mode(split)},
                env=env, split=split, template=template, slots={"seed": str(seed)}, source="builtin")


def builtin_suite(env: str = ENV) -> Suite:
    """The suite of web_form_env or of one of its groups (GROUPS): as many test and held-out seeds per task."""
    tasks = GROUPS[env]
    held = tuple(t for t in HELD_OUT if t in tasks)
    counts = {"train": TRAIN_TASKS, "test": TEST_PER_TASK * (len(tasks) - len(held)),
              FAMILY_SPLIT: FAMILY_PER_TASK * len(held)}
    return Suite(env, counts, lambda split, index, template: generate(split, index, template, env),
                 template_names=tasks, held_out=held)


def validate_task(task: Task, env: str = ENV) -> tuple[str, str] | None:
    """(field, message) when a task (e.g. from a task file) does not name a page of `env`'s tasks and an integer
    seed."""
    name = page_of(task)
    if name not in GROUPS[env]:
        return ("miniwob", f"expected one of {env}'s MiniWoB tasks ({', '.join(GROUPS[env])}), got {name!r}")
    seed = task.checker.get("seed", 0)
    if isinstance(seed, bool) or not isinstance(seed, int):
        return ("seed", f"expected an integer, got {seed!r}")
    mode = task.checker.get("mode", "train")
    if mode not in ("train", "test"):
        return ("mode", f"expected MiniWoB's data mode \"train\" or \"test\", got {mode!r}")
    return None
