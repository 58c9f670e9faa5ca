"""What every package of Lachesis stands on: the user-error base (ground/errors.py), the help-text helper of the
commands' config fields (ground/options.py), and the generic helpers every wing uses, each written once: crash-safe
writes (atomic.py, over durable.py's fsync), reading files others write or name (files.py: regular files only,
bounded), the one JSON Lines reader (jsonl.py: bounded, gzip-aware), UUIDv7 ids (ids.py), range checks of config
fields (ranges.py), processes (processes.py: alive, stop) and a file's sha256 (digest.py).

It imports nothing of ours and nothing outside the standard library but orjson (tests/test_layering.py), so the
lake, the environments and the model code that runs where no lake is installed (the model-code-without-lake
contract in pyproject.toml) can all use it.
"""
