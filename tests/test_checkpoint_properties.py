"""Checkpoints and the metrics log, property by property (the trainer's tests drive them
through whole runs): a checkpoint restores exactly what was saved (weights, optimizer state,
random state, metadata), tied weights included; anything damaged, foreign, of another
version or of another model is refused in one line naming the file; the metrics log keeps
whole records around damaged lines and rewrites itself atomically."""

import os
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file
from torch import nn

from modformer.errors import CheckpointError, ModformerError
from modformer.train.checkpoint import (FORMAT, FORMAT_VERSION, checkpoint_path, digest, list_checkpoints,
                                        load_model_state, load_optimizer_tensors, optimizer_tensors, read_checkpoint,
                                        restore_rng, rewrite_checkpoint_meta, rng_tensors, save_checkpoint)
from modformer.train.records import MetricsLog, NullMetricsLog, read_records


class Tied(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(5, 3)
        self.head = nn.Linear(3, 5, bias=False)
        self.head.weight = self.embed.weight  # one tensor under two names
        self.norm = nn.LayerNorm(3)

    def forward(self, ids):
        return self.head(self.norm(self.embed(ids)))


def stepped(model: Tied) -> torch.optim.Optimizer:
    """An AdamW that has taken one step, so that it holds state to save."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.1)
    model(torch.tensor([[1, 2]])).sum().backward()
    optimizer.step()
    return optimizer


def names(model):
    return {p: n for n, p in model.named_parameters()}


def test_a_checkpoint_restores_weights_optimizer_state_random_state_and_metadata(tmp_path):
    torch.manual_seed(0)
    model = Tied()
    optimizer = stepped(model)
    torch.manual_seed(123)
    path = checkpoint_path(tmp_path, 42)
    assert path.name == "step_0000042.safetensors"
    save_checkpoint(path, 42, model, optimizer, {"config": {"a": [1, 2]}, "note": "x"})
    expected_draw = torch.rand(3)

    ckpt = read_checkpoint(path)
    assert ckpt.step == 42 and ckpt.meta == {"config": {"a": [1, 2]}, "note": "x"}
    assert set(ckpt.model) == set(model.state_dict())  # both tied names, each its own copy in the file
    for key, value in model.state_dict().items():
        assert torch.equal(ckpt.model[key], value), key
    assert set(ckpt.optimizer) == {f"{n}.{slot}" for n in ("embed.weight", "norm.weight", "norm.bias")
                                   for slot in ("step", "exp_avg", "exp_avg_sq")}
    restore_rng(ckpt.rng)
    assert torch.equal(torch.rand(3), expected_draw)  # the random stream continues where it was saved

    fresh = Tied()
    fresh_optimizer = torch.optim.AdamW(fresh.parameters(), lr=0.1)
    load_model_state(fresh, ckpt.model, path)
    load_optimizer_tensors(fresh_optimizer, names(fresh), ckpt.optimizer)
    assert fresh.head.weight is fresh.embed.weight  # still tied after loading
    before = optimizer_tensors(optimizer, names(model))
    after = optimizer_tensors(fresh_optimizer, names(fresh))
    assert before.keys() == after.keys() and all(torch.equal(before[k], after[k]) for k in before)
    assert all(s["step"].device.type == "cpu" for s in fresh_optimizer.state.values())


def test_the_checksum_covers_names_dtypes_shapes_and_bytes():
    base = {"a": torch.zeros(2, 3), "b": torch.ones(4)}
    same = {"b": torch.ones(4), "a": torch.zeros(2, 3)}
    assert digest(base) == digest(same)  # name order, not insertion order
    for changed in ({"a": torch.zeros(3, 2), "b": torch.ones(4)}, {"a": torch.zeros(2, 3, dtype=torch.float64),
                    "b": torch.ones(4)}, {"a": torch.zeros(2, 3), "c": torch.ones(4)},
                    {"a": torch.zeros(2, 3), "b": torch.tensor([1.0, 1, 1, 2])}):
        assert digest(changed) != digest(base)


def test_a_damaged_foreign_or_other_versions_file_is_refused_naming_it(tmp_path):
    model = nn.Linear(2, 2)
    path = tmp_path / "step_0000001.safetensors"
    save_checkpoint(path, 1, model, None, {})

    with pytest.raises(CheckpointError, match=rf"^checkpoint not found: {tmp_path / 'none'}$"):
        read_checkpoint(tmp_path / "none")
    data = bytearray(path.read_bytes())
    data[-8:] = bytes(8) if data[-8:] != bytes(8) else b"\x01" * 8  # the last tensor's bytes, header intact
    damaged = tmp_path / "damaged.safetensors"
    damaged.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match=rf"^checkpoint {damaged} is damaged: its tensors do not match"):
        read_checkpoint(damaged)
    (tmp_path / "text.safetensors").write_text("not a checkpoint")
    with pytest.raises(CheckpointError, match=r"is corrupt or not a safetensors file \(\w+\)$"):
        read_checkpoint(tmp_path / "text.safetensors")
    save_file({"x": torch.zeros(1)}, str(tmp_path / "foreign.safetensors"), metadata={"format": "other"})
    with pytest.raises(CheckpointError, match=r"is not a modformer checkpoint \(a safetensors file without our "):
        read_checkpoint(tmp_path / "foreign.safetensors")
    save_file({"x": torch.zeros(1)}, str(tmp_path / "v0.safetensors"), metadata={"format": FORMAT,
                                                                                  "format_version": "0"})
    with pytest.raises(CheckpointError, match=rf"has checkpoint format version 0, this modformer reads version "
                                              rf"{FORMAT_VERSION}$"):
        read_checkpoint(tmp_path / "v0.safetensors")
    for meta, what in (({"step": "x"}, "ValueError"), ({}, "KeyError"), ({"step": "1", "config": "{"}, "JSONDecodeError")):
        file = tmp_path / f"meta_{what}.safetensors"
        save_file({"model.w": torch.zeros(1)}, str(file), metadata={"format": FORMAT, "format_version": FORMAT_VERSION,
                                                                     **meta})
        with pytest.raises(CheckpointError, match=rf"^checkpoint {file} has damaged metadata \({what}\)$"):
            read_checkpoint(file)
    file = tmp_path / "odd.safetensors"
    save_file({"other.w": torch.zeros(1)}, str(file), metadata={"format": FORMAT, "format_version": FORMAT_VERSION,
                                                                 "step": "1"})
    with pytest.raises(CheckpointError, match=r"holds an unexpected tensor 'other\.w'$"):
        read_checkpoint(file)
    assert isinstance(CheckpointError("x"), ModformerError)


def test_weights_of_another_model_are_refused_saying_how_they_differ(tmp_path):
    model = nn.Sequential(nn.Linear(2, 3), nn.Linear(3, 1))
    state = {k: v.clone() for k, v in model.state_dict().items()}
    load_model_state(model, state, "here")  # its own: fine
    with pytest.raises(CheckpointError, match=r"^checkpoint here does not fit this model: missing \['1\.bias'\]$"):
        load_model_state(model, {k: v for k, v in state.items() if k != "1.bias"}, "here")
    with pytest.raises(CheckpointError, match=r"does not fit this model: unexpected \['2\.weight'\]$"):
        load_model_state(model, {**state, "2.weight": torch.zeros(1)}, "here")
    with pytest.raises(CheckpointError, match=r"does not fit this model: shape of '0\.weight' is \(2, 2\), the model "
                                              r"has \(3, 2\)$"):
        load_model_state(model, {**state, "0.weight": torch.zeros(2, 2)}, "here")
    with pytest.raises(CheckpointError, match=r"missing \['0\.bias'\]; unexpected \['x'\]$"):
        load_model_state(model, {**{k: v for k, v in state.items() if k != "0.bias"}, "x": torch.zeros(1)}, "here")


def test_optimizer_state_of_another_freeze_set_is_refused():
    model = nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 2))
    optimizer = torch.optim.AdamW(model.parameters())
    model(torch.ones(1, 2)).sum().backward()
    optimizer.step()
    saved = optimizer_tensors(optimizer, names(model))
    with pytest.raises(CheckpointError, match=r"^checkpoint has optimizer state for 'x', which is not a trainable"):
        load_optimizer_tensors(optimizer, names(model), {**saved, "x.step": torch.tensor(1.0)})
    partial = {k: v for k, v in saved.items() if not k.startswith("1.")}
    with pytest.raises(CheckpointError, match=r"lacks optimizer state for \['1\.weight', '1\.bias'\]; was it saved "
                                              r"with another freeze set\?$"):
        load_optimizer_tensors(optimizer, names(model), partial)
    load_optimizer_tensors(optimizer, names(model), {})  # a run saved before any step: no state, and none kept
    assert not optimizer.state


def test_checkpoints_are_listed_oldest_first_by_step(tmp_path):
    assert list_checkpoints(tmp_path / "none") == []
    for step in (200, 5, 1000):
        checkpoint_path(tmp_path, step).write_bytes(b"")
    (tmp_path / "notes.txt").write_text("")
    (tmp_path / f".step_0000007.safetensors.tmp-{os.getpid()}").write_text("")  # a write in progress
    assert list_checkpoints(tmp_path) == [(5, checkpoint_path(tmp_path, 5)), (200, checkpoint_path(tmp_path, 200)),
                                          (1000, checkpoint_path(tmp_path, 1000))]


def test_rewriting_the_metadata_keeps_the_tensors_and_only_writes_what_changed(tmp_path):
    model = nn.Linear(2, 2)
    path = tmp_path / "c.safetensors"
    save_checkpoint(path, 3, model, None, {"config": {"k": 1}})
    before = path.read_bytes()
    assert rewrite_checkpoint_meta(path, lambda meta: []) == [] and path.read_bytes() == before

    def bump(meta):
        meta["config"]["k"] = 2
        return ["k 1 -> 2"]

    assert rewrite_checkpoint_meta(path, bump) == ["k 1 -> 2"]
    ckpt = read_checkpoint(path)  # its checksum still holds
    assert ckpt.meta == {"config": {"k": 2}} and ckpt.step == 3
    assert all(torch.equal(ckpt.model[k], v) for k, v in model.state_dict().items())


def test_the_random_state_of_a_device_this_machine_lacks_is_left_alone():
    state = rng_tensors()
    assert list(state) == (["rng.torch"] + [f"rng.cuda{i}" for i in range(torch.cuda.device_count())])
    torch.manual_seed(7)
    expected = torch.rand(2)
    torch.manual_seed(7)
    restore_rng({})  # nothing saved: the stream is untouched
    assert torch.equal(torch.rand(2), expected)
    if not torch.cuda.is_available():  # a GPU's state, saved where there was one, is left alone here
        torch.manual_seed(7)
        restore_rng({"rng.cuda0": torch.get_rng_state()})
        assert torch.equal(torch.rand(2), expected)


# -- the metrics log --------------------------------------------------------------------------

def test_the_metrics_log_keeps_whole_records_around_damaged_lines(tmp_path):
    path = tmp_path / "metrics.jsonl"
    log = MetricsLog(path)
    assert log.records() == [] and log.sync() is None  # no file yet: nothing, and nothing to sync
    log.append({"step": 1})
    with open(path, "a") as f:
        f.write('{"step": 2, "lo\n\x00\x00\x00\n[1, 2]\n\n   \n"text"\n')  # torn, zero-filled, not objects
    log.append({"step": 3})
    assert log.records() == [{"step": 1}, {"step": 3}]
    log.keep(lambda r: r["step"] > 1)
    assert path.read_text() == '{"step": 3}\n'  # rewritten whole: the damaged lines are gone too
    log.replace([{"step": 9}, {"step": 10}])
    assert [r["step"] for r in read_records(path)] == [9, 10]
    log.sync()
    with pytest.raises(ModformerError, match=rf"^cannot read {tmp_path}: Is a directory$"):
        list(read_records(tmp_path))


def test_the_metrics_log_sends_each_record_to_its_trackers_until_closed(tmp_path):
    class Seen:
        def __init__(self):
            self.logged, self.finished = [], None

        def log(self, step, values):
            self.logged.append((step, values))

        def finish(self, images):
            self.finished = images

    seen = Seen()
    log = MetricsLog(tmp_path / "m.jsonl")
    log.track([seen])
    log.append({"kind": "train", "step": 4, "loss": 1.5})
    log.close([tmp_path / "curves.png"])
    log.append({"kind": "train", "step": 5, "loss": 1.0})  # after close: the file only
    assert seen.finished == [tmp_path / "curves.png"] and len(seen.logged) == 1 and seen.logged[0][0] == 4
    assert seen.logged[0][1]["train/loss"] == 1.5
    assert [r["step"] for r in log.records()] == [4, 5]
    MetricsLog(tmp_path / "other.jsonl").close([])  # a log that never tracked closes too


def test_a_full_disk_refusing_an_append_names_the_log():
    log = MetricsLog(Path("/dev/full"))  # every write: no space left on the device
    with pytest.raises(OSError) as refused:
        log.append({"step": 1})
    assert refused.value.errno == 28 and refused.value.filename == "/dev/full"


def test_a_rank_that_does_not_write_logs_nothing(tmp_path):
    log = NullMetricsLog(tmp_path / "m.jsonl")
    log.append({"step": 1})
    log.keep(lambda r: True)
    log.replace([{"step": 2}])
    log.sync()
    assert log.records() == [] and not (tmp_path / "m.jsonl").exists()


def test_records_are_read_as_json_objects_one_a_line(tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_bytes(b'{"a": 1}\n\xff\xfe\n{"b": "\xc3\xa9"}\n')  # undecodable bytes: a damaged line, skipped
    assert list(read_records(path)) == [{"a": 1}, {"b": "é"}]


def test_each_gpus_random_state_is_saved_and_restored_in_device_order(monkeypatch):
    """The CUDA branch, on a machine without one: torch.cuda's functions stand in for 12 GPUs."""
    fake = [torch.tensor([i], dtype=torch.uint8) for i in range(12)]
    restored = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_rng_state_all", lambda: fake)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 12)
    monkeypatch.setattr(torch.cuda, "set_rng_state_all", restored.append)
    state = rng_tensors()
    assert list(state) == ["rng.torch", *(f"rng.cuda{i}" for i in range(12))]
    restore_rng(state)
    assert len(restored) == 1 and [int(s) for s in restored[0]] == list(range(12))  # cuda10 after cuda9, not cuda1
    restore_rng({k: v for k, v in state.items() if k != "rng.cuda11"})  # saved on 11 GPUs: left alone here
    restore_rng({**state, "rng.cuda12": fake[0]})  # saved on 13
    assert len(restored) == 1


def test_a_restored_step_count_lives_where_the_optimizer_keeps_it():
    """Fused and capturable AdamW keep the step count on the parameter's device, the others on
    the CPU; the moments always go to the parameter's device (here the meta device, which
    tells the two apart on a machine with no GPU)."""
    param = nn.Parameter(torch.zeros(2, device="meta"))
    saved = {"w.step": torch.tensor(3.0), "w.exp_avg": torch.zeros(2), "w.exp_avg_sq": torch.zeros(2)}
    for flag, step_device in ((None, "cpu"), ("fused", "meta"), ("capturable", "meta")):
        optimizer = torch.optim.AdamW([param])
        if flag:
            optimizer.defaults[flag] = True
        load_optimizer_tensors(optimizer, {param: "w"}, saved)
        state = optimizer.state[param]
        assert (state["exp_avg"].device.type, state["exp_avg_sq"].device.type) == ("meta", "meta"), flag
        assert state["step"].device.type == step_device, flag


def test_a_disk_that_refuses_the_checkpoint_is_named_in_one_line(tmp_path, monkeypatch):
    from safetensors import SafetensorError

    from modformer.errors import StorageFault
    from modformer.train import checkpoint

    def full(tensors, filename, metadata=None):
        raise SafetensorError('Error while serializing: IoError(Os { code: 28, kind: StorageFull, message: "No '
                              'space left on device" })')

    monkeypatch.setattr(checkpoint, "save_file", full)
    path = tmp_path / "checkpoints" / "step_0000001.safetensors"
    path.parent.mkdir()
    with pytest.raises(StorageFault) as refused:
        save_checkpoint(path, 1, nn.Linear(2, 2), None, {})
    assert str(refused.value).startswith(f"cannot write to {path.parent}: no space left on the device (No space left "
                                         f"on device). Nothing acknowledged is lost")
    assert sorted(p.name for p in path.parent.iterdir()) == []  # no temporary left

    def other(tensors, filename, metadata=None):
        raise SafetensorError("some other failure")

    monkeypatch.setattr(checkpoint, "save_file", other)
    with pytest.raises(SafetensorError, match="^some other failure$"):  # not a disk's: passed on as it is
        save_checkpoint(path, 1, nn.Linear(2, 2), None, {})


def test_a_long_mismatch_names_its_first_three_keys():
    model = nn.Sequential(*[nn.Linear(1, 1) for _ in range(3)])
    state = model.state_dict()
    with pytest.raises(CheckpointError, match=r"missing \['0\.weight', '0\.bias', '1\.weight'\]$"):
        load_model_state(model, {}, "here")
    extra = {**state, **{f"x{i}": torch.zeros(1) for i in range(5)}}
    with pytest.raises(CheckpointError, match=r"unexpected \['x0', 'x1', 'x2'\]$"):
        load_model_state(model, extra, "here")
    optimizer = torch.optim.AdamW(model.parameters())
    model(torch.ones(1, 1)).sum().backward()
    optimizer.step()
    saved = optimizer_tensors(optimizer, names(model))
    with pytest.raises(CheckpointError, match=r"lacks optimizer state for \['1\.weight', '1\.bias', '2\.weight'\]; "):
        load_optimizer_tensors(optimizer, names(model), {k: v for k, v in saved.items() if k.startswith("0.")})


def test_optimizer_state_that_is_no_tensor_is_saved_as_one():
    model = nn.Linear(1, 1)
    optimizer = torch.optim.AdamW(model.parameters())
    optimizer.state[model.weight]["count"] = 3  # a plain number, as some optimizers keep
    saved = optimizer_tensors(optimizer, names(model))
    assert torch.equal(saved["weight.count"], torch.tensor(3))
