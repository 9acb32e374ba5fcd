"""The texts of an LLM-Modules experiment: task items with a held-out split, and a corpus.

An `Item` is a prompt, the completion a training text continues it with, and the answer a
generated continuation must yield. Items carry a `group`; the split holds out whole groups,
so a held-out fact is never trained on and a held-out operand value never appears in
training sums.

Worked examples:

    facts       "The capital of France is" + " Paris"                      expected "Paris"
    arithmetic  "Add 47 and 38." + " 7+8=15, carry 1. 4+3+1=8. Answer: 85."  expected "85"

The sum ends with a full stop, so that a student learns where the answer ends: without it,
a generated "Answer: 85" runs on into more digits.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from typing import Callable

from ...errors import ModformerError
from ...data.facts import Fact, first_word


@dataclass(frozen=True)
class Item:
    prompt: str
    completion: str  # starts with its separating space
    expected: str
    group: str  # the unit of the held-out split

    @property
    def text(self) -> str:
        return self.prompt + self.completion


def fact_items(facts: list[Fact]) -> list[Item]:
    return [Item(f.prompt, " " + f.answer, f.answer, group=f.text) for f in facts]


def worked_sum(a: int, b: int) -> str:
    """The steps of a + b, digit by digit from the right: worked_sum(47, 38) ==
    "7+8=15, carry 1. 4+3+1=8. Answer: 85."."""
    steps, carry, x, y = [], 0, a, b
    while x or y:
        dx, dy = x % 10, y % 10
        total = dx + dy + carry
        step = f"{dx}+{dy}" + (f"+{carry}" if carry else "") + f"={total}"
        carry = total // 10
        steps.append(step + (", carry 1." if carry else "."))
        x, y = x // 10, y // 10
    return " ".join(steps) + f" Answer: {a + b}."


def arithmetic_items(digits: int) -> list[Item]:
    """Every sum of two `digits`-digit numbers, grouped by the first operand (the held-out
    split then holds out operand values)."""
    low, high = 10 ** (digits - 1), 10 ** digits
    return [Item(f"Add {a} and {b}.", " " + worked_sum(a, b), str(a + b), group=str(a))
            for a in range(low, high) for b in range(low, high)]


def arithmetic_answer(text: str) -> str:
    """The number after the first "Answer:" of a generated continuation, up to the first
    non-digit ("" if none): "Answer: 85. Add" -> "85"."""
    found = re.search(r"Answer:\s*(\d+)", text)
    return found.group(1) if found else ""


EXTRACT: dict[str, Callable[[str], str]] = {"facts": first_word, "arithmetic": arithmetic_answer}


def split_items(items: list[Item], held_out: float, seed: int) -> tuple[list[Item], list[Item]]:
    """(train, held out): a seeded share `held_out` of the groups, all of whose items are held out."""
    groups = sorted({item.group for item in items})
    random.Random(seed).shuffle(groups)
    n_held = max(1, round(held_out * len(groups)))
    if n_held >= len(groups):
        raise ModformerError(f"data.held_out={held_out} leaves no training item among {len(groups)} groups")
    held = set(groups[:n_held])
    return [i for i in items if i.group not in held], [i for i in items if i.group in held]


def load_corpus(source: str, rows: int, seed: int, column: str = "text") -> list[str]:
    """`rows` texts, a seeded sample of the distinct documents of a modformer data source
    (`modformer list` names them; a local .txt file gives one text per line; table-like
    files and hub datasets are read from `column`), or of the Rotten Tomatoes sentences for
    "movie-reviews"."""
    from ...data.open import open_source
    from ...data.sources import Columns

    spec = "rotten_tomatoes" if source == "movie-reviews" else source
    try:
        documents = open_source(spec, Columns(text=column, text_split="line")).documents()
    except ModformerError as e:
        raise ModformerError(f"data.corpus={source}: {e}") from None
    texts = sorted({d.text for d in documents if d.text.strip()})  # sorted: a reproducible sample
    if not texts:
        raise ModformerError(f"data.corpus={source} holds no text")
    random.Random(seed).shuffle(texts)
    return texts[:rows]
