"""The project file lachesis.toml and `rl_edit_config` (issue 13 item 1): the guide's edits work, print old and new,
and every bad edit is one line, exit 2, with the file left byte for byte as it was."""
from __future__ import annotations

import json
import tomllib

import pytest

from envs import RewardWeights
from lachesis.rl_cli import rl_edit_config_main
from trainers.runtime.errors import TrainerInputError
from trainers.rl.project_config import (KEYS, ProjectConfig, describe_config, edit_config, find_config_file, load_config, parse_layer_spec, reward_weights)


def _cli(args, capsys, monkeypatch) -> tuple[int, str, str]:
    monkeypatch.setattr("sys.argv", ["rl_edit_config", *args])
    with pytest.raises(SystemExit) as exc:
        rl_edit_config_main()
    out = capsys.readouterr()
    return exc.value.code, out.out, out.err


def test_guide_edits_round_trip(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert find_config_file() is None and load_config() == ProjectConfig()
    code, out, err = _cli(["reward_scale", "2.5"], capsys, monkeypatch)
    path = tmp_path / "lachesis.toml"
    assert code == 0 and out.strip() == f"reward_scale: 1.0 -> 2.5 ({path})", err
    code, out, _ = _cli(["learning_rate", "3e-5"], capsys, monkeypatch)
    assert code == 0 and out.strip() == f"learning_rate: 5e-05 -> 3e-05 ({path})"
    assert tomllib.loads(path.read_text()) == {"reward_scale": 2.5, "learning_rate": 3e-5}
    cfg = load_config()
    assert cfg.reward_scale == 2.5 and cfg.learning_rate == 3e-5 and cfg.lora_rank == ProjectConfig().lora_rank
    assert edit_config("reward_scale", "3") == (2.5, 3.0, path)  # an integer for a float key is that float
    assert isinstance(load_config().reward_scale, float)
    # found from a subfolder, edited in place
    sub = tmp_path / "a" / "b"
    sub.mkdir(parents=True)
    monkeypatch.chdir(sub)
    assert find_config_file() == path and load_config().reward_scale == 3.0
    assert edit_config("freeze_layers", "0-8")[2] == path and load_config(path).freeze_layers == "0-8"


def test_an_edit_rewrites_only_the_line_of_its_key(tmp_path):
    path = tmp_path / "lachesis.toml"
    path.write_text("# our settings\nseed = 3\nreward_scale = 1.5  # tuned\n\nlora_rank = 8\n")
    assert edit_config("reward_scale", "2.5", path) == (1.5, 2.5, path)
    assert path.read_text() == "# our settings\nseed = 3\nreward_scale = 2.5\n\nlora_rank = 8\n"


@pytest.mark.parametrize("args, message", [
    (["reward_scal", "2"], "unknown key 'reward_scal' (did you mean reward_scale?); keys: reward_scale, learning_rate"),
    (["lora_rank", "2.5"], "lora_rank must be an integer, got '2.5'"),
    (["learning_rate", "fast"], "learning_rate must be a number, got 'fast'"),
    (["reward_scale", "0"], "reward_scale must be positive, got 0.0"),
    (["group_size", "1"], "group_size must be at least 2, got 1"),
    (["seed", "-1"], "seed must be at least 0, got -1"),
    (["checkpoint_minutes", "-5"], "checkpoint_minutes must be at least 0, got -5"),
    (["partial_credit", "1.5"], "partial_credit must be at most 1"),
    (["temperature", "inf"], "temperature must be a finite number"),
    (["freeze_layers", "8-0"], "runs backwards"),
    (["freeze_layers", "a-b"], "is not a layer or a range"),
    (["reward_scale"], "give KEY VALUE"),
])
def test_bad_edits_exit_2_and_change_nothing(args, message, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "lachesis.toml"
    before = "# keep me\nreward_scale = 2.0\n"
    path.write_text(before)
    code, out, err = _cli(args, capsys, monkeypatch)
    assert code == 2 and out == ""
    assert message in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert path.read_text() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["lachesis.toml"]  # no temp file left behind


def test_a_bad_edit_creates_no_file(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert _cli(["reward_scale", "-2"], capsys, monkeypatch)[0] == 2
    assert list(tmp_path.iterdir()) == []


def test_a_file_with_an_unknown_or_mistyped_key_is_refused(tmp_path):
    path = tmp_path / "lachesis.toml"
    path.write_text("learning_rat = 1e-4\n")
    with pytest.raises(TrainerInputError, match=r"unknown key 'learning_rat' \(did you mean learning_rate\?\)"):
        load_config(path)
    with pytest.raises(TrainerInputError, match="learning_rat"):  # editing another key does not hide it
        edit_config("seed", "1", path)
    assert path.read_text() == "learning_rat = 1e-4\n"
    path.write_text('lora_rank = "16"\n')
    with pytest.raises(TrainerInputError, match=r"lachesis.toml: lora_rank must be an integer, got '16'"):
        load_config(path)
    path.write_text("lora_rank = \n")
    with pytest.raises(TrainerInputError, match="not valid TOML"):
        load_config(path)
    with pytest.raises(TrainerInputError, match="does not exist"):
        load_config(tmp_path / "nope.toml")


def test_list_shows_every_key(tmp_path, monkeypatch, capsys):
    path = tmp_path / "proj.toml"
    path.write_text("reward_scale = 2.5\n")
    monkeypatch.chdir(tmp_path)
    code, out, _ = _cli(["--list", "--json", "--config", str(path)], capsys, monkeypatch)
    assert code == 0
    listing = json.loads(out)
    rows = {r["key"]: r for r in listing["keys"]}
    assert listing["path"] == str(path) and list(rows) == list(KEYS)
    assert rows["reward_scale"] == {"key": "reward_scale", "type": "float", "default": 1.0, "current": 2.5,
                                    "help": rows["reward_scale"]["help"]}
    assert rows["lora_rank"]["type"] == "int" and rows["freeze_layers"]["type"] == "str"
    assert all(r["help"] for r in rows.values())
    assert {"learning_rate", "lora_rank", "lora_alpha", "group_size", "batch_size", "max_turns",
            "max_completion_length", "temperature", "kl_beta", "eval_episodes", "seed", "freeze_layers", "well_formed_call_bonus",
            "malformed_call_penalty", "command_error_penalty", "partial_credit", "checkpoint_every"} <= set(rows)
    code, out, _ = _cli(["--list", "--config", str(path)], capsys, monkeypatch)
    assert code == 0 and "reward_scale" in out and "2.5" in out and "checkpoint_every" in out
    assert describe_config(None) == [{**r, "current": r["default"]} for r in listing["keys"]]  # no file: defaults


def test_edit_with_config_path_creates_that_file(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "cfg" / "rl.toml"
    code, out, _ = _cli(["--config", str(path), "kl_beta=0.02"], capsys, monkeypatch)
    assert code == 0 and out.strip() == f"kl_beta: 0.0 -> 0.02 ({path})"
    assert load_config(path).kl_beta == 0.02 and find_config_file() is None


def test_layer_specs():
    assert parse_layer_spec("") == []
    assert parse_layer_spec("0-8") == list(range(9))
    assert parse_layer_spec("0,2,5-7") == [0, 2, 5, 6, 7]
    assert parse_layer_spec(" 3 , 1-2, 2 ") == [1, 2, 3]
    for bad in ("1,,2", "-1", "x", "3-1", "1-2-3"):
        with pytest.raises(TrainerInputError):
            parse_layer_spec(bad)


def test_reward_weights_of_a_config():
    assert reward_weights(ProjectConfig()) == RewardWeights(well_formed_call_bonus=0.05, malformed_call_penalty=0.1,
                                                            command_error_penalty=0.05, partial_credit=0.5,
                                                            reward_scale=1.0)
    assert reward_weights(ProjectConfig(reward_scale=2.5)).reward_scale == 2.5
    with pytest.raises(TrainerInputError, match="batch_size must be at least 1"):
        ProjectConfig(batch_size=0)
    with pytest.raises(TrainerInputError, match="lora_alpha must be an integer"):
        ProjectConfig(lora_alpha=True)


def test_the_reply_budget_is_the_environments_unless_a_setting_names_one():
    """A web expert fills a form in one reply (up to 355 tokens on generated forms): evaluation and online RL give a
    web environment's turns its budget, the shell's stay at 128, and a budget a user sets wins."""
    import envs
    from trainers.eval.config import EvalSettings
    from trainers.rl.project_config import completion_tokens

    web = ("web_form_env", "web_click_env", "web_fill_env", "web_gen_env", "web_mix_env")
    assert {envs.reply_tokens(name) for name in web} == {384}
    assert envs.reply_tokens("bash_exec_env") == envs.reply_tokens("git_repo_env") == 128
    assert EvalSettings(task="web-form", progress=False).max_new_tokens == 384
    assert EvalSettings(task="web-gen", progress=False).max_new_tokens == 384
    assert EvalSettings(task="shell", progress=False).max_new_tokens == 128
    assert EvalSettings(task="web-form", max_new_tokens=8, progress=False).max_new_tokens == 8
    assert completion_tokens(ProjectConfig(), "web_mix_env") == 384
    assert completion_tokens(ProjectConfig(), "bash_exec_env") == 128
    assert completion_tokens(ProjectConfig(max_completion_length=40), "web_form_env") == 40
    with pytest.raises(TrainerInputError, match="max_completion_length"):
        ProjectConfig(max_completion_length=-1)
