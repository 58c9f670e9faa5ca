"""One way to fail, open a lake, find a run and write atomically (issue 36 item 3), and one spelling per option
(item 4): the CLI ends any wing's UserError in one line with its exit code, a missing lake is the one message with
the command's own way out, RunReader finds the weights of every kind of run folder, ground.atomic's writers leave
the old or the new and never a temp folder, and SFT's renamed options still take their old spelling."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ground.atomic import folder_atomically, write_bytes_atomic
from ground.errors import UserError
from lachesis.console import App, config_command
from lake import NoLakeError, open_lake
from trainers.runtime.errors import TrainerInputError
from trainers.runtime.run_reader import RunReader

runner = CliRunner()


def _app(fn) -> App:
    app = App()
    app.command("go")(fn)
    app.command("other")(lambda: None)  # a second command keeps `go` a named subcommand
    return app


class ChosenExit(UserError):
    exit_code = 5


def test_a_user_error_from_any_wing_is_one_line_and_its_exit_code():
    def go(which: str) -> None:
        raise {"trainer": TrainerInputError("bad\n  option"), "chosen": ChosenExit("not there")}[which]

    res = runner.invoke(_app(go), ["go", "trainer"])
    assert res.exit_code == 2 and res.output == "error: bad option\n"
    res = runner.invoke(_app(go), ["go", "chosen"])
    assert res.exit_code == 5 and res.output == "error: not there\n"


def test_ctrl_c_is_interrupted_and_exit_130():
    def go() -> None:
        raise KeyboardInterrupt

    res = runner.invoke(_app(go), ["go"])
    assert res.exit_code == 130 and res.output == "error: interrupted\n"


def test_a_missing_lake_names_the_ways_out_and_creates_nothing(tmp_path):
    missing = tmp_path / "typo"
    with pytest.raises(NoLakeError) as err:
        open_lake(missing, or_else="pass --no-lake")
    assert str(err.value) == (f"no lake at {missing}: pass --lake with an existing lake, create one with "
                              f"`lake init --lake {missing}` or pass --no-lake")
    assert isinstance(err.value, UserError) and not missing.exists()


def _weights(folder: Path, kind: str) -> Path:
    folder.mkdir(parents=True)
    if kind == "lora":
        (folder / "adapter_config.json").write_text("{}")
    else:
        (folder / "config.json").write_text("{}")
        (folder / "model.safetensors").write_bytes(b"")
    return folder


def _checkpoint(run: Path, step: int) -> Path:
    ckpt = run / "checkpoints" / f"step-{step:08d}"
    _weights(ckpt / "weights", "lora")
    (ckpt / "state.json").write_text(json.dumps({"step": step}))
    return ckpt


def test_the_run_reader_finds_the_weights_of_every_kind_of_run(tmp_path, monkeypatch):
    sft = tmp_path / "sft"
    adapter = _weights(sft / "adapter", "lora")
    (sft / "config.json").write_text(json.dumps({"command": "rl_finetune_supervised", "model_path": "/m"}))
    assert RunReader.open(sft, "--adapter").weights() == (adapter, None)
    assert RunReader.open(adapter, "--adapter").weights() == (adapter, None)
    assert RunReader.open(adapter, "--adapter").config()["model_path"] == "/m"  # the run folder's, from adapter/
    full = _weights(tmp_path / "full" / "model", "full")
    assert RunReader.open(tmp_path / "full", "--adapter").weights() == (full, None)
    assert RunReader.open(full, "--adapter").config() == {}  # a model's own config.json is no run's

    watch = tmp_path / "watch"
    one, two = _checkpoint(watch, 1), _checkpoint(watch, 2)
    reader = RunReader.open(watch, "run")
    assert reader.checkpoints() == {1: one, 2: two}
    assert reader.weights() == (two / "weights", 2) and reader.weights(1) == (one / "weights", 1)
    assert RunReader.open(one, "run").weights() == (one / "weights", 1)
    with pytest.raises(TrainerInputError, match=r"no checkpoint of step 7: it keeps steps \[1, 2\]"):
        reader.weights(7)

    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs").mkdir()
    os.rename(sft, tmp_path / "runs" / "sft-1")
    assert RunReader.open("sft-1", "--resume", by_id=True).path == Path("runs") / "sft-1"
    with pytest.raises(TrainerInputError, match="--resume nope: no run folder there"):
        RunReader.open("nope", "--resume", by_id=True)
    (tmp_path / "empty").mkdir()
    with pytest.raises(TrainerInputError, match="no adapter/ or model/ folder"):
        RunReader.open(tmp_path / "empty", "--adapter").weights()


def test_a_file_written_through_a_link_keeps_the_link_and_its_mode(tmp_path):
    target = tmp_path / "shared.toml"
    target.write_text("a = 1\n")
    target.chmod(0o640)
    link = tmp_path / "lachesis.toml"
    link.symlink_to(target)
    write_bytes_atomic(link, b"a = 2\n")
    assert link.is_symlink() and target.read_text() == "a = 2\n" and target.stat().st_mode & 0o777 == 0o640
    write_bytes_atomic(tmp_path / "new.json", b"{}")
    assert (tmp_path / "new.json").stat().st_mode & 0o777 == 0o644  # not mkstemp's 0600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["lachesis.toml", "new.json", "shared.toml"]


def test_a_folder_is_published_whole_or_not_at_all(tmp_path):
    out = tmp_path / "out"
    with pytest.raises(RuntimeError):
        with folder_atomically(out) as tmp:
            (tmp / "half").write_text("x")
            raise RuntimeError("killed midway")
    assert not out.exists() and list(tmp_path.iterdir()) == []

    out.mkdir()  # the empty folder a user made for it is replaced by the complete one
    with folder_atomically(out) as tmp:
        (tmp / "a").write_text("1")
    assert (out / "a").read_text() == "1"
    with pytest.raises(FileExistsError):  # another writer's complete copy is not replaced unasked
        with folder_atomically(out) as tmp:
            (tmp / "b").write_text("2")
    assert sorted(p.name for p in out.iterdir()) == ["a"]
    with folder_atomically(out, replace=True, durable=True) as tmp:
        (tmp / "b").write_text("2")
    assert sorted(p.name for p in out.iterdir()) == ["b"]
    inode = out.stat().st_ino
    with folder_atomically(out, in_place_of=[out / "b"]) as tmp:  # the user's folder stays, its old entry goes
        (tmp / "c").write_text("3")
    assert out.stat().st_ino == inode and sorted(p.name for p in out.iterdir()) == ["c"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_sft_options_take_their_old_spelling_with_one_warning_after_the_run():
    from lachesis.train_cli import RENAMED, TRAIN_OPTIONS, sft_app
    from trainers.sft.config import SFTConfig

    built = []
    app = App()
    app.command("go")(config_command(SFTConfig, TRAIN_OPTIONS, lambda values, *_: built.append(SFTConfig(**values)),
                                     renamed=RENAMED))
    res = runner.invoke(app, ["--data", "d.jsonl", "--lr", "0.5", "--lora-r", "4"])
    assert res.exit_code == 0, res.output
    assert (built[0].learning_rate, built[0].lora_rank) == (0.5, 4)
    assert res.output.splitlines() == ["warning: --lr is now --learning-rate; the old spelling still works, for now",
                                       "warning: --lora-r is now --lora-rank; the old spelling still works, for now"]
    res = runner.invoke(sft_app, ["--data", "d.jsonl", "--lr", "-1"])  # refused: its one line, no warning
    assert res.exit_code == 2 and res.output == "error: --learning-rate must be positive, got -1.0\n"
    res = runner.invoke(sft_app, ["--help"], env={"COLUMNS": "200"})
    assert "--learning-rate" in res.output and "--lora-rank" in res.output and "--lr " not in res.output
