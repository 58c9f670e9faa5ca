"""`skill_to_instruction`'s configuration: which skills become instruction pairs, from where, and the filters.

A module of its own, without heavy imports, because the console script reads its options' defaults and help
from it when it starts (lachesis/views_cli.py). The guide's selection is "recent, created by the agent,
proven effective and used often": provenance and --min-uses read the skills and their `.usage.json` counters;
--since reads the time of the skill's current version; --min-success and --min-lift read the skill_effect view,
so they need the lake's trajectories (a skills folder has none).
"""
from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass, field
from pathlib import Path
from statistics import NormalDist
from typing import Any, Optional

from ground.errors import UserError
from ground.options import AS_OF_HELP, helped

PROVENANCES = ("agent", "bundled", "hub")
_DURATION = re.compile(r"^\s*(\d+)\s*([smhdw])\s*$")
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


TRY_SAMPLES = ("to try it on the sample skills (used often, created by the agent): "
               "`lake samples skills skills/ && skill_to_instruction --skills skills/`")


class InstructionInputError(UserError, ValueError):
    """A bad skill_to_instruction option; one line, the CLI prints it and exits 2."""


def parse_time(text: str, flag: str) -> dt.datetime:
    """ISO date or date-time -> aware UTC datetime (a time without a zone is read as UTC)."""
    try:
        t = dt.datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise InstructionInputError(f"{flag} takes an ISO date or time such as 2026-05-01T00:00:00Z, "
                                    f"got {text!r}") from None
    return (t if t.tzinfo else t.replace(tzinfo=dt.timezone.utc)).astimezone(dt.timezone.utc)


def window_start(since: str, now: dt.datetime) -> dt.datetime:
    """--since: a duration back from `now` (30d, 12h, 2w, 90m, 45s) or an ISO date/time."""
    m = _DURATION.match(since)
    if m:
        return now - dt.timedelta(seconds=int(m.group(1)) * _UNIT_SECONDS[m.group(2)])
    if not re.match(r"^\s*\d{4}-\d{2}-\d{2}", since):
        raise InstructionInputError(f"--since takes a duration (30d, 12h, 2w, 90m) or an ISO date/time, got {since!r}")
    return parse_time(since, "--since")


@dataclass(frozen=True)
class SkillToInstructionConfig:
    """skill_to_instruction: skills -> instruction-tuning pairs, one .jsonl per skill plus manifest.json."""

    output: Path = field(default=Path("ft_prompts"), **helped("Folder for one .jsonl per skill."))
    skills: Optional[Path] = field(default=None, **helped(
        "A Hermes skills folder (with .usage.json). Default, when there is no lake either: $HERMES_HOME/skills "
        "(~/.hermes/skills) if it exists."))
    lake: Optional[Path] = field(default=None, **helped(
        "Read the lake's instruction view instead of a folder (default when --skills is not given: $LAKE_ROOT or "
        "./data/lake, when it holds a lake)."))
    min_uses: int = field(default=5, **helped(
        "Keep skills used at least this often (use_count, or view_count on old sidecars whose use_count is 0)."))
    provenance: str = field(default="agent", **helped(
        "Skill origins to keep: agent (default), bundled, hub, a comma list, or all."))
    since: Optional[str] = field(default=None, **helped(
        "Keep skills whose current version is recent: a duration back from --now (30d, 12h, 2w) or an ISO "
        "date/time. Lake only."))
    now: Optional[str] = field(default=None, **helped(
        "The time --since counts back from (ISO; default: the current time). Recorded in the manifest; give it, "
        "with --as-of, to reproduce a selection."))
    min_success: Optional[float] = field(default=None, **helped(
        "Keep skills whose trajectories succeed at least this often (0-1; the skill_effect view's success_rate). "
        "Lake only."))
    min_lift: Optional[float] = field(default=None, **helped(
        "Keep skills whose success beats the same envs' trajectories without them: the lower bound of "
        "skill_effect's success_diff interval must be at least this (0: better than the baseline at --confidence). "
        "Lake only."))
    confidence: float = field(default=0.95, **helped("Confidence level of skill_effect's intervals."))
    system_prompt: Optional[str] = field(default=None, **helped("Add this system message to every pair."))
    as_of: Optional[str] = field(default=None, **helped(AS_OF_HELP))
    overwrite: bool = field(default=False, **helped("Replace the .jsonl files in a non-empty output folder."))
    now_at: dt.datetime = field(init=False, repr=False, compare=False)
    since_at: Optional[dt.datetime] = field(init=False, repr=False, compare=False)

    def __post_init__(self):
        if self.skills is not None and self.lake is not None:
            raise InstructionInputError("give either --skills FOLDER or --lake ROOT, not both")
        if self.min_uses < 0:
            raise InstructionInputError(f"--min-uses must be >= 0, got {self.min_uses}")
        kinds = [p.strip() for p in self.provenance.split(",")]
        if self.provenance.strip() != "all" and (not all(kinds) or set(kinds) - set(PROVENANCES)):
            raise InstructionInputError(f"--provenance takes {', '.join(PROVENANCES)}, a comma list of them, or all; "
                                        f"got {self.provenance!r}")
        if self.min_success is not None and not 0.0 <= self.min_success <= 1.0:
            raise InstructionInputError(f"--min-success must be between 0 and 1, got {self.min_success}")
        if self.min_lift is not None and not -1.0 <= self.min_lift <= 1.0:
            raise InstructionInputError(f"--min-lift must be between -1 and 1, got {self.min_lift}")
        if not 0.0 < self.confidence < 1.0:
            raise InstructionInputError(f"--confidence must be between 0 and 1 (exclusive), got {self.confidence}")
        now = parse_time(self.now, "--now") if self.now else dt.datetime.now(dt.timezone.utc).replace(microsecond=0)
        object.__setattr__(self, "now_at", now)
        object.__setattr__(self, "since_at", window_start(self.since, now) if self.since else None)
        if self.skills is not None:
            lake_only = [flag for flag, value in (("--since", self.since), ("--min-success", self.min_success),
                                                   ("--min-lift", self.min_lift), ("--as-of", self.as_of))
                         if value is not None]
            if lake_only:
                raise InstructionInputError(f"{', '.join(lake_only)} read the lake (skill versions and trajectories); "
                                            "a skills folder has neither: use --lake")

    def source(self) -> tuple[Optional[Path], Optional[Path]]:
        """(skills folder, lake root): the one given, else the lake at $LAKE_ROOT or ./data/lake when it holds a
        lake, else $HERMES_HOME/skills (~/.hermes/skills) when it exists; neither is a one-line error that says
        how to try the command on the shipped sample skills."""
        import os

        from lake import is_lake, resolve_root
        from lake.store import redact

        if self.skills is not None or self.lake is not None:
            return self.skills, self.lake
        root = resolve_root(None)
        if is_lake(root):
            return None, Path(root) if isinstance(root, Path) else root
        hermes = Path(os.environ.get("HERMES_HOME") or Path.home() / ".hermes") / "skills"
        if hermes.is_dir():
            return hermes, None
        raise InstructionInputError(f"no lake at {redact(root)} and no skills folder at {hermes}: give --lake ROOT or "
                                    f"--skills FOLDER; {TRY_SAMPLES}")

    @property
    def z(self) -> float:
        """The normal quantile of the two-sided interval at `confidence` (1.96 for 0.95)."""
        return NormalDist().inv_cdf(0.5 + self.confidence / 2)

    def filters(self) -> dict[str, Any]:
        """Every filter as the manifest records it (times in ISO UTC)."""
        return {
            "min_uses": self.min_uses,
            "provenance": self.provenance,
            "since": self.since,
            "now": self.now_at.isoformat() if self.since else None,
            "since_at": self.since_at.isoformat() if self.since_at else None,
            "min_success": self.min_success,
            "min_lift": self.min_lift,
            "confidence": self.confidence if self.min_lift is not None else None,
            "system_prompt": self.system_prompt,
        }
