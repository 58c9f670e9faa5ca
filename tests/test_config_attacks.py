"""Configs and specs that cannot be poisoned (issue 26, items 9 and 10): lachesis.toml keys are bounded above as
well as below, the file must be a regular file of bounded size (a FIFO, a folder, /dev/zero: one line, no hang),
a symlinked lachesis.toml is edited through its link; a transfer spec or a run's config.json that is not what
rl_transfer_init wrote is one line naming the field, and a spec's target environment can only ever select that
environment's rows (a bound variable, never text pasted into SQL)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from lake import Lake
from tests.lake_helpers import trajectory
from trainers.runtime.errors import TrainerInputError
from trainers.rl.project_config import describe_config, edit_config, load_config, parse_layer_spec
from trainers.transfer.config import TransferInitConfig, TransferTrainConfig
from trainers.transfer.transfer import _target_data, load_spec, run_transfer_init
from tests.views_helpers import read_manifest

RL_EDIT_CONFIG = str(Path(sys.executable).with_name("rl_edit_config"))


def within(seconds: float, fn, *args):
    """fn(*args) in a thread: its result, or its exception re-raised; a call still running after `seconds` (a
    hang on a FIFO) fails the test instead of blocking the suite."""
    box: dict = {}

    def call():
        try:
            box["value"] = fn(*args)
        except BaseException as exc:  # handed to the test thread
            box["error"] = exc

    t = threading.Thread(target=call, daemon=True)
    t.start()
    t.join(seconds)
    assert not t.is_alive(), f"{fn.__name__} still running after {seconds} s"
    if "error" in box:
        raise box["error"]
    return box["value"]


def one_line(exc_info) -> str:
    text = str(exc_info.value)
    assert "\n" not in text, text
    return text


# ------------------------------------------------------------------------------------------------ item 9
@pytest.mark.attack
def test_a_huge_layer_range_is_refused_before_it_is_built(tmp_path):
    path = tmp_path / "lachesis.toml"
    path.write_text("seed = 1\n")
    with pytest.raises(TrainerInputError, match="above 4095") as exc:
        within(10, edit_config, "freeze_layers", "0-99999999999", path)
    one_line(exc)
    with pytest.raises(TrainerInputError, match="above 4095"):  # rl_transfer_init parses the same spec
        within(10, parse_layer_spec, "0-8,12-99999999999")
    with pytest.raises(TrainerInputError, match="characters"):
        parse_layer_spec(",".join(["1"] * 2000))
    assert path.read_text() == "seed = 1\n"
    assert parse_layer_spec("0-2,4095") == [0, 1, 2, 4095]


@pytest.mark.attack
def test_values_past_a_keys_upper_bound_are_never_written_nor_listed(tmp_path, monkeypatch, capsys):
    path = tmp_path / "lachesis.toml"
    path.write_text("seed = 1\n")
    for key, value in (("batch_size", str(10**30)), ("group_size", "100000"), ("learning_rate", "5"),
                       ("seed", str(2**40)), ("max_completion_length", str(10**12))):
        with pytest.raises(TrainerInputError, match=f"{key} must be at most"):
            edit_config(key, value, path)
    assert path.read_text() == "seed = 1\n"
    path.write_text(f"batch_size = {10**30}\n")  # written by hand, or by a version without the bound
    from lachesis.rl_cli import rl_edit_config_main
    for args in (["--list"], ["--list", "--json"]):
        monkeypatch.setattr("sys.argv", ["rl_edit_config", *args, "--config", str(path)])
        with pytest.raises(SystemExit) as exc:
            rl_edit_config_main()
        err = capsys.readouterr().err
        assert exc.value.code == 2 and "batch_size must be at most 65536" in err and "Traceback" not in err, err


@pytest.mark.attack
def test_a_fifo_lachesis_toml_is_refused_without_a_hang(tmp_path):
    fifo = tmp_path / "lachesis.toml"
    os.mkfifo(fifo)
    with pytest.raises(TrainerInputError, match="is a FIFO, not a regular file") as exc:
        within(20, load_config, fifo)
    one_line(exc)
    with pytest.raises(TrainerInputError, match="is a FIFO"):
        within(20, edit_config, "seed", "3", fifo)
    # the command, found from the working directory as a user runs it: one line, exit 2, well before the timeout
    out = subprocess.run([RL_EDIT_CONFIG, "seed", "3"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "is a FIFO" in out.stderr and "Traceback" not in out.stderr, out.stderr
    assert fifo.is_fifo()


@pytest.mark.attack
@pytest.mark.parametrize("kind", ["folder", "/dev/zero", "oversized"])
def test_a_config_that_is_not_a_small_regular_file_is_one_line(kind, tmp_path):
    if kind == "folder":
        path = tmp_path / "lachesis.toml"
        path.mkdir()
        words = "is a folder"
    elif kind == "/dev/zero":
        path, words = Path("/dev/zero"), "is a character device"
    else:
        path = tmp_path / "lachesis.toml"
        path.write_text("# padding\n" * 20_000 + "seed = 1\n")
        words = "more than the limit of 65536 bytes"
    for call in (lambda: load_config(path), lambda: edit_config("seed", "3", path), lambda: describe_config(path)):
        with pytest.raises(TrainerInputError, match=words) as exc:
            within(20, call)
        one_line(exc)
    if kind == "folder":  # found from the working directory: the folder is reported, not skipped or replaced
        with pytest.raises(TrainerInputError, match="is a folder"):
            within(20, _edit_in, tmp_path)
        assert path.is_dir()


def _edit_in(folder: Path):
    cwd = os.getcwd()
    os.chdir(folder)
    try:
        return edit_config("seed", "3")
    finally:
        os.chdir(cwd)


def test_a_symlinked_lachesis_toml_is_edited_through_its_link(tmp_path, monkeypatch):
    shared = tmp_path / "shared" / "project.toml"
    shared.parent.mkdir()
    shared.write_text("# team settings\nseed = 1\n")
    link = tmp_path / "work" / "lachesis.toml"
    link.parent.mkdir()
    link.symlink_to(os.path.relpath(shared, link.parent))
    monkeypatch.chdir(link.parent)
    assert edit_config("reward_scale", "2.5") == (1.0, 2.5, link)
    assert link.is_symlink() and link.resolve() == shared.resolve()
    assert shared.read_text() == "# team settings\nseed = 1\nreward_scale = 2.5\n"
    assert load_config().reward_scale == 2.5


# ------------------------------------------------------------------------------------------------ item 10
@pytest.mark.attack
@pytest.mark.parametrize("case", ["passwd", "no-model", "not-an-object", "fifo", "merged-not-a-folder"])
def test_a_spec_that_is_not_a_transfer_spec_is_one_line(case, tmp_path):
    good = {"model": "tiny", "target_env": "git_repo_env", "source_run_dir": str(tmp_path), "freeze_layers": [0]}
    spec = tmp_path / "spec.json"
    if case == "passwd":
        spec, words = Path("/etc/passwd"), "is not JSON"
    elif case == "no-model":
        spec.write_text(json.dumps({k: v for k, v in good.items() if k != "model"}))
        words = "field 'model' is missing"
    elif case == "not-an-object":
        spec.write_text("[1, 2]")
        words = "is not a JSON object"
    elif case == "merged-not-a-folder":  # --adapter fresh's merged model: a folder, or the spec is refused
        spec.write_text(json.dumps({**good, "merged_model": "/etc/passwd"}))
        words = "field 'merged_model' is not a folder"
    else:
        os.mkfifo(spec)
        words = "is a FIFO"
    with pytest.raises(TrainerInputError, match=words) as exc:
        within(20, load_spec, TransferTrainConfig(spec=str(spec)))
    one_line(exc)


@pytest.mark.attack
def test_a_spec_target_env_cannot_widen_the_query(tmp_path, monkeypatch):
    """The SQL injection of the issue: a spec naming `git_repo_env' OR 1=1 OR env='x` trained on every
    environment's rows. The spec is refused, and the export's filter binds the name as a value."""
    injected = "git_repo_env' OR 1=1 OR env='x"
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"model": "tiny", "target_env": injected, "source_run_dir": str(tmp_path),
                                "freeze_layers": [0]}))
    with pytest.raises(TrainerInputError, match="field 'target_env': unknown task/environment"):
        load_spec(TransferTrainConfig(spec=str(spec)))
    lake_root = tmp_path / "lake"
    lk = Lake.init(lake_root)
    lk.append("trajectories", [trajectory(i, env="bash_exec_env") for i in range(4)]
              + [trajectory(10 + i, env="git_repo_env") for i in range(2)])
    cfg = TransferTrainConfig(method="sft", data="trajectories", lake_root=str(lake_root))
    got = read_manifest(_target_data(cfg, "git_repo_env", tmp_path / "ok"))
    assert got["row_count"] == 2 and got["variables"] == {"transfer_target_env": "git_repo_env"}
    try:  # even if it got past the check: no row matches that name (an empty export, or the error saying so)
        rows = read_manifest(_target_data(cfg, injected, tmp_path / "bad"))["row_count"]
    except TrainerInputError as exc:
        assert "has no" in str(exc), exc
        rows = 0
    assert rows == 0


@pytest.mark.attack
@pytest.mark.parametrize("broken", ["{not json", '["a list"]', '{"lr": 1}'])
def test_a_from_folder_with_a_broken_config_json_is_one_line(broken, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    Lake.init(tmp_path / "lake")
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text(broken)
    cfg = TransferInitConfig(from_run=str(run), lake_root=str(tmp_path / "lake"), freeze_layers="0")
    with pytest.raises(TrainerInputError, match=r"run config .*config.json") as exc:
        run_transfer_init(cfg)
    one_line(exc)


def test_transfer_sft_takes_whole_micro_batches():
    from trainers.transfer.config import TransferTrainConfig

    with pytest.raises(TrainerInputError, match="--batch_size 6 is not a multiple of --micro_batch 4"):
        TransferTrainConfig(method="sft", batch_size=6, micro_batch=4)
    assert TransferTrainConfig(method="sft", batch_size=8, micro_batch=2).sft_passes == (2, 4)
    assert TransferTrainConfig(method="sft", batch_size=2, micro_batch=8).sft_passes == (2, 1)  # one smaller pass
    assert TransferTrainConfig(method="online", batch_size=6, micro_batch=4).micro_batch == 4  # online: episodes
