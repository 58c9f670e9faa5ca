#!/usr/bin/env bash
# Make a Python with Hermes Agent 0.19.0 (the `hermes` command) for using a model served by `lake serve-model`
# (README: "Use your trained model with Hermes Agent") and for tests/test_hermes_agent_serve.py, outside .venv:
# hermes-agent pins its own openai, pydantic, fastapi and httpx, and needs nothing of ours (it talks HTTP).
#   scripts/make_hermes_venv.sh [/tmp/hermes-venv]   then   /tmp/hermes-venv/bin/hermes --version
set -euo pipefail
dest="${1:-${HERMES_VENV:-/tmp/hermes-venv}}"
python="${PYTHON:-python3}"
"$python" -m venv "$dest"
"$dest/bin/pip" install -q --disable-pip-version-check hermes-agent==0.19.0
"$dest/bin/hermes" --version
