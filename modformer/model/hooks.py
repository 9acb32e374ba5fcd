"""Named hook points: one uniform way to read internals (attention maps, hidden states).

A `HookPoint` is an identity module placed where an activation worth reading flows. Its
dotted module name (`blocks.0.mixer.pattern`, `blocks.1.resid_post`) is the activation's
name. `capture(model, patterns)` records every matching activation of the next forward
passes. Modules whose fast path skips materialising an activation (attention maps under
`scaled_dot_product_attention`) ask `hook.active` and take the explicit path only then.

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
from typing import Iterator

import torch
from torch import nn

from ..errors import ModformerError


class HookPoint(nn.Module):
    def __init__(self) -> None:
        super().__init__()

    @property
    def active(self) -> bool:
        return bool(self._forward_hooks)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x


def hook_names(model: nn.Module) -> list[str]:
    return [name for name, m in model.named_modules() if isinstance(m, HookPoint)]


@contextlib.contextmanager
def capture(model: nn.Module, *patterns: str) -> Iterator[dict[str, torch.Tensor]]:
    """Record the activations whose hook names match any glob pattern.

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
    points = {n: m for n, m in model.named_modules() if isinstance(m, HookPoint)}
    chosen = [n for n in points if any(fnmatch.fnmatchcase(n, p) for p in patterns)]
    if not chosen:
        raise ModformerError(
            f"no hook point matches {list(patterns)} (available: {', '.join(points) or 'none'})"
        )
    acts: dict[str, torch.Tensor] = {}
    handles = []
    for name in chosen:
        def record(_module, _inputs, output, name=name):
            acts[name] = output.detach()

        handles.append(points[name].register_forward_hook(record))
    try:
        yield acts
    finally:
        for h in handles:
            h.remove()
