"""An Atropos group parsed once: checked by Arrow in bulk, turned into its lake rows as Arrow columns and into
the JSON /batch serves, without a second pass over its token lists.

Why (docs/ingest-profile.md): a group carries ~18,000 numbers (tokens, masks, logprobs of 4 x ~1,500-token
sequences). pydantic's validation, then a row dict per sequence, then `pa.array` of those rows in the batcher
walked them three times in Python on the event loop. Here `orjson.loads` parses the body once; each numeric
field becomes one typed Arrow list array in one C call (`pa.array(lists, list<int64>)`), which is both the
type check (a float with a fraction, a string, a null, an int beyond 64 bits fail it) and the column the lake
writes; the served JSON is written by orjson from numpy views of the same buffers.

Two ways in, one representation: `parse_fast` takes the shape every env sends and answers None for anything
else (a missing field, a coercion pydantic would make such as `true` or `"3"` for an int, nulls, distillation
arrays); those bodies go through the pydantic model (`ingest.atropos.ScoredData`, atroposlib's own field
types) and `from_model`. So whatever passes the fast path is stored and served exactly as the model would
have stored and served it, and every error answer is still the model's (run-api's 422 shapes).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson
import pyarrow as pa

from edge.errors import BadInput
from ingest.atropos import GROUP_KEYS, GROUP_LEVEL_KEYS, PER_SEQ_KEYS, ScoredData
from ingest.messages import lake_messages
from ingest.records import payload_table, trajectory_type

INT_LIST, FLOAT_LIST = pa.list_(pa.int64()), pa.list_(pa.float64())
# numeric per-sequence fields: one Arrow list array each (tokens/masks/inference_logprobs/advantages are also
# trajectory columns; ref_logprobs goes to raw)
NUMERIC = {"tokens": INT_LIST, "masks": INT_LIST, "inference_logprobs": FLOAT_LIST, "advantages": FLOAT_LIST,
           "ref_logprobs": FLOAT_LIST}
ROW_COLUMNS = ("masks", "inference_logprobs", "advantages")  # stored as columns when one per sequence
_KEYS = frozenset(GROUP_KEYS)
_CONVERT_ERRORS = (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError)


@dataclass
class ParsedGroup:
    """The 14 ScoredData keys as the model holds them (numeric per-sequence fields as Arrow list arrays) and
    the unknown top-level fields (kept in `raw`)."""

    values: dict[str, Any]
    extra: dict[str, Any]

    @property
    def size(self) -> int:
        return len(self.values["tokens"])

    @property
    def env_id(self):
        return self.values["env_id"]

    def served(self) -> bytes:
        """The group as /batch serves it: all 14 keys in run-api's order, absent optionals null."""
        return orjson.dumps({k: _plain(self.values[k]) for k in GROUP_KEYS}, option=orjson.OPT_SERIALIZE_NUMPY)

    def table(self, *, group_id: str, env_name: str | None, qseq: str, source_path: str | None = None,
              meta: dict | None = None) -> pa.Table:
        """One trajectory row per sequence (payload columns). Columns + raw keep enough to rebuild the served
        group exactly (`ingest.atropos.rows_to_group`). `meta`: top-level metadata of every row (a request's
        Idempotency-Key and body hash)."""
        v, n = self.values, self.size
        shapes = {key: _shape(v[key], n) for key in PER_SEQ_KEYS}
        group_raw = {key: _plain(v[key], whole=True) for key in PER_SEQ_KEYS if shapes[key] == "group"}
        group_raw.update({key: v[key] for key in GROUP_LEVEL_KEYS})
        msgs, lossy = [[] for _ in range(n)], [False] * n
        if shapes["messages"] == "seq":
            for i, conv in enumerate(v["messages"]):
                try:
                    msgs[i], lossy[i] = lake_messages(conv, ["messages", i], require_content=False)
                except BadInput:
                    msgs[i], lossy[i] = [], True
        scores = v["scores"]
        row_meta = meta
        meta = {"group_size": n, "env_id": v["env_id"], "qseq": qseq, "format": "atropos"}
        for key in ("generation_params", "group_overrides"):
            if v[key]:
                meta[key] = v[key]
        if source_path:
            meta["source_path"] = source_path
        per_seq_raw = {key: _plain(v[key]) for key in ("ref_logprobs", "distill_token_ids", "distill_logprobs")
                       if shapes[key] == "seq"}
        raws, metas = [], []
        for i in range(n):
            raw: dict[str, Any] = {"i": i}
            if i == 0:
                raw["shapes"], raw["group"] = shapes, group_raw
                if len(scores) != n:
                    raw["scores"] = scores
                if self.extra:
                    raw["extra"] = self.extra
            for key, seqs in per_seq_raw.items():
                raw[key] = seqs[i]
            if lossy[i]:
                raw["messages"] = v["messages"][i]
            raws.append(orjson.dumps(raw, default=str, option=orjson.OPT_SERIALIZE_NUMPY).decode())
            metas.append(orjson.dumps({"atropos": {**meta, "index": i}, **(row_meta or {})}).decode())
        cols = {
            "trajectory_id": pa.array([f"{group_id}:{i}" for i in range(n)], pa.string()),
            "group_id": pa.array([group_id] * n, pa.string()),
            "env": pa.array([env_name] * n, pa.string()),
            "messages": pa.array(msgs, trajectory_type("messages")),
            "reward": pa.array([float(scores[i]) if i < len(scores) else None for i in range(n)], pa.float64()),
            "tokens": v["tokens"],
            "metadata": pa.array(metas, pa.string()),
            "raw": pa.array(raws, pa.string()),
        }
        for key in ROW_COLUMNS:
            if shapes[key] == "seq":
                cols[key] = v[key]
        if shapes["overrides"] == "seq":
            cols["overrides"] = pa.array([orjson.dumps(o).decode() for o in v["overrides"]], pa.string())
        return payload_table(cols, n)


def _shape(v, n: int) -> str:
    if v is None:
        return "null"
    if len(v) == 0:
        return "empty"
    return "seq" if len(v) == n else "group"  # a length that does not match the group: kept whole on row 0


def _plain(v, whole: bool = False):
    """A value as JSON sees it: a numeric list array -> one numpy view per sequence (orjson writes them like
    Python numbers), or Python lists when `whole` (kept in raw as one value)."""
    if not isinstance(v, pa.ListArray):
        return v
    if whole:
        return v.to_pylist()
    # `values` and `offsets` are buffers, not a compute call (flatten); offsets index into values as they are
    flat, offsets = v.values.to_numpy(), v.offsets.to_numpy()
    return [flat[offsets[i]:offsets[i + 1]] for i in range(len(v))]


def _typed(value, typ: pa.DataType) -> pa.ListArray | None:
    """A list of lists as one typed Arrow array, or None where the model would coerce or refuse something.

    The element type is inferred, not imposed: converting to int64 directly would truncate 1.5 to 1 where the
    model refuses it. Inference gives int64 only for ints in range, double once a float is present (fine for a
    float field, the model's business for an int field), bool/string for those."""
    if type(value) is not list:
        return None
    if not value:
        return pa.array([], typ)
    try:
        arr = pa.array(value)
    except _CONVERT_ERRORS:
        return None
    if not pa.types.is_list(arr.type) or arr.null_count or arr.values.null_count:  # a fresh array: no slice
        return None
    vt = arr.type.value_type
    if vt == typ.value_type:
        return arr
    if pa.types.is_null(vt) or (vt == pa.int64() and typ == FLOAT_LIST):
        try:
            return arr.cast(typ)  # safe: an int beyond 2**53 that a double cannot hold exactly fails
        except _CONVERT_ERRORS:
            return None
    return None


def _messages_ok(msgs) -> bool:
    """The model's messages check (a list of lists of objects with role and content)."""
    return type(msgs) is list and all(
        type(conv) is list and all(type(m) is dict and "role" in m and "content" in m for m in conv) for conv in msgs)


def parse_fast(obj) -> ParsedGroup | None:
    """The group of a decoded body when it has the shape envs send; None sends it through the model."""
    if type(obj) is not dict:
        return None
    v = {key: obj.get(key) for key in GROUP_KEYS}
    for key, typ in NUMERIC.items():
        if v[key] is not None or key in ("tokens", "masks"):
            if (arr := _typed(v[key], typ)) is None:
                return None
            v[key] = arr
    scores = v["scores"]
    if type(scores) is not list or not all(type(s) is float or type(s) is int for s in scores):
        return None
    v["scores"] = [float(s) for s in scores]
    if v["messages"] is not None and not _messages_ok(v["messages"]):
        return None
    ov = v["overrides"]
    if ov is not None and not (type(ov) is list and all(type(o) is dict for o in ov)):
        return None
    if any(v[key] is not None and type(v[key]) is not dict for key in ("generation_params", "group_overrides")):
        return None
    if (v["env_id"] is not None and type(v["env_id"]) is not int) or v["distill_token_ids"] is not None \
            or v["distill_logprobs"] is not None or not v["tokens"]:
        return None  # distillation arrays are rare: the model checks their nesting
    return ParsedGroup(v, {k: val for k, val in obj.items() if k not in _KEYS})


def from_model(sd: ScoredData, extra: dict, loc: list) -> ParsedGroup:
    """A group the model validated -> the same representation (BadInput for what Arrow cannot hold)."""
    if not sd.tokens:
        raise BadInput("a group needs at least one sequence", field=loc + ["tokens"], status=422, kind="too_short")
    v = {key: getattr(sd, key) for key in GROUP_KEYS}
    for key, typ in NUMERIC.items():
        if v[key] is None:
            continue
        try:
            v[key] = pa.array(v[key], typ)
        except _CONVERT_ERRORS:
            i = next((i for i, seq in enumerate(v[key]) if _typed([seq], typ) is None), None)
            raise BadInput("integer out of the 64-bit range" if typ == INT_LIST else "value out of range",
                           field=loc + [key] + ([i] if i is not None else []), status=422,
                           kind="value_error") from None
    return ParsedGroup(v, extra)


def parse_group(obj, loc: list) -> ParsedGroup:
    """A decoded group: the fast path, else the model (ValidationError for a group the model refuses)."""
    pg = parse_fast(obj)
    if pg is not None:
        return pg
    return from_model(ScoredData.model_validate(obj), {k: val for k, val in obj.items() if k not in _KEYS}, loc)

