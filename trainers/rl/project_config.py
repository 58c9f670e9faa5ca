"""The project file, lachesis.toml: the keys of online RL and transfer that `rl_edit_config` edits.

The guide tunes its second and third strategies with `rl_edit_config reward_scale 2.5` and
`rl_edit_config learning_rate 3e-5`, then runs `rl_train_online` / `rl_train_transfer`, which must
see those values: so the keys live in one file, found from the working directory upward (like git finds
its repository), and every trainer reads it through `load_config`. `ProjectConfig` is the one typed
schema (TRL style: a help text per field, validation in `__post_init__` raising the one-line
`TrainerInputError`); the file holds only the keys a user changed, flat `key = value` lines.

Reading uses tomllib; writing changes only the edited key's line (comments and order stay) through a
temp file and `os.replace`, so a failed edit leaves the file as it was.

What a hostile or careless file cannot do: every key has an upper bound as well as a lower one (a batch of
10**30 tasks was written, then `--list --json` died on it; `freeze_layers 0-99999999999` built a set of 10**11
layers: MemoryError); the file must be a regular file read with a size cap, opened without blocking (a FIFO
hung the command, a directory or `--config /dev/zero` gave a traceback or a MemoryError); a lachesis.toml that
is a symbolic link is edited through the link (its target is replaced atomically; the link stays a link).
"""
from __future__ import annotations

import dataclasses
import difflib
import math
import os
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from envs import RewardWeights, reply_tokens
from ground.atomic import write_bytes_atomic
from ground.files import Refusal, read_named
from ground.ranges import at_least, positive
from trainers.generation.generate import STOP_REPETITION, check_stop_repetition
from trainers.rl.grpo import LOSS_TYPES
from trainers.runtime.errors import TrainerInputError
from trainers.runtime.options import helped

FILENAME = "lachesis.toml"


@dataclass
class ProjectConfig:
    """Online RL and transfer settings (lachesis.toml); `rl_edit_config --list` shows them."""

    reward_scale: float = field(default=1.0, **helped(
        "multiplies the reward of the key success action (the episode's final success)"))
    learning_rate: float = field(default=5e-5, **helped(
        "peak learning rate of online RL and transfer (the guide lowers it to 3e-5 for transfer)"))
    lora_rank: int = field(default=16, **helped("LoRA rank of the trained adapter"))
    lora_alpha: int = field(default=32, **helped("LoRA alpha (scale = alpha / rank)"))
    group_size: int = field(default=4, **helped("rollouts per task in a GRPO group (the baseline is the group mean)"))
    batch_size: int = field(default=2, **helped("tasks per training step (each played group_size times)"))
    max_turns: int = field(default=4, **helped("an episode ends after this many assistant turns at the latest"))
    max_completion_length: int = field(default=0, **helped(
        "tokens the policy may generate per turn (0: what the environment's replies need: 128, web forms 384)"))
    stop_repetition: int = field(default=STOP_REPETITION, **helped(
        "end a turn whose last N tokens are one span of <= 16 tokens repeated (a loop) instead of running to "
        "max_completion_length; 0: off"))
    temperature: float = field(default=1.0, **helped("sampling temperature of the rollouts"))
    kl_beta: float = field(default=0.0, **helped("KL penalty towards the starting policy (0 = no reference model)"))
    loss_type: str = field(default="dapo", **helped(
        "how the policy loss weighs tokens (trl's names): dapo = every sampled token the same, grpo = every "
        "episode the same (its token mean)"))
    eval_episodes: int = field(default=20, **helped("test-split episodes per evaluation"))
    seed: int = field(default=0, **helped("seed of the task order, sampling and initialisation"))
    freeze_layers: str = field(default="", **helped(
        "layers to freeze in transfer: a spec such as 0-8 or 0,2,5-7 (empty = none)"))
    well_formed_call_bonus: float = field(default=0.05, **helped(
        "step reward for a well-formed tool call (once per step)"))
    malformed_call_penalty: float = field(default=0.1, **helped(
        "step penalty per malformed tool call (bad JSON, unknown tool, bad arguments)"))
    command_error_penalty: float = field(default=0.05, **helped(
        "step penalty per tool call that failed (non-zero exit, missing file)"))
    partial_credit: float = field(default=0.5, **helped(
        "total weight of partial credit on a failed episode: this times the share of checks or tests passing"))
    checkpoint_every: int = field(default=100, **helped("write a checkpoint every this many training steps"))
    checkpoint_minutes: float = field(default=10.0, **helped(
        "also write one when the last is this many minutes old (0 = by checkpoint_every alone): at most what a "
        "killed run loses, however slow its steps"))
    ray: str = field(default="", **helped(
        "the Ray cluster rl_train_online's actors run on when --ray is not given: local, auto or the head's address "
        "(empty = actor processes on this machine)"))

    def __post_init__(self):
        for f in dataclasses.fields(self):
            setattr(self, f.name, _typed(f.name, _kind(f), getattr(self, f.name)))
        key = {"error": TrainerInputError, "option": False}  # a key of lachesis.toml, named as written there
        positive(self, "reward_scale", "learning_rate", "temperature", **key)
        at_least(self, 1, "lora_rank", "lora_alpha", "batch_size", "max_turns", "eval_episodes", "checkpoint_every",
                 **key)
        at_least(self, 2, "group_size", **key)  # a group of one has no baseline: every advantage is 0
        at_least(self, 0, "max_completion_length", "stop_repetition", "kl_beta", "seed", "well_formed_call_bonus",
                 "malformed_call_penalty", "command_error_penalty", "partial_credit", "checkpoint_minutes", **key)
        check_stop_repetition(self.stop_repetition)
        if self.partial_credit > 1:
            raise TrainerInputError(f"partial_credit must be at most 1 (a success is worth 1), "
                                    f"got {self.partial_credit}")
        for name, most in UPPER_BOUNDS.items():
            if getattr(self, name) > most:
                raise TrainerInputError(f"{name} must be at most {most:g}, got {getattr(self, name):g}")
        parse_layer_spec(self.freeze_layers)
        if self.loss_type not in LOSS_TYPES:
            raise TrainerInputError(f"loss_type must be one of {', '.join(LOSS_TYPES)}, got {self.loss_type!r}")


# Upper bounds: far above any useful run (a 2-core CPU trains batch 2, group 4; the largest open models have
# ~130 layers and 128k-token contexts), low enough that no value can exhaust memory before training starts.
UPPER_BOUNDS = {
    "reward_scale": 1e6, "learning_rate": 1.0, "lora_rank": 4096, "lora_alpha": 1 << 16, "group_size": 1024,
    "batch_size": 1 << 16, "max_turns": 10_000, "max_completion_length": 1 << 20, "stop_repetition": 1 << 20,
    "temperature": 100.0,
    "kl_beta": 1e6, "eval_episodes": 1_000_000, "seed": 2**32 - 1, "well_formed_call_bonus": 1e6,
    "malformed_call_penalty": 1e6, "command_error_penalty": 1e6, "checkpoint_every": 10**9,
    "checkpoint_minutes": 1e6,
}
MAX_LAYER = 4095  # the highest layer index a freeze spec may name
MAX_LAYER_SPEC = 1000  # characters of a freeze spec
MAX_FILE_BYTES = 1 << 16  # a lachesis.toml holds ~20 short lines


KEYS = tuple(f.name for f in dataclasses.fields(ProjectConfig))


def _kind(f: dataclasses.Field) -> type:
    return {"float": float, "int": int, "str": str}[f.type if isinstance(f.type, str) else f.type.__name__]


def _typed(key: str, kind: type, value: object) -> object:
    """`value` as the key's type: an int is a float too, never the other way; bools are not numbers."""
    if kind is str and isinstance(value, str):
        return value
    if kind is int and isinstance(value, int) and not isinstance(value, bool):
        return value
    if kind is float and isinstance(value, (int, float)) and not isinstance(value, bool):
        if not math.isfinite(value):
            raise TrainerInputError(f"{key} must be a finite number, got {value}")
        return float(value)
    raise TrainerInputError(f"{key} must be {_TYPE_WORDS[kind]}, got {value!r}")


_TYPE_WORDS = {int: "an integer", float: "a number", str: "a string"}


def parse_layer_spec(spec: str) -> list[int]:
    """Layer indices of a spec such as "0-8" or "0,2,5-7" (ranges inclusive, sorted, no repeats); "" = none.
    Indices above MAX_LAYER are refused before any range is built."""
    if len(str(spec)) > MAX_LAYER_SPEC:
        raise TrainerInputError(f"layer spec of {len(str(spec))} characters: at most {MAX_LAYER_SPEC}")
    layers: set[int] = set()
    for part in (p.strip() for p in str(spec).split(",")):
        if not part:
            if str(spec).strip():
                raise TrainerInputError(f"layer spec {spec!r} has an empty item: use e.g. 0-8 or 0,2,5-7")
            continue
        m = re.fullmatch(r"(\d+)(?:\s*-\s*(\d+))?", part)
        if not m:
            raise TrainerInputError(f"layer spec {spec!r}: {part!r} is not a layer or a range such as 0-8")
        lo, hi = int(m.group(1)), int(m.group(2) if m.group(2) is not None else m.group(1))
        if hi < lo:
            raise TrainerInputError(f"layer spec {spec!r}: range {part!r} runs backwards (write {hi}-{lo})")
        if hi > MAX_LAYER:
            raise TrainerInputError(f"layer spec {spec!r}: layer {hi} is above {MAX_LAYER}, more than any model has")
        layers.update(range(lo, hi + 1))
    return sorted(layers)


def reward_weights(cfg: ProjectConfig) -> RewardWeights:
    """The environments' reward weights of this config (envs import nothing of ours: they get this)."""
    return RewardWeights(well_formed_call_bonus=cfg.well_formed_call_bonus,
                         malformed_call_penalty=cfg.malformed_call_penalty,
                         command_error_penalty=cfg.command_error_penalty, partial_credit=cfg.partial_credit,
                         reward_scale=cfg.reward_scale)


def completion_tokens(cfg: ProjectConfig, env: str) -> int:
    """Tokens the policy may write per turn in `env`: max_completion_length, or (0) what the environment's replies
    need (envs' reply_tokens)."""
    return cfg.max_completion_length or reply_tokens(env)


# ----------------------------------------------------------------------------------------------- the file
def find_config_file(start: Path | None = None) -> Path | None:
    """lachesis.toml in `start` (default the working directory) or the nearest folder above it, else None."""
    here = Path(start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        candidate = folder / FILENAME
        if os.path.lexists(candidate):  # whatever it is: a FIFO or a folder of that name is reported, not skipped
            return candidate
    return None


def read_text(path: Path, what: str = "config file", limit: int = MAX_FILE_BYTES) -> str:
    """The UTF-8 text of a regular file of at most `limit` bytes (a symbolic link to one is followed); anything
    else (missing, a folder, a FIFO, a device, too big, not UTF-8) is a one-line TrainerInputError naming `what`
    (ground.files.read_named opens it without blocking: a FIFO is refused instead of waited on)."""
    try:
        data = read_named(path, limit)
    except FileNotFoundError:
        raise TrainerInputError(f"{what} {path} does not exist") from None
    except Refusal as exc:
        raise TrainerInputError(f"{what} {exc.reason}") from None
    except OSError as exc:
        raise TrainerInputError(f"{what} {path}: cannot read it ({exc.strerror})") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise TrainerInputError(f"{what} {path} is not UTF-8 text: {exc}") from None


def _read(path: Path) -> dict:
    try:
        data = tomllib.loads(read_text(path))
    except tomllib.TOMLDecodeError as exc:
        raise TrainerInputError(f"{path} is not valid TOML: {exc}") from None
    for key in data:
        if key not in KEYS:
            raise TrainerInputError(f"{path}: {unknown_key_message(key)}")
    return data


def unknown_key_message(key: str) -> str:
    """An unknown key, the closest valid one when there is one, and every valid key."""
    close = difflib.get_close_matches(key, KEYS, n=1)
    hint = f" (did you mean {close[0]}?)" if close else ""
    return f"unknown key {key!r}{hint}; keys: {', '.join(KEYS)}"


def load_config(path: Path | None = None) -> ProjectConfig:
    """The project's config: `path`, else lachesis.toml found upward from the working directory, else defaults."""
    path = Path(path) if path is not None else find_config_file()
    if path is None:
        return ProjectConfig()
    data = _read(path)
    try:
        return ProjectConfig(**data)
    except TrainerInputError as exc:
        raise TrainerInputError(f"{path}: {exc}") from None


def parse_value(key: str, text: str) -> object:
    """A command-line value for `key`, by the key's type ("3e-5" is a number, "2.5" is not an integer)."""
    if key not in KEYS:
        raise TrainerInputError(unknown_key_message(key))
    kind = _kind(next(f for f in dataclasses.fields(ProjectConfig) if f.name == key))
    text = text.strip() if kind is not str else text
    try:
        if kind is int:
            return int(text)
        if kind is float:
            return float(text)
    except ValueError:
        raise TrainerInputError(f"{key} must be {_TYPE_WORDS[kind]}, got {text!r}") from None
    return text


def _toml_value(value: object) -> str:
    if isinstance(value, str):  # a basic string: escape what TOML needs escaped
        return '"' + "".join(_ESCAPES.get(c, c if c >= " " else f"\\u{ord(c):04x}") for c in value) + '"'
    return repr(value)  # int, or a float's shortest round-trip form (5e-05, 2.5), valid TOML


_ESCAPES = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\t": "\\t", "\r": "\\r"}


def edit_config(key: str, value: str, path: Path | None = None) -> tuple[object, object, Path]:
    """Set one key: (old value, new value, the file). Creates ./lachesis.toml when none is found. An unknown
    key, a value of the wrong type or out of range is a one-line TrainerInputError and the file is unchanged."""
    path = Path(path) if path is not None else (find_config_file() or Path.cwd() / FILENAME)
    exists = os.path.lexists(path)  # a dangling link or a FIFO is there: read_text says what it is
    data = _read(path) if exists else {}
    old = getattr(load_config(path) if exists else ProjectConfig(), key) if key in KEYS else None
    # validated together with every other key of the file, and normalised (an int given for a float key)
    new = getattr(ProjectConfig(**{**data, key: parse_value(key, value)}), key)
    text = read_text(path) if exists else ""
    line = f"{key} = {_toml_value(new)}"
    pattern = re.compile(rf"^[ \t]*{re.escape(key)}[ \t]*=.*$", re.MULTILINE)
    if pattern.search(text):
        text = pattern.sub(lambda _: line, text, count=1)
    else:
        text = (text if not text or text.endswith("\n") else text + "\n") + line + "\n"
    written = tomllib.loads(text)  # what the file will say: exactly the old keys with this one changed
    if written != {**data, key: new}:
        raise TrainerInputError(f"{path}: cannot edit {key} in place (quoted key or multi-line value?): edit the file")
    write_bytes_atomic(path, text.encode("utf-8"))  # through a symbolic link: its target, the link stays
    return old, new, path


def describe_config(path: Path | None = None) -> list[dict]:
    """One row per key: key, type, default, current value (the file's, else the default) and help."""
    path = Path(path) if path is not None else find_config_file()
    current = load_config(path) if path is not None and os.path.lexists(path) else ProjectConfig()
    defaults = ProjectConfig()
    return [{"key": f.name, "type": _kind(f).__name__, "default": getattr(defaults, f.name),
             "current": getattr(current, f.name), "help": f.metadata["help"]}
            for f in dataclasses.fields(ProjectConfig)]
