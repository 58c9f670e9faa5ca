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
"""
from __future__ import annotations

from pathlib import Path

from envs.base import Suite, builtin_id
from envs.tasks import FAMILY_SPLIT, Task

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

# The fields a correct page holds as some field's value (the rest are clicks, counts or rules).
FILL = {
    "enter-password": ("target",), "enter-text": ("target",), "enter-text-dynamic": ("target",),
    "login-user": ("username", "password"), "login-user-popup": ("username", "password"),
    "choose-list": ("target",), "form-sequence-2": ("textbox text",),
    "multi-layouts": ("genre", "director", "year"), "multi-orderings": ("genre", "director", "year"),
}


def html_dir() -> Path:
    """MiniWoB's task pages, from the installed package (never the network)."""
    import miniwob

    return Path(miniwob.__file__).parent / "html" / "miniwob"


def page_url(name: str) -> str:
    return (html_dir() / f"{name}.html").as_uri()


def data_mode(split: str) -> str:
    return "train" if split == "train" else "test"


def generate(split: str, index: int, template: str) -> Task:
    seed = SEED_BASE[split] + index
    return Task(task_id=builtin_id(ENV, split, index),
                instruction=f"MiniWoB++ {template} (seed {seed}): the page states the task.",
                checker={"miniwob": template, "seed": seed, "mode": data_mode(split)},
                env=ENV, split=split, template=template, slots={"seed": str(seed)}, source="builtin")


def builtin_suite() -> Suite:
    return Suite(ENV, {"train": TRAIN_TASKS, "test": TEST_TASKS, FAMILY_SPLIT: FAMILY_TASKS}, generate,
                 template_names=TASKS, held_out=HELD_OUT)


def validate_task(task: Task) -> tuple[str, str] | None:
    """(field, message) when a task (e.g. from a task file) does not name a suite page and an integer seed."""
    name = task.checker.get("miniwob") or task.template
    if name not in TASKS:
        return ("miniwob", f"expected one of the suite's MiniWoB tasks ({', '.join(TASKS)}), got {name!r}")
    seed = task.checker.get("seed", 0)
    if isinstance(seed, bool) or not isinstance(seed, int):
        return ("seed", f"expected an integer, got {seed!r}")
    return None
