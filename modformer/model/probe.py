"""A model's parts checked on one tiny forward pass, before a run writes anything.

`probe_model` runs two sequences that differ in one token (position k = T // 2) through the
model, in eval mode without gradients, and looks at what every block's mixer and
feed-forward module returned for what it was given (forward hooks, so a wrong output is
named before the block trips over it). A part is refused, in one line naming it and what
it returned, when its output is

- not a tensor (a tuple, say: return the tensor alone, expose the rest through a `HookPoint`);
- of another shape than its input (B, T, d_model): wider, or (B, 1, d) that would broadcast
  over the positions and train a wrong model silently;
- of another dtype than its input;
- not finite (nan or inf) at initialisation;
- in a causal model, changed at positions before k by the token at k: a causal leak.

A model is causal unless one of its mixers says otherwise with an attribute `causal = False`
(ours: `model.mixer_options.causal=false`, attention's and mixing's alike); a bidirectional part of
yours sets that attribute, and the causality check is then skipped for the whole model.
A mixer whose output at a position depends on that position's input alone (a feed-forward
module given as the mixer) is not refused, since it may be an ablation: a warning says so.

It costs one forward of two sequences of the task's length (a few milliseconds at test
sizes), on the model's own device, with torch's global RNG forked so that training draws
exactly what it would without the probe.
"""

from __future__ import annotations

import traceback
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ..errors import ConfigError
from .block import Block

ROLES = ("mixer", "ffn")
WHAT = {"mixer": "a mixer", "ffn": "a feed-forward module"}


def is_causal(model: nn.Module) -> bool:
    """Whether the model is meant to be causal: no block's mixer says `causal = False`."""
    return all(getattr(b.mixer, "causal", True) is not False for b in model.modules() if isinstance(b, Block))


def _shape(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return f"a tensor of shape {tuple(value.shape)}"
    if isinstance(value, (tuple, list)):
        inner = ", ".join(_shape(v) for v in value[:3])
        return f"a {type(value).__name__} ({inner}{', ...' if len(value) > 3 else ''})"
    return f"a {type(value).__name__}"


def where(error: BaseException) -> str:
    """' (file.py:12)': the innermost frame of the traceback, where the error was raised."""
    frames = traceback.extract_tb(error.__traceback__)
    return f" ({Path(frames[-1].filename).name}:{frames[-1].lineno})" if frames else ""


def _differs(a: torch.Tensor, b: torch.Tensor) -> float:
    """The largest change from a to b relative to a's scale (0 where equal)."""
    if a.numel() == 0:
        return 0.0
    return float((a - b).abs().max() / (1.0 + a.abs().max()))


TOLERANCE = 1e-4  # relative: exact ops give 0; a leak at initialisation is of order 1e-2 and more


def probe_model(model: nn.Module, seq_len: int, names: dict[str, str]) -> list[str]:
    """Probe `model` (tokens (B, T) -> logits) at length `seq_len`; raise one ConfigError for the
    first wrong part; return warnings. `names`: role ("mixer", "ffn") -> how the config names
    the part, e.g. "model.mixer=mypkg.conv:Conv", for the messages."""
    blocks = [(name, m) for name, m in model.named_modules() if isinstance(m, Block)]
    first = next(iter(model.parameters()), None)
    device = first.device if first is not None else torch.device("cpu")
    vocab = int(getattr(model, "vocab_size", 2))
    T, k = seq_len, seq_len // 2
    generator = torch.Generator().manual_seed(0)
    x = torch.randint(0, vocab, (1, T), generator=generator)
    y = x.clone()
    y[0, k] = (x[0, k] + 1) % vocab  # one token changed: the second sequence
    seen: list[tuple[str, str, torch.Tensor, torch.Tensor]] = []  # (role, label, input, output)
    running: list[str] = []

    def label(block_name: str, role: str, module: nn.Module) -> str:
        return f"{names.get(role, 'model.' + role)} ({block_name}.{role}, {type(module).__name__})"

    def before(block_name, role):
        def hook(module, args):
            running.append(label(block_name, role, module))
        return hook

    def after(block_name, role):
        def hook(module, args, output):
            running.pop()
            what, given = label(block_name, role, module), args[0]
            expect = f"{WHAT[role]} maps (B, T, d_model) to a tensor of the same shape and dtype"
            if not isinstance(output, torch.Tensor):
                raise ConfigError(f"{what} returned {_shape(output)} for an input of shape {tuple(given.shape)}: "
                                  f"{expect} (expose anything else through a HookPoint)")
            if output.shape != given.shape:
                broadcast = " (it would broadcast over the positions)" if output.shape[1:2] == (1,) and T > 1 else ""
                raise ConfigError(f"{what} returned a tensor of shape {tuple(output.shape)} for an input of shape "
                                  f"{tuple(given.shape)}{broadcast}: {expect}")
            if output.dtype != given.dtype:
                raise ConfigError(f"{what} returned dtype {output.dtype} for a {given.dtype} input: {expect}")
            if not torch.isfinite(output).all():
                raise ConfigError(f"{what} returned non-finite values (nan or inf) at initialisation, for a finite "
                                  f"input of shape {tuple(given.shape)}")
            seen.append((role, what, given.detach(), output.detach()))
        return hook

    handles = []
    for block_name, block in blocks:
        for role in ROLES:
            part = getattr(block, role)
            handles += [part.register_forward_pre_hook(before(block_name, role)),
                        part.register_forward_hook(after(block_name, role))]
    was_training = {m: m.training for m in model.modules()}
    try:
        model.eval()
        with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []), torch.no_grad():
            try:
                model(torch.cat([x, y]).to(device))
            except ConfigError:
                raise
            except Exception as e:
                part = running[-1] if running else "the model"
                raise ConfigError(f"{part} raised {e.__class__.__name__} on a probe input of 2 sequences of "
                                  f"{T} tokens{where(e)}: {e}") from None
    finally:
        for h in handles:
            h.remove()
        for m, mode in was_training.items():  # each module as it was (train() would recurse from each)
            m.training = mode
    return _check_positions(seen, k, T, is_causal(model))


def _check_positions(seen, k: int, T: int, causal: bool) -> list[str]:
    """The causality check (sequence 1 differs from sequence 0 at position k only) and the
    warnings of mixers that do not mix positions."""
    warnings = []
    for role, what, given, output in seen:
        same_before = _differs(given[0, :k], given[1, :k]) == 0
        if causal and same_before and (change := _differs(output[0, :k], output[1, :k])) > TOLERANCE:
            raise ConfigError(f"{what} is not causal: changing the token at position {k} of {T} changed its output "
                              f"at earlier positions (by {change:.3g} relative), in a causal model (a part that is "
                              f"bidirectional on purpose sets the attribute `causal = False`)")
        if role == "mixer" and k + 1 < T and _differs(given[0, k + 1:], given[1, k + 1:]) == 0 \
                and _differs(output[0, k + 1:], output[1, k + 1:]) == 0:
            warnings.append(f"warning: {what} does not mix positions: its output at a position depends on that "
                            f"position's input alone (a feed-forward module given as the mixer?)")
    return warnings[:1]
