"""One training code path for one process or many: accelerate under `torchrun` / `accelerate launch`.

Why accelerate and not our own torch.distributed setup: the same few calls (prepare, accumulate, backward,
clip_grad_norm_, reduce, get_state_dict) run a single process, DDP on CPUs (gloo) or GPUs (NCCL), FSDP and
DeepSpeed ZeRO, chosen by the launcher and its config (configs/accelerate/*.yaml), not by our code. A plain
`python -m` / console-script run is the world of one process: nothing is wrapped and nothing communicates.

What is ours is the split of the data: every process draws the same global batches (same seed, same order) and
trains its contiguous slice of each (`Processes.part`); trainers/sft/sft.py normalises a step's loss by the labelled
tokens of the whole global batch, so the gradient the processes average is the one a single process computes on
the whole batch (tests/test_ddp.py). Only the main process writes the run folder, the `runs` event and the
model; `main_first` runs the setting-up on it and hands the others what they need (or its input error).
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Callable, TypeVar

import torch
from accelerate import Accelerator, PartialState
from accelerate.state import AcceleratorState
from accelerate.utils import broadcast_object_list

from trainers.runtime.device import device as pick_device
from trainers.runtime.errors import TrainerInputError

T = TypeVar("T")


def launched_world() -> int:
    """Processes the launcher started (torchrun and accelerate launch set WORLD_SIZE; a plain run has none)."""
    return int(os.environ.get("WORLD_SIZE", "1"))


def is_main_process() -> bool:
    """Rank 0 of a launched run, or a plain run; readable before any process group exists (the CLI asks it)."""
    return int(os.environ.get("RANK", "0")) == 0


@dataclass
class Processes:
    """This process's place among the run's processes, and its device. Make one with `Processes.start`."""

    state: PartialState
    device: torch.device

    @classmethod
    def start(cls, device_spec: str = "auto") -> "Processes":
        """Join the launched processes (a process group: gloo on CPUs, NCCL on GPUs) or stand alone.

        `--device cpu`, or auto without a GPU, asks accelerate for CPU processes: without `cpu=True` torchrun's
        processes on a CPU machine become N unsynchronised copies (docs/training-notes.md pitfall 12). Several
        processes take the GPU of their LOCAL_RANK, so `cuda:N` is for a single process only."""
        world = launched_world()
        spec = str(device_spec or "auto").strip().lower()
        if world > 1 and spec.startswith("cuda:"):
            raise TrainerInputError(f"--device {spec} picks one GPU, but {world} processes were launched: use --device "
                                    "cuda or auto (each process takes the GPU of its LOCAL_RANK)")
        dev = pick_device(spec)  # --device cuda without CUDA: the one-line error, in every process
        if world == 1:
            # accelerate keeps its state per Python process; a plain run may follow another with a different device
            # in the same interpreter (tests, the demo), so it starts from a clean state (accelerate's tests do so)
            AcceleratorState._reset_state(reset_partial_state=True)
        state = PartialState(cpu=dev.type == "cpu")
        return cls(state, dev if world == 1 else state.device)

    @property
    def world(self) -> int:
        return self.state.num_processes

    @property
    def rank(self) -> int:
        return self.state.process_index

    @property
    def is_main(self) -> bool:
        return self.state.is_main_process

    def accelerator(self, grad_accum: int, micro_batch: int) -> Accelerator:
        """The Accelerator of one training loop: accumulation over `grad_accum` micro-batches of `micro_batch` rows
        per process, models left where we put them (`--device cuda:1` is honoured in a single process)."""
        acc = Accelerator(cpu=self.device.type == "cpu", gradient_accumulation_steps=grad_accum, device_placement=False)
        if acc.state.deepspeed_plugin is not None:
            # DeepSpeed sizes its engine by the micro-batch, which it reads from a DataLoader: we have none (the
            # assignment accelerate's own error message asks for)
            acc.state.deepspeed_plugin.deepspeed_config["train_micro_batch_size_per_gpu"] = micro_batch
        return acc

    def part(self, batch: list[T]) -> list[T]:
        """This process's contiguous slice of a global batch; the slices' sizes differ by at most one."""
        n = len(batch)
        return batch[self.rank * n // self.world : (self.rank + 1) * n // self.world]

    def main_first(self, on_main: Callable[[], tuple[T, Any]], elsewhere: Callable[[Any], T]) -> T:
        """`on_main()` -> (its result, what the other processes need: picklable) runs on the main process; then
        every other process returns `elsewhere(that)`. An input error on the main process is raised on every
        process, so none waits for a result that never comes."""
        if self.world == 1:
            return on_main()[0]
        box: list[Any] = [None]
        result = None
        if self.is_main:
            try:
                result, box[0] = on_main()
            except TrainerInputError as exc:
                broadcast_object_list([{"error": str(exc)}])
                raise
            box[0] = {"ok": box[0]}
        broadcast_object_list(box)
        if "error" in box[0]:
            raise TrainerInputError(box[0]["error"])
        return result if self.is_main else elsewhere(box[0]["ok"])

    def end(self) -> None:
        """Leave the process group (a launched run's last call). Why: a process that exits with its gloo group
        alive can abort in the group's destructor ("terminate called without an active exception", SIGABRT),
        which torchrun reports as the run failing although every step was trained and saved."""
        if self.world > 1:
            self.state.destroy_process_group()

    def share(self, obj: T) -> T:
        """The main process's `obj` on every process (a picklable value, e.g. the run summary)."""
        if self.world == 1:
            return obj
        box = [obj]
        broadcast_object_list(box)
        return box[0]
