"""The one base of every error a user can fix, and the exit status the CLI ends with after printing it.

A `UserError` is raised anywhere (a bad option, a missing file, lake or model, a malformed record) with a message
that names what is wrong and the way out; the CLI catches it once, where every command starts
(lachesis/console.py), prints `error: <message>` as one line on stderr and exits with `exit_code`: 2, a usage
error, unless a subclass says otherwise. Each wing derives its own kinds from it (LakeError, ExportError,
TrainerInputError, ServingError, the face's CommandError, envs' TaskFileError, ...) and keeps the builtin base its
callers already catch (`class TaskFileError(UserError, ValueError)`).
"""
from __future__ import annotations


class UserError(Exception):
    """Bad input or state the user can act on: one line of message, and the CLI's exit status."""

    exit_code: int = 2

    def one_line(self) -> str:
        """The message as the CLI prints it: one line, whatever breaks the message held."""
        return " ".join(str(self).split())
