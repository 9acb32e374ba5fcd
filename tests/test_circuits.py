"""Reading retrieval circuits (modformer/papers/random_attention/circuits.py): the corrupted
input differs only in its query, the readings are what they say, and the command writes a
record per run that `modformer quote` reads."""

import json

import pytest
import torch

from modformer.cli import main
from modformer.config import load_config
from modformer.papers.random_attention.circuits import retrieval_circuit, retrieval_examples
from modformer.registry import TASKS
from modformer.sweep.quote import quote_file
from modformer.variants.base import build_model


def test_the_corrupted_input_queries_another_stored_pair():
    cfg = load_config("configs/retrieval.yaml", ["task.test_size=300"])
    task = TASKS["retrieval"](cfg.task)
    ex = retrieval_examples(task, 200)
    rows = torch.arange(len(ex["query"]))
    differs = ex["inputs"] != ex["corrupted"]
    assert torch.equal(differs.nonzero()[:, 1], ex["query"])  # one position per example: the query
    assert torch.equal(ex["inputs"][rows, ex["value"]], ex["answer"])  # the queried pair's value is the answer
    assert torch.equal(ex["inputs"][rows, ex["key"]] + task.n, ex["inputs"][rows, ex["query"]])
    assert not torch.equal(ex["answer"], ex["other_answer"])
    other_key = ex["corrupted"][rows, ex["query"]] - task.n
    assert bool((other_key != ex["inputs"][rows, ex["key"]]).all())  # another key, stored before the query
    stored = ex["inputs"][:, :-2:2]
    assert bool((stored == other_key[:, None]).any(1).all())


def test_the_readings_of_an_untrained_model_are_well_formed():
    cfg = load_config("configs/retrieval.yaml", ["model.d_model=16", "task.test_size=200"])
    task = TASKS["retrieval"](cfg.task)
    r = retrieval_circuit(build_model(cfg.model, 0), task, count=100)
    assert r["examples"] == 100 and len(r["mass"]) == 2 and len(r["mass"][0]) == 4
    assert all(abs(sum(head) - 1) < 1e-5 for layer in r["mass"] for head in layer)
    # Uniform attention at init: the query's weight on any one position is about 1/(its position + 1).
    assert all(0 < head[1] < 0.5 for layer in r["mass"] for head in layer)
    assert len(r["patching"]) == 2 and len(r["layer_patching"]) == 2 and len(r["knockout"]) == 2


@pytest.mark.slow
def test_a_trained_standard_model_reads_the_value_and_the_command_records_it(tmp_path, capsys):
    out = tmp_path / "sweep"
    assert main(["sweep", "configs/retrieval.yaml", "--out", str(out), "task.n_pairs=2", "task.test_size=300",
                 "task.validation_size=100", "train.progress=false", "sweep.seeds=[0]", "train.threads=1"]) == 0
    assert main(["random-attention-circuits", str(out), "--examples", "200"]) == 0
    r = json.loads((out / "runs/standard/default/seed0/circuits.json").read_text())
    assert r["accuracy"] > 0.95
    # The last layer reads the answer at the queried value, and barring it there breaks retrieval.
    assert max(h[1] for h in r["mass"][-1]) > 0.5 and r["knockout"][-1]["value"] < 0.5
    page = tmp_path / "page.md"
    page.write_text("<!--q sweep standard circuits.json:summary.value_mass_max .2-->0<!--/q-->\n")
    quote_file(page)
    assert page.read_text().startswith(f"<!--q sweep standard circuits.json:summary.value_mass_max .2-->"
                                       f"{r['summary']['value_mass_max']:.2f} (one run)<!--/q-->")
