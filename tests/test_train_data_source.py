"""Where `--data` reads from (trainers/sft/data.py): a view name whose folder is the run's own new output folder
(`rl_finetune_supervised --data sft --output sft`, as a newcomer types it) is still the view, while an empty
folder someone else made is an error that names it."""
from __future__ import annotations

import pytest

from tests.views_helpers import new_lake, seeded_trajectories
from trainers.sft.data import load_rows
from trainers.runtime.errors import TrainerInputError


def test_the_runs_own_output_folder_named_like_a_view_reads_the_view(tmp_path, monkeypatch):
    lk = new_lake(tmp_path / "lake")
    lk.append("trajectories", seeded_trajectories(20, seed=1, n_tasks=4))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "sft").mkdir()  # the run folder, created before its data is read
    rows, manifest, source = load_rows("sft", str(tmp_path / "lake"), tmp_path / "sft")
    assert rows and manifest["view"] == "sft" and source.startswith(str(tmp_path / "sft"))
    assert all(r["messages"] for r in rows)
    (tmp_path / "other").mkdir()
    with pytest.raises(TrainerInputError, match="dataset folder other has no .parquet or .jsonl files"):
        load_rows("other", str(tmp_path / "lake"), tmp_path / "sft")
