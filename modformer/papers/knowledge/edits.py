"""Editing facts of a pretrained model through its shared knowledge base E, against the
baselines a researcher would run, with the standard measures.

The model is written EXACTLY over one shared base (n_E = d_E = d_ff, `unfold_model_approximate`
at full rank: logits unchanged up to rounding); an edit trains E alone
(`knowledge.entries`). Baselines, on the original model: one middle layer's FFN down
projection (`blocks.{L//2}.ffn.down_proj.weight`), and every FFN (`blocks.*.ffn.*`). Each
edit of k facts (k in `sizes`; the facts drawn from the known capital facts with each seed,
all of them when k is their number) trains until every edited prompt answers its new city,
then is measured: efficacy, generalisation (paraphrases), specificity (every other known
fact), unrelated prompts unchanged, held-out perplexity. For edits through E it also
records which entries changed most and whether they are the entries that carried the
facts' score mass (`entry_mass`).

The facts are drawn from a pool: the first `pool` usable capital facts (by default as many
as the largest size). An edit of the whole pool has no randomness: it is made once,
labelled seed 0. In a sweep (`sweep.experiment: knowledge_edits`, `edits_kind.py`) each run
edits one method, one size and one seed, drawing from the same pool; there a run of the
whole pool at another seed than 0 records nothing (the run at seed 0 holds that edit).
"""

from __future__ import annotations

import copy
import random
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ...data.facts import Fact
from ...interop.packaged import NAME
from ...configtools import option, to_dict
from ...errors import ModformerError
from ...knowledge.editing import EditConfig, Request, answered, continuations, edit, measure
from ...knowledge.fold import fold_model, unfold_model_approximate
from ...model.hooks import capture
from .known import known_fact_list
from .loading import EditFact, edit_facts, fact_requests, load_pretrained, request, text_blocks
from .records import append_record, done_keys

METHODS = {
    "entries": (["knowledge.entries"], "E only (the shared knowledge base)"),
    "one_down_proj": (["blocks.{mid}.ffn.down_proj.weight"], "one middle layer's FFN down projection"),
    "all_ffns": (["blocks.*.ffn.*"], "every FFN's weights"),
}


@dataclass
class EditRunConfig:
    model: str = option(NAME, "the packaged SmolLM2 name or a local Hugging Face Llama folder")
    sizes: list[int] = option(default_factory=lambda: [1, 5, 20], help="facts edited at once")
    seeds: list[int] = option(default_factory=lambda: [0, 1, 2], help="seeds drawing the facts (sizes below the pool)")
    pool: int | None = option(None, "the facts drawn from: the first `pool` usable capital facts (null: as many as "
                                    "the largest size); a sweep over sizes sets it, so that every run draws from "
                                    "the same facts")
    methods: list[str] = option(default_factory=lambda: list(METHODS), help=f"of {', '.join(METHODS)}")
    lr: dict[str, float] = option(default_factory=lambda: {"entries": 3e-4, "one_down_proj": 1e-3, "all_ffns": 3e-5},
                                  help="Adam learning rate per method (set so that one edit takes several steps)")
    max_steps: int = option(60, "most optimizer steps per edit")
    require_known: bool = option(True, "edit only capital facts the model answers (false: the first ones of the "
                                       "fact set whatever it answers, for small or random models)")
    top_entries: int = option(32, "entries compared for the overlap of edited and fact-carrying entries")
    corpus: str = option("imdb", "held-out text")
    eval_blocks: int = option(2, "held-out blocks for the change in perplexity (the ladder's first ones)")
    block_len: int = option(512, "tokens per block")
    unrelated_tokens: int = option(4, "greedy tokens of each unrelated prompt that must stay unchanged")
    threads: int | None = option(None, "CPU threads for torch; null leaves torch's default (a sweep gives each of its "
                                       "workers its share of the cores)")

    def __post_init__(self) -> None:
        if self.threads is not None and self.threads < 1:
            raise ModformerError(f"threads must be positive or null, got {self.threads}")
        unknown = [m for m in self.methods if m not in METHODS]
        if unknown or not self.methods or not self.sizes or any(k < 1 for k in self.sizes):
            raise ModformerError(f"edit run: methods must be among {', '.join(METHODS)} and sizes positive "
                                 f"(at least one of each), got {self.methods} and {self.sizes}")
        if self.pool is not None and self.pool < max(self.sizes):
            raise ModformerError(f"edit run: pool ({self.pool}) must hold the largest size, got sizes {self.sizes}")

    def to_dict(self) -> dict[str, Any]:
        return to_dict(self)

    @property
    def pool_size(self) -> int:
        """How many facts the edits draw from."""
        return self.pool if self.pool is not None else max(self.sizes)

    def draws(self, size: int, one_run: bool = False) -> list[int]:
        """The seeds of the edits of `size` facts: each of `seeds`, or, for the whole pool (no
        randomness), one edit labelled 0; in a sweep's run (`one_run`) only the run at seed 0
        makes that one."""
        if size < self.pool_size:
            return list(self.seeds)
        return [0] if not one_run or 0 in self.seeds else []


def entry_mass(model: nn.Module, requests: list[Request]) -> torch.Tensor:
    """(N, n_E): per request, each entry's |score| at the last prompt position (the one that
    predicts the answer), summed over every layer reading the shared base."""
    rows = []
    with torch.no_grad():
        for r in requests:
            with capture(model, "blocks.*.ffn.scores") as acts:
                model(torch.tensor([r.prompt]))
            rows.append(sum(s[0, -1].abs() for s in acts.values()))
    return torch.stack(rows)


def fact_entries(model: nn.Module, facts: list[Fact], requests: list[Request], k: int) -> dict[str, Any]:
    """Per known fact, its top-k entries by score mass at the answer position and the share of
    the mass they hold; and how much the top-k sets of two facts overlap, within a kind of fact
    (capital, symbol, ...) and across kinds (mean share of common entries)."""
    if not requests:
        return {"k": k, "facts": 0}
    mass = entry_mass(model, requests)
    top = [set(m.topk(k).indices.tolist()) for m in mass]
    within, across = [], []
    for i in range(len(facts)):
        for j in range(i + 1, len(facts)):
            (within if facts[i].kind == facts[j].kind else across).append(len(top[i] & top[j]) / k)
    share = (mass.topk(k, dim=1).values.sum(1) / mass.sum(1)).tolist()
    return {"k": k, "n_entries": mass.shape[1], "top": {f.prompt: sorted(t) for f, t in zip(facts, top)},
            "top_share_mean": sum(share) / len(share), "uniform_share": k / mass.shape[1],
            "overlap_within_kind": sum(within) / max(len(within), 1),
            "overlap_across_kinds": sum(across) / max(len(across), 1)}


def _others(known: list[Fact], edited: list[EditFact]) -> list[Fact]:
    """The known facts an edit of `edited` should leave alone: all but their own capital facts."""
    subjects = {f.subject for f in edited}
    return [k for k in known if not (k.kind == "capital" and k.subject in subjects)]


def _overlap(a: torch.Tensor, b: torch.Tensor, k: int) -> float:
    """Share of the top-k indices of a that are among the top-k of b."""
    return len(set(a.topk(k).indices.tolist()) & set(b.topk(k).indices.tolist())) / k


def draw(seed: int, size: int, pool: int) -> list[int]:
    """The indices into the pool of the facts one edit changes: all of them, or `size` drawn with `seed`."""
    if size >= pool:
        return list(range(pool))  # no randomness
    return sorted(random.Random(seed).sample(range(pool), size))


def run_edits(cfg: EditRunConfig, out: Path, one_run: bool = False) -> Path:
    """Every method x size x seed (`EditRunConfig.draws`; `one_run`: a sweep's run); one
    record each in `out/edits.jsonl` after the `before` record (done ones skipped). A run
    with nothing to edit loads nothing and records nothing."""
    if cfg.threads is not None:
        torch.set_num_threads(cfg.threads)
    records = out / "edits.jsonl"
    if not any(cfg.draws(size, one_run) for size in cfg.sizes):
        return records
    done = done_keys(records)
    pre = load_pretrained(cfg.model)
    tok, model = pre.tokenizer, pre.model
    mid = pre.cfg.n_layers // 2
    known = known_fact_list(pre, out)
    candidates, unrelated_prompts = edit_facts()
    main = answered(model, [request(tok, f.prompt, f.answer) for f in candidates])
    usable = [f for f, ok in zip(candidates, main.tolist()) if ok or not cfg.require_known]
    if len(usable) < cfg.pool_size:
        raise ModformerError(f"the model answers {len(usable)} of the capital facts, fewer than {cfg.pool_size}")
    usable = usable[:cfg.pool_size]
    blocks = text_blocks(tok, source=cfg.corpus, n_blocks=cfg.eval_blocks, length=cfg.block_len)
    unrelated = continuations(model, [tuple(tok(p).input_ids) for p in unrelated_prompts], cfg.unrelated_tokens)
    shared, _ = unfold_model_approximate(model, pre.cfg.ffn_dim, pre.cfg.ffn_dim)

    def plan(size: int) -> list[tuple[int, list[int]]]:
        return [(seed, draw(seed, size, len(usable))) for seed in cfg.draws(size, one_run)]

    if "before" not in done:
        t = time.time()
        cases = [f.case(tok) for f in usable]
        others = fact_requests(tok, _others(known, usable))
        true_paraphrases = [p for f in usable for p in f.case(tok, new=False).paraphrases]
        append_record(records, "before", {
            "facts": [f.subject for f in usable], "known_facts": len(known),
            "fact_entries": fact_entries(shared, known, fact_requests(tok, known), cfg.top_entries),
            "true_paraphrases_answered": float(answered(model, true_paraphrases).float().mean()),
            "measures": asdict(measure(model, cases, others, unrelated, blocks))}, t)
    for method in cfg.methods:
        for size in cfg.sizes:
            for seed, chosen in plan(size):
                key = f"{method}/{size}/{seed}"
                if key in done:
                    continue
                t = time.time()
                facts = [usable[i] for i in chosen]
                cases = [f.case(tok) for f in facts]
                others = fact_requests(tok, _others(known, facts))
                target = copy.deepcopy(shared if method == "entries" else model)
                patterns = [p.format(mid=mid) for p in METHODS[method][0]]
                extra: dict[str, Any] = {}
                if method == "entries":
                    mass = entry_mass(target, [c.request for c in cases])
                    before_entries = target.knowledge.entries.detach().clone()
                result = edit(target, [c.request for c in cases], patterns,
                              EditConfig(lr=cfg.lr[method], max_steps=cfg.max_steps))
                edit_seconds = time.time() - t
                if method == "entries":
                    change = (target.knowledge.entries.detach() - before_entries).norm(dim=1)
                    k = cfg.top_entries
                    extra = {"top_changed_entries": change.topk(k).indices.tolist(),
                             "top_mass_entries": [m.topk(k).indices.tolist() for m in mass],
                             "overlap_changed_vs_mass": [_overlap(change, m, k) for m in mass],
                             "overlap_changed_vs_mass_of_all": _overlap(change, mass.sum(0), k),
                             "chance_overlap": k / change.numel()}
                    target = fold_model(target)  # the same function, scored at an FFN's speed
                measures = measure(target, cases, others, unrelated, blocks)
                kinds = [k.kind for k in _others(known, facts)]
                hits = answered(target, others).tolist()
                extra["specificity_by_kind"] = {
                    kind: sum(h for h, k in zip(hits, kinds) if k == kind) / kinds.count(kind) for kind in set(kinds)}
                rec = append_record(records, key, {
                    "method": method, "size": size, "seed": seed, "facts": [f.subject for f in facts],
                    "new_answers": [f.new_answer for f in facts], "parameters": result.parameters,
                    "steps": result.steps, "answered": result.answered, "changed_scalars": result.changed,
                    "final_loss": result.losses[-1], "edit_seconds": round(edit_seconds, 1),
                    "measures": asdict(measures), **extra}, t)
                print(f"{key}: {result.steps} steps, efficacy {measures.efficacy:.2f}, generalisation "
                      f"{measures.generalisation:.2f}, specificity {measures.specificity:.3f}, unrelated "
                      f"{measures.unrelated:.2f}, perplexity {measures.perplexity:.3f}, {rec['seconds']:.0f} s",
                      flush=True)
                del target
    return records

