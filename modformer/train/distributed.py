"""Data-parallel training across processes started by `torchrun` (gloo on CPU, NCCL on GPU).

`torchrun --nproc_per_node N -m modformer.cli train CONFIG` runs N copies of the trainer.
Each draws the same global batch `train.batch_size` (the stream is a pure function of seed
and step), keeps its own contiguous share, and DDP averages the gradients. The loss each
process backpropagates is its share's summed token loss times N over the global count of
scored tokens, so that the averaged gradient is the gradient of the global batch's mean
loss: the run ends where a single process with the same global batch ends (up to float
summation order; tested). Only rank 0 writes files: run directory, metrics, checkpoints,
summary and plots; every rank reads the same checkpoint when resuming.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist

from ..errors import ConfigError


@dataclass(frozen=True)
class World:
    rank: int = 0
    size: int = 1
    device: torch.device = torch.device("cpu")  # where collectives put their tensors

    @property
    def main(self) -> bool:
        return self.rank == 0

    def share(self, batch_size: int) -> tuple[int, int]:
        """(start, length) of this process's rows of a global batch."""
        if batch_size % self.size:
            raise ConfigError(f"train.batch_size={batch_size} does not split over {self.size} processes")
        per = batch_size // self.size
        return self.rank * per, per

    def sum(self, value: torch.Tensor) -> torch.Tensor:
        """The sum over processes (the value itself in a single process)."""
        if self.size > 1:
            value = value.clone()
            dist.all_reduce(value)
        return value

    def wrap(self, model: torch.nn.Module) -> torch.nn.Module:
        """What the training forward goes through: the model itself in one process, else DDP
        (which averages the gradients in backward) on this process's GPU, or on the CPU."""
        if self.size == 1:
            return model
        return torch.nn.parallel.DistributedDataParallel(
            model, device_ids=[self.device.index] if self.device.type == "cuda" else None)

    def any(self, flag: bool) -> bool:
        """True on every process if it is true on any (so that all stop at the same step)."""
        if self.size == 1:
            return flag
        return bool(self.sum(torch.tensor([float(flag)], device=self.device)).item() > 0)


def init_world(device: torch.device) -> tuple[World, torch.device]:
    """The process group `torchrun` asks for (WORLD_SIZE > 1), or a single process, and the
    device this process trains on: on CUDA, its own GPU (`cuda:LOCAL_RANK`)."""
    size = int(os.environ.get("WORLD_SIZE", "1"))
    if size <= 1:
        return World(device=device), device
    if device.type == "cuda":
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(device)
    if not dist.is_initialized():
        dist.init_process_group(backend="nccl" if device.type == "cuda" else "gloo")
    return World(dist.get_rank(), dist.get_world_size(), device), device
