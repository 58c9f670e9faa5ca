"""`lake train status` in a terminal (lachesis/train_watch_cli.py): readable at 80 columns by default, the full
table with --wide, --json unchanged. The watchers' statuses are given (no lake, no model): only the rendering is
under test here; tests/test_train_watch.py tests what the statuses hold."""
from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from rich.console import Console

from lachesis import console as cli_console
from lachesis.cli import app
from lachesis.console import run

ALIVE = {
    "name": "watch-sft-served-conversations", "folder": "/srv/lachesis/runs/watch-sft-served-conversations",
    "recipe": "sft", "view": "sft", "model": "smollm2", "lake_root": "/srv/lachesis/data/lake",
    "offsets": {"trajectories": 12345, "rewards": 678}, "increments": 42, "alive": True, "pid": 4242,
    "phase": "training increment 43", "heartbeat_age_s": 0.4, "broken": [],
    "adapters": [f"/srv/lachesis/runs/watch-sft/checkpoints/step-{n:08d}/weights" for n in range(1, 43)],
    "last_increment": {"increment": 42, "run_id": "watch-sft-1a2b3c4d-inc-000042", "rows": 1234, "steps": 56,
                       "final_loss": 0.1234, "adapter": "/srv/lachesis/runs/watch-sft/checkpoints/step-42/weights",
                       "at": 1.0, "left_out": {"other_split": 3, "over_max_length": 2, "no_assistant_tokens": 1},
                       "truncated_rows": 7},
    "skipped": {"rows_consumed": 9, "left_out": {"no_assistant": 4, "over_max_length": 5}, "offsets": {}, "at": 1.0},
    "latest": {"trajectories": 12350, "rewards": 679}, "lag_versions": {"trajectories": 5, "rewards": 1},
    "lag_rows": {"trajectories": 1234, "rewards": 1}, "registered_offsets": {"trajectories": 12345, "rewards": 678},
}
DEAD = {
    "name": "watch-instruction", "folder": "/srv/lachesis/runs/watch-instruction", "offsets": {"skills": 3,
    "skill_usage": 17}, "increments": 0, "adapters": [], "last_increment": None, "broken": [], "alive": False,
    "pid": None, "phase": "stopped", "heartbeat_age_s": None, "skipped": None,
    "error": "no lake at /srv/lachesis/data/other-lake: create one with `lake init`",
}


@pytest.fixture()
def shown(monkeypatch, capsys):
    """Runs `lake train status ARGS` on ALIVE and DEAD into an 80-column console; returns what it printed (the
    console's text; --json writes stdout itself)."""
    import trainers.watch.status as status_mod

    monkeypatch.setattr(status_mod, "find_watchers", lambda runs: [Path("a"), Path("b")])
    monkeypatch.setattr(status_mod, "watcher_status", lambda folder, lake=None: ALIVE if folder.name == "a" else DEAD)
    out = io.StringIO()
    monkeypatch.setattr(cli_console, "console", Console(file=out, width=80, emoji=False, color_system=None))

    def show(*args: str) -> str:
        with pytest.raises(SystemExit) as exit_:
            run(app, ["train", "status", "--runs", "runs", *args])
        assert exit_.value.code == 0
        return out.getvalue() + capsys.readouterr().out

    return show


def reads_whole(text: str, value: str) -> bool:
    """`value`'s words appear in `text` in order and together: wrapped at word boundaries at most, never cut into
    pieces nor interleaved with other cells' pieces (whitespace and line breaks collapsed)."""
    return " ".join(value.split()) in " ".join(text.split())


def test_status_fits_80_columns_and_every_value_reads_whole(shown):
    text = shown()
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= 80, "\n".join(lines)
    for value in ("watch-sft-served-conversations", "pid 4242", "training increment 43", "trajectories 12345",
                  "rewards 678", "trajectories 5 v / 1234 rows", "rewards 1 v / 1 rows",
                  "#42: 1234 rows, 56 steps, left out: no_assistant_tokens 1, other_split 3, over_max_length 2",
                  "cut to --max-length 7", "9 rows, no example, left out: no_assistant 4, over_max_length 5",
                  "watch-instruction", "stopped", "skills 3, skill_usage 17",
                  "no lake at /srv/lachesis/data/other-lake: create one with `lake init`"):
        assert reads_whole(text, value), f"{value!r} is cut in:\n{text}"


def test_wide_is_the_full_table_one_row_per_watcher(shown):
    text = shown("--wide")
    header = next(line for line in text.splitlines() if "name" in line)
    for column in ("name", "alive", "phase", "offsets", "lag", "increments", "last", "since"):
        assert column in header
    row = next(line for line in text.splitlines() if "watch-sft-served-conversations" in line)
    assert "training increment 43" in row and "trajectories 5 v / 1234 rows" in row  # one line: nothing folded


def test_json_is_unchanged(shown):
    assert json.loads(shown("--json")) == [ALIVE, DEAD]
