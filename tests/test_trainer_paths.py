"""A run's paths off the straight line (modformer/train/trainer.py): resumes of folders that a
killed run, a failing disk or an older modformer left, a stop on Ctrl-C, a run that cannot
clean up after diverging, and what the summary, the progress bar and the plots name. Written
for survivors of the training package's mutation sample (results/mutation/train_survivors.txt)."""

import json
import math
import os
import shutil

import pytest
import torch

from modformer.errors import CheckpointError, Interrupted, ModformerError, TrainingDiverged
from modformer.evaluate import evaluate
from modformer.tasks.retrieval import Retrieval
from modformer.train import trainer as trainer_module
from modformer.train.checkpoint import list_checkpoints
from modformer.train.records import read_records
from modformer.train.trainer import Trainer
from modformer.version import RECORDS_FORMAT
from test_own_parts import Pointwise

# Four steps, every one logged, evaluated and checkpointed every two.
STEPS = ("train.steps=4", "train.log_every=1", "train.eval_every=2", "train.checkpoint_every=2")


def train(cfg, folder, **kw):
    """Run `cfg` in `folder`; (the trainer, its summary, what it said)."""
    said = []
    trainer = Trainer(cfg, folder, echo=said.append, **kw)
    return trainer, trainer.run(), said


def test_a_new_run_reads_no_checkpoint_and_says_nothing(tiny_config, tmp_path):
    _, summary, said = train(tiny_config(*STEPS), tmp_path / "run")
    assert said == [] and summary["step"] == 4


def test_a_resume_removes_what_killed_writers_left_and_says_so(tiny_config, tmp_path):
    run = tmp_path / "run"
    train(tiny_config(*STEPS), run)
    gone = 2 ** 22 + 1  # above Linux's largest process id: no process has it
    left = [run / f".metrics.jsonl.tmp-{gone}", run / "checkpoints" / ".tmpAb12Cd"]
    for path in left:
        path.write_bytes(b"\0" * 64)
    _, _, said = train(tiny_config(*STEPS), run, resume=True)
    assert not any(p.exists() for p in left)
    assert said[0] == f"removed 2 temporary file(s) a killed run left in {run}"


@pytest.mark.parametrize("info, why", [
    ({"starts": []}, "holds records of format 1"),  # written before run.json said its format
    ({"format": 1, "starts": []}, "holds records of format 1"),
    ({"format": RECORDS_FORMAT + 1, "starts": []}, f"holds records of format {RECORDS_FORMAT + 1}"),
    ("[1", "run.json is unreadable (JSONDecodeError)"),
])
def test_a_folder_an_older_modformer_wrote_is_not_resumed(tiny_config, tmp_path, info, why):
    run = tmp_path / "run"
    train(tiny_config(*STEPS), run)
    (run / "run.json").write_text(info if isinstance(info, str) else json.dumps(info))
    with pytest.raises(ModformerError, match=rf"^cannot resume: .*{why.replace('(', '.').replace(')', '.')}"):
        train(tiny_config(*STEPS), run, resume=True)


def test_a_changed_config_is_refused_naming_four_of_its_changes(tiny_config, tmp_path):
    run = tmp_path / "run"
    train(tiny_config(*STEPS), run)
    changed = ["train.lr=1e-3", "train.warmup_steps=1", "train.seed=7", "train.grad_clip=0.5", "train.weight_decay=0.5"]
    with pytest.raises(ModformerError) as refused:
        train(tiny_config(*STEPS, *changed), run, resume=True)
    message = str(refused.value)
    assert message.startswith(f"cannot resume {run} with a different config (train.grad_clip: 1.0 -> 0.5, train.lr: ")
    assert message.count(" -> ") == 4 and "train.weight_decay" not in message
    assert message.endswith("only train.log_group, train.log_to, train.mlflow_uri, train.progress may change")


def test_records_a_failing_disk_lost_come_back_from_the_checkpoint(tiny_config, tmp_path):
    run = tmp_path / "run"
    train(tiny_config(*STEPS), run)
    metrics = run / "metrics.jsonl"
    before = list(read_records(metrics))
    kept = metrics.read_text().splitlines(keepends=True)[:2]  # the training records of steps 1 and 2
    metrics.write_text("".join(kept))
    _, _, said = train(tiny_config(*STEPS), run, resume=True)
    assert said[0] == (f"{metrics}: 4 record(s) up to step 4 were missing or damaged (steps 2-4); restored from the "
                       f"checkpoint")
    assert said[1] == f"resumed {run} from step 4"
    assert list(read_records(metrics)) == before  # the test score recomputed as it was


def test_a_checkpoint_of_another_model_is_named_when_refused(tiny_config, tmp_path):
    ours, other = tmp_path / "ours", tmp_path / "other"
    train(tiny_config(*STEPS), ours)
    train(tiny_config(*STEPS, "model.d_model=32"), other)
    [*_, (_, latest)] = list_checkpoints(ours / "checkpoints")
    shutil.copyfile(list_checkpoints(other / "checkpoints")[-1][1], latest)
    with pytest.raises(CheckpointError, match=rf"^checkpoint {latest} does not fit this model: shape of "):
        train(tiny_config(*STEPS), ours, resume=True)


def test_the_probes_warnings_reach_the_runs_listener(tiny_config, tmp_path):
    mixer = f"{Pointwise.__module__}:Pointwise"  # a feed-forward module given as the mixer
    _, _, said = train(tiny_config(*STEPS, f"model.mixer={mixer}"), tmp_path / "run")
    assert len(said) == 1 and said[0].startswith(f"warning: model.mixer={mixer} (blocks.0.mixer, Pointwise) does not "
                                                 f"mix positions")


def test_validation_is_scored_on_the_validation_set_also_when_a_finished_run_is_resumed(tiny_config, tmp_path):
    cfg = tiny_config(*STEPS)
    trainer, summary, _ = train(cfg, tmp_path / "run")
    want = evaluate(trainer.model, trainer.task, batch_size=cfg.train.eval_batch_size,
                    precision=cfg.train.precision, data=trainer.task.validation_set())
    last = [r for r in read_records(tmp_path / "run" / "metrics.jsonl") if r.get("split") == "validation"][-1]
    assert {k: last[k] for k in want} == want == summary["validation"]
    assert summary["test"]["loss"] != want["loss"]  # another set
    _, resumed, _ = train(cfg, tmp_path / "run", resume=True)  # nothing evaluated in this process before the end
    assert resumed["validation"] == want


def test_the_summary_names_the_construction_and_the_budget(tiny_config, tmp_path):
    _, summary, _ = train(tiny_config(*STEPS), tmp_path / "run")
    assert summary["construction"] == "corrected"
    assert summary["budget"] == {"sequences": 4 * 32, "amount": 4 * 32, "unit": "sequences", "width": 64}
    assert json.loads((tmp_path / "run" / "summary.json").read_text()) == summary


def test_ctrl_c_saves_the_step_and_says_how_to_continue(tiny_config, tmp_path, monkeypatch):
    monkeypatch.setattr(Trainer, "stop_requested", lambda self: True)
    run = tmp_path / "run"
    with pytest.raises(Interrupted) as stopped:
        train(tiny_config(*STEPS), run)
    assert str(stopped.value) == (f"interrupted at step 1; checkpoint saved. Continue with: modformer train "
                                  f"{run / 'config.yaml'} --out {run} --resume")
    assert [s for s, _ in list_checkpoints(run / "checkpoints")] == [1] and (run / "curves.png").exists()


def test_the_progress_bar_names_the_variant_and_the_task(tiny_config, tmp_path, capsys):
    train(tiny_config(*STEPS, "train.progress=true"), tmp_path / "run")
    err = capsys.readouterr().err
    assert "standard/retrieval" in err and "4/4" in err


def test_the_curves_are_titled_with_the_model_and_the_task(tiny_config, tmp_path, monkeypatch):
    drawn = []
    monkeypatch.setattr(trainer_module, "plot_training_curves", lambda *a, **kw: drawn.append((a, kw)))
    train(tiny_config(*STEPS), tmp_path / "run")
    assert drawn == [((tmp_path / "run" / "metrics.jsonl", tmp_path / "run" / "curves.png"),
                      {"title": "standard on retrieval"})]


class InfiniteGradient(torch.autograd.Function):
    """The identity forward; an infinite gradient backward."""

    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        return grad * math.inf


@pytest.mark.parametrize("poison, what", [(lambda loss: loss * math.nan, "loss became nan"),
                                          (InfiniteGradient.apply, "the gradient norm became (inf|nan)")])
def test_a_diverged_step_names_what_became_non_finite(tiny_config, tmp_path, monkeypatch, poison, what):
    original = Retrieval.loss
    monkeypatch.setattr(Retrieval, "loss", lambda self, logits, batch, **kw: poison(original(self, logits, batch, **kw)))
    with pytest.raises(TrainingDiverged, match=rf"^{what} at step 1 \(run {tmp_path / 'run'}\); no checkpoint"):
        train(tiny_config(*STEPS), tmp_path / "run")


def test_a_diverged_new_run_that_cannot_remove_its_folder_still_says_why(tiny_config, tmp_path, monkeypatch):
    """Removing what the run wrote is best effort: a folder the disk refuses to remove must
    not replace the divergence's message with an OSError."""
    original = Retrieval.loss
    monkeypatch.setattr(Retrieval, "loss", lambda self, logits, batch, **kw: original(self, logits, batch) * math.nan)

    def refuse(path, *args, **kwargs):
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(os, "rmdir", refuse)
    with pytest.raises(TrainingDiverged, match="Nothing of this run is kept"):
        train(tiny_config(*STEPS), tmp_path / "run")
    monkeypatch.undo()
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == ["checkpoints"]  # emptied, as far as it went
