"""--report-to (trainers/runtime/reporting.py): TensorBoard event files in the run folder hold exactly the metrics of
train_log.jsonl (read back with tensorboard's own EventAccumulator), for our SFT loop and trl's DPOTrainer; a
resumed run replaces the steps after its checkpoint; wandb, when missing, is a one-line how-to; with the
atroposlib side venv (which has wandb) an offline W&B run lands in the run folder."""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
from pathlib import Path

import pytest

import train_helpers as th
from train_helpers import tiny_dir  # noqa: F401  (session fixture)
from trainers.runtime.errors import TrainerInputError
from trainers.runtime.reporting import TB_DIR, check_report_to, make_reporter, scalars

ATROPOS_PY = os.environ.get("ATROPOS_PYTHON", "/tmp/atropos-venv/bin/python")


def _events(folder: Path) -> dict[str, list[tuple[int, float]]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(folder))
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def _logged(run_dir: Path, key: str) -> list[tuple[int, float]]:
    rows = [json.loads(x) for x in (run_dir / "train_log.jsonl").read_text().splitlines()]
    return [(r["step"], r[key]) for r in rows if "step" in r and key in r and not r.get("summary")]


def _same(got: list[tuple[int, float]], want: list[tuple[int, float]]) -> None:
    assert [s for s, _ in got] == [s for s, _ in want] and len(want) >= 2
    assert [v for _, v in got] == pytest.approx([v for _, v in want], rel=1e-6)  # event files hold float32


def test_sft_tensorboard_scalars_are_the_logged_metrics(tiny_dir, tmp_path):
    from trainers.sft.config import SFTConfig
    from trainers.sft.sft import run_sft

    data = th.write_jsonl(tmp_path / "chats.jsonl", th.tool_chats(16))
    run_sft(SFTConfig(model=str(tiny_dir), data=str(data), output=str(tmp_path / "run"), max_steps=6, log_every=2,
                      batch_size=4, record_in_lake=False, progress=False, plot=False, report_to="tensorboard"))
    events = _events(tmp_path / "run" / TB_DIR)
    _same(events["train/loss"], _logged(tmp_path / "run", "loss"))  # steps 1, 2, 4, 6
    _same(events["train/lr"], _logged(tmp_path / "run", "lr"))
    assert "train/summary" not in events and not any(t.startswith("eval/") for t in events)


def test_dpo_tensorboard_scalars_are_the_logged_metrics(tiny_dir, tmp_path):
    from test_train_runfolder import _preference_rows
    from trainers.sft.config import InstructConfig
    from trainers.sft.dpo import run_dpo

    data = th.write_jsonl(tmp_path / "prefs.jsonl", _preference_rows(8))
    run_dpo(InstructConfig(method="dpo", model=str(tiny_dir), data=str(data), output=str(tmp_path / "run"), max_steps=3,
                           batch_size=4, full=False, record_in_lake=False, progress=False, plot=False,
                           report_to="tensorboard"))
    events = _events(tmp_path / "run" / TB_DIR)
    _same(events["train/loss"], _logged(tmp_path / "run", "loss"))
    assert "train/rewards/chosen" in events  # trl's own metrics come along, under the same names as in the log


def test_a_resumed_run_replaces_the_steps_after_its_checkpoint(tmp_path):
    first = make_reporter("tensorboard", tmp_path, "r", {})
    for step in (1, 2, 3, 4):
        first.log(step, {"step": step, "loss": float(step)})
    first.finish({})
    again = make_reporter("tensorboard", tmp_path, "r", {}, resume_step=3)  # the checkpoint was at step 2
    for step in (3, 4, 5):
        again.log(step, {"step": step, "loss": 10.0 + step, "eval": True, "reward_mean": 0.5})
    again.finish({})
    events = _events(tmp_path / TB_DIR)
    assert events["train/loss"] == [(1, 1.0), (2, 2.0)]
    assert events["eval/loss"] == [(3, 13.0), (4, 14.0), (5, 15.0)] and len(events["eval/reward_mean"]) == 3


def test_values_and_scalars():
    assert check_report_to(" TensorBoard ") == "tensorboard" and check_report_to("none") == "none"
    with pytest.raises(TrainerInputError, match="unknown --report-to 'mlflow'"):
        check_report_to("mlflow")
    assert scalars({"step": 3, "loss": 1, "done": True, "note": "x", "summary": False}) == {"train/loss": 1.0}


def test_cli_option_and_its_errors(tmp_path):
    data = str(th.write_jsonl(tmp_path / "chats.jsonl", th.tool_chats(4)))
    r = th.run_cli("rl_finetune_supervised", "--data", data, "--report-to", "mlflow", "--no-lake")
    assert r.returncode == 2 and r.stderr.strip().count("\n") == 0 and "--report-to" in r.stderr, r.stderr
    if importlib.util.find_spec("wandb") is None:
        r = th.run_cli("llm_finetune", "--data", data, "--report-to", "wandb", "--no-lake", "--output", str(tmp_path / "w"))
        assert r.returncode == 2 and "pip install wandb" in r.stderr and "WANDB_MODE=offline" in r.stderr, r.stderr
        assert r.stderr.strip().count("\n") == 0 and not (tmp_path / "w").exists()  # refused before any work


@pytest.mark.slow
def test_wandb_offline_run_in_the_run_folder(tiny_dir, tmp_path):
    """The atroposlib side venv sees the shared venv's packages and adds wandb: an SFT run reports to W&B offline."""
    probe = subprocess.run([ATROPOS_PY, "-c", "import wandb"], capture_output=True) if Path(ATROPOS_PY).exists() else None
    if probe is None or probe.returncode != 0:
        pytest.skip(f"no Python with wandb at {ATROPOS_PY} (tests/data/make_atropos_venv.sh makes one)")
    data = str(th.write_jsonl(tmp_path / "chats.jsonl", th.tool_chats(8)))
    run = tmp_path / "run"
    code = "from lachesis.train_cli import rl_finetune_supervised_main as m; m()"
    r = subprocess.run([ATROPOS_PY, "-c", code, "--model", str(tiny_dir), "--data", data, "--output", str(run),
                        "--max-steps", "4", "--batch-size", "4", "--no-lake", "--no-plot", "--report-to", "wandb",
                        "--json", "--quiet"],
                       capture_output=True, text=True, cwd=str(th.REPO), timeout=300,
                       env={**os.environ, "WANDB_MODE": "offline", "WANDB_SILENT": "true", "PYTHONPATH": str(th.REPO)})
    assert r.returncode == 0, r.stderr[-3000:]
    offline = list((run / "wandb").glob("offline-run-*"))
    assert len(offline) == 1 and list(offline[0].glob("run-*.wandb")), list((run / "wandb").iterdir())
    # the run's transaction log (protobuf records; no reader in wandb's Python API) holds the tag and every loss
    # value as JSON text, as the log has them
    history = next(offline[0].glob("run-*.wandb")).read_bytes()
    assert b"train/loss" in history
    assert all(json.dumps(loss).encode() in history for _, loss in _logged(run, "loss"))
