"""Native records -> Arrow rows (ingest.records): the bulk column path gives what the lake's record checker gives,
and a bad value is still named by record and field."""
import pyarrow as pa
import pytest

from edge.errors import BadInput
from ingest.formats import native_to_record
from ingest.records import numeric_column, validated_batch
from lake.records import validate_records


def records(n=3):
    return [native_to_record({
        "trajectory_id": f"t{i}", "reward": 0.5 * i, "tokens": [1, 2, 3 + i], "masks": [-100, 2, 3],
        "inference_logprobs": [1.0, -0.5, -0.25 * i], "advantages": [1, 2, 3] if i else None,
        "messages": [{"role": "user", "content": "q"},
                     {"role": "assistant", "content": None, "tool_calls": [
                         {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
                     {"role": "tool", "content": "out", "tool_call_id": "c", "name": "f"}]})
        for i in range(n)]


def checker_table(recs):
    """The reference: the lake's checker on whole records, then pa.array per column."""
    rows = validate_records("trajectories", [dict(r) for r in recs])
    schema = validated_batch(records(1)).arrow().payload.schema
    return pa.Table.from_arrays([pa.array([r.payload.get(f.name) for r in rows], f.type) for f in schema],
                                schema=schema)


def test_bulk_columns_equal_the_checker_and_keep_the_records_whole():
    recs = records()
    before = [dict(r) for r in recs]
    got = validated_batch(recs)
    assert recs == before  # taken out for the bulk columns, put back afterwards
    assert set(got.columns) == {"tokens", "masks", "inference_logprobs", "advantages", "messages"}
    assert got.arrow().payload.equals(checker_table(recs))
    assert got.arrow([0, 2]).payload.equals(checker_table([recs[0], recs[2]]))
    # one message the checker has to convert (an OpenAI content list): every message goes the checker's way
    odd = records()
    odd[1]["messages"][0] = {"role": "user", "content": [{"type": "text", "text": "q"}]}
    batch = validated_batch(odd)
    assert "messages" not in batch.columns
    assert batch.arrow().payload.column("messages").to_pylist()[1][0]["content"] == "q"


@pytest.mark.parametrize("field, value, where, says", [
    ("tokens", [1, 2.5], ["tokens"], "integers"),
    ("tokens", [1, 2 ** 70], ["tokens"], "integers"),
    ("inference_logprobs", [-0.5, "x"], ["inference_logprobs"], "numbers"),
    ("masks", "abc", ["masks"], "array"),
    ("messages", [{"role": "user", "content": 5, "reasoning": None, "tool_calls": None, "tool_call_id": None,
                   "name": None}], ["messages", 0, "content"], "string"),
])
def test_a_bad_value_is_named_by_record_and_field(field, value, where, says):
    recs = records()
    recs[2][field] = value
    with pytest.raises(BadInput) as ei:
        validated_batch(recs, locs=[10, 11, 12])
    assert ei.value.status == 422 and ei.value.field == ["body", 12, *where] and says in ei.value.reason


def test_numeric_column_mixes_records_and_absent_fields():
    col = numeric_column([[1, 2], None, [], [3.0]], pa.int64(), "tokens", [0, 1, 2, 3])
    assert col.type == pa.list_(pa.int64()) and col.to_pylist() == [[1, 2], None, [], [3]]
    assert numeric_column([[1], [0.5]], pa.float64(), "x", [0, 1]).to_pylist() == [[1.0], [0.5]]
    assert numeric_column([None, None], pa.float64(), "x", [0, 1]).null_count == 2
