"""What every package of Lachesis stands on: the user-error base (ground/errors.py), the help-text helper of the
commands' config fields (ground/options.py), a file's sha256 (ground/digest.py) and whether a process is alive
(ground/processes.py), and nothing else.

It imports nothing of ours and nothing outside the standard library, so the lake, the environments and the model
code that runs where no lake is installed (the model-code-without-lake contract in pyproject.toml) can all use it.
"""
