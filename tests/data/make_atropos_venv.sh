#!/usr/bin/env bash
# Make a Python with atroposlib 0.4.0 for tests/test_server_atropos.py and bench/bench_ingest.py, without
# touching the shared venv: a separate venv that sees .venv's packages through a .pth file, so pip adds only
# what atroposlib needs beyond them (wandb, math-verify, nltk, aiohttp, openai, ... ; no torch: the base
# install of atroposlib does not depend on torch, only its extras do), pinned by constraints.txt.
#   tests/data/make_atropos_venv.sh [/tmp/atropos-venv]   then   ATROPOS_PYTHON=/tmp/atropos-venv/bin/python
set -euo pipefail
repo="$(cd "$(dirname "$0")/../.." && pwd)"
dest="${1:-/tmp/atropos-venv}"
"$repo/.venv/bin/python" -m venv "$dest"
site="$("$dest/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
shared="$("$repo/.venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
echo "$shared" > "$site/shared-lachesis.pth"
"$dest/bin/pip" install -q atroposlib==0.4.0 -c "$repo/constraints.txt"
"$dest/bin/python" -c "import atroposlib, importlib.metadata as m; print('atroposlib', m.version('atroposlib'), 'ok')"
