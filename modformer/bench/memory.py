"""Peak memory of a training step: the most bytes that tensors hold at once during it.

On CUDA this is `torch.cuda.max_memory_allocated` over the step (after
`reset_peak_memory_stats`): every byte the caching allocator has handed to live tensors,
blocks it caches but no tensor uses excluded.

On the CPU torch keeps no such counter, so `LiveTensorBytes` keeps one: a dispatch mode
sees every tensor that an ATen operator returns (forward, backward and optimizer alike)
and adds the size of its storage, once per storage however many views share it, until a
weak reference reports the storage freed. What it counts:

- the tensors live when the step begins, which the caller names (parameters, buffers,
  gradients still held, optimizer state, the batch);
- everything the step creates while it lives: activations saved for backward, gradients,
  temporaries, the loss.

What it does not count: buffers a kernel allocates for itself and frees before returning
(oneDNN scratch pads, the fused attention kernel's per-thread blocks), the allocator's
own overhead, and memory that is not a tensor's (Python, the libraries). On CUDA, scratch
space that kernels take from the caching allocator is counted, so the two devices agree
up to that scratch. Compiled code cannot be counted on the CPU: under a dispatch mode
`torch.compile` runs the eager model instead (the same operators run), so the count would
describe the eager step.
"""

from __future__ import annotations

import weakref
from typing import Callable, Iterable

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten


class LiveTensorBytes(TorchDispatchMode):
    """Within `with LiveTensorBytes(live) as m:` on the CPU, `m.now` is the bytes of tensor
    storage alive (`live`, the tensors alive at entry, and what operators made since) and
    `m.peak` its maximum so far."""

    def __init__(self, live: Iterable[torch.Tensor] = ()):
        super().__init__()
        self.sizes: dict[int, int] = {}  # id(storage) -> bytes, for storages still alive
        self.watches: list[weakref.finalize] = []
        self.now = self.peak = 0
        for t in live:
            self._see(t)

    def __exit__(self, *exc):
        for watch in self.watches:  # storages that outlive the count no longer report to it
            watch.detach()
        return super().__exit__(*exc)

    def _see(self, t: object) -> None:
        if not isinstance(t, torch.Tensor) or t.is_meta or t.layout != torch.strided:
            return
        storage = t.untyped_storage()  # one Python object per storage, however many views
        key, size = id(storage), storage.nbytes()
        old = self.sizes.get(key)
        if old is None:
            # The callback runs as the storage is freed, before its id can be reused.
            self.watches.append(weakref.finalize(storage, self._free, key))
        self.sizes[key] = size
        self.now += size - (old or 0)  # an in-place resize changes a known storage's size
        self.peak = max(self.peak, self.now)

    def _free(self, key: int) -> None:
        self.now -= self.sizes.pop(key)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:
            self._see(t)
        return out


def live_state(model: nn.Module, optimizer: torch.optim.Optimizer, *extra: torch.Tensor) -> list[torch.Tensor]:
    """The tensors a training step finds alive: parameters, their gradients, buffers,
    optimizer state and `extra` (the batch)."""
    tensors = [*model.parameters(), *model.buffers(), *extra]
    tensors += [p.grad for p in model.parameters() if p.grad is not None]
    tensors += [v for state in optimizer.state.values() for v in state.values() if isinstance(v, torch.Tensor)]
    return tensors


def peak_step_memory(step: Callable[[], object], device: torch.device, live: Iterable[torch.Tensor] = ()) -> int:
    """Peak bytes held by tensors during one call of `step` on `device`, counting what is
    alive when it begins (on the CPU, `live` names that; CUDA's allocator knows it itself)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        step()
        torch.cuda.synchronize(device)
        return torch.cuda.max_memory_allocated(device)
    with LiveTensorBytes(live) as counter:
        step()
    return counter.peak
