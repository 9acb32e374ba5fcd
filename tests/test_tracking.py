"""train.log_to: every metrics.jsonl record reaches TensorBoard, W&B (offline) and MLflow (a
local store), read back with each tool's own reader or format. Offline and in seconds."""

import json
import struct

import pytest

from modformer.api import train_run
from modformer.cli import main
from modformer.errors import ConfigError
from modformer.train import tracking
from modformer.train.records import read_records
from modformer.train.tracking import scalars


def trained(tmp_path, tiny_config, monkeypatch, *trackers):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    cfg = tiny_config(f"train.log_to={json.dumps(list(trackers))}", "train.log_group=grid",
                      f"train.mlflow_uri={(tmp_path / 'mlruns').as_uri()}")
    run_dir = tmp_path / "run"
    train_run(cfg, run_dir)
    records = list(read_records(run_dir / "metrics.jsonl"))
    return run_dir, records


def expected(records, name):
    """(step, value) of one scalar in every record that has it, as metrics.jsonl holds them."""
    return [(step, values[name]) for step, values in map(scalars, records) if name in values]


def test_records_are_named_by_split_or_kind():
    step, values = scalars({"kind": "eval", "split": "validation", "step": 6, "accuracy": 0.5,
                            "slices": {"n_pairs": {"2": {"accuracy": 1.0, "examples": 3}}}})
    assert step == 6 and values == {"validation/accuracy": 0.5, "validation/slices/n_pairs/2/accuracy": 1.0,
                                    "validation/slices/n_pairs/2/examples": 3.0}
    assert scalars({"kind": "induction", "step": 2, "scores": [[0.1, 0.2]]})[1] == {
        "induction/scores/0/0": 0.1, "induction/scores/0/1": 0.2}


def test_tensorboard_event_files_hold_every_record(tmp_path, tiny_config, monkeypatch):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    run_dir, records = trained(tmp_path, tiny_config, monkeypatch, "tensorboard")
    events = EventAccumulator(str(run_dir), size_guidance={"scalars": 0, "images": 0}).Reload()
    for name in ("train/loss", "train/lr", "validation/accuracy", "test/accuracy"):
        got = [(e.step, pytest.approx(e.value, rel=1e-6)) for e in events.Scalars(name)]
        assert got == expected(records, name) and got
    assert "plots/curves" in events.Tags()["images"]
    assert any(tag.startswith("config") for tag in events.Tags()["tensors"])  # add_text keeps text as tensors


def wandb_history(run_dir):
    """The history rows of the offline W&B run in `run_dir`, read from its .wandb file: a
    7-byte header, then LevelDB log records (32 KiB blocks) of protobuf `Record`s."""
    from wandb.proto import wandb_internal_pb2

    [path] = run_dir.glob("wandb/offline-run-*/run-*.wandb")
    data, pos, block, chunks, rows = path.read_bytes(), 7, 32768, b"", []
    while pos + 7 <= len(data):
        if block - pos % block < 7:  # a block's tail too short for a header is padding
            pos += block - pos % block
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        chunks += data[pos + 7:pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):  # a whole record, or the last piece of one
            record = wandb_internal_pb2.Record()
            record.ParseFromString(chunks)
            chunks = b""
            if record.WhichOneof("record_type") == "history":
                rows.append({item.key or "/".join(item.nested_key): json.loads(item.value_json)
                             for item in record.history.item})
        elif kind == 0:
            break
    return rows


def test_wandb_offline_run_holds_every_record(tmp_path, tiny_config, monkeypatch):
    pytest.importorskip("wandb")
    import wandb

    run_dir, records = trained(tmp_path, tiny_config, monkeypatch, "wandb")
    # run.finish() returns before W&B's service process has written the offline file (seen
    # as a 7-byte file under load); the service writes it by the time it shuts down, which
    # a run's process does at exit and teardown() does here.
    wandb.teardown()
    rows = wandb_history(run_dir)
    for name in ("train/loss", "validation/accuracy", "test/accuracy"):
        got = [(row["step"], pytest.approx(row[name], rel=1e-6)) for row in rows if name in row]
        assert got == expected(records, name) and got
    assert any(row.get("plots/curves/_type") == "image-file" for row in rows)
    assert list(run_dir.glob("wandb/offline-run-*/files/media/images/plots/curves*.png"))


def test_mlflow_store_holds_the_metrics_params_and_plots(tmp_path, tiny_config, monkeypatch):
    pytest.importorskip("mlflow")
    from mlflow.tracking import MlflowClient

    run_dir, records = trained(tmp_path, tiny_config, monkeypatch, "mlflow")
    client = MlflowClient(tracking_uri=(tmp_path / "mlruns").as_uri())
    run = client.get_run((run_dir / "mlflow_run_id").read_text().strip())
    assert client.get_experiment(run.info.experiment_id).name == "grid" and run.info.status == "FINISHED"
    assert run.data.params["train.steps"] == "12" and run.data.params["model.d_model"] == "64"
    for name in ("train/loss", "validation/accuracy", "test/accuracy"):
        got = sorted((m.step, pytest.approx(m.value, rel=1e-6)) for m in client.get_metric_history(run.info.run_id, name))
        assert got == expected(records, name) and got
    assert [a.path for a in client.list_artifacts(run.info.run_id, "plots")] == ["plots/curves.png"]


def test_unknown_or_missing_trackers_are_one_clear_error(tmp_path, tiny_config, monkeypatch, capsys):
    with pytest.raises(ConfigError, match="train.log_to"):
        tiny_config("train.log_to=[tensorbored]")
    monkeypatch.setitem(tracking.TRACKERS, "mlflow", ("modformer.train.tracking.mlflow_log", "no_such_package_x"))
    config = tmp_path / "c.yaml"
    config.write_text("task: {name: retrieval}\n")
    assert main(["train", str(config), "train.log_to=[mlflow]", "train.steps=2", "--out", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "pip install 'modformer[track]'" in err[0]
    assert not (tmp_path / "r").exists()


def test_a_resumed_run_shows_each_step_once_in_tensorboard(tmp_path, tiny_config, monkeypatch):
    """Killed after step 8's checkpoint having logged up to step 12: the resumed run redoes
    9-12, and TensorBoard drops the killed process's values for them (purge_step)."""
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    run_dir, _ = trained(tmp_path, tiny_config, monkeypatch, "tensorboard")
    (run_dir / "checkpoints" / "step_0000012.safetensors").unlink()
    (run_dir / "summary.json").unlink()
    cfg = tiny_config("train.log_to=[tensorboard]", "train.log_group=grid",
                      f"train.mlflow_uri={(tmp_path / 'mlruns').as_uri()}")
    train_run(cfg, run_dir, resume=True)
    records = list(read_records(run_dir / "metrics.jsonl"))
    events = EventAccumulator(str(run_dir), size_guidance={"scalars": 0}).Reload()
    got = [(e.step, pytest.approx(e.value, rel=1e-6)) for e in events.Scalars("train/loss")]
    assert got == expected(records, "train/loss") and [s for s, _ in got] == [3, 6, 9, 12]


def test_a_sweep_groups_its_runs_in_the_trackers(tmp_path):
    import yaml

    from modformer.sweep.runner import SweepRunner
    from modformer.sweep.spec import load_sweep

    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump({"task": {"name": "retrieval"}, "train": {"log_to": ["tensorboard"]},
                                    "sweep": {"variants": ["standard"], "seeds": [0]}}))
    runner = SweepRunner(load_sweep(path), tmp_path / "ra", echo=lambda m: None)
    run = runner.sweep.runs()[0]
    runner.out.mkdir()
    cmd, _, _ = runner.prepare(run, threads=1)
    assert yaml.safe_load(open(cmd[4]))["train"]["log_group"] == "ra"  # W&B group, MLflow experiment


@pytest.fixture
def fake_wandb(monkeypatch):
    """wandb_log's `wandb`, recording what it is asked: `calls` holds init's arguments and each
    define_metric, in order."""
    pytest.importorskip("wandb")
    from types import SimpleNamespace

    from modformer.train.tracking import wandb_log

    calls = []
    run = SimpleNamespace(define_metric=lambda *a, **kw: calls.append(("define_metric", a, kw)))
    fake = SimpleNamespace(init=lambda **kw: calls.append(("init", kw)) or run, Settings=dict,
                           api=SimpleNamespace(api_key=None))
    monkeypatch.setattr(wandb_log, "wandb", fake)
    for name in ("WANDB_MODE", "WANDB_API_KEY", "WANDB_BASE_URL", "WANDB_PROJECT"):
        monkeypatch.delenv(name, raising=False)
    return SimpleNamespace(calls=calls, module=wandb_log, api=fake.api)


def test_each_start_of_a_run_continues_one_wandb_run_charted_by_the_training_step(fake_wandb, tmp_path):
    import hashlib

    fake_wandb.module.WandbTracker(tracking.RunInfo(run_dir=tmp_path, name="runs/r", group="grid", config={"a": 1},
                                                    start_step=4, mlflow_uri=None))
    [init, *metrics] = fake_wandb.calls
    assert init == ("init", {"project": "modformer", "group": "grid", "name": "runs/r",
                             "id": hashlib.sha1(str(tmp_path.resolve()).encode()).hexdigest()[:16], "resume": "allow",
                             "dir": str(tmp_path), "config": {"a": 1}, "mode": "offline",
                             "settings": {"silent": True, "console": "off"}})
    assert metrics == [("define_metric", ("step",), {}), ("define_metric", ("*",), {"step_metric": "step"})]


def test_wandb_goes_online_only_with_a_key_and_a_server_that_answers(fake_wandb, monkeypatch):
    asked = []

    class Connection:
        def close(self):
            pass

    def connect(address, timeout):
        asked.append(address)
        if address[0] == "down.example":
            raise OSError("unreachable")
        return Connection()

    monkeypatch.setattr(fake_wandb.module.socket, "create_connection", connect)
    mode = fake_wandb.module._mode
    assert mode() == "offline" and asked == []  # no key: not even asked
    fake_wandb.api.api_key = "from ~/.netrc"
    assert mode() == "online" and asked == [("api.wandb.ai", 443)]
    monkeypatch.setenv("WANDB_BASE_URL", "http://down.example:8080")
    assert mode() == "offline" and asked[-1] == ("down.example", 8080)
    monkeypatch.setenv("WANDB_MODE", "disabled")
    assert mode() == "disabled"


def test_mlflow_stores_in_mlruns_here_by_default_and_logs_every_parameter_100_a_call(tmp_path, monkeypatch):
    pytest.importorskip("mlflow")
    from types import SimpleNamespace

    from modformer.train.tracking import mlflow_log

    seen = {"batches": []}

    class Client:
        def __init__(self, tracking_uri):
            seen["uri"] = tracking_uri

        def get_experiment_by_name(self, name):
            return None

        def create_experiment(self, name):
            return "7"

        def create_run(self, experiment_id, run_name):
            return SimpleNamespace(info=SimpleNamespace(run_id="r1"))

        def log_batch(self, run_id, params):
            seen["batches"].append([(p.key, p.value) for p in params])

    monkeypatch.setattr(mlflow_log, "MlflowClient", Client)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.chdir(tmp_path)
    config = {"train": {f"k{i:03d}": i for i in range(250)}}
    mlflow_log.MlflowTracker(tracking.RunInfo(run_dir=tmp_path, name="r", group="g", config=config, start_step=0,
                                              mlflow_uri=None))
    assert seen["uri"] == (tmp_path / "mlruns").as_uri()
    assert [len(b) for b in seen["batches"]] == [100, 100, 50]
    assert sum(seen["batches"], []) == [(f"train.k{i:03d}", str(i)) for i in range(250)]
