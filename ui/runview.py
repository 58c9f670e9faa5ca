"""A run's page from what the lake (ui/reader.py `run`) and, where the server may read it, the run's folder
(ui/runfiles.py) record: its config, its curves as charts (ui/charts.py), its lineage and its evaluations.

What each part comes from (nothing else is shown, nothing is inferred beyond these fields):
* config, manifest, metadata: the run's newest event that carries each (a training run writes one event at its end;
  online RL one per checkpoint; an increment one);
* the loss curve: `train_log.jsonl`'s step lines ({"step", "loss"}) when the folder is readable, else the final
  loss of each increment of the same streaming trainer (metrics.final_loss by metrics.increment);
* the evaluation curve: the evaluations' runs events (metrics.success_rate and mean_reward), placed at
  metrics.step (online RL), else at the increment whose weights they evaluated (adapter_path), else in order; else
  the log's {"eval": true} lines; checkpoints (metrics.step) and increments are marked;
* the lineage: the data (the manifest: the export's view, lake versions, rows, event-id hash; an increment's view
  and offsets), this run and its increments, and what was served from its weights (metadata.adapter_sha256 of the
  served trajectories).
"""
from __future__ import annotations

from typing import Any

from ui.charts import Chart, line_chart
from ui.runfiles import train_log

# manifest fields the lineage shows, in this order, where the manifest has them (views/export.py, the watcher)
MANIFEST_FIELDS = ("view", "lake_versions", "where", "row_count", "splits", "event_id_count", "event_ids_sha256",
                   "after", "upto", "events_sha256", "lake_root", "filter")


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _obj(v: Any) -> dict:
    return v if isinstance(v, dict) else {}


def newest(events: list[dict], column: str) -> Any:
    """The newest event's non-empty `column` (config, manifest, metadata), else None."""
    for e in reversed(events):
        if e.get(column) not in (None, {}, ""):
            return e[column]
    return None


def run_view(data: dict[str, Any], runs_root: Any = None) -> dict[str, Any]:
    """The page's parts from `LakeReader.run`'s data: config, manifest (the lineage's data fields), metadata,
    increments, evaluations (each with its x on the evaluation curve), the two charts and why a curve is absent."""
    events, related = data["events"], data["related"]
    meta = _obj(newest(events, "metadata"))
    manifest = _obj(newest(events, "manifest"))
    increments = [r for r in related if r["relation"] == "increment"]
    if any(_num(_obj(e["metrics"]).get("increment")) is not None for e in events):
        increments = sorted(increments + [e for e in events if e["kind"] != "eval"],
                            key=lambda r: (_num(_obj(r["metrics"]).get("increment")) or 0, r["ingested_at"]))
    by_weights = {r["adapter_path"]: _num(_obj(r["metrics"]).get("increment")) for r in increments
                  if r.get("adapter_path")}
    evaluations = []
    for i, r in enumerate([e for e in events if e["kind"] == "eval"] +
                          [r for r in related if r["relation"] == "evaluation"], 1):
        m = _obj(r["metrics"])
        x = _num(m.get("step"))
        where = "step"
        if x is None and r.get("adapter_path") in by_weights:
            x, where = by_weights[r["adapter_path"]], "increment"
        if x is None:
            x, where = float(i), "order"
        evaluations.append({**r, "x": x, "x_of": where, "success_rate": _num(m.get("success_rate")),
                            "mean_reward": _num(m.get("mean_reward")), "episodes": _num(m.get("episodes"))})

    log, why_no_log = train_log(runs_root, meta.get("run_dir"))
    loss = [(r["step"], r["loss"]) for r in log
            if not r.get("eval") and not r.get("summary") and _num(r.get("step")) is not None
            and _num(r.get("loss")) is not None]
    checkpoints = [(_num(_obj(e["metrics"]).get("step")), f"checkpoint {_obj(e['metrics']).get('step')}")
                   for e in events if e["kind"] == "checkpoint"]
    checkpoints = [(x, label) for x, label in checkpoints if x is not None]
    inc_marks = [(_num(_obj(r["metrics"]).get("increment")), f"increment {_obj(r['metrics']).get('increment')}")
                 for r in increments]
    inc_marks = [(x, label) for x, label in inc_marks if x is not None]
    if loss:
        loss_chart = line_chart("Training loss (train_log.jsonl)", {"loss": loss}, x_label="step", y_label="loss",
                                marks=checkpoints)
        loss_source = "the run folder's train_log.jsonl"
    else:
        by_inc = [(_num(_obj(r["metrics"]).get("increment")), _num(_obj(r["metrics"]).get("final_loss")))
                  for r in increments]
        loss_chart = line_chart("Final loss by increment", {"final loss": [p for p in by_inc if None not in p]},
                                x_label="increment", y_label="loss")
        loss_source = "each increment's metrics.final_loss" if not loss_chart.empty else None

    axis = {e["x_of"] for e in evaluations}
    if evaluations:
        x_label = "step" if axis == {"step"} else "increment" if axis == {"increment"} else "evaluation"
        eval_chart = line_chart(
            "Evaluations", {"success rate": [(e["x"], e["success_rate"]) for e in evaluations
                                             if e["success_rate"] is not None],
                            "mean reward": [(e["x"], e["mean_reward"]) for e in evaluations
                                            if e["mean_reward"] is not None]},
            x_label=x_label, y_label="rate / reward",
            marks=checkpoints if x_label == "step" else inc_marks if x_label == "increment" else ())
        eval_source = "the evaluations' runs events"
    else:
        points = [r for r in log if r.get("eval") and _num(r.get("step")) is not None]
        eval_chart = line_chart("Evaluations (train_log.jsonl)", {
            "success rate": [(r["step"], r.get("success_rate")) for r in points],
            "mean reward": [(r["step"], r.get("mean_reward")) for r in points]},
            x_label="step", y_label="rate / reward", marks=checkpoints)
        eval_source = "the run folder's train_log.jsonl" if not eval_chart.empty else None
    charts: list[Chart] = [loss_chart, eval_chart]
    return {"run_id": events[0]["run_id"], "kind": events[-1]["kind"], "status": events[-1]["status"], "events": events,
            "model": events[-1]["model"], "config": newest(events, "config"), "metrics": newest(events, "metrics"),
            "manifest": manifest, "lineage": {k: manifest[k] for k in MANIFEST_FIELDS if k in manifest},
            "metadata": meta, "increments": increments, "evaluations": evaluations, "charts": charts,
            "loss_source": loss_source, "eval_source": eval_source, "why_no_log": None if loss else why_no_log}


def loop_chart(rows: list[dict], increments: list[dict], split: list[dict] = ()) -> Chart:
    """The loop's chart (GET /ui/loop): each policy version's success rate and mean reward (ui/sql/loop.sql) at the
    time its first trajectory was ingested, in hours since the earliest point or mark, with each training event
    (ui/sql/loop_marks.sql: a run's end, an increment) marked at its ingestion time; where the lake holds more than
    one kind of trajectory (ui/sql/loop_split.sql: evaluations, served calls, the rest), each kind's success rate
    too, at the time its first trajectory of that version was ingested."""
    times = [r["first_at"] for r in rows if r.get("first_at") is not None] + [
        m["ingested_at"] for m in increments if m.get("ingested_at") is not None]
    if not times:
        return line_chart("Success and reward by policy version over time", {}, x_label="hours", y_label="")
    t0 = min(times)

    def hours(t: Any) -> float:
        return (t - t0).total_seconds() / 3600

    def name(r: dict) -> str:
        return "(none)" if r["policy_version"] is None else str(r["policy_version"])

    series = {"success rate": [(hours(r["first_at"]), r["success_rate"], name(r)) for r in rows],
              "mean reward": [(hours(r["first_at"]), r["mean_reward"], name(r)) for r in rows]}
    kinds = sorted({s["kind"] for s in split})
    if len(kinds) > 1:
        for kind in kinds:
            series[f"{kind}: success rate"] = [(hours(s["first_at"]), s["success_rate"], name(s))
                                               for s in split if s["kind"] == kind]
    marks = [(hours(m["ingested_at"]), f"{m['run_id']}" + (f" (increment {m['increment']})"
                                                            if m.get("increment") is not None else ""))
             for m in increments]
    return line_chart(f"Success and reward by policy version over time (hours since {t0:%Y-%m-%d %H:%M:%S} UTC)",
                      series, x_label="hours", y_label="rate / reward", marks=marks)
