"""Training data: an export folder (parquet or jsonl + manifest.json), a .jsonl/.parquet file, or a lake view name.

Rows are chat conversations (`messages`, optionally `tools` and `split`). A view name is exported from the lake
through the views wing first, so the run trains on a pinned, manifested snapshot. Messages reach the chat template
through the message model (transcript/messages.py `template_messages`), the one normaliser the importers stored them
with: an export (OpenAI's spelling of the stored messages) reads back as what was stored, and a file in another
spelling (ShareGPT turns, Hermes markup in an assistant's text) as an importer would have stored it.

What one row can cost is bounded before it is tokenized: a conversation is cut to CHARS_PER_TOKEN_MAX characters
per token of --max-length by the rule of trainers/modeling/fit.py (system prompt, tools, task and last turn kept,
older turns dropped first), which cuts its tokens afterwards too. Tokenizing the text whole is
what costs: the tokenizer's per-token offsets and the assistant mask of one huge row take gigabytes (issue 26;
docs/training-notes.md, "Figures behind the code"). The cut rows and those left out are counted (`truncated_rows`;
`skipped_rows`: what the rule keeps is over; `dropped_split`: another split; `dropped_invalid`: no assistant message).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ground.digest import file_sha256
from ground.jsonl import read_jsonl
from lake import Lake, LakeError, resolve_root
from lake.store import redact
from trainers.modeling.chat import normalize_tools
from trainers.modeling.fit import fit
from trainers.runtime.errors import TrainerInputError
from transcript.messages import template_messages
from views.export import ExportError, export_view


def _read_jsonl(path: Path) -> list[dict]:
    """A JSONL file's rows (ground/jsonl.py, the one reader: an error names the file and line), each an object."""
    rows, lines = read_jsonl(path)
    for obj, i in zip(rows, lines):
        if not isinstance(obj, dict):
            raise TrainerInputError(f"{path}:{i}: each line must be a JSON object, got {type(obj).__name__}")
    return rows


def _read_parquet(paths: list[Path]) -> list[dict]:
    import pyarrow.parquet as pq

    rows: list[dict] = []
    for p in paths:
        rows.extend(pq.read_table(p).to_pylist())
    return rows


def _file_manifest(files: list[Path], rows: int, source: str) -> dict:
    return {"source": source, "rows": rows, "files": [{"path": str(p), "sha256": file_sha256(p)} for p in files]}


def load_rows(data: str, lake_root: str | None = None, work_dir: Path | None = None) -> tuple[list[dict], dict, str]:
    """(rows, manifest, resolved source path) for a folder, a file or a view name."""
    if not data:
        raise TrainerInputError("no dataset given: pass --data FOLDER (an export), FILE.jsonl or a lake view name such as sft")
    p = Path(data).expanduser()
    # `--data sft --output sft`: the run's own new folder is not a dataset; the name is the view's
    own_folder = ("/" not in data and work_dir is not None and p.is_dir()
                  and p.resolve() == Path(work_dir).resolve())
    if p.is_dir() and not own_folder:
        parquet = sorted(p.rglob("*.parquet"))
        jsonl = sorted(p.rglob("*.jsonl"))
        if parquet:
            rows = _read_parquet(parquet)
            files = parquet
        elif jsonl:
            rows = [r for f in jsonl for r in _read_jsonl(f)]
            files = jsonl
        else:
            raise TrainerInputError(f"dataset folder {p} has no .parquet or .jsonl files: export one with `lake export sft --output {p}`")
        mpath = p / "manifest.json"
        if mpath.exists():
            try:
                manifest = json.loads(mpath.read_text())
            except ValueError:
                raise TrainerInputError(f"{mpath} is not valid JSON: re-export the dataset") from None
            manifest = {"source": str(p), "export_manifest": manifest,
                        "files": [{"path": str(f), "sha256": file_sha256(f)} for f in files], "rows": len(rows)}
        else:
            manifest = _file_manifest(files, len(rows), str(p))
        return rows, manifest, str(p)
    if p.is_file():
        if p.suffix == ".parquet":
            rows = _read_parquet([p])
        elif p.suffix in (".jsonl", ".json", ".ndjson"):
            rows = _read_jsonl(p)
        else:
            raise TrainerInputError(f"{p}: unknown dataset format {p.suffix!r}: use .jsonl, .parquet or an export folder")
        return rows, _file_manifest([p], len(rows), str(p)), str(p)
    if not own_folder and ("/" in data or data.endswith((".jsonl", ".parquet", ".json"))):
        raise TrainerInputError(f"dataset {data} does not exist: pass an export folder, a .jsonl file or a lake view name")
    return _rows_from_view(data, lake_root, work_dir)


def _rows_from_view(view: str, lake_root: str | None, work_dir: Path | None) -> tuple[list[dict], dict, str]:
    """Export a lake view (views.export) into the run folder, then load that export: the run trains on a pinned,
    manifested snapshot."""
    root = resolve_root(lake_root)
    try:
        lake = Lake.open(root)
    except LakeError:
        raise TrainerInputError(f"--data {view} is neither a file nor a folder, and there is no lake at {redact(root)} "
                                "to read it as a view from: pass --lake ROOT or an export folder") from None
    out = (work_dir or Path(".")) / "dataset"
    try:
        export_view(lake, view, out, format="parquet")
    except (ExportError, LakeError) as exc:
        raise TrainerInputError(f"cannot export view {view!r} from the lake at {root}: {str(exc).splitlines()[0]}") from None
    rows, manifest, _ = load_rows(str(out))
    manifest["view"] = view
    manifest["lake_root"] = str(root)
    return rows, manifest, str(out)


# No tokenizer we load averages more than a few characters per token on text (SmolLM2 about 4 on English and
# code); 16 leaves room for runs of spaces and long identifiers, so a conversation over max_length x 16 characters
# is over max_length tokens: the cut in characters drops no turn the cut in tokens keeps, and a row costs at most
# that much to tokenize.
CHARS_PER_TOKEN_MAX = 16
MESSAGE_OVERHEAD_CHARS = 16  # a message's role header and end marker in a template: a million empty ones cost too


def bounded(conv: dict, max_chars: int) -> tuple[dict | None, bool]:
    """`conv` cut to at most `max_chars` characters of text before tokenizing, by the one rule
    (trainers/modeling/fit.py: the system prompt, the tools, the task and the last turn kept; older turns dropped
    first). (None, True) when what the rule keeps is over. Returns (the conversation, whether it was cut)."""
    return fit(conv, text_chars, max_chars)


def text_chars(conv: dict) -> int:
    """The characters of a conversation's text and tool schemas, each message counting its template overhead."""
    tools = conv.get("tools")
    return (len(json.dumps(tools)) if tools else 0) + sum(
        MESSAGE_OVERHEAD_CHARS + len(m["content"]) + len(m.get("reasoning") or "")
        + sum(len(c["name"]) + len(c["arguments"]) for c in m.get("tool_calls") or ()) for m in conv["messages"])


def conversations(rows: list[dict], source: str, split: str | None = "train", max_length: int | None = None,
                  may_be_empty: bool = False) -> tuple[list[dict], dict]:
    """Rows -> [{messages, tools}] for training; checks the dataset is usable. `split`: keep only that split
    when the rows carry a `split` column (None or "all" keeps every row). `max_length` (tokens) bounds each
    conversation's text before it is tokenized (`bounded`). `may_be_empty`: none left is no error (a streaming
    increment whose only row was skipped is consumed, not a crash)."""
    if not rows:
        raise TrainerInputError(f"dataset {source} is empty (0 rows): fill the lake (e.g. `lake rollout ...`) and export again")
    if not any("messages" in r for r in rows):
        if any("prompt" in r and "chosen" in r for r in rows):
            raise TrainerInputError(f"dataset {source} is a preference dataset (prompt/chosen/rejected), not chats: use --method dpo")
        if any(("prompt" in r and ("completion" in r or "response" in r)) or ("instruction" in r and ("output" in r or "response" in r)) for r in rows):
            rows = [_pair_to_messages(r) for r in rows]
        else:
            cols = sorted({k for r in rows[:50] for k in r})
            raise TrainerInputError(f"dataset {source} has no `messages` column (columns: {', '.join(cols[:12])}): "
                                    "export the sft view, or give rows with messages [{role, content, tool_calls}]")
    stats = {"rows": len(rows), "dropped_split": 0, "dropped_invalid": 0, "truncated_rows": 0, "skipped_rows": 0}
    keep_split = None if split in (None, "all") else split
    out = []
    for i, r in enumerate(rows):
        if keep_split and r.get("split") not in (None, keep_split):
            stats["dropped_split"] += 1
            continue
        try:
            msgs = template_messages(r.get("messages"))
            tools = normalize_tools(r.get("tools"))
        except (ValueError, TypeError) as exc:
            raise TrainerInputError(f"dataset {source}, row {i}: bad messages ({exc}): each message needs a role and content") from None
        if not any(m["role"] == "assistant" for m in msgs):
            stats["dropped_invalid"] += 1
            continue
        conv: dict | None = {"messages": msgs, "tools": tools}
        if max_length:
            conv, cut = bounded(conv, max_length * CHARS_PER_TOKEN_MAX)
            if conv is None:
                stats["skipped_rows"] += 1
                continue
            stats["truncated_rows"] += cut
        out.append(conv)
    if not out and not may_be_empty:
        why = (f"no row has split={keep_split!r}" if stats["dropped_split"] else
               f"every row's system prompt, tools, task and last turn are over --max-length x {CHARS_PER_TOKEN_MAX} "
               "characters"
               if stats["skipped_rows"] else "no conversation has an assistant message")
        raise TrainerInputError(f"dataset {source} has nothing to train on: {why}; pass --split all or export more data")
    stats["conversations"] = len(out)
    envs_seen: dict[str, int] = {}  # what the data was played in: rl_transfer_init finds a source env's runs by it
    for r in rows:
        if r.get("env"):
            envs_seen[r["env"]] = envs_seen.get(r["env"], 0) + 1
    stats["envs"] = envs_seen
    return out, stats


def _pair_to_messages(r: dict) -> dict:
    prompt = r.get("prompt", r.get("instruction"))
    if r.get("input"):
        prompt = f"{prompt}\n\n{r['input']}"
    answer = r.get("completion", r.get("response", r.get("output")))
    msgs: list[dict[str, Any]] = []
    if r.get("system"):
        msgs.append({"role": "system", "content": r["system"]})
    if isinstance(prompt, list):
        msgs.extend(prompt)
    else:
        msgs.append({"role": "user", "content": str(prompt)})
    if isinstance(answer, list):
        msgs.extend(answer)
    else:
        msgs.append({"role": "assistant", "content": str(answer)})
    return {**r, "messages": msgs}
