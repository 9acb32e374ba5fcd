"""Token similarity of trained runs beside their initialisation (`modformer signal --runs`):
the masked measure against a loop in float64, the scored prefix, a tiny trained run read
back from its checkpoint, a sweep folder's table, and bad input refused in one line."""

import json

import pytest
import torch

from modformer.analysis.signal import token_similarity
from modformer.analysis.signal_trained import group_runs, markdown_table, scored_prefix
from modformer.analysis_commands import trained_signal
from modformer.evaluate import load_run
from modformer.model.hooks import capture
from modformer.tasks.base import IGNORE
from modformer.variants import build_model
from test_checkpoint_cli import assert_clean_error, modformer

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def looped(hidden: torch.Tensor, mask: torch.Tensor) -> dict[str, float]:
    """token_similarity by its definition, one sequence and one pair at a time, in float64."""
    per_sequence = []
    for x, keep in zip(hidden.double(), mask):
        kept = [t for t in range(len(keep)) if keep[t]]
        if len(kept) < 2:
            continue
        centred = {t: x[t] - x[t].mean() for t in kept}
        pairs = [(i, j) for i in kept for j in kept if i != j]
        cov = sum(float(centred[i] @ centred[j]) for i, j in pairs) / len(pairs) / x.shape[-1]
        cos = sum(float(x[i] @ x[j] / (x[i].norm() * x[j].norm())) for i, j in pairs) / len(pairs)
        var = sum(float(centred[t] @ centred[t]) for t in kept) / len(kept) / x.shape[-1]
        per_sequence.append((cov, cos, var))
    return {m: sum(s[k] for s in per_sequence) / len(per_sequence)
            for k, m in enumerate(("covariance", "cosine", "variance"))}


def test_masked_similarity_counts_only_the_marked_positions():
    hidden = torch.randn(3, 6, 5, generator=torch.Generator().manual_seed(0))
    mask = torch.tensor([[1, 1, 1, 0, 0, 0], [1, 1, 1, 1, 1, 1], [1, 0, 0, 0, 0, 0]], dtype=torch.bool)
    got, want = token_similarity(hidden, mask), looped(hidden, mask)  # the third sequence has one position: skipped
    assert got == pytest.approx(want, rel=1e-12)
    full = torch.ones(3, 6, dtype=torch.bool)
    assert token_similarity(hidden, full) == pytest.approx(token_similarity(hidden), rel=1e-12)
    assert token_similarity(hidden) == pytest.approx(looped(hidden, full), rel=1e-12)
    changed = hidden.clone()
    changed[0, 3:] = 100.0  # unmarked positions change nothing
    assert token_similarity(changed, mask) == token_similarity(hidden, mask)
    with pytest.raises(ValueError, match="mask must be"):
        token_similarity(hidden, mask[:, :4])
    with pytest.raises(ValueError, match="at least two counted"):
        token_similarity(hidden, torch.zeros(3, 6, dtype=torch.bool))


def test_scored_prefix_ends_at_each_examples_last_scored_position():
    targets = torch.full((3, 5), IGNORE)
    targets[0, 2] = 7  # one answer (Dyck, retrieval): the input up to it
    targets[1, [1, 3]] = 1  # several answer tokens: up to the last
    mask = scored_prefix(targets)  # the third scores nothing: no position
    assert mask.tolist() == [[True, True, True, False, False], [True, True, True, True, False], [False] * 5]


def test_a_regression_tasks_vector_targets_give_the_scored_prefix_and_no_accuracy(tmp_path):
    """`causal_regression` (Theorem 5.1's task) scores a vector at every position and has no
    accuracy: its runs are read all the same, and the table says n/a."""
    from modformer.config import load_config
    from modformer.train.trainer import Trainer

    targets = torch.full((2, 4, 3), float(IGNORE))
    targets[0, :2] = 0.5  # positions 0 and 1 scored
    assert scored_prefix(targets).tolist() == [[True, True, False, False], [False] * 4]
    run = tmp_path / "run"
    cfg = load_config(None, ["task.name=causal_regression", "task.test_size=20", "task.validation_size=20",
                             "model.d_model=16", "model.n_layers=1", "model.n_heads=2", "train.steps=2",
                             "train.batch_size=4", "train.threads=1", "train.eval_every=2", "train.checkpoint_every=2"])
    Trainer(cfg, run, echo=lambda m: None).run()
    paths = trained_signal(run, tmp_path / "out", examples=8, echo=lambda m: None)
    assert json.loads((run / "token_similarity.json").read_text())["test_accuracy"] is None
    assert "| n/a |" in paths["markdown"].read_text()


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    from modformer.config import load_config
    from modformer.train.trainer import Trainer
    from conftest import TINY

    run = tmp_path_factory.mktemp("signal") / "run"
    cfg = load_config(None, [*TINY, "train.steps=16", "train.lr=1e-2", "train.eval_every=16",
                             "train.checkpoint_every=16", "task.test_size=200"])
    Trainer(cfg, run, echo=lambda m: None).run()
    return run


def test_a_trained_run_is_measured_after_every_block_beside_its_initialisation(tiny_run, tmp_path):
    paths = trained_signal(tiny_run, tmp_path / "out", examples=40, echo=lambda m: None)
    record = json.loads((tiny_run / "token_similarity.json").read_text())
    model, cfg, task, step = load_run(tiny_run)
    assert (record["step"], record["examples"]) == (step, 40) == (16, 40)
    batch = task.test_set().narrow(0, 40)
    mask = scored_prefix(batch.targets)
    for stage, net in (("trained", model), ("init", build_model(cfg.model, cfg.train.seed))):
        with torch.no_grad(), capture(net, "embed_out", "blocks.*.resid_post") as acts:
            net.eval()
            net.hidden_states(batch.inputs)
        assert len(record[stage]["by_layer"]["cosine"]) == cfg.model.n_layers == 2
        for layer in range(cfg.model.n_layers):  # every block, against the float64 loop
            want = looped(acts[f"blocks.{layer}.resid_post"], mask)
            for measure, value in want.items():
                assert record[stage]["by_layer"][measure][layer] == pytest.approx(value, rel=1e-9)
        assert {m: record[stage][m] for m in want} == {m: record[stage]["by_layer"][m][-1] for m in want}
        assert record[stage]["embedding"] == pytest.approx(looped(acts["embed_out"], mask), rel=1e-9)
    # training moved the measure: the trained model is not its initialisation
    assert abs(record["trained"]["variance"] - record["init"]["variance"]) > 1e-3 * record["init"]["variance"]
    assert record["test_accuracy"] == pytest.approx(json.loads((tiny_run / "summary.json").read_text())
                                                    ["test"]["accuracy"])
    table = paths["markdown"].read_text()
    assert f"| {cfg.model.variant} | corrected | 2 | 1 |" in table and "cosine trained | cosine init" in table
    assert paths["plot"].read_bytes()[:8] == PNG_MAGIC
    groups = json.loads(paths["json"].read_text())["groups"]
    assert groups[0]["trained"]["cosine"]["mean"] == record["trained"]["cosine"]


def test_a_sweep_folder_pools_its_finished_runs_by_setting(tiny_run, tmp_path):
    sweep = tmp_path / "sweep"
    (sweep / "runs").mkdir(parents=True)
    (sweep / "runs" / "a").symlink_to(tiny_run)
    lines = [{"run_id": "std/seed0", "run_dir": "runs/a", "variant": "std", "point": {"model.n_layers": 2},
              "seed": 0, "status": "done", "summary": {}},
             {"run_id": "std/seed1", "run_dir": "runs/a", "variant": "std", "point": {"model.n_layers": 2},
              "seed": 1, "status": "done", "summary": {}},
             {"run_id": "std/seed2", "run_dir": "runs/missing", "variant": "std", "point": {}, "seed": 2,
              "status": "failed"}]  # not finished: not read
    (sweep / "results.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    result = modformer("signal", "--runs", sweep, "--examples", "20")
    assert result.returncode == 0, result.stderr
    groups = json.loads((sweep / "trained_signal.json").read_text())["groups"]
    assert [(g["variant"], g["depth"], g["seeds"]) for g in groups] == [("std", 2, [0, 1])]
    assert groups[0]["trained"]["cosine"]["std"] == 0.0  # one model read twice
    assert "| std | corrected | 2 | 2 |" in (sweep / "trained_signal.md").read_text()


def test_markdown_table_names_other_settings_only_where_there_are_some():
    cell = {"mean": 0.5, "std": 0.1}
    group = {"variant": "mixit", "construction": "reference", "depth": 4, "setting": "", "seeds": [0, 1],
             "accuracy": cell, "trained": dict.fromkeys(("covariance", "cosine", "variance"), cell),
             "init": dict.fromkeys(("covariance", "cosine", "variance"), cell)}
    assert "| mixit | reference | 4 | 2 | 50.0% ± 10.0 | 0.5 ± 0.1 |" in markdown_table([group])
    assert "| setting |" in markdown_table([{**group, "setting": "train.lr=0.01"}])
    rows = [{"variant": "v", "construction": "c", "depth": 2, "setting": "", "seed": s, "accuracy": a,
             "record": {st: {"covariance": a, "cosine": a, "variance": a} for st in ("trained", "init")}}
            for s, a in ((0, 0.2), (1, 0.4))]
    (g,) = group_runs(rows)
    assert g["accuracy"]["mean"] == pytest.approx(0.3)
    assert g["accuracy"]["std"] == pytest.approx(0.02 ** 0.5)  # the sample std, as `modformer quote` gives it


@pytest.mark.parametrize("args, fragment", [
    (["--runs", "{tmp}"], "neither a sweep folder"),
    (["--runs", "{run}", "--width", "16"], "--width does not apply"),
    (["--runs", "{run}", "--examples", "0"], "--examples must be positive"),
    (["--out", "{tmp}", "--examples", "5"], "--examples applies only with --runs"),
    ([], "give --out"),
])
def test_bad_input_is_one_clear_line(tiny_run, tmp_path, args, fragment):
    args = [a.format(tmp=tmp_path, run=tiny_run) for a in args]
    assert_clean_error(modformer("signal", *args), fragment)


def test_a_committed_run_without_checkpoints_is_refused(tmp_path):
    sweep = tmp_path / "sweep"
    (sweep / "runs" / "r").mkdir(parents=True)
    (sweep / "results.jsonl").write_text(json.dumps({"run_id": "r", "run_dir": "runs/r", "variant": "mixit",
                                                     "point": {}, "seed": 0, "status": "done", "summary": {}}) + "\n")
    assert_clean_error(modformer("signal", "--runs", sweep), "run r has no checkpoints/")
