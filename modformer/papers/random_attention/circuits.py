"""How a trained model solves retrieval, read and written through hook points: whether
Frozen-QK, where it solves retrieval, uses the head pattern Standard uses (a reviewer's
question about the paper's Frozen-QK results).

On held-out retrieval examples with at least two stored pairs (`retrieval`: pairs
`k v k v ...`, then the query token of one key; the answer is that key's value), per run:

- `accuracy`: the answer at the query position is the argmax;
- `mass` (layer, head, 3): the query row's attention weight on the queried pair's key, on
  its value, and on everything else;
- `head_ablation` (layer, head): accuracy with that head's pattern replaced by uniform causal
  attention (the head still reads values, but no longer chooses where);
- `knockout` {layer: {key, value}}: accuracy with every head of that layer barred from the
  queried pair's key (or value) position at the query (its weight set to 0, the row
  renormalised): which position the answer is read from, and in which layer;
- `patching` (layer, head): activation patching of attention patterns. The corrupted input
  queries another stored pair (same sequence otherwise, so only the query row differs); with
  d = logit(clean answer) - logit(corrupted answer) at the query, a head's score is
  (d_patched - d_corrupted) / (d_clean - d_corrupted) when its clean pattern is patched into
  the corrupted run: 1 where that head's choice of position alone carries the answer;
- `layer_patching` (layer,): the same with every head of the layer patched at once;
- `induction` (layer, head): TransformerLens's induction score on repeated random tokens.

`modformer random-attention circuits SWEEP` writes each finished run's `circuits.json`
(beside its summary; `modformer quote` reads it as `circuits.json:PATH`) and the sweep's
`circuits.md`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ...analysis.induction import induction_scores
from ...api import load_run
from ...errors import ModformerError
from ...files import atomic_write_text
from ...model.hooks import capture, hooked
from ...sweep.runner import read_results
from ...tasks.retrieval import Retrieval
from ...version import code_version

PATTERN = "blocks.{}.mixer.pattern"


def retrieval_examples(task: Retrieval, count: int) -> dict[str, torch.Tensor]:
    """The first `count` held-out examples with 2+ pairs: inputs (B, T), a corrupted copy
    querying the next stored pair, the query, key and value positions (B,), both answers (B,)."""
    batch = task.test_set()
    keep = (batch.slices["n_pairs"] >= 2).nonzero().flatten()[:count]
    inputs, targets = batch.inputs[keep], batch.targets[keep]
    rows = torch.arange(len(keep))
    query = (inputs >= task.n + task.half).float().argmax(1)  # (B,)
    n_pairs = query // 2
    key_token = inputs[rows, query] - task.n  # the queried key's own token
    pair = (inputs[:, 0:2 * task.n:2] == key_token[:, None]).float().argmax(1)  # (B,) which pair
    other = (pair + 1) % n_pairs
    corrupted = inputs.clone()
    corrupted[rows, query] = inputs[rows, 2 * other] + task.n
    return {"inputs": inputs, "corrupted": corrupted, "query": query, "key": 2 * pair, "value": 2 * pair + 1,
            "answer": targets[rows, query], "other_answer": inputs[rows, 2 * other + 1]}


def _at_query(logits: torch.Tensor, ex: dict[str, torch.Tensor]) -> torch.Tensor:
    return logits[torch.arange(len(ex["query"])), ex["query"]]  # (B, V)


def _accuracy(model: nn.Module, ex: dict[str, torch.Tensor], hooks: dict | None = None) -> float:
    with hooked(model, hooks or {}):
        predicted = _at_query(model(ex["inputs"]), ex).argmax(-1)
    return float((predicted == ex["answer"]).float().mean())


def _difference(model: nn.Module, inputs: torch.Tensor, ex: dict[str, torch.Tensor], hooks: dict | None = None):
    """Mean logit(clean answer) - logit(corrupted answer) at the query."""
    with hooked(model, hooks or {}):
        logits = _at_query(model(inputs), ex)
    rows = torch.arange(len(logits))
    return float((logits[rows, ex["answer"]] - logits[rows, ex["other_answer"]]).mean())


def _uniform_head(head: int):
    def replace(name: str, w: torch.Tensor) -> torch.Tensor:  # w: (B, H, T, T)
        T = w.shape[-1]
        causal = torch.ones(T, T, dtype=w.dtype).tril()
        w = w.clone()
        w[:, head] = causal / causal.sum(-1, keepdim=True)
        return w
    return replace


def _bar(ex: dict[str, torch.Tensor], where: str):
    """Every head's query row loses its weight on the queried pair's `where` position."""
    rows = torch.arange(len(ex["query"]))

    def replace(name: str, w: torch.Tensor) -> torch.Tensor:
        w = w.clone()
        w[rows, :, ex["query"], ex[where]] = 0.0
        return w / w.sum(-1, keepdim=True).clamp_min(1e-12)
    return replace


def _patch_head(clean: torch.Tensor, head: int):
    def replace(name: str, w: torch.Tensor) -> torch.Tensor:
        w = w.clone()
        w[:, head] = clean[:, head]
        return w
    return replace


@torch.no_grad()
def retrieval_circuit(model: nn.Module, task: Retrieval, *, count: int = 500, seed: int = 0) -> dict[str, Any]:
    """The readings of the module's note for one trained retrieval model (eval mode, no
    gradients; `count` held-out examples with 2+ pairs; `seed` draws the induction tokens)."""
    model.eval()
    ex = retrieval_examples(task, count)
    rows = torch.arange(len(ex["query"]))
    with capture(model, "blocks.*.mixer.pattern") as patterns:
        logits = model(ex["inputs"])
    layers = [patterns[PATTERN.format(i)] for i in range(len(patterns))]  # each (B, H, T, T)
    mass = []
    for w in layers:
        row = w[rows, :, ex["query"]]  # (B, H, T)
        on_key, on_value = row[rows, :, ex["key"]], row[rows, :, ex["value"]]  # (B, H)
        mass.append(torch.stack([on_key, on_value, 1 - on_key - on_value], -1).mean(0).tolist())
    heads = layers[0].shape[1]
    with capture(model, "blocks.*.mixer.pattern") as clean:
        d_clean = _difference(model, ex["inputs"], ex)
    d_corrupted = _difference(model, ex["corrupted"], ex)
    spread = d_clean - d_corrupted
    def restored(hooks: dict) -> float:
        return (_difference(model, ex["corrupted"], ex, hooks) - d_corrupted) / spread if abs(spread) > 1e-9 \
            else float("nan")

    patching = [[restored({PATTERN.format(i): _patch_head(clean[PATTERN.format(i)], h)}) for h in range(heads)]
                for i in range(len(layers))]
    # A whole layer's pattern patched at once: heads that share the work each restore a part.
    layer_patching = [restored({PATTERN.format(i): lambda name, w, c=clean[PATTERN.format(i)]: c})
                      for i in range(len(layers))]
    cfg_vocab = getattr(task, "vocab_size")
    induction = induction_scores(model, vocab_size=min(cfg_vocab, task.half), half_len=(task.seq_len - 1) // 2,
                                 generator=torch.Generator().manual_seed(seed))
    return {
        "examples": len(rows), "accuracy": float((_at_query(logits, ex).argmax(-1) == ex["answer"]).float().mean()),
        "mass": mass,  # [layer][head] = [on key, on value, elsewhere]
        "head_ablation": [[_accuracy(model, ex, {PATTERN.format(i): _uniform_head(h)}) for h in range(heads)]
                          for i in range(len(layers))],
        "knockout": [{where: _accuracy(model, ex, {PATTERN.format(i): _bar(ex, where)}) for where in ("key", "value")}
                     for i in range(len(layers))],
        "logit_difference": {"clean": d_clean, "corrupted": d_corrupted},
        "patching": patching,
        "layer_patching": layer_patching,
        "induction": induction.tolist(),
        "summary": {**_summary(mass, patching), "layer_patching_max": max(layer_patching)},
        "code_version": code_version(),  # the code that read it (the run's summary names what trained it)
    }


def _summary(mass: list, patching: list) -> dict[str, float]:
    """What a comparison quotes: the strongest head's weight on the queried value (and key) at
    the query, and the largest patching score, with where they sit (last layer first)."""
    value = max((m[1], i, h) for i, layer in enumerate(mass) for h, m in enumerate(layer))
    key = max((m[0], i, h) for i, layer in enumerate(mass) for h, m in enumerate(layer))
    patch = max((p, i, h) for i, layer in enumerate(patching) for h, p in enumerate(layer) if p == p)
    return {"value_mass_max": value[0], "value_mass_layer": value[1], "key_mass_max": key[0],
            "key_mass_layer": key[1], "patching_max": patch[0], "patching_layer": patch[1]}


def sweep_circuits(folder: Path, count: int = 500) -> Path:
    """circuits.json in every finished run of a retrieval sweep, and the sweep's circuits.md."""
    done = [r for r in read_results(folder).values() if r["status"] == "done"]
    if not done:
        raise ModformerError(f"{folder} has no finished run")
    rows = []
    for r in done:
        run = folder / r["run_dir"]
        model, cfg, task, _ = load_run(run)
        if not isinstance(task, Retrieval):
            raise ModformerError(f"{run} is a run of task {cfg.task.name}, not retrieval")
        result = retrieval_circuit(model, task, count=count, seed=cfg.train.seed)
        atomic_write_text(run / "circuits.json", json.dumps(result, indent=1) + "\n")
        rows.append((r["run_id"], result))
        print(f"{r['run_id']}: accuracy {result['accuracy']:.3f}, "
              + ", ".join(f"{k} {v:.3g}" for k, v in result["summary"].items()), flush=True)
    path = folder / "circuits.md"
    atomic_write_text(path, "\n".join(_report(rows)) + "\n")
    return path


def _report(rows: list[tuple[str, dict[str, Any]]]) -> list[str]:
    lines = ["# Retrieval circuits", "",
             "Per run (modformer/papers/random_attention/circuits.py says what each reading is): held-out accuracy "
             "on examples with 2+ pairs; per layer and head, the query's attention weight on the queried key | value; "
             "accuracy with the head's pattern made uniform; its activation-patching score; its induction score. "
             "Then, per layer, accuracy with the query barred from the queried key | value.", ""]
    for run_id, r in sorted(rows):
        lines += [f"## {run_id}", "", f"accuracy {r['accuracy']:.3f} on {r['examples']} examples; logit difference "
                  f"clean {r['logit_difference']['clean']:.2f}, corrupted {r['logit_difference']['corrupted']:.2f}", "",
                  "| layer.head | weight on key | weight on value | ablated accuracy | patching | induction |",
                  "|---|---|---|---|---|---|"]
        for i, layer in enumerate(r["mass"]):
            for h, (key, value, _) in enumerate(layer):
                lines.append(f"| {i}.{h} | {key:.3f} | {value:.3f} | {r['head_ablation'][i][h]:.3f} | "
                             f"{r['patching'][i][h]:.3f} | {r['induction'][i][h]:.3f} |")
        lines += ["", "| layer | accuracy, key barred | accuracy, value barred |", "|---|---|---|"]
        lines += [f"| {i} | {k['key']:.3f} | {k['value']:.3f} |" for i, k in enumerate(r["knockout"])]
        lines.append("")
    return lines


def circuits_arguments(p) -> None:
    """`modformer random-attention-circuits SWEEP [--examples N]`."""
    from ...commands import describe_parser

    describe_parser(p, "Read how each finished run of a retrieval sweep answers (attention on the query, head "
                       "ablation, knockout of the key and value positions, activation patching of patterns, "
                       "induction scores): circuits.json per run, circuits.md in the sweep.")
    p.add_argument("sweep", help="a sweep folder of retrieval runs")
    p.add_argument("--examples", type=int, default=500, help="held-out examples with 2+ pairs read per run")

    def run(args) -> int:
        if args.examples < 1:
            raise ModformerError(f"--examples must be positive, got {args.examples}")
        path = sweep_circuits(Path(args.sweep), args.examples)
        print(f"circuits: {path}")
        return 0

    p.set_defaults(func=run)
