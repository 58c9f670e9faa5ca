# Lachesis tasks. `bash scripts/bootstrap.sh RECIPE` sets up .venv first on a fresh machine.
set export
HF_HUB_OFFLINE := "1"
HF_DATASETS_OFFLINE := "1"
TOKENIZERS_PARALLELISM := "false"
bin := justfile_directory() / ".venv/bin"

default:
    @{{bin}}/just --list

# Create .venv and install everything (idempotent).
setup:
    bash scripts/bootstrap.sh

# The whole default test suite (slow tests excluded).
test *ARGS:
    {{bin}}/python -m pytest {{ARGS}}

# Include the slow tests too.
test-all:
    {{bin}}/python -m pytest -m ""

# End-to-end: fresh lake, rollouts + skills, views, fine-tune the tiny model, evaluate before/after, plots.
demo *ARGS:
    {{bin}}/python -m trainers.demo {{ARGS}}

# Export the sft view of an existing lake, fine-tune the tiny model on it, evaluate before and after.
train-sft LAKE="data/lake" *ARGS:
    {{bin}}/python -m trainers.demo --from-lake {{LAKE}} {{ARGS}}

# Benchmarks: each prints ratios against a baseline measured in the same run.
bench-lake *ARGS:
    {{bin}}/python bench/bench_lake.py {{ARGS}}

bench-views *ARGS:
    {{bin}}/python bench/bench_views.py {{ARGS}}

bench-sft *ARGS:
    {{bin}}/python bench/bench_sft.py {{ARGS}}

bench: bench-lake bench-views bench-sft bench-envs bench-ingest

bench-envs *ARGS:
    {{bin}}/python bench/bench_envs.py {{ARGS}}

# A side venv with atroposlib 0.4.0 for the real-Atropos compatibility tests (kept out of .venv: wandb, nltk, ...).
atropos-venv:
    bash tests/data/make_atropos_venv.sh /tmp/atropos-venv
    ATROPOS_PYTHON=/tmp/atropos-venv/bin/python {{bin}}/python -m pytest -m slow tests/test_server_atropos.py

# Needs atroposlib's run-api as the baseline: builds the side venv first when it is missing.
bench-ingest *ARGS:
    test -x /tmp/atropos-venv/bin/python || bash tests/data/make_atropos_venv.sh /tmp/atropos-venv
    ATROPOS_PYTHON=/tmp/atropos-venv/bin/python {{bin}}/python bench/bench_ingest.py {{ARGS}}
