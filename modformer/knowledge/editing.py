"""Editing what a model answers by training a chosen set of its parameters, and the standard
editing measures (efficacy, generalisation, specificity, held-out perplexity).

Everything here works on token ids, so it needs no tokenizer: a `Request` is a prompt and
the answer it should complete with. A request is *answered* when greedy decoding from the
prompt produces exactly the answer's tokens first, i.e. when every answer token is the
argmax of the logits at the position before it (teacher forcing gives the greedy path).

`edit(model, requests, ["knowledge.entries"], cfg)` edits through the knowledge base E
alone; the baselines a researcher runs are the same call with other parameter patterns
(`blocks.15.ffn.down_proj.weight`: one middle FFN's down projection; `blocks.*.ffn.*`:
every FFN). Parameters outside the patterns are never handed to the optimizer, so they
stay bit-identical (tested).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from ..configtools import option
from ..errors import ModformerError
from ..freeze import matching_parameters


@dataclass(frozen=True)
class Request:
    """A prompt (token ids) and the answer (token ids) it should complete with.

    Args:
        prompt: the prompt's token ids (non-empty).
        answer: the token ids the prompt should complete with (non-empty).
    """

    prompt: tuple[int, ...]
    answer: tuple[int, ...]

    def __post_init__(self) -> None:
        if not self.prompt or not self.answer:
            raise ModformerError("an edit request needs a non-empty prompt and a non-empty answer")


@dataclass(frozen=True)
class EditCase:
    """One edited fact: the request (prompt -> new answer) and its paraphrases (-> new answer).

    Args:
        request: the edited prompt and its new answer.
        paraphrases: other prompts of the same fact, each with the same new answer.
    """

    request: Request
    paraphrases: tuple[Request, ...] = ()


@dataclass
class EditConfig:
    """How an edit trains: Adam on the named parameters until every request is answered."""

    lr: float = option(1e-3, "Adam learning rate")
    max_steps: int = option(100, "most optimizer steps; the edit stops earlier once every request is answered")
    extra_steps: int = option(0, "steps taken after every request is first answered (a margin)")
    batch_size: int = option(64, "requests per forward pass when scoring")

    def __post_init__(self) -> None:
        if self.lr <= 0 or self.max_steps < 0 or self.extra_steps < 0 or self.batch_size < 1:
            raise ModformerError(f"edit config: lr must be positive, max_steps and extra_steps non-negative, "
                                 f"batch_size positive, got {self}")


@dataclass
class EditResult:
    steps: int  # optimizer steps taken
    answered: bool  # every request answered at the end
    losses: list[float] = field(default_factory=list)  # mean answer cross-entropy before each step
    parameters: list[str] = field(default_factory=list)  # the parameters the edit trained
    changed: int = 0  # how many scalars of those parameters changed


def _device(model: nn.Module) -> torch.device:
    return next(model.parameters()).device


def _batch(requests: list[Request], device: torch.device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """inputs (N, T): prompt + answer minus its last token, right-padded with 0 (a causal model's
    earlier positions never see the padding); targets (N, T): the next token where it is an
    answer token, else -100."""
    length = max(len(r.prompt) + len(r.answer) - 1 for r in requests)
    inputs = torch.zeros(len(requests), length, dtype=torch.long)
    targets = torch.full((len(requests), length), -100, dtype=torch.long)
    for i, r in enumerate(requests):
        seq = list(r.prompt) + list(r.answer)
        inputs[i, :len(seq) - 1] = torch.tensor(seq[:-1])
        targets[i, len(r.prompt) - 1:len(seq) - 1] = torch.tensor(r.answer)
    return inputs.to(device), targets.to(device), targets.ne(-100).to(device)


def _scores(logits: torch.Tensor, targets: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """logits (N, T, V) -> (mean answer cross-entropy per request (N,), answered per request (N,) bool)."""
    ce = F.cross_entropy(logits.float().flatten(0, 1), targets.flatten(), reduction="none").view(targets.shape)
    per_request = (ce * mask).sum(1) / mask.sum(1)
    hit = (logits.argmax(-1) == targets) | ~mask
    return per_request, hit.all(1)


def answered(model: nn.Module, requests: list[Request], *, batch_size: int = 64) -> torch.Tensor:
    """(N,) bool: does greedy decoding from each prompt start with its answer?

    Args:
        model: a causal model mapping token ids (B, T) to logits (B, T, vocab_size).
        requests: the N requests to check.
        batch_size: requests per forward pass.

    Returns:
        A bool tensor (N,) on the CPU: True where every answer token is the argmax of the
            logits at the position before it (empty when there are no requests).
    """
    out = []
    with torch.no_grad():
        for start in range(0, len(requests), batch_size):
            inputs, targets, mask = _batch(requests[start:start + batch_size], _device(model))
            out.append(_scores(model(inputs), targets, mask)[1].cpu())
    return torch.cat(out) if out else torch.zeros(0, dtype=torch.bool)


def edit(model: nn.Module, requests: list[Request], patterns: list[str], cfg: EditConfig | None = None) -> EditResult:
    """Train only the parameters matching `patterns` (globs over `named_parameters`) with Adam
    on the answers' cross-entropy until every request is answered (then `extra_steps` more),
    or `cfg.max_steps`. All requests form one batch. The model is edited in place, in eval
    mode; `requires_grad` flags are restored afterwards.

    Args:
        model: the model to edit, in place; it maps token ids (B, T) to logits (B, T, vocab_size).
        requests: the prompts and the answers they should complete with (at least one).
        patterns: globs over the model's parameter names (e.g. `knowledge.entries`,
            `blocks.*.ffn.*`); each must match at least one parameter.
        cfg: learning rate, step limits and scoring batch size; None: `EditConfig()`.

    Returns:
        An `EditResult`: `steps` taken, whether every request is `answered` at the end, the
            mean answer cross-entropy before each step (`losses`), the names of the trained
            `parameters`, and how many of their scalars `changed`.
    """
    cfg = cfg or EditConfig()
    if not requests:
        raise ModformerError("nothing to edit: no requests")
    names: list[str] = []
    for pattern in patterns:
        found = matching_parameters(model, pattern)
        if not found:
            raise ModformerError(f"edit parameter pattern '{pattern}' matches no parameter of the model")
        names += [n for n in found if n not in names]
    params = dict(model.named_parameters())
    flags = {n: p.requires_grad for n, p in params.items()}
    before = {n: params[n].detach().clone() for n in names}
    result = EditResult(0, False, parameters=names)
    inputs, targets, mask = _batch(requests, _device(model))
    training = model.training
    try:
        for n, p in params.items():
            p.requires_grad_(n in before)
        optimizer = torch.optim.Adam([params[n] for n in names], lr=cfg.lr)
        model.eval()
        margin = None
        while True:
            loss, hit = _scores(model(inputs), targets, mask)
            result.losses.append(float(loss.detach().mean()))
            if hit.all() and margin is None:
                margin = cfg.extra_steps
            if (margin is not None and margin <= 0) or result.steps >= cfg.max_steps:
                break
            if margin is not None:
                margin -= 1
            optimizer.zero_grad(set_to_none=True)
            loss.mean().backward()
            optimizer.step()
            result.steps += 1
        if result.steps:  # the last step's effect has not been scored yet
            result.answered = bool(answered(model, requests, batch_size=cfg.batch_size).all())
        else:
            result.answered = bool(hit.all())
    finally:
        for n, p in params.items():
            p.requires_grad_(flags[n])
            p.grad = None
        model.train(training)
    result.changed = sum(int((params[n].detach() != b).sum()) for n, b in before.items())
    return result


def perplexity(model: nn.Module, blocks: torch.Tensor, *, batch_size: int = 4) -> float:
    """exp(mean next-token cross-entropy) over every position of `blocks` (N, T) token ids.

    Args:
        model: a causal model mapping token ids (B, T) to logits (B, T, vocab_size).
        blocks: held-out token ids (N, T), T >= 2; positions 1..T-1 are predicted.
        batch_size: blocks per forward pass.

    Returns:
        The perplexity, exp of the mean cross-entropy over all N (T - 1) predicted tokens.
    """
    if blocks.ndim != 2 or blocks.shape[1] < 2:
        raise ModformerError(f"perplexity needs (N, T >= 2) token blocks, got shape {tuple(blocks.shape)}")
    total, count = 0.0, 0
    with torch.no_grad():
        for start in range(0, blocks.shape[0], batch_size):
            chunk = blocks[start:start + batch_size].to(_device(model))
            logits = model(chunk[:, :-1])
            total += float(F.cross_entropy(logits.float().flatten(0, 1), chunk[:, 1:].flatten(), reduction="sum"))
            count += chunk[:, 1:].numel()
    return math.exp(total / count)


@dataclass
class EditMeasures:
    """The standard editing measures of one model (before or after an edit); fractions in [0, 1].

    Args:
        efficacy: share of edited prompts answered with the new answer.
        generalisation: share of their paraphrases answered with the new answer.
        specificity: share of other facts the model knew, still answered correctly.
        unrelated: share of unrelated prompts whose greedy continuation is unchanged.
        perplexity: perplexity on held-out text, or None when none was given.
    """

    efficacy: float
    generalisation: float
    specificity: float
    unrelated: float
    perplexity: float | None


def measure(model: nn.Module, cases: list[EditCase], others: list[Request], unrelated: list[Request],
            blocks: torch.Tensor | None = None, *, batch_size: int = 64) -> EditMeasures:
    """The measures of `model`: `cases` carry the NEW answers; `others` the true answers of
    facts not edited; `unrelated` the original model's own greedy continuations of unrelated
    prompts (so 1.0 means unchanged); `blocks` (N, T) held-out text, or None to skip it.

    Args:
        model: a causal model mapping token ids (B, T) to logits (B, T, vocab_size).
        cases: the edited facts, with their NEW answers (efficacy, generalisation).
        others: facts not edited, with their true answers (specificity).
        unrelated: unrelated prompts with the original model's own greedy continuations, as
            `continuations` gives them (unrelated).
        blocks: held-out token ids (N, T) for the perplexity, or None to skip it.
        batch_size: requests per forward pass.

    Returns:
        The `EditMeasures`; a share whose list of requests is empty is NaN.
    """

    def share(requests: list[Request]) -> float:
        return float(answered(model, requests, batch_size=batch_size).float().mean()) if requests else float("nan")

    return EditMeasures(
        efficacy=share([c.request for c in cases]),
        generalisation=share([p for c in cases for p in c.paraphrases]),
        specificity=share(others), unrelated=share(unrelated),
        perplexity=None if blocks is None else perplexity(model, blocks))


def continuations(model: nn.Module, prompts: list[tuple[int, ...]], tokens: int) -> list[Request]:
    """Each prompt with the model's own greedy continuation of `tokens` tokens, as requests
    (the `unrelated` set of `measure`).

    Args:
        model: a causal model mapping token ids (B, T) to logits (B, T, vocab_size).
        prompts: the prompts' token ids.
        tokens: how many tokens to continue each prompt with, greedily.

    Returns:
        One `Request` per prompt, in order: the prompt and its `tokens` continuation tokens.
    """
    out = []
    with torch.no_grad():
        for prompt in prompts:
            seq = torch.tensor([prompt], device=_device(model))
            for _ in range(tokens):
                seq = torch.cat([seq, model(seq)[:, -1:].argmax(-1)], dim=1)
            out.append(Request(tuple(prompt), tuple(seq[0, len(prompt):].tolist())))
    return out
