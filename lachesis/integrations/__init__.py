"""Doors to other frameworks, each module written against that framework's own API and imported only where it
is installed.

Why a folder of its own: these modules import a third-party framework at the top (atroposlib, which pulls
wandb, openai, nltk...), and the shared venv does not have it (docs/atropos-api.md; tests/data/make_atropos_venv.sh
builds the side venv). Nothing else in Lachesis imports them, so `lake`, the console scripts and the default
test suite never need the framework; tests/test_atropos_env.py checks that no other module imports this
folder or atroposlib. Run a module with the framework's Python and our source on PYTHONPATH, e.g.

    PYTHONPATH=. /tmp/atropos-venv/bin/python -m lachesis.integrations.atropos_env serve --env.environment shell ...
"""
