"""The random-attention paper's budgets: each task's is what the reference script that launches
it trains one model on, in that script's unit, with its source; a run's fraction of it."""

import pytest

from modformer.config import config_from_dict
from test_reference_construction import D, reference

def test_retrievals_budget_is_what_depth_py_trains():
    """depth.py ~389: max_steps x train_size // batch steps of `batch` sequences, with
    max_steps 500 (the README's command and depth_array.sh) and task_condattendstream.py's
    train_size 200,000 (vocabulary 512): 10^8 sequences at the task file's batch 1,000 and,
    to within one batch, at depth_array.sh's 128."""
    from modformer.papers.random_attention.budget import REFERENCE_BUDGETS, budget, budget_text
    max_steps, train_size = 500, 200_000
    for batch in (1000, 128):
        sequences = (max_steps * train_size // batch) * batch
        assert abs(REFERENCE_BUDGETS["retrieval"].amount - sequences) < batch
    b = budget(reference("mixit", ("train.batch_size", 256), ("train.steps", 50_000)).to_dict())
    assert b["fraction"] == pytest.approx(50_000 * 256 / (max_steps * train_size))  # 12.8%, not 100%
    assert (b["script"], b["unit"]) == ("depth.py", "sequences")
    assert budget_text(b) == "12,800,000 sequences (12.8% of depth.py's 1e+08), width 64 (0.125x the paper's 512)"
    # Every budget names its source script and line.
    for task, ref in REFERENCE_BUDGETS.items():
        assert ref.script in ref.source or ref.script in ("trainer.py", "trainer_classifier.py"), task
        assert "~" in ref.source or "README" in ref.source, task


def test_budget_is_stated_in_the_reference_scripts_unit():
    from modformer.papers.random_attention.budget import budget, budget_text
    b = budget(reference("mixit", ("train.batch_size", 256)).to_dict())
    assert b == {"sequences": 200 * 256, "amount": 200 * 256, "unit": "sequences", "paper": 100_000_000,
                 "script": "depth.py", "fraction": 51_200 / 100_000_000, "width": D, "width_fraction": D / 512,
                 "reference_width": 512}
    assert budget_text(b) == "51,200 sequences (0.0512% of depth.py's 1e+08), width 64 (0.125x the paper's 512)"
    # Language modelling counts tokens against the reference README's 40,000 x 512 x 256;
    # sentiment reviews against its classifier command's 3,000 x 32.
    lm = budget(reference("mixit", ("train.batch_size", 32), trainer="trainer.py").to_dict())
    assert (lm["amount"], lm["unit"], lm["paper"]) == (200 * 32 * 32, "tokens", 40_000 * 512 * 256)
    assert budget_text(lm).startswith("204,800 tokens (0.00391% of trainer.py's 5.24e+09)")
    reviews = budget(reference("mixit", ("train.batch_size", 32), trainer="trainer_classifier.py").to_dict())
    assert (reviews["amount"], reviews["unit"], reviews["fraction"]) == (6_400, "sequences", 6_400 / 96_000)
    # ... whose command trains width 1,024 (n_embd=1024; its Slurm command's 512), not the paper's 512.
    assert budget_text(reviews).endswith(f"width {D} ({D / 1024:.3g}x trainer_classifier.py's 1,024)")
    # Memorization against depth_array.sh's 500 steps of hdmemorize_exp.py's batch of 32,768.
    facts = budget(reference("mixit", ("train.batch_size", 512), trainer="hdmemorize_exp.py").to_dict())
    assert (facts["amount"], facts["unit"], facts["paper"]) == (200 * 512, "sequences", 500 * 32_768)
    # A summary written before budgets named their script counted against another amount: its
    # amount alone is said.
    assert budget_text({"sequences": 51_200, "paper": 12_800_000, "fraction": 0.004, "width": 64,
                        "width_fraction": 0.125}) == "51,200 sequences, width 64 (0.125x the paper's 512)"


def test_the_papers_budget_is_named_only_for_the_papers_tasks():
    from modformer.papers.random_attention.budget import budget, budget_text
    for task in ("mqar", "repeat"):
        b = budget(config_from_dict({"task": {"name": task}, "train": {"steps": 10, "batch_size": 8}}).to_dict())
        assert (b["paper"], b["fraction"], b["width_fraction"]) == (None, None, None)
        assert budget_text(b) == "80 sequences, width 128"
    # k-hop is the paper's task, but no reference script trains it: its width only.
    assert budget_text(budget(config_from_dict({"task": {"name": "khop"}}).to_dict())) == (
        "64,000 sequences, width 128 (0.25x the paper's 512)")
