"""--follow runs/<watch-run>: serve each new increment of the streaming trainer as it is written.

The trainer writes increment N as one atomic folder `checkpoints/step-<N>/` (trainers/runtime/checkpoint.py: temp folder,
fsync, rename), so a folder that exists under its final name is complete: polling the folder every
`--poll-interval` s and loading the new ones is safe, and a load that fails (a folder removed by --keep, a broken
file) is reported and skipped, never served. Loading happens on the engine's thread between batches
(engine.add_version), so requests in flight finish on the version they started with. A folder the trainer has not
written yet (`just up` starts both together) is waited for, the base model served meanwhile.

--promote-if-better: an increment is served only when its `--eval-every` evaluation (the trainer's hermes_eval of
that increment's weights: a `runs` event of kind `eval` whose adapter_path is the increment's weights/) has a
success rate no lower than that of the version served; an increment the trainer does not evaluate (N not a multiple
of --eval-every) is never promoted, and one whose evaluation has not landed yet is waited for.
"""
from __future__ import annotations

import json
import threading
import time
from pathlib import Path

from lake import Lake, LakeError
from trainers.runtime import checkpoint
from trainers.runtime.errors import TrainerInputError
from trainers.runtime.weights_files import check_weights
from trainers.watch.config import WATCH_FILE

from .access_log import log
from .engine import EmbeddedEngine
from .errors import ServingError
from .versions import check_base, run_name


class Follower:
    """Polls a watcher's folder and hands each new increment (or, with promote_if_better, each evaluated one that
    did not fall) to the engine."""

    def __init__(self, engine: EmbeddedEngine, folder: str | Path, *, poll_interval: float,
                 promote_if_better: bool = False, lake_root: str | None = None):
        self.engine = engine
        self.folder = Path(folder)
        self.poll_interval = poll_interval
        self.promote = promote_if_better
        self.lake_root = lake_root
        self.eval_every: int | None = None  # the trainer's --eval-every, from its watch.json
        if not self._read_meta():  # `just up` starts the server and the trainer together: it may come later
            log(f"waiting for a streaming trainer in {self.folder} (no {WATCH_FILE} yet); "
                  "serving what it started with (--adapter's weights, else the base model) until its first "
                  "increment")
        self.seen = 0  # the newest increment looked at (served, skipped or refused)
        self.best: float | None = None  # the served version's evaluated success rate (promote_if_better)
        self.events: list[dict] = []  # what happened to each increment: for /v1/health and the tests
        self._strays: set[str] = set()  # step-* names that are no increment's (a step-00000002.bak copy), said once
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _read_meta(self) -> bool:
        """The trainer's watch.json (its lake and --eval-every), once it is there. False while it is not."""
        if self.eval_every is not None:
            return True
        path = self.folder / WATCH_FILE
        if not path.is_file():
            return False
        try:
            meta = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            raise ServingError(f"--follow {self.folder}: {WATCH_FILE} is unreadable ({exc})") from None
        self.eval_every = int((meta.get("config") or {}).get("eval_every") or 0)
        self.lake_root = meta.get("lake_root") or self.lake_root
        if self.promote and self.eval_every <= 0:
            raise ServingError(f"--promote-if-better: the trainer in {self.folder} does not evaluate its "
                               "increments (start it with --eval-every K)")
        return True

    def newest(self) -> tuple[str, str] | None:
        """(step, weights folder) of the newest increment at start, or None (the base is served until one comes)."""
        self._report_strays()
        for ckpt in reversed(checkpoint.complete(self.folder)):  # the newest whose weights may be loaded
            n = checkpoint.step_of(ckpt)
            try:
                self._check(ckpt)
            except (ServingError, TrainerInputError) as exc:  # check_base's, or check_weights' (the trainers')
                self._refuse(n, exc)
                continue
            self.seen = max(self.seen, n)
            if self.promote:
                self.best = self._success_rate(ckpt)
            return run_name(str(checkpoint.weights(ckpt))), str(checkpoint.weights(ckpt))
        return None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="serve-model-follow", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)

    def _loop(self) -> None:
        while not self._stop.wait(self.poll_interval):
            try:
                self.poll()
            except OSError as exc:  # the folder itself unreadable for a moment (moved, a disk): said, looked at again
                log(f"--follow {self.folder}: {exc}")

    def poll(self) -> None:
        """Serve what is new (in order); with promote_if_better, stop at an increment whose evaluation is awaited."""
        try:
            if not self._read_meta():
                return
        except ServingError as exc:  # a trainer that started without --eval-every: said once, never promoted
            self._note(0, "refused", str(exc))
            log(f"{exc}")
            self.eval_every = 0
        if self.promote and not self.eval_every:
            return
        self._report_strays()
        for ckpt in checkpoint.complete(self.folder):
            n = checkpoint.step_of(ckpt)
            if n <= self.seen:
                continue
            if self.promote:
                if n % self.eval_every:
                    self._note(n, "skipped", "not evaluated by the trainer")
                    continue
                rate = self._success_rate(ckpt)
                if rate is None:
                    return  # its evaluation has not landed yet: look again next time
                if self.best is not None and rate < self.best:
                    self._note(n, "skipped", f"eval success {rate:.3f} < {self.best:.3f} served")
                    continue
            t0 = time.time()
            try:
                self._check(ckpt)
                v = self.engine.add_version(run_name(str(checkpoint.weights(ckpt))), str(checkpoint.weights(ckpt)))
            except (ServingError, TrainerInputError, OSError, ValueError, RuntimeError) as exc:
                self._refuse(n, exc)
                continue
            if self.promote:
                self.best = rate
            written = ckpt.stat().st_mtime if ckpt.exists() else t0
            self._note(n, "served", v.name, load_s=round(time.time() - t0, 3),
                       written_to_served_s=round(time.time() - written, 3))
            log(f"increment {n} served as {v.name} (loaded in {time.time() - t0:.2f} s)")

    def _check(self, ckpt: Path) -> None:
        """An increment's weights, before any file is opened (no FIFO, no pickle, all there), and a LoRA adapter's
        base (adapter_config.json) against the served one: an adapter of another model is refused, one line."""
        weights = checkpoint.weights(ckpt)
        check_weights(weights)
        check_base(weights, self.engine.model_path)

    def _note(self, n: int | None, what: str, detail: str, **extra) -> None:
        if n is not None:
            self.seen = max(self.seen, n)
        self.events.append({"increment": n, "event": what, "detail": detail, "at": time.time(), **extra})

    def _refuse(self, n: int, exc: Exception) -> None:
        """An increment that cannot be served: one line, one health event; the next one is looked at."""
        self._note(n, "refused", f"{type(exc).__name__}: {str(exc)[:200]}")
        log(f"increment {n} not served: {exc}")

    def _report_strays(self) -> None:
        """Folders in checkpoints/ named like an increment but not one (step-00000002.bak): skipped, said once."""
        root = self.folder / checkpoint.DIR
        names = {p.name for p in root.iterdir()} if root.is_dir() else set()
        for name in sorted(names - self._strays):
            if name.startswith(checkpoint.PREFIX) and not checkpoint.STEP_NAME.fullmatch(name):
                self._strays.add(name)
                self._note(None, "skipped", f"{name}: not an increment's name (step-<digits>)")
                log(f"{root / name} skipped: not an increment's name (step-<digits>)")

    def _success_rate(self, ckpt: Path) -> float | None:
        """The success rate of the trainer's evaluation of this increment's weights, or None if there is none yet."""
        if not self.lake_root:
            return None
        weights = checkpoint.weights(ckpt).resolve()
        tail = f"{ckpt.name}/{checkpoint.weights(ckpt).name}"
        try:
            lake = Lake.open(self.lake_root)
            with lake.snapshot(for_query="SELECT adapter_path, metrics FROM runs") as snap:
                rows = snap.arrow("SELECT adapter_path, metrics FROM runs WHERE kind = 'eval' AND "
                                  "ends_with(adapter_path, ?)", [tail]).to_pylist()  # a folder name: bound, not pasted
        except LakeError:
            return None
        for r in rows:
            p = Path(r["adapter_path"])
            if (p.resolve() if p.is_absolute() else (self.folder.parent.parent / p).resolve()) == weights \
                    or str(p).endswith(f"{self.folder.name}/{checkpoint.DIR}/{tail}"):
                return float(json.loads(r["metrics"])["success_rate"])
        return None
