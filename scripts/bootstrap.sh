#!/usr/bin/env bash
# Set up .venv on a fresh machine (CPU torch pinned by constraints.txt), then run a Justfile recipe.
#   bash scripts/bootstrap.sh            # setup only
#   bash scripts/bootstrap.sh demo       # setup + the end-to-end demo
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  echo ">> creating .venv"
  "$PY" -m venv .venv
fi
stamp=.venv/.lachesis-installed
want="$(cat pyproject.toml constraints.txt | sha256sum | cut -d' ' -f1)"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  echo ">> installing torch (CPU build) and Lachesis with its extras"
  .venv/bin/pip install --quiet --disable-pip-version-check -c constraints.txt torch==2.13.0
  .venv/bin/pip install --quiet --disable-pip-version-check -c constraints.txt -e '.[all]'
  echo "$want" > "$stamp"
fi
if [ "$#" -gt 0 ]; then
  exec .venv/bin/just "$@"
fi
