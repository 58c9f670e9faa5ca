"""Configuration of `lake train watch`, the streaming trainer: which view it follows, when it wakes, how much it
replays; every SFT option (lr, batch, LoRA, ...) applies to each increment.

A recipe names the view a watcher trains on and the tables whose change feed it follows. A view row is new when
one of the events it is built from is new (its `event_id` column names a trajectory or skill event, and
`reward_event_id` / `usage_event_id` a late label or usage count), so a late reward that makes an old trajectory
good trains it once the reward lands.

The `online` recipe is not a view: actors append rollouts to the lake and a learner trains on them from its change
feed, alternating. That loop has one implementation, rl_train_online --actors N (trainers/rl/learner.py); `online_config`
maps the watch options that apply onto its OnlineConfig, and an option that does not apply is a one-line error.
"""
from __future__ import annotations

import re
from dataclasses import MISSING, dataclass, field, fields
from pathlib import Path
from typing import ClassVar

from trainers.rl.config import OnlineConfig
from trainers.runtime.errors import TrainerInputError
from trainers.runtime.options import at_least, helped, positive
from trainers.runtime.run_reader import RunReader
from trainers.sft.config import SFTConfig


@dataclass(frozen=True)
class Recipe:
    view: str  # the default view
    follow: dict[str, str]  # table whose change feed is followed -> the view's column holding that table's event_id


RECIPES = {
    "sft": Recipe("sft", {"trajectories": "event_id", "rewards": "reward_event_id"}),
    "instruction": Recipe("instruction", {"skills": "event_id", "skill_usage": "usage_event_id"}),
}
ONLINE = "online"
# the watch options the online recipe takes: WatchConfig field -> OnlineConfig field (one increment is one
# learner step: its actors' rollouts in the lake, then one update on them)
ONLINE_FIELDS = {"model": "model", "lake_root": "lake_root", "output": "output", "seed": "seed", "threads": "threads",
                 "device": "device", "eval_task": "env", "actors": "actors", "max_increments": "steps",
                 "eval_every": "eval_interval", "progress": "progress", "plot": "plot", "report_to": "report_to"}
# fields set by the command itself, not options a user gives
INTERNAL = {"recipe", "data", "record_in_lake"}
# the option of a field whose flag is not --field-name (learning_rate: with the old spelling it still takes)
FLAGS = {"full": "--full/--lora", "learning_rate": "--learning-rate/--lr", "from_run": "--from"}
MIN_ACTORS = 2
# the files of a watcher's folder (trainers/watch/loop.py describes them)
WATCH_FILE, HEARTBEAT_FILE, LOCK_FILE = "watch.json", "heartbeat.json", "lock"
CONSUMED_FILE = "consumed.json"  # rows consumed without a new example since the last checkpoint (nothing published)
META_KEYS = ("name", "serial", "recipe", "view", "model", "model_path", "lake_root")  # watch.json's string fields
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


@dataclass(kw_only=True)
class WatchConfig(SFTConfig):
    """lake train watch: a resident trainer that trains one increment per batch of new lake rows."""

    recipe: str = field(default="sft", **helped(
        "sft (good trajectories' chats) | instruction (skills -> pairs) | online (actors' rollouts into the lake, "
        "then an update on them: rl_train_online --actors N; its hyperparameters are lachesis.toml's)"))
    view: str | None = field(default=None, **helped(
        "the view to train on (default: the recipe's); it must have the recipe's event id columns"))
    data: str = field(default="", **helped("the view (set from --view / --recipe)"))
    name: str | None = field(default=None, **helped(
        "the watcher's name: its consumer name in the lake and its folder runs/<name> (default watch-<recipe>)"))
    output: str | None = field(default=None, **helped(
        "the watcher's folder (default runs/<name>); a restarted watcher continues from its last increment there"))
    from_run: str | None = field(default=None, **helped(
        "a trained run to continue (runs/<run>: its LoRA adapter, trained on as it is, or its fully fine-tuned "
        "model): the first increment starts from its weights instead of --model's; a folder that already has "
        "increments continues from its own newest"))
    min_rows: int = field(default=1, **helped("train once at least this many new view rows are there"))
    debounce: float = field(default=0.25, **helped(
        "seconds to wait after a commit is seen, so a burst of commits becomes one increment"))
    poll_interval: float = field(default=2.0, **helped(
        "seconds between polls of the lake when no file event arrives (object storage, missed events)"))
    served_test_fraction: float = field(default=0.0, **helped(
        "share of served conversations (recorded by `lake serve-model`) the sft view holds out as its test split, "
        "by md5 of the conversation (0 = every one trains; the view's sft_served_test_fraction)"))
    replay: float = field(default=0.25, **helped(
        "replayed older view rows per new row, against forgetting (0 = only new rows)"))
    max_versions: int | None = field(default=None, **helped(
        "consume at most this many versions of each followed table per increment (default: all that are new)"))
    once: bool = field(default=False, **helped("train on what is new (if anything) and exit; for cron and CI"))
    max_increments: int | None = field(default=None, **helped("exit after this many increments"))
    eval_every: int = field(default=0, **helped(
        "evaluate every K increments on --eval-task's held-out tasks, recorded in the lake (0 = never)"))
    eval_task: str = field(default="shell", **helped(
        "the environment evaluated by --eval-every (the online recipe also plays it)"))
    eval_limit: int = field(default=8, **helped("held-out tasks evaluated per evaluation"))
    keep: int = field(default=0, **helped("increment folders kept (0 = every one: each is a versioned adapter)"))
    epochs: float = field(default=1.0, **helped("passes over an increment's rows (new + replayed)"))
    warmup_steps: int = field(default=0, **helped("linear warm-up steps of each increment, at most 10% of it"))
    plot: bool = field(default=False, **helped("draw loss.png (not per increment)"))
    actors: int = field(default=MIN_ACTORS, **helped(
        "online recipe: actor processes appending rollouts to the lake (at least 2: the lake is the only channel "
        "between them and the learner)"))

    COMMAND: ClassVar[str] = "lake train watch"

    def __post_init__(self):
        self.recipe = str(self.recipe).lower()
        if self.recipe == ONLINE:
            self._refuse(set(ONLINE_FIELDS), "--recipe online (it takes --model, --lake, --output, --seed, --threads, "
                         "--device, --eval-task, --eval-every, --max-increments and --actors; its hyperparameters are "
                         "lachesis.toml's: rl_edit_config)")
            self.online_config()  # its own checks, now: one line before anything starts
            return
        if self.recipe not in RECIPES:
            raise TrainerInputError(f"unknown --recipe {self.recipe!r}: use {', '.join(RECIPES)} or {ONLINE}")
        self._refuse({f.name for f in fields(self)} - {"actors"}, f"--recipe {self.recipe}")
        self.view = self.view or RECIPES[self.recipe].view
        self.data = self.view
        self.name = self.name or f"watch-{self.recipe}"
        if not NAME.match(self.name):
            raise TrainerInputError(f"bad --name {self.name!r}: letters, digits, '.', '_' and '-' only, up to 64")
        super().__post_init__()
        if self.from_run:  # a missing or empty run folder: one line now, before any model loads
            RunReader.open(self.from_run, "--from").weights()
        at_least(self, 0, "debounce", "replay", "eval_every", "keep")
        at_least(self, 1, "min_rows", "max_versions", "max_increments", "eval_limit")
        if not 0 <= self.served_test_fraction <= 1:
            raise TrainerInputError(f"--served-test-fraction must be within 0 and 1, got {self.served_test_fraction}")
        positive(self, "poll_interval")

    def _refuse(self, applies: set[str], what: str) -> None:
        """A one-line error for the first option given (not at its default) that `what` does not take."""
        for f in fields(self):
            if f.name in applies or f.name in INTERNAL:
                continue
            default = f.default_factory() if f.default is MISSING else f.default
            if getattr(self, f.name) != default:
                flag = FLAGS.get(f.name, "--" + f.name.replace("_", "-"))
                raise TrainerInputError(f"{flag} does not apply to {what}")

    def online_config(self) -> OnlineConfig:
        """The online recipe's run: rl_train_online --actors N with the watch options that apply. One increment is one
        step; --max-increments is the step count (default rl_train_online's), --eval-every K evaluates every K steps
        (0: before the first and after the last only), --eval-task is the environment played and evaluated."""
        if self.actors < MIN_ACTORS:
            raise TrainerInputError(f"--actors must be at least {MIN_ACTORS} for --recipe online: the lake is the only "
                                    "channel between actors and learner (one process is rl_train_online)")
        given = {ONLINE_FIELDS[k]: getattr(self, k) for k in ONLINE_FIELDS}
        given["steps"] = given["steps"] or _default(OnlineConfig, "steps")
        given["eval_interval"] = given["eval_interval"] or given["steps"]
        if given["seed"] == _default(WatchConfig, "seed"):
            given["seed"] = None  # not given: the project config's seed, as rl_train_online
        return OnlineConfig(**given)

    @property
    def follow(self) -> dict[str, str]:
        return RECIPES[self.recipe].follow

    def folder(self) -> Path:
        return Path(self.output or Path("runs") / self.name).expanduser()


def offsets_of(state: dict) -> dict[str, int]:
    """An increment checkpoint's offsets, its runs event checked too: table -> a version (a TypeError, ValueError or
    KeyError when they are not what the watcher wrote)."""
    offsets = {str(t): int(v) for t, v in state["offsets"].items()}
    event = state["event"]
    if (any(v < 0 for v in offsets.values()) or not isinstance(event["run_id"], str)
            or not isinstance(event["metadata"]["serial"], str) or not isinstance(event["metrics"], dict)):
        raise ValueError("a negative offset, or a runs event without run_id, serial or metrics")
    return offsets


def _default(cls, name: str):
    return next(f.default for f in fields(cls) if f.name == name)
