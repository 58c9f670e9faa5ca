"""The Atropos run-api queue as one state machine: every change is an event, applied the same way live and
when the lake is replayed at start.

Why events: run-api keeps its queue in memory and loses it on restart. Here each change (trainer
registration, env registration and disconnection, the started gate, a reset, a served batch, a delivery
confirmation) is a `runs` row of kind `atropos.*`, and each queued group is a `trajectories` row. The server
commits an event and applies it with `AtroposQueue.apply`; at start `AtroposQueue.restore` applies the
recorded events in order, then the groups that no served batch or reset settled. Forming batches is not an
event: it is recomputed from the queue (batches formed but not served when the server died are formed again).

The arithmetic (packing, buffering, /status-env) follows atroposlib 0.4.0 (docs/atropos-api.md section 2).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Optional, Union

import orjson

from ingest.atropos import (QGroup, RegisterEnv, Registration, find_groups_summing_to_target,
                            grab_batch_with_minimum_allocations, grab_exact_from_heterogeneous_queue)

MIN_ENV_WEIGHT = 0.01


# ----------------------------------------------------------------------------------------------------------
# events (each but GroupQueued is one `runs` row; GroupQueued is the group's `trajectories` rows)
# ----------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Registered:
    config: dict  # Registration fields


@dataclass(frozen=True)
class EnvRegistered:
    env: dict  # max_context_len, weight, desired_name, real_name, connected, min_batch_allocation, group_size
    request: Optional[dict] = None


@dataclass(frozen=True)
class EnvDisconnected:
    env_id: int


@dataclass(frozen=True)
class Started:
    pass


@dataclass(frozen=True)
class Reset:
    group_ids: tuple  # the groups the reset dropped (queued, buffered or formed into unserved batches)


@dataclass(frozen=True)
class BatchServed:
    batch_id: str
    group_ids: tuple
    sequences: int
    step: int
    confirms: tuple  # earlier batches this pull confirms were delivered (at-least-once)
    mode: str


@dataclass(frozen=True)
class Confirmed:
    confirms: tuple


@dataclass(frozen=True)
class GroupQueued:
    group: QGroup


Event = Union[Registered, EnvRegistered, EnvDisconnected, Started, Reset, BatchServed, Confirmed, GroupQueued]


def event_record(ev: Event) -> dict:
    """The `runs` record of an event (the format of lakes written so far: kind, config, metadata)."""
    kind, config, metadata, status = None, None, None, None
    if isinstance(ev, Registered):
        kind, config = "atropos.register", ev.config
    elif isinstance(ev, EnvRegistered):
        kind, config, metadata = "atropos.env", ev.env, {"request": ev.request}
    elif isinstance(ev, EnvDisconnected):
        kind, metadata = "atropos.env_disconnect", {"env_id": ev.env_id}
    elif isinstance(ev, Started):
        kind = "atropos.started"
    elif isinstance(ev, Reset):
        kind, metadata = "atropos.reset", {"group_ids": list(ev.group_ids)}
    elif isinstance(ev, BatchServed):
        kind, status = "atropos.batch", "served"
        metadata = {"batch_id": ev.batch_id, "group_ids": list(ev.group_ids), "sequences": ev.sequences,
                    "step": ev.step, "confirms": list(ev.confirms), "mode": ev.mode}
    elif isinstance(ev, Confirmed):
        kind, metadata = "atropos.confirm", {"confirms": list(ev.confirms)}
    else:
        raise TypeError(f"{type(ev).__name__} is not a runs event")
    return {"kind": kind, "status": status, "config": config, "metadata": metadata}


def event_from_run(kind: str, config: Optional[str], metadata: Optional[str]) -> Optional[Event]:
    """A `runs` row (JSON text columns) -> its event; None for an unknown atropos.* kind (newer writer)."""
    cfg = orjson.loads(config) if config else {}
    meta = orjson.loads(metadata) if metadata else {}
    if kind == "atropos.register":
        return Registered(cfg)
    if kind == "atropos.env":
        return EnvRegistered(cfg, meta.get("request"))
    if kind == "atropos.env_disconnect":
        return EnvDisconnected(int(meta.get("env_id", -1)))
    if kind == "atropos.started":
        return Started()
    if kind == "atropos.reset":
        return Reset(tuple(meta.get("group_ids") or ()))
    if kind == "atropos.batch":
        # batches recorded before the mode field existed were recorded before they were sent: at-most-once
        mode = meta.get("mode") if meta.get("batch_id") else None
        return BatchServed(meta.get("batch_id") or "", tuple(meta.get("group_ids") or ()),
                           int(meta.get("sequences") or 0), int(meta.get("step") or 0),
                           tuple(meta.get("confirms") or ()), mode or "at-most-once")
    if kind == "atropos.confirm":
        return Confirmed(tuple(meta.get("confirms") or ()))
    return None


# ----------------------------------------------------------------------------------------------------------
# the state machine
# ----------------------------------------------------------------------------------------------------------
@dataclass
class AtroposQueue:
    registered: bool = False
    group: Optional[str] = None
    project: Optional[str] = None
    batch_size: int = -1
    max_token_len: int = -1
    step: int = 0  # run-api's step: batches formed since the starting step
    starting_step: int = 0
    checkpoint_dir: str = ""
    save_checkpoint_interval: int = 0
    num_steps: int = -1
    started: bool = False
    envs: list[dict] = field(default_factory=list)
    buffer: dict[int, list[QGroup]] = field(default_factory=dict)
    queue: list[QGroup] = field(default_factory=list)
    curr_batch: list[list[QGroup]] = field(default_factory=list)  # formed, not yet served (run-api's cache)
    latest: Optional[QGroup] = None
    served: int = 0  # batches served since the run was registered
    sent: dict[str, tuple] = field(default_factory=dict)  # at-least-once: batch_id -> group ids, unconfirmed
    # only while restoring: groups that a served batch or a reset settled, so their rows are not queued again
    settled: Optional[set] = None

    # -- the one way state changes ---------------------------------------------------------------------
    def apply(self, ev: Event) -> Optional[dict]:
        """Apply one event; returns the route's answer where the event has one (register-env, a group)."""
        if isinstance(ev, GroupQueued):
            if self.settled is not None and ev.group.group_id in self.settled:
                return None
            return self._add_group(ev.group)
        if isinstance(ev, Registered):
            if not self.registered:  # only the first registration after start or reset creates the run
                self._register(Registration(**ev.config))
            return None
        if isinstance(ev, EnvRegistered):
            rid = len(self.envs)
            self.envs.append({**ev.env, "registered_id": rid})
            return {"status": "success", "env_id": rid, "wandb_name": ev.env["real_name"],
                    "checkpoint_dir": self.checkpoint_dir, "starting_step": self.step,
                    "checkpoint_interval": self.save_checkpoint_interval, "num_steps": self.num_steps}
        if isinstance(ev, EnvDisconnected):
            if -len(self.envs) <= ev.env_id < len(self.envs):
                self.envs[ev.env_id]["connected"] = False
            return {"status": "success"}
        if isinstance(ev, Started):
            self.started = True
            return None
        if isinstance(ev, Reset):
            self._settle(ev.group_ids)
            for gids in self.sent.values():  # a reset ends the run: whatever was sent is settled
                self._settle(gids)
            self._reset()
            return None
        if isinstance(ev, BatchServed):
            self._confirm(ev.confirms)
            if ev.mode == "at-least-once":
                self.sent[ev.batch_id] = ev.group_ids  # settled once the trainer's next pull confirms it
            else:
                self._settle(ev.group_ids)
            self.served += 1
            return None
        if isinstance(ev, Confirmed):
            self._confirm(ev.confirms)
            return None
        raise TypeError(f"unknown event {ev!r}")

    @classmethod
    def restore(cls, events: Iterable[Event],
                unsettled_groups: Callable[[frozenset], Iterable[QGroup]]) -> "AtroposQueue":
        """Replay recorded events, then queue the groups no served batch or reset settled.

        `unsettled_groups(settled)` yields the recorded groups whose ids are not in `settled`, in queue order.
        A batch sent but never confirmed (the server died before the trainer came back) is served again.
        """
        q = cls(settled=set())
        for ev in events:
            q.apply(ev)
        for g in unsettled_groups(frozenset(q.settled)):
            q.apply(GroupQueued(g))
        q.served -= len(q.sent)
        q.sent = {}
        q.settled = None
        if q.registered:  # batches formed but not served before the restart are formed again: count served ones
            q.step = q.starting_step + q.served
        return q

    # -- events built from the current state (the server records them, then applies them) ----------------
    def env_event(self, re: RegisterEnv) -> EnvRegistered:
        k = len([x for x in self.envs if x["desired_name"] == re.desired_name])
        env = {"max_context_len": re.max_token_length, "weight": re.weight if re.weight is not None else 1.0,
               "desired_name": re.desired_name, "real_name": f"{re.desired_name}_{k}", "connected": True,
               "min_batch_allocation": re.min_batch_allocation, "group_size": re.group_size}
        return EnvRegistered(env, re.model_dump())

    def reset_event(self) -> Reset:
        return Reset(tuple(g.group_id for g in self.queue) + tuple(g.group_id for b in self.curr_batch for g in b)
                     + tuple(g.group_id for buf in self.buffer.values() for g in buf))

    def batch_event(self, batch_id: str, b: list[QGroup], mode: str) -> BatchServed:
        """Batch `b`, just popped, served now; it confirms every batch sent before (the trainer came back)."""
        return BatchServed(batch_id, tuple(g.group_id for g in b), sum(g.size for g in b), self.step,
                           tuple(self.sent), mode)

    def confirm_event(self) -> Optional[Confirmed]:
        """A pull that gets no batch still confirms the batches sent before it."""
        return Confirmed(tuple(self.sent)) if self.sent else None

    def disconnect_event(self, env_id: int) -> Optional[EnvDisconnected]:
        """None for an id run-api's list indexing would refuse (negative ids count from the end, as there)."""
        return EnvDisconnected(env_id) if -len(self.envs) <= env_id < len(self.envs) else None

    # -- batches (formation is recomputed, not recorded) -------------------------------------------------
    def next_batch(self) -> Optional[list[QGroup]]:
        """run-api's /batch: form every batch that can be formed now (once the cache is empty), pop one."""
        if not self.curr_batch:
            self._form_batches()
        return self.curr_batch.pop() if self.curr_batch else None

    def unpop_batch(self, b: list[QGroup]) -> None:
        self.curr_batch.append(b)

    def _form_batches(self) -> None:
        has_min = any(e.get("min_batch_allocation") is not None for e in self.envs)
        while True:
            if has_min:
                b, self.queue = grab_batch_with_minimum_allocations(self.queue, self.batch_size, self.envs)
            else:
                b, self.queue = grab_exact_from_heterogeneous_queue(self.queue, self.batch_size)
            if b is None:
                return
            self.curr_batch.append(b)
            self.step += 1

    # -- read-only answers -----------------------------------------------------------------------------
    def env_name(self, env_id) -> Optional[str]:
        if isinstance(env_id, int) and 0 <= env_id < len(self.envs):
            return self.envs[env_id]["desired_name"]
        return None

    def status(self) -> dict:
        if not self.registered:
            return {"current_step": 0, "queue_size": 0}
        return {"current_step": self.step, "queue_size": len(self.queue)}

    def status_env(self, env_id: int) -> dict:
        """run-api's /status-env arithmetic, without its PR #488 bug (other envs counted at group size 1).
        Like run-api it raises the env's recorded group size to the largest group it has queued."""
        envs = self.envs
        if not (0 <= env_id < len(envs)):
            raise IndexError("list index out of range")
        total = sum(x["max_context_len"] * max(0.0, x["weight"]) for x in envs if x["connected"])
        me = envs[env_id]
        env_group_size = me["group_size"]
        env_weight = me["max_context_len"] * me["weight"] / total if total else 1.0
        env_weight = max(MIN_ENV_WEIGHT, env_weight)
        total_min = sum(e["min_batch_allocation"] for e in envs
                        if e.get("connected") and e.get("min_batch_allocation") is not None)
        unallocated = 1.0 - min(total_min, 1.0)
        max_group_size = 1
        self_seqs = 0
        for item in self.queue:
            if item.size > max_group_size:
                max_group_size = item.size
            if item.env_id == env_id:
                env_group_size = max(env_group_size, item.size)
                self_seqs += item.size
        me["group_size"] = env_group_size
        min_by_env = {e["registered_id"]: int(self.batch_size * e["min_batch_allocation"]) for e in envs
                      if e.get("connected") and e.get("min_batch_allocation") is not None}
        by_env: dict[Any, int] = {}
        cur = 0
        for item in self.queue:
            if item.env_id == env_id:
                cur += item.size
            else:
                by_env[item.env_id] = by_env.get(item.env_id, 0) + item.size
        available = 0
        for eid, n in by_env.items():
            packed = math.ceil(n / max_group_size) * max_group_size
            available += max(0, packed - min_by_env.get(eid, 0))
        gs = env_group_size or 1
        return {"current_step": self.step, "queue_size": (cur + available) // gs,
                "unallocated_fraction": unallocated, "self_queue_size": self_seqs // gs,
                "max_group_size": max_group_size, "env_weight": env_weight}

    def latest_example(self) -> bytes:
        if self.latest is not None:
            return self.latest.body
        return orjson.dumps({"tokens": [], "masks": [], "scores": [], "advantages": [], "ref_logprobs": [],
                             "generation_params": [], "inference_logprobs": [], "messages": [], "images": []})

    # -- transitions -----------------------------------------------------------------------------------
    def _register(self, reg: Registration) -> None:
        self.registered = True
        self.group, self.project = reg.wandb_group, reg.wandb_project
        self.batch_size, self.max_token_len = int(reg.batch_size), int(reg.max_token_len)
        self.starting_step = self.step = reg.starting_step
        self.served = 0
        self.checkpoint_dir = reg.checkpoint_dir
        self.save_checkpoint_interval = reg.save_checkpoint_interval
        self.num_steps = reg.num_steps
        self.curr_batch = []
        self.started = False
        self.envs = []
        self.buffer = {}

    def _add_group(self, g: QGroup) -> dict:
        env_id = g.env_id
        if env_id is not None and 0 <= env_id < len(self.envs):
            expected = self.envs[env_id].get("group_size", 1)
            if g.size != expected:
                buf = self.buffer.setdefault(env_id, [])
                buf.append(g)
                idx = find_groups_summing_to_target(buf, expected)
                if idx:
                    moved = [buf.pop(i) for i in sorted(idx, reverse=True)]
                    for mg in reversed(moved):
                        self.queue.append(mg)
                        self.latest = mg
                return {"status": "buffered", "buffer_size": sum(x.size for x in self.buffer.get(env_id, []))}
        self.queue.append(g)
        self.latest = g
        return {"status": "received"}

    def _confirm(self, batch_ids: Iterable[str]) -> None:
        for bid in batch_ids:
            self._settle(self.sent.pop(bid, ()))

    def _settle(self, group_ids: Iterable[str]) -> None:
        if self.settled is not None:  # live, a settled group has already left the queue: nothing to remember
            self.settled.update(group_ids)

    def _reset(self) -> None:
        """/reset_data: wipe everything but max_token_len."""
        self.queue = []
        self.registered = False
        self.group = self.project = None
        self.batch_size = -1
        self.num_steps = -1
        self.starting_step = self.step = 0
        self.served = 0
        self.curr_batch = []
        self.sent = {}
        self.started = False
        self.envs = []
        self.buffer = {}
