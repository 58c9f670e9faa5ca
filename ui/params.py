"""The query parameters of the read API and the pages, parsed once for both: each parameter's parser, the pin
(`as_of`), the keyset cursor, and `read_params`, which refuses an unknown, repeated or malformed parameter with a
`ParamError` naming it (the routes answer it 400 in one line).

Why here and not FastAPI's typed parameters: FastAPI's 422 is a list of pydantic errors, and the pages' forms send
every field, blank ones as "" (a blank field is no filter). Parsing here gives the API and the pages one grammar.

Every value stays a value: filters reach DuckDB as bound parameters, `where` only as DuckDB prints the one
expression it parsed (lake.query.check_filter, the guard of `lake sql`), the pin through lake.as_of's parser with
file paths off (a client must not make the server read its files), the cursor as numbers and an event id it carries.
"""
from __future__ import annotations

import base64
import binascii
import datetime as dt
import math
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping

import orjson

from lake.as_of import as_utc, parse_as_of
from lake.errors import LakeError
from lake.query import QueryError, check_filter

LIMIT_DEFAULT = 50
LIMIT_MAX = 500
ORDERS = ("newest", "oldest")
ORDER_SYNONYMS = {"desc": "newest", "asc": "oldest"}
# what the trajectory list sorts by (ui/sql/trajectory_list.sql names each): ingestion time alone, or a column first
SORTS = ("ingested", "reward", "turns", "steps", "task", "env", "split", "policy_version", "trajectory_id")
CURSOR_MAX = 4096  # characters of a cursor: a pin of every table and a position are far less
REASON_CHARS = 400  # characters of a ParamError's reason (DuckDB quotes the whole expression it refused)


class ParamError(ValueError):
    """A query parameter that cannot be taken: `param` names it, `reason` says why (one line of at most
    REASON_CHARS characters, whatever the value quoted in it)."""

    def __init__(self, param: str, reason: str):
        reason = " ".join(str(reason).split())
        if len(reason) > REASON_CHARS:
            reason = reason[:REASON_CHARS // 2] + " … " + reason[-(REASON_CHARS // 2):]
        self.param, self.reason = param, reason
        super().__init__(f"{param}: {self.reason}")

    def body(self) -> dict:
        """The JSON of the 400 answer."""
        return {"detail": str(self), "param": self.param}


# -- one parser per kind of value (each gets non-blank text; raises ValueError with the reason) -----------------
def text(value: str) -> str:
    return value


def boolean(value: str) -> bool:
    v = value.strip().lower()
    if v in ("true", "1", "yes"):
        return True
    if v in ("false", "0", "no"):
        return False
    raise ValueError(f"must be true or false, not {value[:40]!r}")


def number(value: str) -> float:
    try:
        x = float(value)
    except ValueError:
        raise ValueError(f"must be a number, not {value[:40]!r}") from None
    if not math.isfinite(x):
        raise ValueError(f"must be a finite number, not {value[:40]!r}")
    return x


def timestamp(value: str) -> dt.datetime:
    """An ISO 8601 time (`2026-12-01`, `2026-12-01T10:00:00Z`, with an offset); without one it is UTC."""
    try:
        return as_utc(dt.datetime.fromisoformat(value.strip()))
    except ValueError:
        raise ValueError(f"must be an ISO 8601 time such as 2026-12-01T10:00:00Z, not {value[:40]!r}") from None


def limit(value: str) -> int:
    try:
        n = int(value)
    except ValueError:
        raise ValueError(f"must be a whole number, not {value[:40]!r}") from None
    if not 1 <= n <= LIMIT_MAX:
        raise ValueError(f"must be between 1 and {LIMIT_MAX}, not {n}")
    return n


def count(value: str) -> int:
    """A whole number >= 0 (a threshold such as min_uses)."""
    try:
        n = int(value)
    except ValueError:
        raise ValueError(f"must be a whole number, not {value[:40]!r}") from None
    if not 0 <= n <= 10 ** 9:
        raise ValueError(f"must be between 0 and {10 ** 9}, not {n}")
    return n


def order(value: str) -> str:
    """newest or oldest (desc and asc are their synonyms for a sorted list)."""
    value = ORDER_SYNONYMS.get(value, value)
    if value not in ORDERS:
        raise ValueError(f"must be one of {', '.join(ORDERS + tuple(ORDER_SYNONYMS))}, not {value[:40]!r}")
    return value


def sort(value: str) -> str:
    """A column the trajectory list may be sorted by (SORTS: a whitelist; the SQL names each)."""
    if value not in SORTS:
        raise ValueError(f"must be one of {', '.join(SORTS)}, not {value[:40]!r}")
    return value


def where(value: str) -> str:
    """One SQL boolean expression, as DuckDB prints it back (lake.query.check_filter: never a second statement)."""
    try:
        return check_filter(value, "where")
    except QueryError as exc:
        raise ValueError(str(exc).removeprefix("where ")) from None


def as_of(value: str) -> int | dict[str, int] | dt.datetime:
    """A pin in lake.as_of's spellings (VERSION, TABLE=V[,TABLE=V], a JSON object, a time), never a path on the
    server."""
    try:
        pin = parse_as_of(value, files=False)
    except LakeError as exc:
        raise ValueError(str(exc).removeprefix("--as-of").strip(" :")) from None
    return pin


@dataclass(frozen=True)
class Cursor:
    """Where a page ends: the versions its first page was pinned at (so the next pages read the same rows), the
    last row's position in the order (`ingested_at` in microseconds, then `event_id`) and the order."""

    versions: dict[str, int]
    after_us: int
    after_event: str
    order: str = "newest"
    sort: str = "ingested"  # the list's sort column (SORTS), and the last row's key in it:
    has: int = 1  # 1: the row has a value in the sorted column, 0: NULL
    num: float = 0.0  # the value of a numeric column (reward, turns, steps)
    text: str = ""  # the value of a text column (task, env, ...)

    def encode(self) -> str:
        raw = orjson.dumps({"v": self.versions, "t": self.after_us, "e": self.after_event, "o": self.order,
                            "s": self.sort, "h": self.has, "n": self.num, "x": self.text})
        return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def cursor(value: str) -> Cursor:
    """A cursor this server gave (opaque to clients); anything else is refused, never half-read."""
    bad = "not a cursor this server gave (start again without it)"
    if len(value) > CURSOR_MAX:
        raise ValueError(bad)
    try:
        obj = orjson.loads(base64.urlsafe_b64decode(value + "=" * (-len(value) % 4)))
        versions = parse_as_of(obj["v"]) if isinstance(obj.get("v"), dict) else None
        t, e, o = obj["t"], obj["e"], obj["o"]
        srt, has, num, txt = obj.get("s", "ingested"), obj.get("h", 1), obj.get("n", 0.0), obj.get("x", "")
    except (binascii.Error, ValueError, TypeError, KeyError, AttributeError, LakeError):
        raise ValueError(bad) from None
    if (not isinstance(versions, dict) or type(t) is not int or not isinstance(e, str) or o not in ORDERS
            or not -(2 ** 63) <= t < 2 ** 63 or srt not in SORTS or has not in (0, 1) or type(has) is not int
            or type(num) not in (int, float) or not math.isfinite(num) or not isinstance(txt, str)):
        raise ValueError(bad)
    return Cursor(versions, t, e, o, srt, has, float(num), txt)


# -- which parameters each route takes ---------------------------------------------------------------------------
PAGED = {"as_of": as_of, "limit": limit, "cursor": cursor, "order": order}
TRAJECTORY_FILTERS = {"env": text, "split": text, "task": text, "success": boolean, "min_reward": number,
                      "max_reward": number, "policy_version": text, "source": text, "since": timestamp,
                      "until": timestamp, "where": where}
TRAJECTORY_LIST = {**TRAJECTORY_FILTERS, **PAGED, "sort": sort}
RUN_LIST = {"kind": text, "run_id": text, **PAGED}
PINNED = {"as_of": as_of}
SKILLS = {"as_of": as_of, "min_uses": count, "provenance": text}
VIEW = {"as_of": as_of, "limit": limit}
VERSIONS = {"limit": limit}


def read_params(items: Iterable[tuple[str, str]], parsers: Mapping[str, Callable[[str], Any]]) -> dict[str, Any]:
    """{name: parsed value} of every parameter `parsers` knows, None for those absent or blank. A name it does not
    know, one given twice or a value its parser refuses is a ParamError naming the parameter."""
    values: dict[str, Any] = dict.fromkeys(parsers)
    seen: set[str] = set()
    for name, value in items:
        if name not in parsers:
            raise ParamError(name[:60], f"unknown parameter; this route takes {', '.join(parsers)}")
        if name in seen:
            raise ParamError(name, "given more than once")
        seen.add(name)
        if value.strip():
            try:
                values[name] = parsers[name](value)
            except ValueError as exc:
                raise ParamError(name, str(exc)) from None
    return values


# What each parameter means, for the OpenAPI description of the routes (ui/api.py) and the pages' form hints.
HELP = {
    "env": "Only trajectories of this environment (exact name).",
    "split": "Only this split (train, test, test_families...).",
    "task": "Only this task_id.",
    "success": "true or false: only successes, or only failures (the current success: late rewards applied).",
    "min_reward": "Only rewards at least this (the current reward: late rewards applied).",
    "max_reward": "Only rewards at most this.",
    "policy_version": "Only rows produced by this policy_version.",
    "source": "Only this origin: metadata.source (`lake serve-model`), else the writer's kind (rollout, import...).",
    "since": "Only rows ingested at or after this ISO 8601 time (UTC when it has no offset).",
    "until": "Only rows ingested before this ISO 8601 time.",
    "where": "One SQL boolean expression over the row's columns (DuckDB), checked as `lake sql`'s filters are: one "
             "expression, never a second statement, run on a snapshot that reads only the lake's files.",
    "as_of": "Pin the lake: VERSION (every table at min(VERSION, latest)), TABLE=V[,TABLE=V], a JSON object "
             "{table: version} or an ISO 8601 time (each table as committed then), as `lake sql --as-of` (no "
             "manifest paths over HTTP).",
    "limit": f"Rows per page, 1..{LIMIT_MAX} (default {LIMIT_DEFAULT}; for versions: commits per table).",
    "cursor": "The next_cursor of the previous page: the same pinned versions, the rows right after it.",
    "order": "newest (default) or oldest first, by ingestion time; with `sort`, desc (= newest) or asc (= oldest).",
    "sort": f"Sort by this column first ({', '.join(SORTS)}; default ingested: the time alone), then by "
            "ingestion time; a row without a value sorts below every value.",
    "kind": "Only runs of this kind.",
    "run_id": "Only the events of this run (a run's start, increments and end share its run_id).",
    "min_uses": "skill_to_instruction's --min-uses: keep skills used at least this often (default 5).",
    "provenance": "skill_to_instruction's --provenance: agent (default), bundled, hub, a comma list, or all.",
}


def openapi_parameters(parsers: Mapping[str, Callable[[str], Any]]) -> dict:
    """The `openapi_extra` of a route taking these query parameters (read by read_params, not by FastAPI)."""
    return {"parameters": [{"name": name, "in": "query", "required": False, "schema": {"type": "string"},
                            "description": HELP[name]} for name in parsers]}
