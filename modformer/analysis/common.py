"""Helpers shared by the analysis tools: evaluation mode, limits read off a model, random
tokens from a local generator, and atomic figure writing. `plt` is pyplot with the Agg
backend chosen before pyplot loads; the analysis modules import it from here."""

from __future__ import annotations

import contextlib
import re
from typing import Iterator

import torch
from torch import nn

from ..figures import plt, save_figure  # noqa: F401  (re-exported for the analysis modules)


@contextlib.contextmanager
def evaluating(model: nn.Module) -> Iterator[None]:
    """Eval mode and no gradients inside; every module's own training flag restored after.

    Flags are restored per module, not with `model.train(was_training)`, so that a part kept
    in eval mode on purpose (a frozen teacher) stays that way.

    Args:
        model: the model to run in eval mode; every one of its modules' flags is restored.

    Yields:
        Nothing; the block inside the `with` runs in eval mode under `torch.no_grad()`.
    """
    modes = [(m, m.training) for m in model.modules()]
    model.eval()
    try:
        with torch.no_grad():
            yield
    finally:
        for module, mode in modes:
            module.training = mode


def model_device(model: nn.Module) -> torch.device:
    for tensor in (*model.parameters(), *model.buffers()):
        return tensor.device
    return torch.device("cpu")


def model_max_seq_len(model: nn.Module) -> int | None:
    """The longest sequence the model accepts (its `max_seq_len`), or None if it has no limit.

    Args:
        model: any module; its attribute `max_seq_len` is read if it has one.

    Returns:
        `model.max_seq_len` when it is an int, else None.
    """
    limit = getattr(model, "max_seq_len", None)
    return limit if isinstance(limit, int) else None


def random_tokens(batch: int, length: int, vocab_size: int, generator: torch.Generator) -> torch.Tensor:
    """(batch, length) int64 token ids in [0, vocab_size), drawn only from `generator`.

    Each row is a prefix of a random permutation of the vocabulary, so no token repeats
    within a row when vocab_size >= length. With a smaller vocabulary the row is a
    concatenation of independent permutations: every token then occurs ceil(length /
    vocab_size) times at most, the fewest possible. Returned on the generator's device.

    Args:
        batch: number of rows B (positive).
        length: length T of each row (positive).
        vocab_size: token ids are drawn from [0, vocab_size) (positive).
        generator: the only source of randomness; its device is the result's.

    Returns:
        Token ids (batch, length), int64, on the generator's device.
    """
    if batch < 1 or length < 1 or vocab_size < 1:
        raise ValueError(f"batch, length and vocab_size must be positive, got {batch}, {length}, {vocab_size}")
    copies = -(-length // vocab_size)  # ceil
    keys = torch.rand(batch, copies, vocab_size, generator=generator, device=generator.device)
    return keys.argsort(dim=-1).reshape(batch, copies * vocab_size)[:, :length]


_LAYER = re.compile(r"blocks\.(\d+)\.")


def by_layer(acts: dict[str, torch.Tensor]) -> list[torch.Tensor]:
    """Captured activations named `blocks.{i}.*`, ordered by block index i (not by name,
    where 'blocks.10' would sort before 'blocks.2').

    Args:
        acts: captured activations by hook point name, every name starting `blocks.{i}.`.

    Returns:
        The activations, ordered by block index.
    """
    return [acts[name] for name in sorted(acts, key=lambda n: int(_LAYER.match(n).group(1)))]
