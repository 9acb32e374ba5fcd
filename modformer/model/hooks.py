"""Named hook points: the one way to read and to change internals.

A `HookPoint` is an identity module placed where an activation worth reading flows. Its
dotted module name (`blocks.0.mixer.pattern`, `blocks.1.resid_post`) is the activation's
name. `hooked(model, {pattern: fn})` calls fn(name, x) at every matching point during the
forward passes inside the block; a tensor fn returns replaces the activation (ablation,
patching, steering, a bridge reading a teacher), None leaves it as it was.
`capture(model, patterns)` is `hooked` with a function that records. Modules whose fast
path skips materialising an activation (attention maps under `scaled_dot_product_attention`)
ask `hook.active` and take the explicit path only then.

A part of yours exposes an activation the same way: `self.pattern = HookPoint()` in its
constructor and `weights = self.pattern(weights)` in forward (only when `self.pattern.active`
if forming them costs). A mixer's hook point named `pattern`, yielding (B, heads, T, T)
weights whose rows say how much each position reads from each other, is what
`modformer attention`, `capture(model, "blocks.*.mixer.pattern")` and
`train.induction_scores` read; a training that asks for induction scores of a model
without it is refused before it starts (modformer/analysis/induction.py).
"""

from __future__ import annotations

import contextlib
import fnmatch
import weakref
from typing import Callable, Iterator, Mapping

import torch
from torch import nn

from ..errors import ModformerError

# fn(hook name, activation) -> the activation that goes on (same shape), or None: unchanged.
Hook = Callable[[str, torch.Tensor], "torch.Tensor | None"]


class HookPoint(nn.Module):
    """An identity on (any shape) that runs the functions `hooked` gave it, in order.

    It keeps its functions itself rather than as PyTorch forward hooks so that a block
    recomputed under activation checkpointing, in backward after the `hooked` block ended,
    runs the ones its forward pass ran (`pinned`).
    """

    def __init__(self) -> None:
        super().__init__()
        self.fns: tuple[tuple[str, Hook], ...] = ()  # (hook name, fn), in call order

    @property
    def active(self) -> bool:
        return bool(self.fns)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for name, fn in self.fns:
            out = fn(name, x)
            if out is not None:
                if out.shape != x.shape:
                    raise ModformerError(f"a hook at {name} returned shape {tuple(out.shape)} for an activation "
                                         f"of shape {tuple(x.shape)}: return the same shape, or None to leave it")
                x = out
        return x


_ACTIVE: "weakref.WeakSet[HookPoint]" = weakref.WeakSet()  # the points `hooked` gave functions


def pinned(module: nn.Module) -> Callable[..., torch.Tensor]:
    """`module` as a function that runs, whenever called, the hook functions active now.

    Args:
        module: a module holding hook points (a block).

    Returns:
        fn(*args) -> module(*args) with each of its hook points' functions as they are at
            this call; what activation checkpointing recomputes in backward.
    """
    # The block's own points, and every point with functions now: a bridge's gate runs inside
    # the block's recomputation though it is not the block's.
    now = {point: point.fns for point in module.modules() if isinstance(point, HookPoint)}
    now.update({point: point.fns for point in list(_ACTIVE)})

    def call(*args):
        then = {point: point.fns for point in now}
        for point, fns in now.items():
            point.fns = fns
        try:
            return module(*args)
        finally:
            for point, fns in then.items():
                point.fns = fns
    return call


def hook_names(model: nn.Module) -> list[str]:
    """The names of every hook point of `model`, in module order (what `capture` and `hooked` match)."""
    return [name for name, m in model.named_modules() if isinstance(m, HookPoint)]


def _matching(model: nn.Module, patterns: list[str]) -> dict[str, HookPoint]:
    points = {n: m for n, m in model.named_modules() if isinstance(m, HookPoint)}
    chosen = {n: m for n, m in points.items() if any(fnmatch.fnmatchcase(n, p) for p in patterns)}
    if not chosen:
        raise ModformerError(
            f"no hook point matches {patterns} (available: {', '.join(points) or 'none'})"
        )
    return chosen


@contextlib.contextmanager
def hooked(model: nn.Module, hooks: Mapping[str, Hook]) -> Iterator[None]:
    """Call each function at the hook points its glob pattern matches, and let it change them.

    >>> def ablate(name, x):                 # zero the stream after block 0
    ...     return torch.zeros_like(x)
    >>> with hooked(model, {"blocks.0.resid_post": ablate}):
    ...     logits = model(tokens)

    A point matched by several patterns runs their functions in the mapping's order, each
    seeing the previous one's result. Under activation checkpointing a function at a point
    inside a block runs again when the block is recomputed and must give the same result
    there (so it recomputes with its block, and gradients reach what it holds).

    Args:
        model: a model holding `HookPoint`s (every model modformer builds).
        hooks: glob pattern of hook names (`hook_names(model)` lists them) -> fn(name, x),
            returning the activation that goes on (same shape as x) or None (x unchanged).
            A pattern that matches no hook point raises `ModformerError`.

    Returns:
        A context manager; the functions are removed when its block ends.
    """
    added = [(point, (name, fn)) for pattern, fn in hooks.items()
             for name, point in _matching(model, [pattern]).items()]
    for point, entry in added:
        point.fns = (*point.fns, entry)
        _ACTIVE.add(point)
    try:
        yield
    finally:
        for point, entry in added:
            point.fns = tuple(e for e in point.fns if e is not entry)
            if not point.fns:
                _ACTIVE.discard(point)


@contextlib.contextmanager
def capture(model: nn.Module, *patterns: str) -> Iterator[dict[str, torch.Tensor]]:
    """Record the activations whose hook names match any glob pattern (`hooked`, reading).

    >>> with capture(model, "blocks.*.mixer.pattern") as acts:
    ...     model(tokens)
    >>> acts["blocks.0.mixer.pattern"].shape   # (B, n_heads, T, T)

    Values are detached; a later forward pass inside the block overwrites earlier ones.

    Args:
        model: a model holding `HookPoint`s (every model modformer builds).
        *patterns: glob patterns of hook names (`hook_names(model)` lists them); one that
            matches no hook point raises `ModformerError`.

    Returns:
        A context manager yielding a dict, hook name -> its latest output, filled by the
            forward passes run inside the block; the hooks are removed when the block ends.
    """
    acts: dict[str, torch.Tensor] = {}

    def record(name: str, x: torch.Tensor) -> None:
        acts[name] = x.detach()

    chosen = _matching(model, list(patterns))
    with hooked(model, dict.fromkeys(chosen, record)):
        yield acts
