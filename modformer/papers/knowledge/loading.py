"""What the pretrained knowledge-base experiments read: the model (the packaged SmolLM2 or any
local Hugging Face Llama folder) as our standard `Transformer`, its tokenizer, held-out text
cut into token blocks, the 221 facts as edit requests, and the capital-edit fact set
(`capital_edits.json`, committed data: true answer, new answer, three paraphrases)."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ...data.facts import Fact, all_facts, known_facts
from ...interop.packaged import NAME, load_teacher
from ...data.open import open_source
from ...data.sources import Columns
from ...errors import ModformerError
from ...interop.hf_llama import from_hf_llama
from ...knowledge.editing import EditCase, Request
from ...model.config import ModelConfig
from ...model.transformer import Transformer

EDIT_FACTS = Path(__file__).with_name("capital_edits.json")


@dataclass
class Pretrained:
    model: Transformer  # our standard model with the Hugging Face weights (float32, eval mode)
    cfg: ModelConfig
    tokenizer: Any  # the Hugging Face tokenizer
    hf: Any  # the Hugging Face model itself (for `known_facts`, which generates with it)


def load_pretrained(source: str = NAME) -> Pretrained:
    """The packaged SmolLM2-135M-Instruct (`source` left at its name; cached as float32 under
    ~/.cache/modformer) or a local Hugging Face Llama-family folder."""
    if source != NAME and not (Path(source).expanduser() / "config.json").is_file():
        raise ModformerError(f"--model {source}: not a Hugging Face model folder (no config.json); give a local "
                             f"Llama folder or {NAME} (the packaged teacher)")
    hf, tokenizer = load_teacher(source if source == NAME else str(Path(source).expanduser()))
    model, cfg = from_hf_llama(hf)
    return Pretrained(model.eval(), cfg, tokenizer, hf)


def _rank(text: str, seed: int) -> str:
    return hashlib.sha256(f"{seed}:{text}".encode()).hexdigest()


def text_blocks(tokenizer: Any, *, source: str = "imdb", n_blocks: int, length: int, skip_blocks: int = 0,
                seed: int = 0) -> torch.Tensor:
    """(n_blocks, length) token ids of documents of `source` taken in the order of a hash of
    (seed, text), each followed by end-of-text, cut into consecutive blocks; the first
    `skip_blocks` blocks are passed over (so evaluation and training text never overlap:
    evaluation takes blocks 0.., training blocks after them)."""
    docs = sorted({d.text for d in open_source(source, Columns()).documents()}, key=lambda t: _rank(t, seed))
    eos = tokenizer.eos_token_id if tokenizer.eos_token_id is not None else 0
    need = (n_blocks + skip_blocks) * length
    ids: list[int] = []
    for text in docs:
        ids += tokenizer(text, add_special_tokens=False).input_ids + [eos]
        if len(ids) >= need:
            break
    if len(ids) < need:
        raise ModformerError(f"{source} holds {len(ids)} tokens, fewer than the {need} asked for")
    return torch.tensor(ids[skip_blocks * length:need]).view(n_blocks, length)


def request(tokenizer: Any, prompt: str, answer: str) -> Request:
    """The prompt's ids (as `known_facts` tokenizes it) and the ids of ' ' + answer."""
    answer_ids = tokenizer(" " + answer, add_special_tokens=False).input_ids
    return Request(tuple(tokenizer(prompt).input_ids), tuple(answer_ids))


def fact_requests(tokenizer: Any, facts: list[Fact]) -> list[Request]:
    return [request(tokenizer, f.prompt, f.answer) for f in facts]


def the_known_facts(pre: Pretrained) -> list[Fact]:
    """The facts of `modformer.data.facts` the model completes correctly (greedy generation)."""
    return known_facts(pre.hf, pre.tokenizer, all_facts())


@dataclass
class EditFact:
    subject: str
    prompt: str
    answer: str
    new_answer: str
    paraphrases: list[str]

    def case(self, tokenizer: Any, *, new: bool = True) -> EditCase:
        """The edit (to the new answer, or the true one with `new=False`) and its paraphrases."""
        answer = self.new_answer if new else self.answer
        return EditCase(request(tokenizer, self.prompt, answer),
                        tuple(request(tokenizer, p, answer) for p in self.paraphrases))


def edit_facts() -> tuple[list[EditFact], list[str]]:
    """(the capital facts to edit, the unrelated prompts) of `capital_edits.json`."""
    data = json.loads(EDIT_FACTS.read_text())
    return [EditFact(**f) for f in data["facts"]], list(data["unrelated"])
