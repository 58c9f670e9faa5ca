"""Online RL and transfer (issue 13 items 2 and 4): rollouts in the lake with their policy version and step rewards,
reward_scale applied, evaluations queryable with `lake sql`, a kill -9 then --resume that neither repeats nor skips a
step, frozen layers bit-identical through rl_train_transfer while the trained ones change.

Tiny model, a few steps, 1 torch thread; the killed run is a real subprocess."""
from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from train_helpers import REPO, tiny_dir  # noqa: F401  (session fixture)
from tests.fault_figures import record

B, G, STEPS = 2, 2, 6  # tasks per step, rollouts per task, steps of the killed run


def write_project(path: Path, **over) -> Path:
    keys = {"group_size": G, "batch_size": B, "max_turns": 2, "max_completion_length": 16, "eval_episodes": 2,
            "checkpoint_every": 2, "learning_rate": 1e-3, **over}
    path.write_text("".join(f"{k} = {json.dumps(v)}\n" for k, v in keys.items()))
    return path


def write_tasks(path: Path) -> Path:
    """bash tasks already solved when they start (the file exists): an episode that submits succeeds, so a random
    policy's rollouts show the success reward as configured."""
    rows = [{"task_id": f"keep-{split}-{i}", "split": split, "instruction": f"Keep notes{i}.txt where it is.",
             "files": {f"notes{i}.txt": "hello\n"}, "solution": [],
             "checks": [{"type": "exists", "path": f"notes{i}.txt"}]}
            for split in ("train", "test") for i in range(3)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture
def lake_root(tmp_path):
    from lake import Lake

    Lake.init(tmp_path / "lake")
    return tmp_path / "lake"


def sql(lake_root: Path, query: str) -> list[dict]:
    """`lake sql --format json` as a user runs it."""
    from lachesis.cli import app

    res = CliRunner().invoke(app, ["sql", query, "--lake", str(lake_root), "--format", "json"])
    assert res.exit_code == 0, res.output
    return json.loads(res.output)


# ----------------------------------------------------------------------------------------------- rl_train_online
def test_online_rollouts_in_the_lake_with_versions_and_scaled_step_rewards(tiny_dir, tmp_path, lake_root):
    from trainers.rl.online import run_online
    from trainers.rl.config import OnlineConfig

    cfg = OnlineConfig(env="shell", steps=3, eval_interval=2, config=str(write_project(tmp_path / "l.toml",
                       reward_scale=2.5)), tasks_file=str(write_tasks(tmp_path / "tasks.jsonl")),
                       output=str(tmp_path / "run"), lake_root=str(lake_root), progress=False, device="cpu",
                       report_to="tensorboard")
    summary = run_online(cfg)
    run_id = summary["run_id"]
    assert summary["steps"] == 3 and summary["rollouts"] == 3 * B * G
    recorded = _recorded_config(lake_root, tmp_path / "run", run_id)
    assert (recorded["device"], recorded["report_to"], recorded["actors"]) == ("cpu", "tensorboard", 1)
    assert recorded["project"]["reward_scale"] == 2.5 and recorded["policy"]["full"] is True
    events = _tb_scalars(tmp_path / "run")  # TensorBoard got what train_log.jsonl holds
    logged = [json.loads(x) for x in (tmp_path / "run" / "train_log.jsonl").read_text().splitlines()]
    assert [v for _, v in events["train/reward_mean"]] == pytest.approx([r["reward_mean"] for r in logged
                                                                         if "reward_mean" in r and not r.get("summary")])
    assert [s for s, _ in events["eval/success_rate"]] == [0, 2, 3]

    rows = sql(lake_root, f"""SELECT policy_version, split, reward, success, steps,
                                     json_extract(metadata, '$.step')::INT AS step FROM trajectories
                              WHERE json_extract_string(metadata, '$.train_run_id') = '{run_id}'""")
    train = [r for r in rows if r["split"] == "train"]
    # rollouts of step s were sampled by the weights after s-1 updates: versions 0, 1, 2, each B x G rollouts
    assert sorted(int(r["policy_version"]) for r in train) == [v for v in range(3) for _ in range(B * G)]
    assert all(int(r["policy_version"]) == r["step"] - 1 for r in train)
    for r in train:
        assert r["reward"] == pytest.approx(sum(s["reward"] for s in r["steps"]))  # the return = sum of step rewards
        assert r["success"]
    # the final success is worth reward_scale (2.5); a last turn without any tool call carries no step term
    plain = [r for r in train if "<tool_call>" not in r["steps"][-1]["action"]]
    assert plain and all(r["steps"][-1]["reward"] == pytest.approx(2.5) for r in plain)
    assert json.loads((tmp_path / "run" / "config.json").read_text())["project"]["reward_scale"] == 2.5

    evals = sql(lake_root, f"""SELECT json_extract(metrics, '$.step')::INT AS step,
                                      json_extract(metrics, '$.success_rate')::DOUBLE AS success
                               FROM runs WHERE kind = 'eval' AND json_extract_string(metadata, '$.train_run_id') = '{run_id}'
                               ORDER BY step""")
    assert [e["step"] for e in evals] == [0, 2, 3]
    assert all(e["success"] == 1.0 for e in evals)  # evaluation scores the environment's own reward: success 1.0
    test_versions = sorted({int(r["policy_version"]) for r in rows if r["split"] == "test"})
    assert test_versions == [0, 2, 3]
    kinds = sql(lake_root, f"SELECT kind, count(*) AS n FROM runs WHERE run_id = '{run_id}' GROUP BY kind ORDER BY kind")
    assert kinds == [{"kind": "checkpoint", "n": 2}, {"kind": "train", "n": 1}]  # steps 2 and 3 (the last)
    assert (tmp_path / "run" / "eval_curve.png").stat().st_size > 0


def test_checkpoint_minutes_checkpoints_a_slow_run_between_checkpoint_every(tiny_dir, tmp_path, lake_root):
    """checkpoint_minutes: a run whose last checkpoint is that old checkpoints after the step under way, although
    checkpoint_every is far off (a CPU's web RL step takes minutes: at 100 steps a kill lost hours)."""
    from trainers.rl.config import OnlineConfig
    from trainers.rl.online import run_online

    cfg = OnlineConfig(env="shell", steps=3, eval_interval=100, tasks_file=str(write_tasks(tmp_path / "tasks.jsonl")),
                       config=str(write_project(tmp_path / "l.toml", checkpoint_every=1000,
                                                checkpoint_minutes=1e-9)),  # due after every step
                       output=str(tmp_path / "run"), lake_root=str(lake_root), progress=False, device="cpu",
                       plot=False)
    run_id = run_online(cfg)["run_id"]
    steps = sql(lake_root, f"""SELECT json_extract(metrics, '$.step')::INT AS step FROM runs
                               WHERE run_id = '{run_id}' AND kind = 'checkpoint' ORDER BY step""")
    assert [r["step"] for r in steps] == [1, 2, 3]  # without it: step 3 alone (the last), as checkpoint_every says
    assert sorted(p.name for p in (tmp_path / "run" / "checkpoints").glob("step-*")) == ["step-00000002", "step-00000003"]


def _recorded_config(lake_root: Path, run_dir: Path, run_id: str) -> dict:
    """The config the run folder recorded, checked to be the one its `runs` train event holds."""
    folder = json.loads((run_dir / "config.json").read_text())
    event = sql(lake_root, f"SELECT config FROM runs WHERE run_id = '{run_id}' AND kind = 'train'")
    assert len(event) == 1
    in_lake = event[0]["config"] if isinstance(event[0]["config"], dict) else json.loads(event[0]["config"])
    assert in_lake == {k: v for k, v in folder.items() if k not in ("command", "method", "model_path")}
    return folder


def _tb_scalars(run_dir: Path) -> dict[str, list[tuple[int, float]]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run_dir / "tb"))
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def test_gradient_checkpointing_is_on_for_the_update_only(tiny_dir, tmp_path, lake_root):
    """--gradient-checkpointing: the policy recomputes activations when it trains (the update), and generates
    with its KV cache as before (rollouts run in eval mode)."""
    from trainers.rl.online import start
    from trainers.rl.config import OnlineConfig

    def trainer(checkpointing: bool, name: str):
        return start(OnlineConfig(env="shell", steps=1, gradient_checkpointing=checkpointing, device="cpu",
                                  config=str(write_project(tmp_path / "l.toml")), output=str(tmp_path / name),
                                  lake_root=str(lake_root), progress=False, plot=False))

    plain, ckpt = trainer(False, "plain"), trainer(True, "ckpt")
    assert ckpt.model.is_activation_checkpointing and not plain.model.is_activation_checkpointing
    assert json.loads((tmp_path / "ckpt" / "config.json").read_text())["gradient_checkpointing"] is True
    prompt = plain.tok("<|im_start|>user\nls<|im_end|>\n<|im_start|>assistant\n", return_tensors="pt")
    same = [m.model.generate(**prompt, max_new_tokens=8, do_sample=False, use_cache=True) for m in (plain, ckpt)]
    assert same[0].equal(same[1])


def test_bad_input_is_one_line_before_any_work(tmp_path, lake_root):
    from trainers.runtime.errors import TrainerInputError
    from trainers.rl.online import run_online
    from trainers.rl.config import OnlineConfig
    from trainers.transfer.config import TransferTrainConfig

    with pytest.raises(TrainerInputError, match="unknown task/environment 'nope'"):
        OnlineConfig(env="nope")
    with pytest.raises(TrainerInputError, match="--eval-interval must be at least 1"):
        OnlineConfig(eval_interval=0)
    with pytest.raises(TrainerInputError, match="--actors must be at least 1"):
        OnlineConfig(actors=0)
    with pytest.raises(TrainerInputError, match="unknown --report-to 'tb'"):
        OnlineConfig(report_to="tb")
    with pytest.raises(TrainerInputError, match="unknown --device 'tpu'"):
        TransferTrainConfig(device="tpu")
    with pytest.raises(TrainerInputError, match="unknown --report-to 'csv'"):
        TransferTrainConfig(report_to="csv")
    with pytest.raises(TrainerInputError, match="--micro-batch must be at least 1"):
        TransferTrainConfig(micro_batch=0)
    with pytest.raises(TrainerInputError, match="--device cuda"):  # this machine has no CUDA
        run_online(OnlineConfig(env="shell", device="cuda", lake_root=str(lake_root), output=str(tmp_path / "r")))
    with pytest.raises(TrainerInputError, match="no run folder there"):
        run_online(OnlineConfig(resume=str(tmp_path / "missing")))
    assert not (tmp_path / "r").exists()


def _log_steps(log: Path, key: str = "policy_version") -> list[dict]:
    """The step records (those with `key`) of a train_log.jsonl that a kill may have cut mid-line."""
    if not log.exists():
        return []
    out = []
    for line in log.read_text().splitlines():
        try:
            rec = json.loads(line)
        except ValueError:  # a line cut by the kill
            continue
        if key in rec:
            out.append(rec)
    return out


def test_kill_9_then_resume_neither_repeats_nor_skips_a_step(tiny_dir, tmp_path, lake_root):
    run_dir = tmp_path / "run"
    args = ["--env", "bash_exec_env", "--steps", str(STEPS), "--eval_interval", "100", "--config",
            str(write_project(tmp_path / "l.toml", max_turns=1, eval_episodes=1)), "--output", str(run_dir), "--lake", str(lake_root), "--quiet"]
    code = "from lachesis.rl_cli import rl_train_online_main as m; m()"
    env = {**os.environ, "LACHESIS_THREADS": "1", "OMP_NUM_THREADS": "1"}
    kill_at = random.Random(13).randint(3, STEPS - 1)  # after the first checkpoint (step 2), before the end
    proc = subprocess.Popen([sys.executable, "-c", code, *args], cwd=REPO, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 240
    while time.time() < deadline and proc.poll() is None:
        if len(_log_steps(run_dir / "train_log.jsonl")) >= kill_at:
            break
        time.sleep(0.05)
    assert proc.poll() is None, f"the run ended before step {kill_at}: {proc.stderr.read()[-2000:]}"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    before = {r["step"]: r for r in _log_steps(run_dir / "train_log.jsonl")}
    assert max(before) >= kill_at and not (run_dir / "summary.json").exists()

    res = subprocess.run([sys.executable, "-c", code, "--resume", str(run_dir), "--quiet"], cwd=REPO, env=env,
                         capture_output=True, text=True, timeout=240)
    assert res.returncode == 0, res.stderr[-2000:]
    steps = _log_steps(run_dir / "train_log.jsonl")
    logged = [r["step"] for r in steps]
    record(f"rl_train_online kill -9 at step {kill_at}, then --resume", tried=STEPS, unit="training steps",
           repeated=len(logged) - len(set(logged)), skipped=len(set(range(1, STEPS + 1)) - set(logged)))
    assert [r["step"] for r in steps] == list(range(1, STEPS + 1))  # each step once, in order
    assert [r["data_position"] for r in steps] == [B * s for s in range(1, STEPS + 1)]
    resumed_from = max(s for s in range(0, STEPS + 1, 2) if s < min(kill_at + 1, max(before) + 1))
    for s in range(resumed_from + 1, max(before) + 1):  # redone steps: same tasks, same sampled actions (RNG state)
        assert steps[s - 1]["rollouts_digest"] == before[s]["rollouts_digest"]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["steps"] == STEPS and summary["status"] == "completed"

    rows = sql(lake_root, f"""SELECT policy_version, count(*) AS n FROM trajectories
                              WHERE json_extract_string(metadata, '$.train_run_id') = '{summary['run_id']}'
                                AND split = 'train' GROUP BY 1 ORDER BY 1""")
    assert [(int(r["policy_version"]), r["n"]) for r in rows] == [(v, B * G) for v in range(STEPS)]


# ----------------------------------------------------------------------------------------------- transfer
@pytest.fixture(scope="module")
def source_lake(tiny_dir, tmp_path_factory):
    """A lake with expert rollouts of bash (the source) and git (the target), and a short SFT run on bash."""
    from lake import Lake
    from trainers.sft.config import SFTConfig
    from trainers.generation.rollouts import policy_rows
    from trainers.sft.sft import run_sft

    root = tmp_path_factory.mktemp("transfer")
    lake = Lake.init(root / "lake")
    lake.append("trajectories", policy_rows("bash_exec_env", "train", 6, "expert", seed=0, workers=1)
                + policy_rows("git_repo_env", "train", 6, "expert", seed=0, workers=1))
    run_sft(SFTConfig(model="tiny", data="sft", lake_root=str(root / "lake"), output=str(root / "bash-sft"),
                      max_steps=2, batch_size=4, progress=False, plot=False))
    return root / "lake"


def test_transfer_init_finds_the_source_run_and_checks_the_depth(source_lake, tmp_path):
    from trainers.runtime.errors import TrainerInputError
    from trainers.transfer.config import TransferInitConfig
    from trainers.transfer.transfer import run_transfer_init

    with pytest.raises(TrainerInputError, match="the model has 2 layers"):  # the guide's 0-8 on the tiny model
        run_transfer_init(TransferInitConfig(source_env="bash_exec_env", target_env="git_repo_env",
                                             freeze_layers="0-8", lake_root=str(source_lake)))
    with pytest.raises(TrainerInputError, match="no completed run trained on python_debug_env"):
        run_transfer_init(TransferInitConfig(source_env="debug-python", lake_root=str(source_lake), freeze_layers="0"))
    spec = run_transfer_init(TransferInitConfig(source_env="shell", target_env="git", freeze_layers="0",
                                                lake_root=str(source_lake), output=str(tmp_path / "spec.json")))
    assert spec["source_run_dir"] == str((source_lake.parent / "bash-sft").resolve())
    assert (spec["depth"], spec["freeze_layers"], spec["trainable_layers"], spec["mode"]) == (2, [0], [1], "full")
    assert json.loads((tmp_path / "spec.json").read_text())["spec_id"] == spec["spec_id"]
    assert spec["command"]["freeze_layers"] == "0" and spec["command"]["command"] == "rl_transfer_init"  # as run
    assert spec["project"]["learning_rate"] > 0
    rows = sql(source_lake, "SELECT run_id FROM runs WHERE kind = 'transfer_spec'")
    assert {"run_id": spec["spec_id"]} in rows


def _weights(folder: Path) -> dict:
    from safetensors.torch import load_file

    return load_file(str(folder / "model.safetensors"))


@pytest.mark.parametrize("method", ["sft", "online"])
def test_train_transfer_keeps_frozen_layers_bit_identical(source_lake, tmp_path, method):
    from trainers.transfer.config import TransferInitConfig, TransferTrainConfig
    from trainers.transfer.transfer import run_train_transfer, run_transfer_init

    project = write_project(tmp_path / "l.toml", learning_rate=3e-3, eval_episodes=1, max_turns=1)
    run_transfer_init(TransferInitConfig(freeze_layers="0", lake_root=str(source_lake), config=str(project),
                                         output=str(tmp_path / "spec.json")))
    summary = run_train_transfer(TransferTrainConfig(method=method, max_steps=2, eval_interval=5, batch_size=4,
                                                     micro_batch=2, gradient_checkpointing=True,
                                                     spec=str(tmp_path / "spec.json"), lake_root=str(source_lake),
                                                     config=str(project), device="cpu", report_to="tensorboard",
                                                     output=str(tmp_path / "target"), progress=False))
    # the run folder and the runs event record the whole config: the transfer spec and lachesis.toml's values too
    recorded = _recorded_config(source_lake, tmp_path / "target", summary["run_id"])
    assert (recorded["device"], recorded["report_to"], recorded["command"]) == ("cpu", "tensorboard",
                                                                               "rl_train_transfer")
    assert recorded["transfer"]["freeze_layers"] == [0] and recorded["project"]["learning_rate"] == 3e-3
    if method == "online":  # the online update's micro-batch reaches the run (smollm2 needs a small one on CPU)
        assert recorded["micro_batch"] == 2
    else:  # and SFT's step of 4 conversations is two passes of 2
        assert (recorded["batch_size"], recorded["grad_accum"]) == (2, 2)
    assert recorded["gradient_checkpointing"] is True  # and so does the memory option, for either method
    assert "train/loss" in _tb_scalars(tmp_path / "target")
    report = json.loads((tmp_path / "target" / "frozen_checksums.json").read_text())
    assert report["frozen_identical"] and report["before"] == report["after"]
    assert report["layers"] == [0] and report["frozen_tensors"] == 10  # embeddings + layer 0's 9 tensors
    # and from the files: the target run's model against the source run's, tensor by tensor
    src, dst = _weights(source_lake.parent / "bash-sft" / "model"), _weights(tmp_path / "target" / "model")
    frozen = [k for k in src if "embed_tokens" in k or ".layers.0." in k]
    assert len(frozen) == 10 and all(src[k].equal(dst[k]) for k in frozen)
    if method == "sft":  # SFT always has a gradient; online RL only where a group's returns differ
        assert report["trained_changed"] == report["trained_tensors"] > 0
        assert all(not src[k].equal(dst[k]) for k in src if k not in frozen)
    assert summary["env"] == "git_repo_env" and summary["frozen_identical"]


def test_a_fresh_adapter_trains_over_the_merged_lora_source(source_lake, tmp_path, tiny_dir):
    """rl_transfer_init --adapter fresh: the source's LoRA adapter is merged into its base beside the spec, and the
    target SFT run trains a new adapter on that merged model (none on the frozen layer) whose run names the merged
    model as its base; a fully fine-tuned source has no adapter to merge (one line)."""
    from trainers.modeling.policy import run_base_model
    from trainers.runtime.errors import TrainerInputError
    from trainers.sft.config import SFTConfig
    from trainers.sft.sft import run_sft
    from trainers.transfer.config import TransferInitConfig, TransferTrainConfig
    from trainers.transfer.transfer import run_train_transfer, run_transfer_init

    with pytest.raises(TrainerInputError, match="--adapter fresh: the source run .* trained the whole model"):
        run_transfer_init(TransferInitConfig(freeze_layers="0", lake_root=str(source_lake), adapter="fresh",
                                             output=str(tmp_path / "full.json")))
    assert not (tmp_path / "full.merged").exists()
    lora = tmp_path / "bash-lora"
    run_sft(SFTConfig(model="tiny", full=False, data="sft", lake_root=str(source_lake), output=str(lora),
                      max_steps=2, batch_size=4, learning_rate=1e-2, progress=False, plot=False))
    project = write_project(tmp_path / "l.toml", learning_rate=3e-3)
    spec = run_transfer_init(TransferInitConfig(freeze_layers="0", from_run=str(lora), adapter="fresh",
                                                config=str(project), lake_root=str(source_lake),
                                                output=str(tmp_path / "spec.json")))
    merged = tmp_path / "spec.merged"
    assert spec["merged_model"] == str(merged.resolve()) and (merged / "model.safetensors").is_file()
    assert json.loads((merged / "lachesis_export.json").read_text())["lora"] is True  # the adapter was merged
    summary = run_train_transfer(TransferTrainConfig(method="sft", max_steps=2, batch_size=4, micro_batch=4,
                                                     spec=str(tmp_path / "spec.json"), lake_root=str(source_lake),
                                                     config=str(project), output=str(tmp_path / "target"),
                                                     progress=False, plot=False))
    target = tmp_path / "target"
    adapter = json.loads((target / "adapter" / "adapter_config.json").read_text())
    assert adapter["layers_to_transform"] == [1]  # a new adapter, on the layer not frozen only
    assert run_base_model(str(target))[1] == str(merged.resolve())  # what hermes_eval --adapter loads it on
    assert summary["frozen_identical"] and summary["trained_changed"] > 0
    # the source's own base has the same shapes: put under this adapter it would load and answer nonsense
    from trainers.modeling.models import load_model

    with pytest.raises(TrainerInputError, match=f"was trained on {merged.resolve()}, not on {tiny_dir}"):
        load_model(str(tiny_dir), str(target))
    assert load_model(str(merged.resolve()), str(target)) is not None


def test_lora_transfer_puts_no_adapter_on_frozen_layers(tiny_dir):
    from trainers.modeling.freeze import frozen_names
    from trainers.modeling.policy import PolicySpec, build_policy

    model, frozen = build_policy(PolicySpec(model_path=str(tiny_dir), full=False, freeze=True, layers=[0]))
    lora = [n for n, _ in model.named_parameters() if "lora_" in n]
    assert lora and all(".layers.1." in n for n in lora)
    assert frozen == frozen_names(model, [0]) and not any(p.requires_grad for n, p in model.named_parameters()
                                                          if n in set(frozen))


def test_eval_curve_plots_every_evaluation_and_labels_the_last_values():
    from trainers.runtime.plots import eval_curve_figure

    evals = [{"step": s, "success_rate": v, "mean_reward": v, "valid_tool_call_rate": 1.0}
             for s, v in ((0, 0.0), (50, 0.25), (100, 0.5))]
    fig = eval_curve_figure(evals, [(s, 0.4) for s in range(1, 101)])
    ax = fig.axes[0]
    lines = {ln.get_label(): ln for ln in ax.get_lines()}
    assert list(lines["test success"].get_xdata()) == [0, 50, 100]
    assert list(lines["test mean reward"].get_ydata()) == [0.0, 0.25, 0.5]
    assert len(lines["train rollouts: mean return"].get_xdata()) == 100
    assert [t.get_text() for t in ax.texts] == ["0.50", "0.50", "1.00"]  # both equal lines keep their label
    assert ax.get_ylim()[1] > 1.0  # a line at 1.0 is not on the frame
