"""Cross-task transfer: rl_transfer_init writes a transfer spec, rl_train_transfer trains the target from it.

The guide's third strategy reuses a policy trained on shell tasks to learn git tasks faster, with the lower layers
frozen (general representations kept, upper layers adapt):

    rl_transfer_init --source_env=bash_exec_env --target_env=git_repo_env --freeze_layers=0-8
    rl_edit_config learning_rate 3e-5
    rl_train_transfer --max_steps=2000

rl_transfer_init finds the source run (--from RUN, else the latest completed training run in the lake's `runs`
whose environment, or whose data's environments, include the source env), checks the layer range against the
model's depth (read from its config, no weights loaded) and writes the spec: a JSON file (runs/<spec_id>.json,
or --output) and a `runs` event of kind transfer_spec, so rl_train_transfer without --spec finds the latest one.

rl_train_transfer trains on the target environment from the source run's weights with the input embeddings and
the named layers frozen (trainers/modeling/policy.py: requires_grad False for full fine-tuning; with LoRA a new adapter
only on the other layers, or the source's adapter continued with its tensors in the frozen layers frozen), by
online RL (trainers/rl/online.py, the default) or by SFT on the target environment's rows of the lake's sft view
(--method sft, trainers/sft/sft.py), at the project config's learning rate. With `rl_transfer_init --adapter fresh`
a LoRA source's adapter is merged into its base once (written beside the spec) and the target trains a new adapter
on that merged model instead of continuing the source's. The frozen tensors and the trained
ones are hashed (sha256) before and after; frozen_checksums.json in the run folder has both lists.
"""
from __future__ import annotations

import json
import shutil
import tempfile
import time
import uuid
from dataclasses import asdict
from pathlib import Path

from lake import Lake
from trainers.eval.config import resolve_env_name
from trainers.modeling.freeze import check_layers, checksums, freeze_report, model_depth, trainable_names
from trainers.modeling.policy import build_policy, resolve_spec, spec_depth
from trainers.transfer.config import TransferInitConfig, TransferOnlineConfig, TransferSFTConfig, TransferTrainConfig
from trainers.rl.learner import train_online
from trainers.rl.project_config import MAX_LAYER, load_config, parse_layer_spec, read_text
from trainers.runtime.device import device as pick_device
from trainers.runtime.device import setup_env
from trainers.runtime.errors import TrainerInputError
from trainers.runtime.model_folder import TINY_MARKER
from trainers.runtime.run_reader import RunReader
from trainers.runtime.runfolder import trainer_lake

SPEC_KIND = "transfer_spec"
ONLINE_METHOD = "transfer-online"
SPEC_BYTES = 1 << 20  # a spec or a run's config.json is a few KB
TARGET_ENV_VARIABLE = "transfer_target_env"  # the SQL variable the --method sft export filters on


# ----------------------------------------------------------------------------------------------- rl_transfer_init
def _json(value) -> dict:
    if isinstance(value, str):
        return json.loads(value) if value.strip() else {}
    return value or {}


def trained_envs(row: dict) -> set[str]:
    """The environments a `runs` train event trained on: its config's env (online RL, transfer) or the
    environments its data held (SFT: the manifest's envs)."""
    config, manifest = _json(row.get("config")), _json(row.get("manifest"))
    found = {config["env"]} if config.get("env") else set()
    if "envs" in manifest:
        return found | set(manifest["envs"])
    return found | _file_envs(manifest.get("files") or [])


def _file_envs(files: list[dict]) -> set[str]:
    """The env column of a run's dataset files (runs recorded before manifests listed their envs)."""
    import pyarrow.parquet as pq

    out: set[str] = set()
    for f in files:
        p = Path(f.get("path", ""))
        if p.suffix == ".parquet" and p.is_file() and "env" in pq.read_schema(p).names:
            out.update(v for v in pq.read_table(p, columns=["env"]).column("env").unique().to_pylist() if v)
    return out


def latest_run_on(lake: Lake, env: str) -> dict:
    """The latest completed training run whose environments include `env` (its runs row, JSON columns parsed)."""
    query = ("SELECT run_id, config, manifest, metadata, occurred_at FROM runs "
             "WHERE kind = 'train' AND status = 'completed' ORDER BY occurred_at DESC")
    with lake.snapshot(for_query=query) as snap:
        rows = snap.arrow(query).to_pylist()
    for row in rows:
        if env in trained_envs(row):
            return {**row, "metadata": _json(row["metadata"]), "config": _json(row["config"])}
    raise TrainerInputError(f"no completed run trained on {env} in the runs of the lake at {lake.root}: train one "
                            f"(rl_train_online --env {env}, or rl_finetune_supervised on its data) or pass --from RUN")


def run_transfer_init(cfg: TransferInitConfig) -> dict:
    """Find the source run, check the layers against its model's depth, write the spec; returns it."""
    setup_env()
    hp = load_config(cfg.config)
    spec_text = hp.freeze_layers if cfg.freeze_layers is None else cfg.freeze_layers
    layers = parse_layer_spec(spec_text)
    lake = trainer_lake(cfg.lake_root)
    if cfg.from_run:
        folder = RunReader.open(cfg.from_run, "--from", by_id=True).path  # its config.json: source_model reads it
        source_id = folder.name
    else:
        row = latest_run_on(lake, cfg.source_env)
        folder, source_id = Path(str(row["metadata"].get("run_dir") or "")), row["run_id"]
        if not row["metadata"].get("run_dir") or not (folder / "config.json").is_file():
            raise TrainerInputError(f"the latest run on {cfg.source_env}, {source_id}, has no folder at {folder} any "
                                    "more: pass --from RUN with a run folder")
    model = source_model(folder)
    policy = resolve_spec(model, str(folder), hp.lora_rank, hp.lora_alpha, layers)
    depth = spec_depth(policy)
    check_layers(layers, depth, spec_text)
    if cfg.adapter == "fresh" and not policy.init_adapter:
        raise TrainerInputError(f"--adapter fresh: the source run {folder} trained the whole model, not a LoRA "
                                "adapter: there is no adapter to merge (its weights are trained on as they are)")
    spec_id = f"transfer-{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}-{uuid.uuid4().hex[:6]}"
    path = Path(cfg.output or Path("runs") / f"{spec_id}.json").expanduser()
    merged = merge_source(folder, path) if cfg.adapter == "fresh" else None
    spec = {"spec_id": spec_id, "source_env": cfg.source_env, "target_env": cfg.target_env,
            "source_run_id": source_id, "source_run_dir": str(folder.resolve()), "source_weights": policy.init_weights,
            "adapter": cfg.adapter, "merged_model": merged,
            "model": model, "model_path": policy.model_path, "mode": "full" if policy.full else "lora",
            "depth": depth, "freeze_layers": layers, "freeze_spec": spec_text, "freeze_embeddings": True,
            "trainable_layers": [i for i in range(depth) if i not in layers], "learning_rate": hp.learning_rate,
            "spec_path": str(path.resolve()), "command": {**asdict(cfg), "command": cfg.COMMAND},
            "project": asdict(hp)}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(spec, indent=2))
    res = lake.append("runs", [{"run_id": spec_id, "kind": SPEC_KIND, "status": "completed", "model": model,
                                "adapter_path": policy.init_weights, "config": spec, "metrics": {},
                                "metadata": {"source_env": cfg.source_env, "target_env": cfg.target_env,
                                             "source_run_id": source_id, "spec_path": str(path.resolve()),
                                             "command": cfg.COMMAND}}])
    return {**spec, "lake_version": res.version}


def merge_source(folder: Path, spec_path: Path) -> str:
    """--adapter fresh: the source run's adapter merged into its base (`lake export-model`'s merge), written beside
    the spec as <spec>.merged/; the target trains a new adapter on it. Returns the folder."""
    from trainers.export.config import ExportModelConfig
    from trainers.export.merged import export_model

    out = spec_path.with_name(spec_path.stem + ".merged")
    export_model(ExportModelConfig(run=str(folder), output=str(out)))
    # the source trained a LoRA adapter, so its merged model is trained with one again: a from-scratch marker
    # copied from a tiny base would make the target run a full fine-tune
    (out / TINY_MARKER).unlink(missing_ok=True)
    return str(out.resolve())


def starting_point(spec: dict) -> tuple[str, str | None]:
    """(--model, --init) of the target run: the source's base and run folder, or with --adapter fresh the merged
    source alone (a new adapter goes on it)."""
    if spec.get("merged_model"):
        return spec["merged_model"], None
    return spec["model"], spec["source_run_dir"]


def source_model(folder: Path) -> str:
    """The model a source run folder trained (its config.json's model, or model_path); a config.json that is
    not a JSON object naming one is a one-line TrainerInputError."""
    path = folder / "config.json"
    run_cfg = _json_file(path, "run config")
    model = run_cfg.get("model") or run_cfg.get("model_path")
    if not isinstance(model, str) or not model:
        raise TrainerInputError(f"run config {path} names no model (a 'model' or 'model_path' string): is {folder} a "
                                "training run folder?")
    return model


def _json_file(path: Path, what: str, limit: int = SPEC_BYTES) -> dict:
    """A JSON object file, read as project_config reads its file (regular, bounded, never blocking)."""
    try:
        value = json.loads(read_text(path, what, limit))
    except ValueError as exc:
        raise TrainerInputError(f"{what} {path} is not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise TrainerInputError(f"{what} {path} is not a JSON object but {type(value).__name__}")
    return value


# ----------------------------------------------------------------------------------------------- rl_train_transfer
# The spec fields rl_train_transfer uses, with their JSON types; a spec is rl_transfer_init's output, but a
# --spec file is whatever the user points at, so each is checked before it reaches a model, a path or a query.
SPEC_FIELDS = {"model": str, "target_env": str, "source_run_dir": str, "freeze_layers": list}


def check_spec(spec: object, source: str) -> dict:
    """`spec` with its fields checked: the types of SPEC_FIELDS, target_env a registered environment (so it can
    only name one: it filters the lake's rows), freeze_layers layer indices; else one line naming the field."""
    if not isinstance(spec, dict):
        raise TrainerInputError(f"{source}: not a JSON object: not a transfer spec of rl_transfer_init")
    for key, kind in SPEC_FIELDS.items():
        if not isinstance(spec.get(key), kind) or (kind is str and not spec[key]):
            raise TrainerInputError(f"{source}: field '{key}' is missing or not a {kind.__name__}: not a transfer "
                                    "spec of rl_transfer_init")
    try:
        target = resolve_env_name(spec["target_env"])
    except TrainerInputError as exc:
        raise TrainerInputError(f"{source}: field 'target_env': {exc}") from None
    merged = spec.get("merged_model")
    if merged is not None and not (isinstance(merged, str) and Path(merged).is_dir()):
        raise TrainerInputError(f"{source}: field 'merged_model' is not a folder: run rl_transfer_init again")
    layers = spec["freeze_layers"]
    if not all(isinstance(i, int) and not isinstance(i, bool) and 0 <= i <= MAX_LAYER for i in layers):
        raise TrainerInputError(f"{source}: field 'freeze_layers' must list layer indices 0..{MAX_LAYER}")
    return {**spec, "target_env": target}


def latest_spec(lake: Lake) -> dict:
    query = "SELECT config FROM runs WHERE kind = ? ORDER BY occurred_at DESC LIMIT 1"
    with lake.snapshot(for_query=query) as snap:
        rows = snap.arrow(query, [SPEC_KIND]).to_pylist()
    if not rows:
        raise TrainerInputError(f"no transfer spec in the lake at {lake.root}: run rl_transfer_init first, or pass "
                                "--spec FILE")
    try:
        spec = _json(rows[0]["config"])
    except ValueError as exc:
        raise TrainerInputError(f"the latest transfer spec in the lake at {lake.root} is not JSON: {exc}") from None
    return check_spec(spec, f"the latest transfer spec in the lake at {lake.root}")


def load_spec(cfg: TransferTrainConfig) -> dict:
    if cfg.spec:
        p = Path(cfg.spec).expanduser()
        if not p.exists():
            raise TrainerInputError(f"transfer spec {p} does not exist: pass the file rl_transfer_init printed")
        return check_spec(_json_file(p, "transfer spec"), f"transfer spec {p}")
    return latest_spec(trainer_lake(cfg.lake_root))


def run_train_transfer(cfg: TransferTrainConfig, console=None) -> dict:
    setup_env()
    if cfg.resume:  # a stopped online transfer run: its folder has everything, the spec included
        return train_online(TransferOnlineConfig(resume=cfg.resume, threads=cfg.threads, device=cfg.device,
                                                 progress=cfg.progress), console, method=ONLINE_METHOD)
    spec = load_spec(cfg)
    if not Path(spec["source_run_dir"]).is_dir():
        raise TrainerInputError(f"the spec's source run {spec['source_run_dir']} does not exist any more: run "
                                "rl_transfer_init again")
    summary = _train_sft(cfg, spec, console) if cfg.method == "sft" else _train_online(cfg, spec, console)
    Path(summary["run_dir"], "transfer_spec.json").write_text(json.dumps(spec, indent=2))
    return summary


def _train_online(cfg: TransferTrainConfig, spec: dict, console) -> dict:
    model, init = starting_point(spec)
    online = TransferOnlineConfig(
        env=spec["target_env"], steps=cfg.max_steps, eval_interval=cfg.eval_interval, model=model,
        init=init, config=cfg.config, output=cfg.output, lake_root=cfg.lake_root, seed=cfg.seed,
        threads=cfg.threads, device=cfg.device, report_to=cfg.report_to, progress=cfg.progress, plot=cfg.plot,
        freeze_layers=list(spec["freeze_layers"]), actors=cfg.actors, micro_batch=cfg.micro_batch,
        gradient_checkpointing=cfg.gradient_checkpointing, transfer=spec)
    return train_online(online, console, method=ONLINE_METHOD)


def _target_data(cfg: TransferTrainConfig, target: str, work: Path) -> str:
    """--data as the SFT run reads it: a lake view is exported with only the target environment's rows."""
    from views.export import EmptyExportError, ExportError, export_view

    if Path(cfg.data).expanduser().exists():
        return cfg.data
    lake = trainer_lake(cfg.lake_root)
    try:  # the environment is a bound variable, never text pasted into the filter
        export_view(lake, cfg.data, work, format="parquet", where=f"env = getvariable('{TARGET_ENV_VARIABLE}')",
                    variables={TARGET_ENV_VARIABLE: target}, allow_empty=False)
    except EmptyExportError:  # what to run, not the temporary folder the empty export would have named
        raise TrainerInputError(
            f"the lake at {lake.root} has no {target} rows in its {cfg.data!r} view to train the target on: add some "
            f"with `lake rollout --env {target} --policy expert --episodes 200 --lake {lake.root}` (or your agent's "
            f"trajectories of {target}), or train online without --method sft") from None
    except ExportError as exc:
        raise TrainerInputError(f"cannot export {cfg.data!r} rows of {target}: {str(exc).splitlines()[0]}") from None
    return str(work)


def _train_sft(cfg: TransferTrainConfig, spec: dict, console) -> dict:
    from trainers.sft.sft import run_sft

    hp = load_config(cfg.config)
    model, init = starting_point(spec)
    policy = resolve_spec(model, init, hp.lora_rank, hp.lora_alpha, list(spec["freeze_layers"]))
    held: dict = {}

    def build(settled):
        model, frozen = build_policy(policy, device=pick_device(settled.device))
        held.update(model=model, frozen=checksums(model, frozen), trained=checksums(model, trainable_names(model)))
        return model, sum(p.numel() for p in model.parameters() if p.requires_grad)

    with tempfile.TemporaryDirectory(prefix="lachesis-transfer-") as tmp:
        exported = not Path(cfg.data).expanduser().exists()
        data = _target_data(cfg, spec["target_env"], Path(tmp) / "data")
        sft = TransferSFTConfig(model=policy.base, data=data, output=cfg.output, max_steps=cfg.max_steps,
                                learning_rate=hp.learning_rate, full=policy.full, lora_rank=hp.lora_rank, lora_alpha=hp.lora_alpha,
                                batch_size=cfg.sft_passes[0], grad_accum=cfg.sft_passes[1],
                                gradient_checkpointing=cfg.gradient_checkpointing,
                                seed=hp.seed if cfg.seed is None else cfg.seed,
                                lake_root=cfg.lake_root, threads=cfg.threads, device=cfg.device,
                                report_to=cfg.report_to, progress=cfg.progress, plot=cfg.plot, transfer=spec,
                                project=asdict(hp))
        summary = run_sft(sft, console, build_model=build)
        if exported:  # keep the exported target rows with the run
            shutil.copytree(data, Path(summary["run_dir"]) / "dataset")
    model = held["model"]
    report = freeze_report(held["frozen"], checksums(model, list(held["frozen"])), held["trained"],
                           checksums(model, list(held["trained"])), policy.layers, model_depth(model),
                           "full" if policy.full else "lora")
    run_dir = Path(summary["run_dir"])
    (run_dir / "frozen_checksums.json").write_text(json.dumps(report, indent=1))
    summary.update(frozen_identical=report["frozen_identical"], frozen_tensors=report["frozen_tensors"],
                   trained_tensors=report["trained_tensors"], trained_changed=report["trained_changed"],
                   env=spec["target_env"])
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=2, default=str))
    return summary
