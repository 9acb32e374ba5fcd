"""The training package's contracts off a single process's straight path (modformer/train/):
what several processes agree on, and what a run's budget counts. Written for survivors of the
package's mutation sample (results/mutation/train_survivors.txt)."""

import json
from types import SimpleNamespace

import pytest
import torch

from modformer.errors import ConfigError, ModformerError
from modformer.train import distributed
from modformer.train.budget import trained
from modformer.train.distributed import World
from modformer.train.records import read_records
from modformer.train.trainer import Trainer


@pytest.fixture
def two_processes(monkeypatch):
    """A world of two processes whose other one holds `other[0]`: all_reduce adds it in."""
    other = [None]

    def all_reduce(value):
        value.add_(other[0].to(value.dtype))

    monkeypatch.setattr(distributed.dist, "all_reduce", all_reduce)
    return other


def test_every_process_stops_where_any_one_would(two_processes):
    world = World(rank=0, size=2)
    two_processes[0] = torch.tensor([1.0])
    assert world.any(False) is True
    two_processes[0] = torch.tensor([0.0])
    assert world.any(False) is False and world.any(True) is True
    assert World().any(True) is True and World().any(False) is False


def test_the_auxiliary_losses_logged_are_the_mean_over_processes_by_name(two_processes):
    two_processes[0] = torch.tensor([1.0, 5.0])  # the other process's a and b, in name order
    trainer = SimpleNamespace(world=World(rank=0, size=2), device=torch.device("cpu"))
    assert Trainer.reduce_aux(trainer, {"b": 3.0, "a": 3.0}) == {"a": 2.0, "b": 4.0}
    assert Trainer.reduce_aux(trainer, {}) == {}
    alone = SimpleNamespace(world=World(), device=torch.device("cpu"))
    assert Trainer.reduce_aux(alone, {"a": 1.5}) == {"a": 1.5}


def test_each_process_takes_its_own_rows_of_a_global_batch():
    assert [World(rank=r, size=4).share(32) for r in range(4)] == [(0, 8), (8, 8), (16, 8), (24, 8)]
    with pytest.raises(ConfigError, match=r"^train\.batch_size=30 does not split over 4 processes$"):
        World(rank=0, size=4).share(30)


@pytest.mark.parametrize("config, budget", [
    ({}, {"sequences": 0, "amount": 0, "unit": "sequences", "width": 0}),
    ({"train": {"steps": 10, "batch_size": 4}, "model": {"d_model": 64}},
     {"sequences": 40, "amount": 40, "unit": "sequences", "width": 64}),
    ({"train": {"steps": 10, "batch_size": 4}, "task": {"name": "lm", "seq_len": 128}},
     {"sequences": 40, "amount": 5120, "unit": "tokens", "width": 0}),
    ({"train": {"batch_size": 4}}, {"sequences": 0, "amount": 0, "unit": "sequences", "width": 0}),
    ({"train": {"steps": 4}}, {"sequences": 0, "amount": 0, "unit": "sequences", "width": 0}),
    ({"train": {"steps": 10, "batch_size": 4}, "task": {"name": "lm"}},
     {"sequences": 40, "amount": 0, "unit": "tokens", "width": 0}),  # no length: no tokens counted
    ({"train": None, "task": {"name": "retrieval", "seq_len": 128}},
     {"sequences": 0, "amount": 0, "unit": "sequences", "width": 0}),
])
def test_a_budget_counts_sequences_or_a_language_models_tokens(config, budget):
    assert trained(config) == budget


def test_a_device_is_chosen_or_refused_in_words():
    from modformer.train.loop import resolve_device

    assert resolve_device("cpu") == torch.device("cpu")
    assert resolve_device("auto") == torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if not torch.cuda.is_available():
        with pytest.raises(ConfigError, match=r"^train\.device=cuda:1, but no CUDA device is available \(use cpu or "
                                              r"auto\)$"):
            resolve_device("cuda:1")


@pytest.mark.parametrize("last_saved, start, kept", [
    (40, 0, "the last good checkpoint (step 40) is kept"),
    (None, 20, "the last good checkpoint (step 20) is kept"),  # resumed there, nothing saved since
    (None, 0, "no checkpoint had been written yet"),
])
def test_a_diverged_run_says_what_it_kept(last_saved, start, kept):
    from modformer.train.loop import TrainingDiverged, TrainingLoop

    loop = SimpleNamespace(last_saved=last_saved, start=start, describe=lambda: " (run r)")
    with pytest.raises(TrainingDiverged) as raised:
        TrainingLoop.diverged(loop, "the loss", float("nan"), 10)
    assert str(raised.value) == f"the loss became nan at step 11 (run r); {kept}. Try a lower learning rate or " \
                                "train.grad_clip"


def test_the_free_memory_is_what_proc_meminfo_says():
    from pathlib import Path

    from modformer.train.preflight import available_memory

    meminfo = Path("/proc/meminfo")
    if not meminfo.exists():
        assert available_memory() is None
        return
    line = next(x for x in meminfo.read_text().splitlines() if x.startswith("MemAvailable:"))
    assert abs(available_memory() - int(line.split()[1]) * 1024) < 2 ** 30  # read twice: it moves a little


@pytest.mark.parametrize("overrides, which", [(["train.batch_size=100000"], "train.batch_size=100,000"),
                                              (["train.eval_batch_size=100000"], "train.eval_batch_size=100,000")])
def test_a_batch_too_large_for_the_free_memory_names_itself_and_both_sizes(overrides, which):
    from modformer.config import load_config
    from modformer.train.preflight import check_memory, step_memory_floor

    cfg = load_config(None, ["model.d_model=16", "model.n_heads=2", *overrides])
    need = step_memory_floor(cfg, 32, 512)
    with pytest.raises(ConfigError, match=rf"^{which}: one batch of sequences of 32 tokens needs at least "
                                          rf"{need / 2 ** 30:,.1f} GiB, more than the 0\.5 GiB this machine has free"):
        check_memory(cfg, 32, 512, 2 ** 29)


class Wide(torch.nn.Module):
    """A feed-forward module that doubles the width: refused by the probe."""

    def __init__(self, cfg):
        super().__init__()
        self.proj = torch.nn.Linear(cfg.d_model, cfg.d_model)

    def forward(self, x):
        return torch.cat([self.proj(x), x], -1)


def test_preflight_names_a_wrong_ffn_by_its_config_key():
    from modformer.config import load_config
    from modformer.train.preflight import preflight
    from modformer.variants.base import build_model

    cfg = load_config(None, ["model.d_model=16", "model.n_heads=2", f"model.ffn={__name__}:Wide"])
    with pytest.raises(ConfigError, match=rf"^model\.ffn={__name__}:Wide \(blocks\.0\.ffn, Wide\) returned"):
        preflight(cfg, build_model(cfg.model, 0), 8, cfg.model.vocab_size)


def test_the_training_curves_show_train_and_validation_records_only(tmp_path, monkeypatch):
    from modformer.train import plots

    drawn = {}
    monkeypatch.setattr(plots, "save_figure", lambda fig, path: drawn.update(fig=fig))
    records = [{"kind": "train", "step": 1, "loss": 2.0}, {"kind": "train", "step": 2, "loss": 1.0},
               {"kind": "eval", "split": "validation", "step": 2, "loss": 1.5, "accuracy": 0.5},
               {"kind": "eval", "split": "test", "step": 2, "loss": 9.0, "accuracy": 0.1},
               {"kind": "induction", "split": "validation", "step": 2, "scores": [[0.1]]}]
    (tmp_path / "m.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    plots.plot_training_curves(tmp_path / "m.jsonl", tmp_path / "c.png", title="t")
    loss, accuracy = drawn["fig"].axes
    assert [(line.get_label(), list(line.get_ydata())) for line in loss.get_lines()] == [
        ("train", [2.0, 1.0]), ("validation", [1.5])]
    assert [(line.get_label(), list(line.get_ydata())) for line in accuracy.get_lines()] == [("validation", [0.5])]
    assert (loss.get_xlabel(), loss.get_ylabel(), accuracy.get_xlabel(), accuracy.get_ylabel()) == (
        "step", "cross-entropy", "step", "accuracy")


def test_each_logged_training_window_records_its_loss_rate_gradient_norm_and_speed(tiny_config, tmp_path):
    cfg = tiny_config("train.steps=4", "train.log_every=2", "train.eval_every=4", "train.checkpoint_every=4")
    Trainer(cfg, tmp_path / "run", echo=lambda m: None).run()
    windows = [r for r in read_records(tmp_path / "run" / "metrics.jsonl") if r["kind"] == "train"]
    assert [w["step"] for w in windows] == [2, 4]
    for w in windows:
        assert {"loss", "lr", "grad_norm", "tokens_per_s"} <= set(w) and w["grad_norm"] > 0 and w["tokens_per_s"] > 0


def test_a_run_speaks_on_stderr_by_default_and_records_each_starts_torch(tiny_config, tmp_path, capsys):
    cfg = tiny_config("train.steps=2", "train.eval_every=2", "train.checkpoint_every=2")
    Trainer(cfg, tmp_path / "run").run()
    Trainer(cfg, tmp_path / "run", resume=True).run()  # finished already: resumed at its last step
    said = capsys.readouterr()
    assert f"resumed {tmp_path / 'run'} from step 2" in said.err and "resumed" not in said.out
    starts = json.loads((tmp_path / "run" / "run.json").read_text())["starts"]
    assert len(starts) == 2 and {s["torch"] for s in starts} == {torch.__version__}


def test_other_processes_stop_with_a_message_when_rank_0_fails(two_processes):
    from pathlib import Path

    two_processes[0] = torch.tensor([1.0])  # rank 0 reports a problem
    rank_1 = SimpleNamespace(world=World(rank=1, size=2), run_dir=Path("runs/r"))
    ran = []
    with pytest.raises(ModformerError, match=r"^rank 0 could not prepare runs/r \(its message says why\)$"):
        Trainer._on_main(rank_1, lambda: ran.append(1))
    assert ran == []  # only rank 0 runs the step


@pytest.fixture
def torchrun(monkeypatch):
    """The environment torchrun gives rank 1 of 2, with a process group that records how it
    was asked for instead of starting (and a GPU that is only recorded)."""
    asked = {}
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setattr(distributed.torch.cuda, "set_device", lambda device: asked.update(gpu=device))
    monkeypatch.setattr(distributed.dist, "is_initialized", lambda: False)
    monkeypatch.setattr(distributed.dist, "init_process_group", lambda backend: asked.update(backend=backend))
    monkeypatch.setattr(distributed.dist, "get_rank", lambda: 1)
    monkeypatch.setattr(distributed.dist, "get_world_size", lambda: 2)
    return asked


def test_under_torchrun_each_process_takes_its_local_gpu_and_nccl(torchrun):
    gpu = torch.device("cuda", 1)
    assert distributed.init_world(torch.device("cuda")) == (World(1, 2, gpu), gpu)
    assert torchrun == {"gpu": gpu, "backend": "nccl"}


def test_under_torchrun_on_cpus_the_processes_use_gloo(torchrun, monkeypatch):
    cpu = torch.device("cpu")
    assert distributed.init_world(cpu) == (World(1, 2, cpu), cpu)
    assert torchrun == {"backend": "gloo"}
    monkeypatch.delenv("LOCAL_RANK")  # torchrun always sets it; a launcher that does not means GPU 0
    assert distributed.init_world(torch.device("cuda"))[1] == torch.device("cuda", 0)


def test_without_torchrun_there_is_one_process_and_no_group(torchrun, monkeypatch):
    monkeypatch.delenv("WORLD_SIZE")
    assert distributed.init_world(torch.device("cpu")) == (World(), torch.device("cpu"))
    assert torchrun == {}


def test_several_processes_train_through_ddp_on_their_own_gpu(monkeypatch):
    wrapped = []
    monkeypatch.setattr(torch.nn.parallel, "DistributedDataParallel",
                        lambda model, device_ids: wrapped.append(device_ids) or ("ddp", model))
    model = torch.nn.Linear(2, 2)
    assert World().wrap(model) is model and wrapped == []
    assert World(1, 2, torch.device("cuda", 1)).wrap(model) == ("ddp", model)
    assert World(1, 2, torch.device("cpu")).wrap(model) == ("ddp", model)
    assert wrapped == [[1], None]


def test_the_peak_shrinks_the_multiply_to_fit_the_time_given(monkeypatch):
    from modformer.train import mfu

    sizes, dtypes = [], set()

    def timed(a, b, device):  # a machine of 2 GFLOP/s
        sizes.append(a.shape[0])
        dtypes.add(a.dtype)
        return 2 * a.shape[0] ** 3 / 2e9

    monkeypatch.setattr(mfu, "_timed_multiply", timed)
    assert mfu.matmul_peak("fp32", size=1024, repeats=2) == pytest.approx(2e9)
    assert sizes == [1024] * 3  # no time given: the size asked for
    sizes.clear()
    assert mfu.matmul_peak("fp32", size=1024, repeats=2, seconds=0.5) == pytest.approx(2e9)
    assert sizes == [128, 768, 768, 768]  # a probe, then (0.5 s x 2 GFLOP/s / 2) ** (1/3) = 794, down to 768
    assert dtypes == {torch.float32}
    mfu.matmul_peak("bf16", size=256, repeats=1)
    assert dtypes == {torch.float32, torch.bfloat16}


def test_a_runs_peak_is_a_1024_multiply_where_one_takes_under_50_ms(monkeypatch):
    from modformer.config import load_config
    from modformer.train import mfu

    sizes = []

    def timed(a, b, device):  # a machine of 20 TFLOP/s: a 1024 multiply takes 0.1 ms
        sizes.append(a.shape[0])
        return 2 * a.shape[0] ** 3 / 2e13

    monkeypatch.setattr(mfu, "_timed_multiply", timed)
    cfg = load_config(None, ["model.d_model=16", "model.n_heads=2"]).model
    measured = mfu.utilisation(cfg, 8, tokens_per_s=1e6, precision="fp32", device=torch.device("cpu"))
    assert sizes == [128, 1024, 1024, 1024, 1024] and measured["matmul_peak_gflops"] == pytest.approx(2e4)
