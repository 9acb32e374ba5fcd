"""Greedy generation of answers, with the bridges reading the text generated so far.

While a student generates, its bridges read the teacher's states of the prompt and of the
tokens it has generated, never of the expected answer: after each new token the grown text
is aligned again (`pairing.extend`), and the teacher reads it (`LiveTeacher`). No arm, the
leaky one included, can see an answer it has not written.
"""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING

import torch

from ...analysis.common import evaluating
from ...precision import autocast
from .dataset import Rows
from ...data.pairing import Encoded, as_tensor, gather_keys, key_mask

if TYPE_CHECKING:
    from .arm_run import ArmRun, TeacherParts


class LiveTeacher:
    """The teacher's states (of every layer the bridges read) of texts that grow as they are
    generated.

    When every text extends the one read before by the same number of tokens and none is
    padded (always so with a shared tokenizer and prompts of one length), only the new tokens
    go through the teacher, with its key-value cache; otherwise the whole texts do."""

    def __init__(self, teacher: TeacherParts):
        self.teacher = teacher
        self.rows: list[list[int]] | None = None
        self.states: torch.Tensor | None = None  # (L, B, U, d_t): `rows`' states, a layer per teacher.layers
        self.past = None  # the key-value cache of `rows`, when they have one length
        self.tails: dict[tuple[int, ...], torch.Tensor] = {}  # a prefix's ids -> its states (L, n, d_t)
        # transformers renamed `past_key_values` to `cache` in the 5.x line; take whichever this one has.
        names = inspect.signature(teacher.model.forward).parameters
        self.cache_name = "cache" if "cache" in names else "past_key_values"

    def keys(self, texts: list[Encoded]) -> dict[int, torch.Tensor]:
        """layer -> (B, K, d_t): each text's whole-text teacher states, then its tails' (the
        layout `pairing.key_mask` reads), zero-padded. A tail's states come from a pass over its
        own prefix (remembered: a prompt's tails recur at every generated token)."""
        states = self._read([e.teacher for e in texts])
        missing = sorted({tuple(prefix) for e in texts for prefix, _ in e.tail_prefixes()} - set(self.tails))
        if missing:
            ids = as_tensor([list(m) for m in missing])
            lengths = torch.tensor([len(m) for m in missing])
            mask = (torch.arange(ids.shape[1])[None, :] < lengths[:, None]).long()
            hidden = self._forward(ids, mask, None)
            self.past = None  # that pass was not the texts' own
            self.rows = None
            for b, m in enumerate(missing):
                self.tails[m] = hidden[:, b, :len(m)]
        keys = gather_keys(texts, states, lambda b: [self.tails[tuple(p)][:, -k:]
                                                     for p, k in texts[b].tail_prefixes()])
        return dict(zip(self.teacher.layers, keys))

    def read(self, rows: list[list[int]]) -> dict[int, torch.Tensor]:
        """rows: teacher ids of each text -> layer -> (B, U_max, d_t) float32 states, zero-padded."""
        return dict(zip(self.teacher.layers, self._read(rows)))

    def _read(self, rows: list[list[int]]) -> torch.Tensor:
        """`read`, the layers stacked: (L, B, U_max, d_t)."""
        old = self.rows
        grown = (old is not None and self.past is not None and len(rows) == len(old)
                 and len({len(r) for r in rows}) == 1 and all(r[:len(o)] == o for r, o in zip(rows, old)))
        if grown and len(rows[0]) > len(old[0]):
            new = torch.tensor([r[len(old[0]):] for r in rows], dtype=torch.long)
            self.states = torch.cat([self.states, self._forward(new, None, self.past)], dim=2)
        elif not grown:
            ids = as_tensor(rows)
            lengths = torch.tensor([len(r) for r in rows])
            if len(set(lengths.tolist())) == 1:
                self.states = self._forward(ids, None, None)
            else:
                mask = (torch.arange(ids.shape[1])[None, :] < lengths[:, None]).long()
                self.states = self._forward(ids, mask, None) * mask[..., None]
                self.past = None  # a padded batch cannot be continued through the cache
        self.rows = [list(r) for r in rows]
        return self.states

    def _forward(self, ids: torch.Tensor, mask: torch.Tensor | None, past) -> torch.Tensor:
        """ids (B, n) -> their states (L, B, n, d_t), float32 (rounded as the cached ones are)."""
        device = next(self.teacher.model.parameters()).device
        with torch.no_grad(), autocast(device, self.teacher.precision):
            out = self.teacher.model(input_ids=ids, attention_mask=mask, use_cache=True, output_hidden_states=True,
                                     **{self.cache_name: past})
        self.past = getattr(out, self.cache_name)
        states = torch.stack([out.hidden_states[layer] for layer in self.teacher.layers]).float().cpu()
        return states.to(torch.bfloat16).float() if self.teacher.round_bf16 else states


@torch.no_grad()
def generate(run: ArmRun, rows: Rows, indices: list[int], chunk: int = 64) -> list[str]:
    """The decoded greedy continuation of each row's prompt (`max_new_tokens` student tokens)."""
    by_length: dict[int, list[int]] = {}
    for i in indices:  # prompts of one length batch without padding
        by_length.setdefault(rows.answer_start[i], []).append(i)
    texts: dict[int, str] = {}
    with evaluating(run.model):
        for _, members in sorted(by_length.items()):
            for start in range(0, len(members), chunk):
                part = members[start:start + chunk]
                for i, new in zip(part, _greedy(run, rows, part)):
                    texts[i] = run.pairing.decode(new)
    return [texts[i] for i in indices]


def _greedy(run: ArmRun, rows: Rows, part: list[int]) -> list[list[int]]:
    """Rows `part` (prompts of one length) -> the student tokenizer ids generated for each."""
    prompts = [rows.texts[i].student[:rows.answer_start[i]] for i in part]
    prompt_texts = [rows.items[i].prompt for i in part]
    live = LiveTeacher(run.teacher) if run.arm.reads == "teacher" else None
    new: list[list[int]] = [[] for _ in part]
    for _ in range(run.cfg.train.max_new_tokens):
        ids = run.data.vocab.to_model(torch.tensor([p + n for p, n in zip(prompts, new)]))
        states = visible = None
        if run.arm.bridged:
            texts = [run.pairing.extend(t, p, n) for t, p, n in zip(prompt_texts, prompts, new)]
            visible = key_mask(texts, leaky=run.arm.visibility == "leaky")
            states = live.keys(texts) if live is not None else run.noise([rows.first + i for i in part],
                                                                           visible.shape[-1])
        logits = run.forward(ids, states, visible)[:, -1].cpu()
        logits[:, run.data.vocab.size:] = -float("inf")  # rows past the tokenizer's ids (a padded embedding)
        nxt = run.data.vocab.to_tokenizer(logits.argmax(-1))
        for n, token in zip(new, nxt.tolist()):
            n.append(token)
    return new
