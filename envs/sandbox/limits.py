"""What one sandbox command may use (`Limits`) and what it gives back (`RunResult`: its output, how it ended, and
the observation an agent sees, which names the limit that killed it).

envs/README.md has the table of which limit is enforced by what; sandbox.py enforces them.
"""
from __future__ import annotations

import signal
from dataclasses import dataclass


@dataclass(frozen=True)
class Limits:
    timeout_s: float = 5.0
    cpu_s: int = 10
    memory_bytes: int = 1 << 30
    processes: int = 64
    file_size_bytes: int = 16 << 20
    open_files: int = 256
    output_bytes: int = 8192  # what the observation keeps
    output_hard_bytes: int = 4 << 20  # past this much output the command is killed (a flood)
    workspace_bytes: int = 64 << 20
    workspace_inodes: int = 32768  # files and directories in the workspace
    tmp_bytes: int = 16 << 20
    total_memory_bytes: int = 1 << 30  # all of the sandbox's processes together (cgroup; memory_bytes is per process)


@dataclass(frozen=True)
class RunResult:
    output: str
    exit_code: int | None
    timed_out: bool = False
    truncated: bool = False
    killed: str = ""  # why the sandbox killed the command ("timeout", "output flood", "workspace quota")
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.killed

    def observation(self) -> str:
        """The tool-result text an agent sees: output, then a note when something went wrong."""
        parts = [self.output.rstrip("\n")] if self.output.strip() else []
        if self.truncated:
            parts.append("[output truncated]")
        if self.killed == "timeout":
            parts.append("[killed: command timed out]")
        elif self.killed:
            parts.append(f"[killed: {self.killed}]")
        elif self.exit_code:
            parts.append(f"[exit code {self.exit_code}{_signal_note(self.exit_code)}]")
        return "\n".join(parts) if parts else "(no output)"


def _signal_note(code: int) -> str:
    if code < 0:
        try:
            return f", {signal.Signals(-code).name}"
        except ValueError:
            return ""
    if code == 128 + signal.SIGXFSZ:
        return ", file size limit exceeded"
    return ""
