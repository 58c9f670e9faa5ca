"""`lake export-model -o` under the output rules of `lake export` (issue 38 item 9; lake/output_folder.py).

Before: an output inside the lake (`lake/trajectories/model`, `lake/newmodel`, through `..`, through a symlinked
parent) was written with rc 0 while `lake export` refused the same paths; `-o RUN/checkpoints/step-00000099`
succeeded and broke every later export of that run; `/proc/self/x`, a folder under an immutable one, a run whose
adapter is a pickle: tracebacks. Now each is one line, before the model loads, and nothing is written; a symbolic
link named as the output is written where it points (as `lake export` does), unless that is a refused place.

The runs here are a streaming trainer's folder whose checkpoints hold the tiny model (a full model: what its
increments are), so an export that gets through is a quick load and save.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from train_helpers import tiny_dir  # noqa: F401  (the session's tiny model)

from lake import Lake
from trainers.export.config import ExportModelConfig
from trainers.export.merged import export_model
from trainers.runtime.errors import TrainerInputError
from views.export import ExportError, export_view

runner = CliRunner()


def _checkpoint(run: Path, step: int, tiny: Path, name: str | None = None) -> Path:
    ckpt = run / "checkpoints" / (name or f"step-{step:08d}")
    shutil.copytree(tiny, ckpt / "weights")
    (ckpt / "state.json").write_text(json.dumps({"step": step}))
    return ckpt


@pytest.fixture
def run(tiny_dir, tmp_path):
    """A trainer folder with checkpoints of steps 1 and 2."""
    folder = tmp_path / "watch-run"
    for step in (1, 2):
        _checkpoint(folder, step, Path(tiny_dir))
    return folder


@pytest.fixture
def lake(tmp_path):
    return Lake.init(tmp_path / "lake")


def _tree(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def _refused(run: Path, output, match: str) -> None:
    with pytest.raises(TrainerInputError, match=match):
        export_model(ExportModelConfig(run=str(run), output=str(output)))


# -- never inside a lake: the paths `lake export` refuses -----------------------------------------------------
@pytest.mark.attack
@pytest.mark.parametrize("where", ["table", "new_folder", "dotdot", "symlinked_parent", "link_inside_the_lake",
                                   "dangling_link_into_the_lake"])
def test_an_output_inside_the_lake_is_refused_and_nothing_is_written(run, lake, tmp_path, where):
    root = lake.root
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    output = {
        "table": root / "trajectories" / "model",
        "new_folder": root / "newmodel",
        "dotdot": tmp_path / "elsewhere" / ".." / "lake" / "m",
    }.get(where)
    if where == "symlinked_parent":
        (tmp_path / "lake-link").symlink_to(root)
        output = tmp_path / "lake-link" / "m"
    elif where == "link_inside_the_lake":  # lake/out -> a folder outside: still a path through the lake
        (root / "out").symlink_to(outside)
        output = root / "out" / "m"
    elif where == "dangling_link_into_the_lake":
        (tmp_path / "dangling").symlink_to(root / "not-yet")
        output = tmp_path / "dangling"
    before = _tree(root)
    _refused(run, output, "inside the lake at")
    assert _tree(root) == before and list(outside.iterdir()) == []
    with pytest.raises(ExportError, match="inside the lake at"):  # `lake export` refuses the very same path
        export_view(lake, "sft", output)


# -- never where this run's later exports read --------------------------------------------------------------
@pytest.mark.attack
@pytest.mark.parametrize("ref", ["trainer_folder", "checkpoint_folder"])
def test_an_output_in_the_runs_checkpoints_is_refused_and_later_exports_still_work(run, tmp_path, ref):
    given = run if ref == "trainer_folder" else run / "checkpoints" / "step-00000001"
    _refused(given, run / "checkpoints" / "step-00000099", "inside .*checkpoints, which the command reads")
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["step-00000001", "step-00000002"]
    info = export_model(ExportModelConfig(run=str(run), output=str(tmp_path / "ok")))
    assert info["step"] == 2 and (tmp_path / "ok" / "model.safetensors").is_file()


@pytest.mark.attack
def test_an_output_inside_the_weights_it_exports_is_refused(run):
    weights = run / "checkpoints" / "step-00000002" / "weights"
    before = _tree(weights)
    _refused(run, weights / "merged", "which the command reads")
    assert _tree(weights) == before


@pytest.mark.attack
def test_a_link_to_an_empty_folder_in_the_checkpoints_is_refused(run, tmp_path):
    (run / "checkpoints" / "empty").mkdir()
    (tmp_path / "link").symlink_to(run / "checkpoints" / "empty")
    _refused(run, tmp_path / "link", "which the command reads")
    assert list((run / "checkpoints" / "empty").iterdir()) == []


# -- symbolic links named as the output: written where they point, as `lake export` writes -------------------
@pytest.mark.attack
@pytest.mark.parametrize("kind", ["to_an_empty_folder", "dangling"])
def test_a_symlink_output_is_written_where_it_points(run, tmp_path, kind):
    target = tmp_path / "target"
    if kind == "to_an_empty_folder":
        target.mkdir()
    link = tmp_path / "link"
    link.symlink_to(target)
    info = export_model(ExportModelConfig(run=str(run), output=str(link)))
    assert link.is_symlink() and Path(info["output"]) == target.resolve()
    assert (target / "model.safetensors").is_file() and (target / "lachesis_export.json").is_file()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temp or probe folder left


# -- places nothing can be written to: one line before the model loads ----------------------------------------
@pytest.mark.attack
def test_an_output_under_proc_is_one_line(run):
    _refused(run, "/proc/self/x", "cannot write into /proc/self/x")


@pytest.mark.attack
def test_an_output_under_a_file_is_one_line(run, tmp_path):
    (tmp_path / "a-file").write_text("mine")
    _refused(run, tmp_path / "a-file" / "model", "cannot write into .*Not a directory")
    assert (tmp_path / "a-file").read_text() == "mine"


@pytest.fixture
def immutable(tmp_path):
    folder = tmp_path / "immutable"
    folder.mkdir()
    if shutil.which("chattr") is None or subprocess.run(["chattr", "+i", str(folder)],
                                                        capture_output=True).returncode != 0:
        pytest.skip("chattr +i is not available here (needs root and a file system with attributes)")
    yield folder
    subprocess.run(["chattr", "-i", str(folder)], check=True)


@pytest.mark.attack
@pytest.mark.parametrize("depth", ["in_it", "below_it"])
def test_an_output_under_an_immutable_folder_is_one_line(run, immutable, depth):
    output = immutable / "model" if depth == "in_it" else immutable / "a" / "b" / "model"
    _refused(run, output, "cannot write into .*Operation not permitted")
    assert list(immutable.iterdir()) == []


# -- weights that must not be opened -----------------------------------------------------------------------------
def _pickle_adapter(w: Path) -> None:
    import torch

    for p in w.glob("*.safetensors"):
        p.unlink()
    (w / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA", "r": 8, "target_modules": ["q_proj"]}))
    torch.save({"base_model.model.x.lora_A.weight": torch.zeros(2, 2)}, w / "adapter_model.bin")


def _pickle_model(w: Path) -> None:
    import torch

    (w / "model.safetensors").unlink()
    torch.save({"x": torch.zeros(2)}, w / "pytorch_model.bin")


def _truncated(w: Path) -> None:
    data = (w / "model.safetensors").read_bytes()
    (w / "model.safetensors").write_bytes(data[: len(data) // 2])


def _fifo(w: Path) -> None:
    (w / "model.safetensors").unlink()
    os.mkfifo(w / "model.safetensors")


@pytest.mark.attack
@pytest.mark.parametrize("spoil, match", [(_pickle_adapter, "adapter_model.bin: pickle weights are never loaded"),
                                          (_pickle_model, "pytorch_model.bin: pickle weights are never loaded"),
                                          (_truncated, "model.safetensors: unreadable, truncated or corrupt"),
                                          (_fifo, "model.safetensors: not a regular file")],
                         ids=["pickle_adapter", "pickle_model", "truncated", "fifo"])
def test_weights_that_must_not_be_opened_are_one_line_and_nothing_is_written(run, tmp_path, spoil, match):
    spoil(run / "checkpoints" / "step-00000002" / "weights")
    _refused(run, tmp_path / "out", match)
    assert not (tmp_path / "out").exists()


@pytest.mark.attack
def test_a_stray_bak_folder_beside_the_checkpoints_leaves_the_newest_good_step_exported(run, tiny_dir, tmp_path):
    _checkpoint(run, 3, Path(tiny_dir), name="step-00000003.bak")  # a hand's copy: not a checkpoint
    info = export_model(ExportModelConfig(run=str(run), output=str(tmp_path / "out")))
    assert info["step"] == 2 and info["weights"].endswith("step-00000002/weights")


# -- what a user sees --------------------------------------------------------------------------------------------
@pytest.fixture
def cli_app():
    from lachesis.console import App
    from lachesis.export_model_cli import register

    app = App()  # as lachesis/cli.py builds `lake`: a command's user errors end as one line and their exit code
    register(app)
    return app


@pytest.mark.attack
@pytest.mark.parametrize("where", ["lake", "proc", "checkpoints"])
def test_the_command_says_one_line_and_exits_2(run, lake, cli_app, where):
    output = {"lake": lake.root / "newmodel", "proc": Path("/proc/self/x"),
              "checkpoints": run / "checkpoints" / "step-00000099"}[where]
    r = runner.invoke(cli_app, [str(run), "--output", str(output)])  # one command: typer runs it as the app
    lines = [line for line in r.output.splitlines() if line.strip()]
    assert r.exit_code == 2 and len(lines) == 1 and lines[0].startswith("error: "), r.output
    assert "Traceback" not in r.output and not os.path.lexists(output)
