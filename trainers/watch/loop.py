"""The streaming trainer (`lake train watch`): a resident process that trains one increment per batch of new lake
rows, exactly once across crashes.

Why resident: imports and model loading cost seconds per process (docs/training-notes.md pitfall 13), an
increment of a few rows a fraction of one. Why not resume_from_checkpoint: on new data it trains 0 steps
silently (pitfall 11); each increment continues the previous weights (a LoRA adapter loaded trainable) and the
same AdamW state with a fresh, seeded step plan, through trainers/sft/sft.py's one training loop.

Exactly once: an increment is one atomic checkpoint (trainers/runtime/checkpoint.py: temp folder, fsync, os.replace)
holding the weights (the versioned adapter, or the model for full fine-tuning), the optimizer and RNG state and
the consumed table versions. Only after it is in place is the offset registered with the lake (so vacuum spares
what is not consumed, and the registry never runs ahead) and the `runs` event appended; a watcher killed between
the two appends the missing events when it restarts (`reconcile`). A watcher killed while training loses only
that increment's work: it restarts from the last checkpoint and reads the same rows again.

    runs/<name>/
      watch.json                 name, serial, recipe, model, lake, followed tables (read by `lake train status`)
      heartbeat.json             pid, phase, time; rewritten every HEARTBEAT_S while the watcher lives
      lock                       flock: one watcher per folder
      consumed.json              offsets consumed since the last checkpoint by increments with no new example
      checkpoints/step-<N>/      increment N: weights/ (+ tokenizer), state.pt, state.json (offsets, the runs event)
"""
from __future__ import annotations

import fcntl
import os
import shutil
import socket
import threading
import time
import uuid
from dataclasses import asdict, replace
from pathlib import Path
from typing import Callable

from ground.atomic import read_json, write_json_atomic
from trainers.eval.config import EvalSettings
from trainers.eval.evaluate import run_eval
from trainers.modeling.batches import encode_all
from trainers.modeling.models import load_model, load_tokenizer, model_label, resolve_model
from trainers.runtime import checkpoint
from trainers.runtime.device import device as pick_device
from trainers.runtime.device import set_threads, setup_env
from trainers.runtime.errors import TrainerInputError
from trainers.runtime.model_folder import (TINY_MARKER, adapter_base_differs, is_adapter_folder, trained_from_scratch,
                                           weights_sha256)
from trainers.runtime.run_reader import RunReader
from trainers.runtime.runfolder import KIND, trainer_lake
from trainers.sft.data import conversations
from trainers.sft.loop import make_optimizer, prepare_model, train_loop
from trainers.watch.config import (CONSUMED_FILE, HEARTBEAT_FILE, LOCK_FILE, META_KEYS, WATCH_FILE, WatchConfig,
                                   offsets_of)
from trainers.watch.feed import Increment, read_increment
from trainers.watch.wake import Waker

TRAINER = "lachesis.watch"
HEARTBEAT_S = 2.0


class IncrementCounter:
    """The increment count, saved and restored with the optimizer (checkpoint.save's scheduler slot)."""

    def __init__(self, n: int = 0):
        self.n = n

    def state_dict(self) -> dict:
        return {"increment": self.n}

    def load_state_dict(self, state: dict) -> None:
        self.n = int(state["increment"])


def run_id_of(serial: str, increment: int) -> str:
    return f"{serial}-inc-{increment:06d}"


class StreamTrainer:
    """One watcher: its folder, model, optimizer and offsets. `run()` follows the lake; `step()` trains at most one
    increment (what `--once` and tests call)."""

    def __init__(self, cfg: WatchConfig, emit: Callable[[dict], None] | None = None):
        setup_env()
        self.emit = emit or (lambda _rec: None)
        self.dev = pick_device(cfg.device)
        self.lake = trainer_lake(cfg.lake_root)  # the streaming trainer follows an existing lake
        self.folder = cfg.folder()
        self.folder.mkdir(parents=True, exist_ok=True)
        self._lock_fd = _lock(self.folder / LOCK_FILE)
        self.phase = "loading"
        self.counter = IncrementCounter()
        self.skipped = 0  # increments consumed without a new example by run(): nothing published
        self._idle_at: dict[str, int] | None = None  # followed tables' versions when step() last found nothing
        self.heartbeat = _Heartbeat(self)
        try:
            self._load(cfg)
        except BaseException:
            self.close()  # a watcher that failed to start holds no lock and is not reported alive
            raise
        self.emit({"event": "ready", "name": self.cfg.name, "increment": self.counter.n, "offsets": self.offsets,
                   "reconciled": self.reconciled, "trainable": self.trainable, "from": self.started_from,
                   **self.recovery})

    def warn(self, line: str) -> None:
        """One line about something found broken or redone at start; it also goes into the next runs event."""
        self.recovery.setdefault("warnings", []).append(line)
        self.emit({"event": "warning", "message": line})

    def _load(self, cfg: WatchConfig) -> None:
        """The model, its optimizer and the offsets: from the last increment whose files all read (newer broken
        ones reported and set aside), or new; then the lake's registry, where a rewind is said, never silent."""
        self.model_path = resolve_model(cfg.model)
        self.tok = load_tokenizer(self.model_path, cfg.chat_template)
        self.cfg = cfg.settle(trained_from_scratch(self.model_path)).settle_length(self.model_path)
        self.recovery: dict = {}  # broken files met and offsets rewound: said at start and in the next runs event
        last = checkpoint.usable(self.folder, ("offsets", "event"), report=self.warn, set_aside=True,
                                 validate=offsets_of)
        self.meta = self._write_meta(last)
        set_threads(self.cfg.threads)
        import torch

        torch.manual_seed(self.cfg.seed)
        start = checkpoint.weights(last) if last is not None else self._from_run()
        self.started_from = str(start) if last is None and start is not None else None
        if start is None:
            self.model, self.trainable = prepare_model(load_model(self.model_path, device=self.dev), self.cfg)
        else:
            if self.cfg.full:
                self.model = load_model(str(start), device=self.dev)
            else:  # is_trainable: peft loads an adapter frozen by default (pitfall 11)
                self.model = load_model(self.model_path, str(start), trainable=True, device=self.dev)
            self.trainable = sum(p.numel() for p in self.model.parameters() if p.requires_grad)
        self.optimizer = make_optimizer(self.model, self.cfg)
        if last is None:
            self.offsets = {t: 0 for t in self.cfg.follow}
        else:
            checkpoint.load_into(last, self.optimizer, self.counter)
            self.offsets = offsets_of(checkpoint.read_state(last))
        consumed = self._consumed()
        if consumed:  # rows consumed without an example since the last checkpoint: not read again
            self.offsets = consumed["offsets"]
        self._say_rewind(last)
        self.lake.register_consumer(self.cfg.name, self.offsets)  # before the first read: vacuum spares the rest
        self.reconciled = self.reconcile()
        self.phase = "idle"

    def _from_run(self) -> Path | None:
        """--from's weights, the first increment's start (a fresh AdamW: a run keeps no optimizer state), checked
        against this watcher: a LoRA adapter of --model's base for a LoRA watcher, a whole model for a full one."""
        if not self.cfg.from_run:
            return None
        reader = RunReader.open(self.cfg.from_run, "--from")
        weights, _ = reader.weights()
        lora = is_adapter_folder(weights)
        if lora == self.cfg.full:
            held, mode = ("a LoRA adapter", "--lora") if lora else ("a fully fine-tuned model", "--full")
            raise TrainerInputError(f"--from {self.cfg.from_run} holds {held} ({weights}): train it with {mode}")
        other = adapter_base_differs(weights, self.model_path) if lora else None
        if other:
            named = reader.config().get("model") or other
            raise TrainerInputError(f"--from {self.cfg.from_run} was trained on {other}, not on --model "
                                    f"{self.cfg.model} ({self.model_path}): pass --model {named}")
        return weights

    # ------------------------------------------------------------------------------------------- bookkeeping
    def _say_rewind(self, last: Path | None) -> None:
        """Offsets behind those registered in the lake (a newer checkpoint broken or removed) rewind the watcher:
        the rows between are trained again. Said in one line and recorded in the next runs event."""
        registered = self.lake.consumers().get(self.cfg.name) or {}
        behind = {t: {"registered": int(registered[t]), "to": v} for t, v in self.offsets.items()
                  if isinstance(registered.get(t), int) and registered[t] > v}
        if behind:
            self.recovery["rewound"] = behind
            where = f"checkpoint {last.name}" if last else "no checkpoint"
            self.warn(f"rewinding {self.cfg.name} to {where}: " + ", ".join(
                f"{t} from version {b['registered']} (registered in the lake) to {b['to']}" for t, b in behind.items())
                + "; the rows of those versions are trained again")

    def _write_meta(self, last: Path | None) -> dict:
        path = self.folder / WATCH_FILE
        old = {}
        if path.exists():
            try:
                old = read_json(path)
                if not isinstance(old, dict) or not all(isinstance(old.get(k), str) for k in META_KEYS):
                    raise ValueError(f"not an object with {', '.join(META_KEYS)}")
            except (OSError, ValueError) as exc:
                old = {}
                self.warn(f"{path} is unreadable, rewritten ({str(exc).splitlines()[0][:100]})")
        if old and (old["recipe"], old["view"], old["model_path"]) != (self.cfg.recipe, self.cfg.view, self.model_path):
            raise TrainerInputError(f"{self.folder} is the folder of a watcher of view {old['view']!r} training "
                                    f"{old['model']!r}: pass another --name or --output")
        # the serial names the runs events: a rewritten watch.json takes it from the last increment
        serial = old.get("serial") or (checkpoint.read_state(last)["event"]["metadata"]["serial"] if last else None)
        meta = {"name": self.cfg.name, "serial": serial or f"{self.cfg.name}-{uuid.uuid4().hex[:8]}",
                "recipe": self.cfg.recipe, "view": self.cfg.view, "follow": self.cfg.follow,
                "model": self.cfg.model, "model_path": self.model_path, "lake_root": self._lake_root(),
                "folder": str(self.folder.resolve()), "config": asdict(self.cfg)}
        write_json_atomic(path, meta)
        return meta

    def _lake_root(self) -> str:
        """The followed lake as `lake train status` reopens it: an absolute folder, or the object-store URL."""
        root = self.lake.root
        return str(Path(root).resolve()) if self.lake.table_set.store.local else str(root)

    def reconcile(self) -> int:
        """Append the runs events of increments whose checkpoint is in place but whose event is not in the lake (a
        watcher killed between the two). Returns how many were appended."""
        prefix = f"{self.meta['serial']}-inc-"
        with self.lake.snapshot(for_query="SELECT run_id FROM runs") as snap:
            have = {r["run_id"] for r in snap.arrow(
                "SELECT run_id FROM runs WHERE starts_with(run_id, ?)", [prefix]).to_pylist()}
        missing = []
        for c in checkpoint.complete(self.folder):
            try:
                event = checkpoint.read_state(c, ("event",))["event"]
            except checkpoint.CheckpointError as exc:  # an older increment's broken state: its event is lost
                self.warn(f"checkpoint {c.name}'s runs event cannot be recovered: {exc}")
                continue
            if event["run_id"] not in have:
                missing.append(event)
        if missing:
            self.lake.append("runs", missing)
        return len(missing)

    def set_phase(self, phase: str) -> None:
        self.phase = phase
        self.heartbeat.beat()

    # ------------------------------------------------------------------------------------------- one increment
    def step(self) -> dict | None:
        """Train one increment on what is new, if at least --min-rows of it are of the trained split. Returns its
        runs event, or the `skipped` record when its new rows give no example (`skip`: nothing published). New
        rows of other splits wait with the rest: an evaluation's episodes (test split) alone never make an
        increment, so --eval-every cannot feed itself. Looks again only when a followed table's version moved
        since the last look that found nothing (one `lake.version` per table otherwise)."""
        # The followed tables' versions, read before the increment is (a commit landing in between only makes the
        # next look run again). Versions unchanged since a look that found nothing to train: the answer cannot have
        # changed (the recipes' views read only the followed tables; the offsets move only here), so the change
        # feed and the view, whose cost grows with the lake, are not run again. An idle watcher with rows waiting
        # (an unrewarded conversation, --min-rows not reached) costs a version check per poll, not a view query.
        # A custom --view that also reads other tables sees their changes with the next commit of a followed one.
        seen = {t: self.lake.version(t) for t in self.cfg.follow}
        if seen == self._idle_at:
            return None
        inc = read_increment(self.lake, self.cfg, self.offsets)
        if inc is None or len(self._of_split(inc.new)) < self.cfg.min_rows:
            self._idle_at = seen
            return None
        self._idle_at = None
        return self.train(inc)

    def _of_split(self, rows: list[dict]) -> list[dict]:
        keep = None if self.cfg.split == "all" else self.cfg.split
        return [r for r in rows if keep is None or r.get("split") in (None, keep)]

    def _examples(self, rows: list[dict], counts: dict | None = None) -> list:
        """The rows' training examples, cut to --max-length by trainers/modeling/fit.py's rule. With `counts`, the
        rows left out add to counts["left_out"][reason] and the rows cut (kept shorter) to counts["truncated_rows"]."""
        kept = self._of_split(rows)
        convs, stats = (conversations(kept, self.cfg.view, "all", self.cfg.max_length, may_be_empty=True)
                        if kept else ([], {}))
        examples, enc = encode_all(self.tok, convs, self.cfg.max_length) if convs else ([], {})
        if counts is not None:
            left_out = counts.setdefault("left_out", {})
            for reason, n in (("other_split", len(rows) - len(kept)), ("no_assistant", stats.get("dropped_invalid", 0)),
                              ("over_max_length", stats.get("skipped_rows", 0) + enc.get("over_max_length", 0)),
                              ("no_assistant_tokens", enc.get("no_assistant_tokens", 0))):
                if n:
                    left_out[reason] = left_out.get(reason, 0) + n
            counts["truncated_rows"] = counts.get("truncated_rows", 0) + enc.get("truncated", 0)
        return examples

    def skip(self, inc: Increment, counts: dict) -> dict:
        """An increment whose new rows give no example trains nothing and is published as nothing: no checkpoint
        (which a served follower would take as a new version), no runs event. Its rows are consumed all the same:
        the offsets go to CONSUMED_FILE (what a restarted watcher continues from, over its last checkpoint's) and
        to the lake's registry, and the rows left out are counted by reason there and in the `skipped` event."""
        before = self._consumed()
        rec = {"checkpoint": self.counter.n, "offsets": dict(inc.upto), "at": time.time(),
               "rows_consumed": (before or {}).get("rows_consumed", 0) + inc.consumed,
               "left_out": dict(before.get("left_out", {})) if before else {}}
        for reason, n in counts.get("left_out", {}).items():
            rec["left_out"][reason] = rec["left_out"].get(reason, 0) + n
        write_json_atomic(self.folder / CONSUMED_FILE, rec)
        self.offsets = dict(inc.upto)
        self.lake.register_consumer(self.cfg.name, self.offsets)
        out = {"event": "skipped", "rows_consumed": inc.consumed, "rows": inc.rows, "view_rows": len(inc.new),
               "left_out": counts.get("left_out", {}), "truncated_rows": counts.get("truncated_rows", 0),
               "upto": inc.upto, "increment": self.counter.n}
        self.emit(out)
        self.set_phase("idle")
        return out

    def _consumed(self) -> dict | None:
        """CONSUMED_FILE when it continues the last checkpoint (a later checkpoint supersedes it), else None."""
        path = self.folder / CONSUMED_FILE
        try:
            rec = read_json(path)
            offsets = {str(t): int(v) for t, v in rec["offsets"].items()}
            stale = int(rec["checkpoint"]) != self.counter.n
        except FileNotFoundError:
            return None
        except (OSError, ValueError, TypeError, KeyError, AttributeError) as exc:
            self.warn(f"{path} is unreadable, its rows are read again ({str(exc).splitlines()[0][:100]})")
            return None
        if stale or any(offsets.get(t, -1) < v for t, v in self.offsets.items()):
            return None
        return {**rec, "offsets": offsets}

    def train(self, inc: Increment) -> dict:
        n = self.counter.n + 1
        t0 = time.perf_counter()
        self.set_phase(f"training increment {n}")
        bounded: dict = {}
        new = self._examples(inc.new, bounded)
        if not new:  # replayed rows alone would publish a version that learnt nothing new
            return self.skip(inc, bounded)
        replayed = self._examples(inc.replay)
        examples = new + replayed
        # served conversations (`lake serve-model`) that this increment trains: usually a reward that arrived after
        # the conversation did. Said by name, since nothing else tells the operator that the wait is over.
        served = [{"trajectory_id": r.get("trajectory_id"), "reward": r.get("reward")}
                  for r in self._of_split(inc.new) if r.get("served")]
        self.emit({"event": "training", "increment": n, "rows": inc.rows, "examples": len(examples)})
        s = replace(self.cfg, seed=self.cfg.seed + n)  # a fresh, seeded plan and batch order per increment
        first_step: dict = {}

        def on_log(rec: dict) -> None:
            if rec.get("step") == 1:
                first_step["at"] = time.time()

        metrics = train_loop(self.model, examples, s, self.tok.pad_token_id, on_log, optimizer=self.optimizer)
        self.counter.n = n
        run_id = run_id_of(self.meta["serial"], n)
        elapsed = round(time.perf_counter() - t0, 4)  # reading the view's rows is before t0: in read_increment
        weights = checkpoint.weights(Path(self.folder) / checkpoint.DIR / f"{checkpoint.PREFIX}{n:08d}")
        event = {
            "run_id": run_id, "kind": KIND, "status": "completed", "model": model_label(self.cfg.model),
            "adapter_path": str(weights.resolve()), "config": asdict(s),
            "metrics": {**metrics, "increment": n, "rows_consumed": inc.consumed, "rows": inc.rows,
                        "new_examples": len(new), "replayed_examples": len(replayed),
                        "view_rows": len(inc.new), "served_rows": len(served), "first_step_at": first_step.get("at"),
                        "increment_s": elapsed, **bounded, **self.recovery},
            "manifest": {"view": self.cfg.view, "after": inc.after, "upto": inc.upto,
                         "events_sha256": inc.events_sha256, "lake_root": self.meta["lake_root"]},
            "metadata": {"trainer": TRAINER, "watcher": self.cfg.name, "serial": self.meta["serial"],
                         "method": self.cfg.recipe, "increment": n, "run_dir": self.meta["folder"],
                         "full": self.cfg.full, "command": self.cfg.COMMAND},
        }
        self.set_phase(f"saving increment {n}")

        def save_weights(folder: str) -> None:  # the event goes into state.json after the weights: with their sha256
            self._save_weights(folder)
            event["metadata"]["adapter_sha256"] = weights_sha256(folder)

        checkpoint.save(self.folder, n, save_weights, self.optimizer, self.counter,
                        {"offsets": inc.upto, "event": event}, keep=self.cfg.keep or 1 << 62)
        self.offsets, self.recovery = dict(inc.upto), {}
        (self.folder / CONSUMED_FILE).unlink(missing_ok=True)  # superseded by this checkpoint's offsets
        self.lake.register_consumer(self.cfg.name, self.offsets)
        self.lake.append("runs", [event])
        self.emit({"event": "increment", **{k: event["metrics"][k] for k in (
            "increment", "rows_consumed", "rows", "new_examples", "replayed_examples", "steps", "increment_s",
            "first_step_at")}, "final_loss": metrics.get("final_loss"), "upto": inc.upto, "adapter": str(weights),
            "left_out": bounded.get("left_out", {}), "truncated_rows": bounded.get("truncated_rows", 0),
            "served": served})
        if self.cfg.eval_every and n % self.cfg.eval_every == 0:
            self.evaluate(weights)
        self.set_phase("idle")
        return event

    def _save_weights(self, folder: str) -> None:
        self.model.save_pretrained(folder)
        self.tok.save_pretrained(folder)
        marker = Path(self.model_path) / TINY_MARKER
        if self.cfg.full and marker.is_file():  # a fine-tuned tiny model is still one (full fine-tuning by default)
            shutil.copy2(marker, Path(folder) / TINY_MARKER)

    def evaluate(self, weights: Path) -> dict:
        """hermes_eval of this increment's weights on held-out tasks, recorded in the lake (episodes + runs event)."""
        self.set_phase(f"evaluating increment {self.counter.n}")
        summary = run_eval(EvalSettings(model=self.cfg.model, adapter=str(weights), task=self.cfg.eval_task,
                                        split="test", limit=self.cfg.eval_limit, lake_root=str(self.lake.root),
                                        threads=self.cfg.threads, device=self.cfg.device, progress=False,
                                        chat_template=self.cfg.chat_template))
        self.emit({"event": "eval", "increment": self.counter.n, "run_id": summary["run_id"],
                   "success_rate": summary["success_rate"], "mean_reward": summary["mean_reward"]})
        return summary

    # ------------------------------------------------------------------------------------------- the loop
    def run(self, stop: threading.Event | None = None) -> int:
        """Follow the lake until `stop` is set (or --once / --max-increments). Returns the increments trained."""
        stop = stop or threading.Event()
        # a local lake's commits are file events; an object store has no folder to watch: the poll alone wakes it
        local = self.lake.table_set.store.local
        logs = [Path(self.lake.table_path(t)) / "_delta_log" for t in self.cfg.follow] if local else []
        waker = Waker(logs, self.cfg.poll_interval)
        trained = 0
        try:
            while not stop.is_set():
                event = self.step()
                if event is not None:
                    if event.get("event") == "skipped":
                        self.skipped += 1
                    else:
                        trained += 1
                    if self.cfg.max_increments and trained >= self.cfg.max_increments:
                        break
                    continue  # more may be waiting (--max-versions)
                if self.cfg.once:
                    break
                self.set_phase("idle")
                if waker.wait() and not stop.is_set():
                    stop.wait(self.cfg.debounce)  # a burst of commits becomes one increment
        finally:
            waker.stop()
        return trained

    def close(self) -> None:
        self.heartbeat.stop()
        self.set_phase("stopped")
        os.close(self._lock_fd)


def _lock(path: Path) -> int:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        hb = path.parent / HEARTBEAT_FILE
        try:
            pid = read_json(hb).get("pid", "?")
        except (OSError, ValueError, AttributeError):  # garbage or missing: the lock alone says it runs
            pid = "?"
        raise TrainerInputError(f"a watcher already runs in {path.parent} (pid {pid}): stop it, or pass another "
                                "--name") from None
    return fd


class _Heartbeat:
    """heartbeat.json rewritten every HEARTBEAT_S by a daemon thread, and at each phase change."""

    def __init__(self, trainer: StreamTrainer):
        self.trainer = trainer
        self.path = trainer.folder / HEARTBEAT_FILE
        self._stop = threading.Event()
        self.beat()
        self.thread = threading.Thread(target=self._loop, name="watch-heartbeat", daemon=True)
        self.thread.start()

    def beat(self) -> None:
        t = self.trainer
        write_json_atomic(self.path, {"pid": os.getpid(), "host": socket.gethostname(), "at": time.time(),
                                      "phase": t.phase, "increment": t.counter.n,
                                      "interval_s": HEARTBEAT_S})

    def _loop(self) -> None:
        while not self._stop.wait(HEARTBEAT_S):
            self.beat()

    def stop(self) -> None:
        self._stop.set()
