"""Auxiliary losses (modformer/model/aux.py): a part's own loss enters the training loss with
its weight, is logged per term under `aux`, evens out an MoE's expert load, survives a resume,
and a weight naming no loss is one line."""

import json

import torch

from modformer.api import train_run
from modformer.cli import main
from modformer.config import load_config
from modformer.model.aux import AuxLoss, collecting
from modformer.train.checkpoint import list_checkpoints, read_checkpoint
from modformer.variants.base import build_model

TINY = ["model.d_model=16", "model.n_heads=2", "model.ffn_options.n_experts=4", "task.test_size=50",
        "task.validation_size=20", "train.batch_size=16", "train.progress=false", "train.threads=1",
        "train.warmup_steps=2"]


def config(*overrides):
    return load_config("examples/moe.yaml", [*TINY, *overrides])


def train_records(run):
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()
            if json.loads(line)["kind"] == "train"]


def test_the_loss_changes_the_gradients_upstream_of_the_routers_only(tmp_path):
    """One step from the same weights, weight 1 against weight 0: the balancing loss moves the
    routers (and what feeds them), and leaves what lies after every router as it was: the
    last layer's experts, the final norm and the head (no clipping: the global norm would tie
    every parameter's step to the others')."""
    steps = ["train.steps=1", "train.eval_every=1", "train.checkpoint_every=1", "train.grad_clip=0"]
    for weight in (0.0, 1.0):
        train_run(config(*steps, f"train.aux_weights={{blocks.*.ffn.balance: {weight}}}"), tmp_path / str(weight))
    off, on = (_weights(tmp_path / str(w)) for w in (0.0, 1.0))
    assert not torch.equal(off["blocks.0.ffn.router.weight"], on["blocks.0.ffn.router.weight"])
    assert not torch.equal(off["blocks.1.ffn.router.weight"], on["blocks.1.ffn.router.weight"])
    after = ["blocks.1.ffn.up", "blocks.1.ffn.down", "norm.weight", "lm_head.weight"]
    assert all(torch.equal(off[k], on[k]) for k in after)


def _weights(run):
    return read_checkpoint(list_checkpoints(run / "checkpoints")[-1][1]).model


def test_each_term_is_logged_and_the_balance_evens_the_load(tmp_path):
    steps = ["train.steps=60", "train.eval_every=60", "train.log_every=20", "train.lr=1e-2"]
    loads = {}
    for weight in (0.0, 0.5):
        run = tmp_path / str(weight)
        summary = train_run(config(*steps, f"model.ffn_options.balance_weight={weight}"), run)
        records = train_records(run)
        assert [sorted(r["aux"]) for r in records] == [["blocks.0.ffn.balance", "blocks.1.ffn.balance"]] * 3
        assert summary["aux"] == records[-1]["aux"]
        loads[weight] = sum(records[-1]["aux"].values())
    assert loads[0.5] < loads[0.0]  # weighted, the routers spread the tokens more evenly


def test_a_resume_across_a_log_window_logs_the_same_terms(tmp_path):
    """The window's sums of the auxiliary losses are in the checkpoint: a run stopped at step 4
    (mid-window: logs at 3 and 6) and resumed logs what an uninterrupted run logs."""
    cfg = config("train.steps=8", "train.eval_every=4", "train.checkpoint_every=4", "train.log_every=3",
                 "train.keep_checkpoints=3")
    whole, cut = tmp_path / "whole", tmp_path / "cut"
    train_run(cfg, whole)
    train_run(cfg, cut)
    for step, path in list_checkpoints(cut / "checkpoints"):
        if step > 4:
            path.unlink()
    (cut / "summary.json").unlink()
    train_run(cfg, cut, resume=True)

    def logged(run):
        return [{k: v for k, v in r.items() if k != "tokens_per_s"} for r in train_records(run)]

    assert logged(cut) == logged(whole) and all("aux" in r for r in logged(whole))


def test_a_weight_naming_no_loss_is_one_line(tmp_path, capsys):
    out = tmp_path / "r"
    assert main(["train", "examples/moe.yaml", *TINY, "train.steps=2", "train.aux_weights={blocks.*.ffn.balanse: 0}",
                 "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "'blocks.*.ffn.balanse' names no auxiliary loss of this model" in err and "Traceback" not in err
    assert not out.exists()


def test_outside_a_training_step_nothing_is_collected():
    cfg = config()
    model = build_model(cfg.model, 0)
    x = torch.randint(0, 10, (2, 5))
    model(x)  # evaluation: no collector, no record, no error
    with collecting(model) as terms:
        model(x)
    assert sorted(terms.values) == ["blocks.0.ffn.balance", "blocks.1.ffn.balance"]
    assert isinstance(model.blocks[0].ffn.balance, AuxLoss) and terms.weight("blocks.0.ffn.balance") == 0.01


class Penalised(torch.nn.Module):
    """A feed-forward module that hands each training step an auxiliary loss of exactly 3 (whose
    gradient is 0), so that its logged mean is known."""

    def __init__(self, cfg):
        super().__init__()
        self.up = torch.nn.Linear(cfg.d_model, cfg.d_model)
        self.penalty = AuxLoss()

    def forward(self, x):
        self.penalty(3.0 + 0.0 * self.up.weight.sum())
        return self.up(x)


def test_a_logged_term_is_its_mean_over_the_window_and_a_finished_run_resumed_keeps_it(tmp_path):
    cfg = load_config("configs/retrieval.yaml", ["model.d_model=16", "model.n_heads=2", "task.test_size=50",
                                                 "task.validation_size=20", "train.batch_size=8", "train.steps=4",
                                                 "train.log_every=2", "train.eval_every=4", "train.progress=false",
                                                 f"model.ffn={__name__}:Penalised"])
    summary = train_run(cfg, tmp_path / "run")
    names = [f"blocks.{i}.ffn.penalty" for i in range(cfg.model.n_layers)]
    assert [r["aux"] for r in train_records(tmp_path / "run")] == [dict.fromkeys(names, 3.0)] * 2
    assert summary["aux"] == dict.fromkeys(names, 3.0)
    assert train_run(cfg, tmp_path / "run", resume=True)["aux"] == summary["aux"]  # from the checkpoint
