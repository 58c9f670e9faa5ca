"""Atropos wire contract: request models, trajectory rows -> ScoredDataGroup, and the batch packer.

The models mirror atroposlib 0.4.0 `api/server.py` field for field, so validation errors (422, loc, msg)
have the same shape. A group becomes rows in `ingest.groups` (parsed once, Arrow columns); `rows_to_group`
is the way back, for the queue restored at start. The packing functions follow `api/utils.py` (same
algorithm, same order), operating on light queue entries (`QGroup`) that carry the group's pre-encoded JSON
so /batch never re-encodes. The queue state machine that uses them is `ingest.atropos_queue`.
"""
from __future__ import annotations

import math

from dataclasses import dataclass
from typing import Any, Dict, List, Optional

import orjson
from pydantic import BaseModel, ConfigDict, ValidationError, field_validator


GROUP_KEYS = ("tokens", "masks", "scores", "advantages", "ref_logprobs", "messages", "generation_params",
              "inference_logprobs", "overrides", "group_overrides", "images", "env_id", "distill_token_ids",
              "distill_logprobs")
PER_SEQ_KEYS = ("tokens", "masks", "advantages", "ref_logprobs", "messages", "inference_logprobs", "overrides",
                "distill_token_ids", "distill_logprobs")
GROUP_LEVEL_KEYS = ("generation_params", "group_overrides", "images", "env_id")


class Registration(BaseModel):
    wandb_group: str
    wandb_project: str
    batch_size: int
    max_token_len: int
    checkpoint_dir: str
    save_checkpoint_interval: int
    starting_step: int
    num_steps: int


class RegisterEnv(BaseModel):
    max_token_length: int
    desired_name: str
    weight: float
    group_size: int
    min_batch_allocation: Optional[float] = None


class EnvIdentifier(BaseModel):
    env_id: int


class ScoredData(BaseModel):
    tokens: List[List[int]]
    masks: List[List[int]]
    scores: List[float]
    advantages: Optional[List[List[float]]] = None
    ref_logprobs: Optional[List[List[float]]] = None
    messages: Optional[List[List[Dict[str, Any]]]] = None
    generation_params: Optional[Dict[str, Any]] = None
    inference_logprobs: Optional[List[List[float]]] = None
    overrides: Optional[List[dict]] = None
    group_overrides: Optional[dict] = None
    images: Optional[Any] = None
    env_id: Optional[int] = None
    distill_token_ids: Optional[List[List[List[int]]]] = None
    distill_logprobs: Optional[List[List[List[float]]]] = None

    @field_validator("messages", mode="before")
    @classmethod
    def validate_messages(cls, v):
        if v is None:
            return None
        # run-api's check, made total: a non-list or non-dict here would be a TypeError (a 500 in run-api)
        if not isinstance(v, list):
            raise ValueError("messages must be a list of message lists")
        for message_list in v:
            if not isinstance(message_list, list):
                raise ValueError("messages must be a list of message lists")
            for msg in message_list:
                if not isinstance(msg, dict) or "role" not in msg or "content" not in msg:
                    raise ValueError("Message must have 'role' and 'content' fields")
        return v


class ScoredDataX(ScoredData):
    """ScoredData that keeps unknown top-level fields (model_extra) so they reach `raw`."""

    model_config = ConfigDict(extra="allow")


def validation_detail(exc: ValidationError, prefix=("body",)) -> list[dict]:
    """pydantic errors -> FastAPI's 422 detail list (loc prefixed with 'body')."""
    out = []
    for e in exc.errors(include_url=False):
        d = {"type": e["type"], "loc": list(prefix) + list(e["loc"]), "msg": e["msg"]}
        inp = e.get("input")
        if isinstance(inp, float) and not math.isfinite(inp):
            d["input"] = str(inp)  # JSON has no inf/nan: echoing it raw made the 422 itself fail with a 500
        elif isinstance(inp, (str, int, float, bool)) or inp is None:
            d["input"] = inp
        else:
            d["input"] = _short(inp)
        if e.get("ctx"):
            d["ctx"] = {k: str(v) for k, v in e["ctx"].items()}
        out.append(d)
    return out


def _short(v):
    s = orjson.dumps(v, default=str)
    if len(s) <= 200:
        return orjson.loads(s)
    return s[:200].decode("utf-8", "replace") + "…"


def _denorm_message(m: dict) -> dict:
    out = {"role": m["role"], "content": m["content"]}
    if m.get("reasoning") is not None:
        out["reasoning"] = m["reasoning"]
    if m.get("tool_calls"):
        out["tool_calls"] = [{"id": t["id"], "type": "function",
                              "function": {"name": t["name"], "arguments": t["arguments"]}} for t in m["tool_calls"]]
    if m.get("tool_call_id") is not None:
        out["tool_call_id"] = m["tool_call_id"]
    if m.get("name") is not None:
        out["name"] = m["name"]
    return out


def rows_to_group(rows: list[dict]) -> dict:
    """Inverse of ParsedGroup.table: rows of one group (any order) -> the 14-key served dict."""
    rows = sorted(rows, key=lambda r: orjson.loads(r["raw"])["i"])
    raws = [orjson.loads(r["raw"]) for r in rows]
    head = raws[0]
    shapes = head["shapes"]
    group = head["group"]
    out: dict[str, Any] = {}
    cols = {"tokens": "tokens", "masks": "masks", "inference_logprobs": "inference_logprobs",
            "advantages": "advantages"}
    for key in PER_SEQ_KEYS:
        shp = shapes.get(key, "null")
        if shp == "null":
            out[key] = None
        elif shp == "empty":
            out[key] = []
        elif shp == "group":
            out[key] = group[key]
        elif key in cols:
            out[key] = [list(r[cols[key]]) for r in rows]
        elif key == "overrides":
            out[key] = [orjson.loads(r["overrides"]) for r in rows]
        elif key == "messages":
            out[key] = [raw["messages"] if "messages" in raw else [_denorm_message(m) for m in (r["messages"] or [])]
                        for r, raw in zip(rows, raws)]
        else:
            out[key] = [raw.get(key) for raw in raws]
    out["scores"] = head["scores"] if "scores" in head else [r["reward"] for r in rows]
    for key in GROUP_LEVEL_KEYS:
        out[key] = group.get(key)
    return {k: out[k] for k in GROUP_KEYS}


# ----------------------------------------------------------------------------------------------------------
# queue entries and packing (atroposlib api/utils.py, same algorithm on QGroup)
# ----------------------------------------------------------------------------------------------------------
@dataclass(eq=False)
class QGroup:
    group_id: str
    size: int
    env_id: Optional[int]
    body: bytes  # orjson of the 14-key dict
    qseq: str = ""


def find_groups_summing_to_target(buffer: List[QGroup], target_size: int) -> List[int]:
    if not buffer:
        return []
    current_sum = 0
    indices = []
    for i, group in enumerate(buffer):
        size = group.size
        if current_sum + size <= target_size:
            indices.append(i)
            current_sum += size
            if current_sum == target_size:
                return indices
    n = len(buffer)
    sizes = [g.size for g in buffer]
    if target_size < 0:
        return []
    dp = [[False] * (target_size + 1) for _ in range(n + 1)]
    dp[0][0] = True
    for i in range(1, n + 1):
        for j in range(target_size + 1):
            dp[i][j] = dp[i - 1][j]
            if j >= sizes[i - 1]:
                dp[i][j] = dp[i][j] or dp[i - 1][j - sizes[i - 1]]
    if not dp[n][target_size]:
        return []
    indices = []
    j = target_size
    for i in range(n, 0, -1):
        if j >= sizes[i - 1] and dp[i - 1][j - sizes[i - 1]]:
            indices.append(i - 1)
            j -= sizes[i - 1]
    return sorted(indices)


def grab_exact_from_heterogeneous_queue(queue: List[QGroup], batch_size: int):
    if not queue:
        return None, queue
    lengths = [g.size for g in queue]
    total = sum(lengths)
    max_group_size = max(lengths)
    if total < batch_size:
        return None, queue
    storage: Dict[int, List[int]] = {s: [] for s in set(lengths)}
    potential = []
    for i, gs in enumerate(lengths):
        storage[gs].append(i)
        if len(storage[gs]) * gs == max_group_size:
            potential.extend(storage[gs])
            storage[gs].clear()
    if sum(lengths[i] for i in potential) < batch_size:
        return None, queue
    batch, idxs, running = [], [], 0
    for idx in potential:
        batch.append(queue[idx])
        idxs.append(idx)
        running += lengths[idx]
        if running == batch_size:
            break
        elif running > batch_size:
            return None, queue
    if running != batch_size:
        return None, queue
    s = set(idxs)
    return batch, [g for i, g in enumerate(queue) if i not in s]


def grab_batch_with_minimum_allocations(queue: List[QGroup], batch_size: int, env_configs: List[dict]):
    if not queue:
        return None, queue
    env_min = {}
    for env in env_configs:
        if env.get("connected", False) and env.get("min_batch_allocation") is not None:
            env_min[env["registered_id"]] = env["min_batch_allocation"]
    if not env_min:
        return grab_exact_from_heterogeneous_queue(queue, batch_size)
    max_group_size = max(g.size for g in queue)
    items_by_env: Dict[Any, Dict[int, list]] = {}
    packable: Dict[Any, list] = {}
    for i, item in enumerate(queue):
        env_id, gs = item.env_id, item.size
        if env_id is not None:
            if env_id not in items_by_env:
                items_by_env[env_id] = {}
                packable[env_id] = []
            items_by_env[env_id].setdefault(gs, []).append((i, item, gs))
            if len(items_by_env[env_id][gs]) * gs == max_group_size:
                packable[env_id].extend(items_by_env[env_id][gs])
                items_by_env[env_id][gs] = []
    min_seq = {}
    total_min = 0
    for env_id, prop in env_min.items():
        m = int(batch_size * prop)
        if m > 0:
            if env_id not in items_by_env:
                return None, queue
            if not packable.get(env_id):
                return None, queue
            min_seq[env_id] = m
            total_min += m
    if total_min > batch_size:
        scale = batch_size / total_min
        for env_id in min_seq:
            if packable.get(env_id):
                mg = min(g[2] for g in packable[env_id])
                min_seq[env_id] = max(mg, int(min_seq[env_id] * scale))
    batch, idxs = [], []
    taken = {e: 0 for e in packable}
    total = 0
    for env_id, m in min_seq.items():
        if env_id in packable:
            for idx, item, gs in packable[env_id]:
                if taken[env_id] >= m:
                    break
                if total + gs <= batch_size:
                    batch.append(item)
                    idxs.append(idx)
                    taken[env_id] += gs
                    total += gs
    if total < batch_size:
        chosen = set(idxs)
        pack_idx = {idx: (item, gs) for lst in packable.values() for idx, item, gs in lst}
        for i in range(len(queue)):
            if i in chosen or i not in pack_idx:
                continue
            item, gs = pack_idx[i]
            if total + gs <= batch_size:
                batch.append(item)
                idxs.append(i)
                total += gs
            if total == batch_size:
                break
    if total != batch_size:
        return None, queue
    s = set(idxs)
    return batch, [g for i, g in enumerate(queue) if i not in s]
