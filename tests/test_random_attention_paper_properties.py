"""The random-attention paper's package (modformer/papers/random_attention/), in process: the
reference construction's filled values and modes, the budgets' width against the launch's own,
the Theorem 5.1 task's target, score and refusals, its report section's text and figure, and
the retrieval-circuits command's readings, records, report and help."""

import json

import numpy as np
import pytest
import torch
from torch import nn

from conftest import TINY
from test_causal_regression import theorem_groups
from modformer.cli import main
from modformer.config import load_config
from modformer.errors import ConfigError, ModformerError
from modformer.papers.random_attention import circuits, theorem51
from modformer.papers.random_attention.budget import budget
from modformer.papers.random_attention.causal_regression import (CausalRegression, CausalRegressionConfig,
                                                                 RandomCausalNetwork)
from modformer.papers.random_attention.construction import memorization_batch, mode_of, reference_model_config
from modformer.registry import TASKS


# --- construction.py -------------------------------------------------------------------------

def test_the_memorization_batch_is_all_n_squared_facts_up_to_256_times_128():
    """hdmemorize_exp.py ~94: min(n^2, 256 * 128); where n is no positive integer, or the task
    section no mapping (the strict loader names those), the reference's n = 512 cap."""
    assert memorization_batch({"task": {"n": 100}}) == 10_000
    assert memorization_batch({"task": {"n": 512}}) == 256 * 128
    assert memorization_batch({}) == 256 * 128
    assert memorization_batch({"task": {"n": 0}}) == 256 * 128
    assert memorization_batch({"task": {"n": -3}}) == 256 * 128
    assert memorization_batch({"task": {"n": "many"}}) == 256 * 128
    assert memorization_batch({"task": ["n", 100]}) == 256 * 128
    assert memorization_batch({"task": "memorization"}) == 256 * 128


@pytest.mark.parametrize("layers", [
    [{"mixer": "mixing"}, {"mixer": "mixing"}],
    {0: {"mixer": "mixing"}, 1: {"mixer": "mixing"}},
])
def test_a_stack_whose_every_layer_mixes_is_built_in_the_mixing_mode(layers):
    """A standard model whose model.layers give every layer the mixing mixer is a MixiT model to
    the reference: its points are the mixing mode's (learned positions, shaped leaky GLU)."""
    assert mode_of({"variant": "standard", "layers": layers}) == "mixing"
    with pytest.raises(ConfigError, match=r"^model.construction=reference builds every layer of a model in one mode"):
        mode_of({"variant": "standard", "layers": [{"mixer": "mixing"}, {"mixer": "attention"}]})


def test_a_layers_value_that_is_no_list_or_mapping_leaves_the_model_its_own_mode():
    """A bad model.layers (the strict loader names it) is not read layer by layer."""
    assert mode_of({"variant": "standard", "layers": "mixing"}) == "vanilla"
    assert mode_of({"variant": "mixit", "layers": 3}) == "mixing"


def test_the_reference_model_config_of_mixit_holds_the_mixing_modes_values():
    cfg = reference_model_config("mixit", d_model=64, n_heads=4)
    assert (cfg.construction, cfg.variant, cfg.d_model, cfg.n_heads) == ("reference", "mixit", 64, 4)
    assert cfg.learned_positions and cfg.ffn == "shaped_leaky_glu" and cfg.init_std == 0.02
    assert cfg.mixer_options["sink_head"] is True and cfg.construction_options["scaled_linear"] == [512.0, 1.0]
    plain = reference_model_config("standard", d_model=32)
    assert plain.ffn == "swiglu" and plain.rope and not plain.learned_positions and plain.d_model == 32


# --- budget.py -------------------------------------------------------------------------------

def test_the_classifiers_width_fraction_is_of_its_own_launchs_1024():
    """trainer_classifier.py's README command runs n_embd 1,024: a sentiment run's width is
    compared with it, not with the paper's 512 (which the other tasks keep)."""
    config = {"task": {"name": "sentiment"}, "model": {"d_model": 128}, "train": {"steps": 10, "batch_size": 4}}
    b = budget(config)
    assert b["width_fraction"] == 0.125 and b["reference_width"] == 1024
    retrieval = budget({"task": {"name": "retrieval"}, "model": {"d_model": 128}, "train": {"steps": 1}})
    assert retrieval["width_fraction"] == 0.25 and retrieval["reference_width"] == 512


# --- causal_regression.py --------------------------------------------------------------------

def test_the_target_follows_the_documented_recurrence():
    """h_t = tanh(W h_{t-1} + U u_t + b), h_0 = 0, y_t = C h_t (the module's note), before
    standardisation."""
    net = RandomCausalNetwork(CausalRegressionConfig(test_size=10, validation_size=10))
    tokens = np.array([[3, 0, 7], [15, 15, 1]])
    raw = net.raw(tokens)
    h = np.zeros((2, net.W.shape[0]))
    for t in range(3):
        h = np.tanh(h @ net.W.T + net.phi[tokens[:, t]] @ net.U.T + net.b)
        assert np.allclose(raw[:, t], h @ net.C.T, atol=1e-12)
    assert np.allclose(net(tokens), ((raw - net.mean) / net.std).astype(np.float32))


def test_score_gives_each_examples_own_squared_error():
    """score's sums are per example (the evaluator adds them up over batches and slices)."""
    task = CausalRegression(CausalRegressionConfig(test_size=10, validation_size=10, seq_len=3, outputs=2))
    batch = task.test_set()
    logits = torch.zeros(len(batch), 3, 16)
    logits[0, :, :2] = batch.targets[0]  # the first example predicted exactly
    stats = task.score(logits, batch)
    y = batch.targets.float()
    assert stats["sq_err"].shape == (len(batch),)
    assert stats["sq_err"][0] == 0.0
    assert torch.allclose(stats["sq_err"][1:], y[1:].pow(2).sum((1, 2)))
    assert torch.equal(stats["scalars"], torch.full((len(batch),), 6.0))


def test_held_out_sets_of_a_quarter_of_2_to_the_62_are_refused_for_a_vast_task():
    """The space of distinct sequences is counted up to 2^62 (vocab_size^seq_len beyond it):
    held-out sets of half of that are refused, naming the count."""
    with pytest.raises(ConfigError, match=r"^task.test_size=2305843009213693952 plus task.validation_size=1 would "
                                          r"hold over half of the 4611686018427387904 distinct examples with "
                                          r"task.vocab_size=16 and task.seq_len=20; lower them or enlarge the task$"):
        CausalRegressionConfig(vocab_size=16, seq_len=20, test_size=2 ** 61, validation_size=1)
    CausalRegressionConfig(vocab_size=16, seq_len=20, test_size=2 ** 60, validation_size=1)


# --- theorem51.py ----------------------------------------------------------------------------

def test_the_theorem_section_says_what_fit_error_is_and_its_floor(tmp_path):
    lines = theorem51.fit_error_section(tmp_path, ["standard", "frozen_qk"], theorem_groups(), {})
    assert lines[:5] == [
        "## Theorem 5.1: test fit_error per grid point", "",
        "Test fit_error (squared error over the targets' variance: 1 is predicting each output's mean, 0 an exact "
        "fit), mean ± std [95% t interval] over seeds, at every grid point. Floor of position and current token "
        "alone (`current_token_floor`, on the test set): 0.500.", "",
        "| model.d_ff | model.n_heads | standard | frozen_qk |"]


def test_the_theorem_figure_has_a_capped_labelled_line_per_setting(tmp_path, monkeypatch):
    """One line per other grid key's setting (labelled d_ff=16, d_ff=64), error bars with caps,
    beside the dashed floor, in each variant's panel."""
    figures = []

    def keep(fig, path):
        figures.append(fig)
        path.write_bytes(b"")
        return path

    monkeypatch.setattr(theorem51, "save_figure", keep)
    theorem51.fit_error_section(tmp_path, ["standard", "frozen_qk"], theorem_groups(), {})
    (fig,) = figures
    try:
        assert [ax.get_title() for ax in fig.axes] == ["standard", "frozen_qk"]
        for ax in fig.axes:
            assert [t.get_text() for t in ax.get_legend().get_texts()] == ["current-token floor", "d_ff=16", "d_ff=64"]
            assert len(ax.containers) == 2
            for bars in ax.containers:
                _, caps, _ = bars.lines
                assert len(caps) == 2 and all(cap.get_markersize() == 6 for cap in caps)  # capsize 3
    finally:
        theorem51.plt.close(fig)


# --- circuits.py -----------------------------------------------------------------------------

class Logits(nn.Module):
    def __init__(self, logits):
        super().__init__()
        self.logits = logits

    def forward(self, inputs):
        return self.logits


def test_accuracy_compares_each_examples_argmax_at_its_query_with_its_answer():
    logits = torch.zeros(3, 4, 6)
    logits[0, 2, 1] = logits[1, 0, 3] = logits[2, 3, 5] = 1.0  # rows 0 and 1 right, row 2 wrong
    logits[2, 3, 0] = 2.0
    ex = {"inputs": torch.zeros(3, 4, dtype=torch.long), "query": torch.tensor([2, 0, 3]),
          "answer": torch.tensor([1, 3, 5])}
    assert circuits._accuracy(Logits(logits), ex) == pytest.approx(2 / 3)


def test_the_summary_names_the_strongest_heads_and_their_layers():
    mass = [[[0.1, 0.2, 0.7], [0.6, 0.1, 0.3]], [[0.2, 0.7, 0.1], [0.3, 0.3, 0.4]]]
    patching = [[0.9, float("nan")], [0.1, 0.2]]
    assert circuits._summary(mass, patching) == {
        "value_mass_max": 0.7, "value_mass_layer": 1, "key_mass_max": 0.6, "key_mass_layer": 0,
        "patching_max": 0.9, "patching_layer": 0}


def _reading():
    return {"examples": 7, "accuracy": 0.5, "mass": [[[0.25, 0.5, 0.25]]], "head_ablation": [[0.125]],
            "knockout": [{"key": 0.375, "value": 0.0625}], "logit_difference": {"clean": 1.5, "corrupted": -0.25},
            "patching": [[0.75]], "layer_patching": [0.75], "induction": [[0.1]],
            "summary": {"value_mass_max": 0.5, "value_mass_layer": 0}}


def test_the_command_reads_every_finished_run_only_and_writes_the_report(tmp_path, monkeypatch, capsys):
    cfg = load_config(None, [*TINY, "train.seed=3"])
    task = TASKS["retrieval"](cfg.task)
    calls = []
    monkeypatch.setattr(circuits, "read_results", lambda folder: {
        "a": {"run_id": "a", "status": "done", "run_dir": "runs/a", "summary": {}},
        "b": {"run_id": "b", "status": "failed", "run_dir": "runs/b"}})
    monkeypatch.setattr(circuits, "load_run", lambda run: (run.name, cfg, task, None))
    monkeypatch.setattr(circuits, "retrieval_circuit",
                        lambda model, t, count, seed: calls.append((model, count, seed)) or _reading())
    (tmp_path / "runs/a").mkdir(parents=True)
    (tmp_path / "runs/b").mkdir(parents=True)
    path = circuits.sweep_circuits(tmp_path, count=7)
    assert calls == [("a", 7, 3)]
    assert json.loads((tmp_path / "runs/a/circuits.json").read_text()) == _reading()
    assert not (tmp_path / "runs/b/circuits.json").exists()
    assert capsys.readouterr().out == "a: accuracy 0.500, value_mass_max 0.5, value_mass_layer 0\n"
    assert path == tmp_path / "circuits.md"
    assert path.read_text().splitlines() == [
        "# Retrieval circuits", "",
        "Per run (modformer/papers/random_attention/circuits.py says what each reading is): held-out accuracy on "
        "examples with 2+ pairs; per layer and head, the query's attention weight on the queried key | value; "
        "accuracy with the head's pattern made uniform; its activation-patching score; its induction score. Then, "
        "per layer, accuracy with the query barred from the queried key | value.", "",
        "## a", "", "accuracy 0.500 on 7 examples; logit difference clean 1.50, corrupted -0.25", "",
        "| layer.head | weight on key | weight on value | ablated accuracy | patching | induction |",
        "|---|---|---|---|---|---|",
        "| 0.0 | 0.250 | 0.500 | 0.125 | 0.750 | 0.100 |", "",
        "| layer | accuracy, key barred | accuracy, value barred |", "|---|---|---|",
        "| 0 | 0.375 | 0.062 |", ""]


def test_the_command_refuses_a_sweep_with_no_finished_run(tmp_path, monkeypatch):
    monkeypatch.setattr(circuits, "read_results", lambda folder: {
        "b": {"run_id": "b", "status": "failed", "run_dir": "runs/b"}})
    with pytest.raises(ModformerError, match=rf"^{tmp_path} has no finished run$"):
        circuits.sweep_circuits(tmp_path)


def test_the_commands_help_says_what_it_reads_and_what_sweep_is(capsys):
    with pytest.raises(SystemExit) as done:
        main(["random-attention-circuits", "--help"])
    assert done.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    assert ("Read how each finished run of a retrieval sweep answers (attention on the query, head ablation, "
            "knockout of the key and value positions, activation patching of patterns, induction scores): "
            "circuits.json per run, circuits.md in the sweep.") in text
    assert "sweep a sweep folder of retrieval runs" in text
    assert "--examples EXAMPLES held-out examples with 2+ pairs read per run" in text
