"""Bad input found by fuzzing the command line (issue 51 point 3): each is one line naming what
is wrong and exit status 2, before anything is written; never a traceback, never a silent
default."""

from __future__ import annotations

import pytest

from test_sharp_edges import TINY, one_line_error


def config(tmp_path, name: str, text: str | bytes):
    path = tmp_path / name
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    return str(path)


@pytest.mark.parametrize("override, says", [
    ("train.lr=.nan", "train.lr: expected a finite number, got nan"),
    ("model.init_std=.nan", "model.init_std: expected a finite number"),
    ("train.grad_clip=.inf", "train.grad_clip: expected a finite number"),
    ("train.seed=-1", "train.seed must be a seed >= 0, got -1"),
    ("task.test_seed=-3", "task.test_seed must be a seed >= 0"),
    (f"train.seed={2 ** 70}", "is beyond the 64-bit integers"),
    ("train=null", "train: null; give it keys, or leave the section out"),
    ("model.mixer=..:x", "absolute: a relative one has no package"),
])
def test_a_value_that_would_reach_torch_badly_is_refused_where_loaded(tmp_path, capsys, override, says):
    line = one_line_error(capsys, "train", "configs/retrieval.yaml", "--out", str(tmp_path / "run"), *TINY, override)
    assert says in line
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("name, text, says", [
    ("deep.yaml", "x: " + "[" * 5000 + "]" * 5000 + "\n", "nests deeper than a config does"),
    ("listkey.yaml", "model:\n  ? [1, 2]\n  : 3\n", "a key must be a name, not a list or mapping"),
    ("binary.yaml", bytes(range(256)), "cannot read config file"),
])
def test_a_config_file_that_is_no_config_is_one_line(tmp_path, capsys, name, text, says):
    assert says in one_line_error(capsys, "train", config(tmp_path, name, text), "--out", str(tmp_path / "run"))


def test_a_config_that_is_not_a_regular_file_is_not_read(tmp_path, capsys):
    """/dev/zero would be read until memory runs out."""
    assert "is not a regular file" in one_line_error(capsys, "train", "/dev/zero", "--out", str(tmp_path / "run"))


@pytest.mark.parametrize("out, says", [
    ("", "--out is empty"),
    ("x" * 300, "is 300 bytes, over the 255 a file name may have"),
])
def test_an_out_that_names_no_folder_is_refused(tmp_path, capsys, monkeypatch, out, says):
    monkeypatch.chdir(tmp_path)
    assert says in one_line_error(capsys, "train", str(config(tmp_path, "c.yaml", "model: {d_model: 16}\n")),
                                  "--out", out, *TINY)
    assert [p.name for p in tmp_path.iterdir()] == ["c.yaml"]  # nothing written, no dated folder either


@pytest.mark.parametrize("body, says", [
    ("raise RuntimeError('broken part module')", r"raised RuntimeError \(.*broken_part.py, line 1\): broken part module"),
    ("def broken(:\n", r"raised SyntaxError \(.*broken_part.py, line 1\)"),
    ("import sys\nsys.exit(0)", "raised SystemExit"),
])
def test_a_part_module_that_fails_on_import_is_named_with_its_file(tmp_path, capsys, monkeypatch, body, says):
    import re
    import sys

    (tmp_path / "broken_part.py").write_text(body)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "broken_part", raising=False)
    line = one_line_error(capsys, "train", "configs/retrieval.yaml", "--out", str(tmp_path / "run"), *TINY,
                          "model.mixer=broken_part:Mixer")
    assert re.search(r"model.mixer: importing module 'broken_part' for 'broken_part:Mixer' " + says, line), line


def test_a_grid_axis_naming_a_whole_section_is_one_line(tmp_path, capsys):
    sweep = config(tmp_path, "s.yaml", "model: {d_model: 16}\nsweep: {grid: {train: [1]}}\n")
    assert "train: expected a mapping" in one_line_error(capsys, "sweep", sweep, "--out", str(tmp_path / "sw"))


@pytest.mark.slow  # a sweep run twice
def test_a_zero_filled_summary_is_an_unfinished_run_not_a_crash(tmp_path, capsys):
    """A failing disk leaves summary.json zero-filled and the sweep's "done" line unwritten:
    `--status` and the sweep read it as a run not yet done, and the sweep finishes it again
    (from its last checkpoint) instead of stopping on a JSONDecodeError until the file is
    deleted by hand."""
    import json

    from modformer.cli import main

    out = tmp_path / "sweep"
    sweep = ["sweep", "configs/retrieval.yaml", "--out", str(out), *TINY, "sweep.seeds=[0]"]
    assert main(sweep) == 0
    summary = out / "runs/standard/default/seed0/summary.json"
    whole = json.loads(summary.read_text())
    summary.write_bytes(bytes(summary.stat().st_size))
    (out / "results.jsonl").write_text("")
    capsys.readouterr()
    assert main(["sweep", "--status", str(out)]) == 0
    assert "done" not in capsys.readouterr().out.split("standard/default/seed0", 1)[1].splitlines()[0]
    assert main(sweep) == 0
    again = json.loads(summary.read_text())
    assert again["test"] == whole["test"] and again["step"] == whole["step"]
    (record,) = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert record["status"] == "done" and record["summary"]["test"] == whole["test"]


@pytest.mark.parametrize("override, key", [("train.batch_size=1000000000", "train.batch_size=1,000,000,000"),
                                           ("train.eval_batch_size=100000000", "train.eval_batch_size=100,000,000")])
def test_a_batch_that_cannot_fit_in_memory_is_refused_before_allocating(tmp_path, capsys, override, key):
    line = one_line_error(capsys, "train", "configs/retrieval.yaml", "--out", str(tmp_path / "run"), *TINY, override)
    assert key in line and "GiB this machine has free" in line
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("variant", ["standard", "mixit", "frozen_mlp"])
def test_the_memory_floor_is_below_what_a_step_holds_at_once(tiny_config, variant):
    """The floor never refuses a batch that fits: as backward starts, a step holds at once every
    tensor saved for backward, the logits and the logits' gradient, and their bytes are above
    the floor."""
    import torch

    from modformer.train.preflight import step_memory_floor
    from modformer.variants import build_model

    cfg = tiny_config("train.batch_size=64", "train.eval_batch_size=1", f"model.variant={variant}")
    model = build_model(cfg.model, 0)
    T = cfg.model.max_seq_len
    tokens = torch.randint(0, cfg.model.vocab_size, (64, T), generator=torch.Generator().manual_seed(0))
    saved = {}

    def keep(t):
        saved[(t.untyped_storage().data_ptr(), t.dtype)] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(keep, lambda t: t):
        logits = model(tokens)
    held = sum(saved.values()) + 2 * logits.numel() * logits.element_size()  # the logits and their gradient
    assert step_memory_floor(cfg, T, cfg.model.vocab_size) <= held


def test_a_second_sweep_on_a_running_folder_is_refused_in_one_line(tmp_path, capsys):
    """While a sweep runs a folder (its lock held), another on it would score the finished runs
    again, be refused each run's lock (recorded FAILED) and share each run's log."""
    from modformer.lock import take_lock

    out = tmp_path / "sweep"
    out.mkdir()
    with take_lock(out / "sweep.lock", wait=False):  # as the running sweep holds it
        line = one_line_error(capsys, "sweep", "configs/retrieval.yaml", "--out", str(out), *TINY, "sweep.seeds=[0]")
    assert "another sweep is running this folder" in line and "--status" in line
    assert sorted(p.name for p in out.iterdir()) == ["sweep.lock"]  # nothing else written


def test_a_run_killed_just_after_writing_its_summary_is_done(tmp_path):
    """Its summary is written last: whatever ended the process after it, the run is done."""
    import json

    from modformer.sweep.runner import read_results, record_outcome

    run = tmp_path / "runs" / "standard" / "default" / "seed0"
    run.mkdir(parents=True)
    (run / "summary.json").write_text(json.dumps({"test": {"accuracy": 1.0}}))
    said = []
    base = {"run_id": "standard/default/seed0", "run_dir": "runs/standard/default/seed0"}
    record_outcome(tmp_path, base, -9, tmp_path / "log", said.append, lambda s: "")
    assert read_results(tmp_path)["standard/default/seed0"]["status"] == "done" and said[0].startswith("done")
    (run / "summary.json").unlink()
    record_outcome(tmp_path, {**base, "run_id": "x", "run_dir": "runs/standard/default/seed0"}, 130,
                   tmp_path / "log", said.append, lambda s: "")
    assert said[-1] == "paused x (no checkpoint yet: it starts again)"  # not "checkpoint saved"


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A finished one-run sweep and a finished run, to damage copies of."""
    from modformer.cli import main

    root = tmp_path_factory.mktemp("finished")
    assert main(["sweep", "configs/retrieval.yaml", "--out", str(root / "sweep"), *TINY, "sweep.seeds=[0]"]) == 0
    assert main(["train", "configs/retrieval.yaml", "--out", str(root / "run"), *TINY]) == 0
    return root


def damaged_copy(finished, tmp_path, which: str, name: str, content: bytes | None):
    import shutil

    copy = tmp_path / which
    shutil.copytree(finished / which, copy)
    target = copy / name
    if content is None:  # a folder where the file was
        target.unlink()
        target.mkdir()
    else:
        target.write_bytes(content)
    return copy


def first_result(finished, change) -> bytes:
    import json

    record = json.loads((finished / "sweep" / "results.jsonl").read_text().splitlines()[0])
    change(record)
    return (json.dumps(record) + "\n").encode()


@pytest.mark.slow  # a finished sweep and run to damage (module fixture)
@pytest.mark.parametrize("name, content, says", [
    ("sweep.yaml", bytes(range(256)), "cannot read"),
    ("sweep.yaml", b"", "holds no sweep (empty, or damaged)"),
])
def test_a_damaged_sweep_file_is_one_line_for_every_command(finished, tmp_path, capsys, name, content, says):
    sweep = damaged_copy(finished, tmp_path, "sweep", name, content)
    for command in (["report", str(sweep)], ["sweep", "configs/retrieval.yaml", "--out", str(sweep), *TINY,
                                               "sweep.seeds=[0]"]):
        assert says in one_line_error(capsys, *command)
    line = one_line_error(capsys, "sweep", "--status", str(sweep))
    assert "sweep.yaml" in line


@pytest.mark.slow  # a finished sweep and run to damage (module fixture)
@pytest.mark.parametrize("case", ["binary results", "no status", "null summary", "binary metrics"])
def test_damaged_records_are_runs_not_recorded_and_the_sweep_records_them_again(finished, tmp_path, capsys, case):
    from modformer.cli import main
    from modformer.sweep.runner import read_results

    name, content = {
        "binary results": ("results.jsonl", bytes(range(256))),
        "no status": ("results.jsonl", first_result(finished, lambda r: r.pop("status"))),
        "null summary": ("results.jsonl", first_result(finished, lambda r: r.update(summary=None))),
        "binary metrics": ("runs/standard/default/seed0/metrics.jsonl", bytes(range(256))),
    }[case]
    sweep = damaged_copy(finished, tmp_path, "sweep", name, content)
    assert main(["sweep", "--status", str(sweep)]) == 0
    assert main(["sweep", "configs/retrieval.yaml", "--out", str(sweep), *TINY, "sweep.seeds=[0]"]) == 0
    assert read_results(sweep)["standard/default/seed0"]["status"] == "done"
    assert main(["report", str(sweep)]) == 0 and "| standard |" in (sweep / "report.md").read_text()


@pytest.mark.slow  # a finished sweep and run to damage (module fixture)
@pytest.mark.parametrize("name, content, says", [
    ("config.yaml", bytes(range(256)), "is unreadable (UnicodeDecodeError)"),
    ("run.json", b"[1", "run.json is unreadable"),
    ("metrics.jsonl", None, "metrics.jsonl: Is a directory"),
])
def test_a_damaged_run_folder_is_not_resumed(finished, tmp_path, capsys, name, content, says):
    run = damaged_copy(finished, tmp_path, "run", name, content)
    assert says in one_line_error(capsys, "train", "configs/retrieval.yaml", "--out", str(run), *TINY, "--resume")


@pytest.mark.slow  # a finished sweep and run to damage (module fixture)
def test_a_sweep_into_a_run_folder_is_refused(finished, tmp_path, capsys):
    import shutil

    shutil.copytree(finished / "run", tmp_path / "run")
    line = one_line_error(capsys, "sweep", "configs/retrieval.yaml", "--out", str(tmp_path / "run"), *TINY,
                         "sweep.seeds=[0]")
    assert "is a run's folder" in line and not (tmp_path / "run" / "sweep.yaml").exists()


def test_a_record_appended_after_a_torn_line_is_whole_and_later_lines_are_kept(tmp_path):
    from modformer.files import durable_append
    from modformer.train.records import read_records

    path = tmp_path / "results.jsonl"
    path.write_bytes(b'{"a": 1}\n{"torn": tr' + bytes(8) + b'\n{"b": 2}\n{"c": ')  # damage mid-file, torn at the end
    durable_append(path, '{"d": 4}\n')
    assert list(read_records(path)) == [{"a": 1}, {"b": 2}, {"d": 4}]
