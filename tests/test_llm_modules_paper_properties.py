"""Parts of the LLM-Modules paper (modformer/papers/llm_modules/) a mutation sample found
unchecked: the share of task items in a batch, the leaky arm's reading, a stopped run's
message, what a run records and echoes, the cache of the facts a teacher knows and of its
states, the config's refusals and YAML, the report's words and figure, and the migration of
the one-folder layout."""

from __future__ import annotations

import hashlib
import json
import shutil
import struct
import tempfile
from pathlib import Path

import pytest
import torch
import yaml

from modformer.errors import Interrupted
from modformer.papers.llm_modules.arm_run import ArmRun
from modformer.papers.llm_modules.arms import ARMS
from modformer.papers.llm_modules.config import LLMModulesConfig, load_llm_modules_config
from modformer.papers.llm_modules.dataset import LLMModulesData, Rows, Vocabulary
from modules_fixtures import tiny_config
import test_modules
from test_migrate import lay_out_one_folder

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "results" / "llm_modules"
prepared = test_modules.prepared  # the fixture: an experiment with its data and teacher states ready


# -- batches -------------------------------------------------------------------------------

def _data(corpus: bool) -> LLMModulesData:
    def rows():
        return Rows([], [], 0)
    return LLMModulesData(rows(), rows() if corpus else None, rows(), Vocabulary.whole(5), "answer")


@pytest.mark.parametrize("size, fraction, with_corpus, expected", [
    (32, 0.25, True, 8), (8, 0.25, True, 2), (8, 0.01, True, 1), (8, 1.0, True, 8),
    (32, 0.25, False, 32), (8, 0.5, False, 8)])
def test_a_batch_holds_the_task_share_of_items_with_a_corpus_and_only_items_without(size, fraction, with_corpus,
                                                                                    expected):
    """With a corpus a batch takes round(task_fraction x size) task items (at least one), the
    rest corpus texts; without one every row is a task item."""
    assert _data(with_corpus).task_rows(size, fraction) == expected


# -- the arms --------------------------------------------------------------------------------

def test_the_leaky_arm_reads_every_teacher_state_of_the_text_and_the_teacher_arm_only_the_past(prepared):
    """Teacher-forced, the leaky arm's student reads each text's whole teacher states at every
    position (the reference's bridge); the causal teacher arm, from the same weights, only the
    states up to each position: their logits differ."""
    from modformer.analysis.common import evaluating

    data = prepared.data
    leaky = ArmRun(prepared.cfg, ARMS["leaky"], 0, data, prepared.teacher, prepared.pairing)
    causal = ArmRun(prepared.cfg, ARMS["teacher"], 0, data, prepared.teacher, prepared.pairing)
    assert all(torch.equal(p, q) for p, q in zip(leaky.model.state_dict().values(),
                                                 causal.model.state_dict().values()))
    batch = data.batch(data.train, [0, 1, 2], answer_only=True)
    states = {layer: data.states(batch, layer) for layer in prepared.teacher.layers}
    with evaluating(leaky.model), evaluating(causal.model):
        read_leaky, read_causal = leaky.logits(batch), causal.logits(batch)
        whole = leaky.forward(batch.ids, states, batch.visibility(True))
        past = leaky.forward(batch.ids, states, batch.visibility(False))
    assert torch.allclose(read_leaky, whole, atol=1e-6) and torch.allclose(read_causal, past, atol=1e-6)
    assert not torch.allclose(read_leaky, read_causal, atol=1e-3)


@pytest.mark.parametrize("saving, message", [
    (True, r"^teacher seed 0 interrupted at step 1; its state is saved; run the same command again to continue$"),
    (False, r"^teacher seed 0 interrupted at step 1; no state is saved \(train\.checkpoint_every is 0\): it will "
            r"start again$")])
def test_a_stopped_run_says_whether_its_state_was_saved(prepared, tmp_path, saving, message):
    """Ctrl-C (the loop's stop flag) after step 1: a run with a checkpoint file saves its state
    there and says a second command continues it; one without says it will start again."""
    run = ArmRun(prepared.cfg, ARMS["teacher"], 0, prepared.data, prepared.teacher, prepared.pairing)

    def log(record):
        if record["step"] == 1:
            run.interrupts.requested = True
    checkpoint = tmp_path / "checkpoint.safetensors"
    with pytest.raises(Interrupted, match=message):
        run.train(log, checkpoint if saving else None)
    assert checkpoint.is_file() == saving


# -- one run of the experiment -------------------------------------------------------------

def test_a_run_echoes_its_start_and_records_both_precisions(prepared, tmp_path, monkeypatch):
    """A fresh run says "ARM seed S: training" (no "from step", it has no checkpoint), and its
    summary.json names the teacher's and the training's precision under those keys."""
    from modformer.precision import resolve_precision
    from modformer.train.loop import resolve_device

    said: list[str] = []
    monkeypatch.setattr(prepared, "echo", said.append)
    result = prepared._train_one("alone", 0, tmp_path / "run")
    assert said[0] == "alone seed 0: training"
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary == json.loads(json.dumps(result))
    train = resolve_precision(prepared.cfg.train.precision, resolve_device(prepared.cfg.train.device))
    assert summary["precision"] == {"teacher": "fp32", "train": train}
    assert summary["arm"] == "alone" and summary["seed"] == 0
    assert not (tmp_path / "run" / "checkpoint.safetensors").exists()


def _answering(model, tokenizer, word: str):
    """A hook on the teacher's output head that makes it answer `word` to every prompt."""
    token = tokenizer.convert_tokens_to_ids(word)

    def hook(_module, _inputs, logits):
        logits = logits.clone()
        logits[..., token] += 1e4
        return logits
    return model.get_output_embeddings().register_forward_hook(hook)


def test_the_facts_a_teacher_knows_are_asked_once_and_read_back_from_the_cache(tiny_teacher, tmp_path, monkeypatch):
    """With teacher.known_only, the task's facts are those the teacher completes correctly:
    asked of the teacher once, written to the cache, and on the next experiment read from there
    (the teacher is not asked again)."""
    from modformer.data.facts import all_facts
    from modformer.interop.packaged import load_teacher
    from modformer.papers.llm_modules.experiment import LLMModulesExperiment
    from modformer.files import cache_root

    monkeypatch.setenv("MODFORMER_CACHE", str(tmp_path / "cache"))
    cfg = tiny_config(tiny_teacher, "teacher.known_only=true")
    model, tokenizer = load_teacher(cfg.teacher.name)
    paris = [f for f in all_facts() if f.answer == "Paris"]
    assert paris and len(paris) < len(all_facts())
    said: list[str] = []
    experiment = LLMModulesExperiment(cfg, tmp_path / "run", echo=said.append)
    experiment.tokenizer = tokenizer
    hook = _answering(model, tokenizer, "Paris")  # a teacher that knows the facts answered Paris, only those
    try:
        items = experiment._items(model)
    finally:
        hook.remove()
    assert [i.text for i in items] == [f.text for f in paris]
    key = hashlib.sha256("|".join([cfg.teacher.name, *(f.text for f in all_facts())]).encode()).hexdigest()[:32]
    known_file = cache_root() / "known-facts" / f"{key}.json"
    assert json.loads(known_file.read_text()) == [f.text for f in paris]
    assert said == [f"asking the teacher {len(all_facts())} facts (once; the answer is cached in {known_file})",
                    f"the teacher completes {len(paris)} of {len(all_facts())} facts correctly"]
    said.clear()
    again = LLMModulesExperiment(cfg, tmp_path / "run2", echo=said.append)
    assert [i.text for i in again._items(None)] == [f.text for f in paris]  # no teacher needed: read back
    assert said == [f"the teacher completes {len(paris)} of {len(all_facts())} facts correctly"]


def test_teacher_states_cached_in_float32_and_bf16_are_kept_apart(tiny_teacher, tmp_path, monkeypatch):
    """The same texts cached in float32 and in bf16 are two caches, each in its own folder:
    preparing one does not replace the other."""
    from modformer.papers.llm_modules.experiment import LLMModulesExperiment

    monkeypatch.setenv("MODFORMER_CACHE", str(tmp_path / "cache"))
    said: dict[str, list[str]] = {}
    for dtype in ("float32", "bf16"):
        said[dtype] = []
        LLMModulesExperiment(tiny_config(tiny_teacher, f"teacher.cache_dtype={dtype}"), tmp_path / dtype,
                             echo=said[dtype].append).prepare()
    folders = sorted(p for p in (tmp_path / "cache" / "teacher-states").iterdir() if p.is_dir())
    assert len(folders) == 2
    indexes = [json.loads((f / "index.json").read_text()) for f in folders]
    assert sorted(i["dtype"] for i in indexes) == ["bf16", "float32"]
    named = {dtype: [line for line in lines if line.startswith("teacher states of layer")]
             for dtype, lines in said.items()}
    assert named["float32"] != named["bf16"]


# -- the config --------------------------------------------------------------------------------

@pytest.mark.parametrize("weight", ["0", "0.0", "1", "0.25"])
def test_a_distill_weight_in_the_closed_unit_interval_is_accepted(weight):
    """train.distill_weight 0 (the distill arm's loss is plain cross-entropy) and 1 are allowed."""
    assert load_llm_modules_config(None, [f"train.distill_weight={weight}"]).train.distill_weight == float(weight)


@pytest.mark.parametrize("weight", ["-0.1", "1.5"])
def test_a_distill_weight_outside_the_unit_interval_is_refused(weight):
    from modformer.errors import ConfigError

    with pytest.raises(ConfigError, match=r"^train\.distill_weight must lie in \[0, 1\]$"):
        load_llm_modules_config(None, [f"train.distill_weight={weight}"])


def test_the_saved_config_keeps_the_sections_and_keys_in_their_documented_order():
    """config.yaml lists the sections as the config defines them (teacher, student, bridge,
    data, train, arms, seeds), each section's keys in its own order, not alphabetically; and it
    reads back as the same config."""
    cfg = load_llm_modules_config(None, [])
    text = cfg.to_yaml()
    data = yaml.safe_load(text)
    assert list(data) == ["teacher", "student", "bridge", "data", "train", "arms", "seeds"]
    assert list(data["teacher"]) == ["name", "layer", "precision", "device", "cache_dtype", "batch_size", "known_only"]
    assert text.startswith("teacher:\n  name: ")
    from modformer.configtools import from_dict
    assert from_dict(LLMModulesConfig, data) == cfg


# -- the report --------------------------------------------------------------------------------

def _gated(seed: int, loss: float, shift: float) -> dict:
    """A bridged run's summary, scored again with its gate forced to 0 and 1."""
    return {"seed": seed, "held_out_exact": 0.5, "train_exact": 1.0, "held_out_answer_loss": loss,
            "gate_mean": {"input": 0.5},
            "forced_gate": {key: {"gate": gate, "held_out_exact": 0.0, "train_exact": 0.5,
                                  "held_out_answer_loss": loss + shift * gate}
                            for key, gate in (("0", 0.0), ("1", 1.0))}}


def test_the_forced_gate_section_pairs_the_real_and_random_teacher_by_seed():
    """With both teacher arms scored at forced gates, the report ends the section with their
    held-out answer loss difference at each gate, paired by seed."""
    from modformer.papers.llm_modules.report import _forced_gate_lines

    by_arm = {"teacher": [_gated(0, 2.0, 1.0), _gated(1, 3.0, 1.0)],
              "random_teacher": [_gated(0, 4.0, 0.0), _gated(1, 5.0, 0.0)]}
    lines = _forced_gate_lines(by_arm, ["teacher", "random_teacher"], "##")
    assert lines[0:3] == ["", "## The gate forced after training (bridge.eval_gates)", ""]
    heading = "Held-out answer loss, teacher - random teacher, paired by seed, at each forced gate:"
    assert lines[-5:-2] == ["", heading, ""]
    assert lines[-2].startswith("- gate 0: -2.000 ± 0.000") and lines[-1].startswith("- gate 1: -1.000 ± 0.000")


def _png_size(path: Path) -> tuple[int, int]:
    header = path.read_bytes()[:24]
    assert header[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", header[16:24])


def test_the_curves_figure_draws_both_losses_with_their_axes_named(tmp_path, monkeypatch):
    """curves.png beside a sweep's report: two panels side by side, 11 x 4 inches at 100 dpi,
    the training loss and the held-out answer loss against step, each axis named."""
    from modformer.papers.llm_modules import report
    from modformer.papers.llm_modules.sweep_kind import write_sweep_report

    folder = tmp_path / "facts_two_bridges_one_layer"
    shutil.copytree(RESULTS / folder.name, folder)
    (folder / "curves.png").unlink()
    drawn = []
    save = report.save_figure

    def keep(fig, path):
        drawn.append([(ax.get_xlabel(), ax.get_ylabel(), ax.get_title()) for ax in fig.axes])
        return save(fig, path)
    monkeypatch.setattr(report, "save_figure", keep)
    write_sweep_report(folder)
    assert drawn == [[("step", "cross-entropy", "training loss"),
                      ("step", "cross-entropy per answer token", "held-out answer loss (teacher-forced)")]]
    assert _png_size(folder / "curves.png") == (1100, 400)


def test_a_sweep_over_several_settings_reports_each_under_its_setting(tmp_path):
    """A grid of four gate values: the report titles the sweep, then gives each setting as
    "Setting: KEY=VALUE." above its own section, word for word the committed report."""
    from modformer.papers.llm_modules.sweep_kind import write_sweep_report

    folder = tmp_path / "facts_gate_fixed"
    shutil.copytree(RESULTS / folder.name, folder)
    (folder / "report.md").unlink()
    report = write_sweep_report(folder).read_text()
    assert report == (RESULTS / folder.name / "report.md").read_text()
    settings = [line for line in report.splitlines() if line.startswith("Setting: ")]
    assert settings == [f"Setting: bridge.gate_value={v}." for v in ("0.0", "0.25", "0.5", "1.0")]


# -- the migration of the one-folder layout ------------------------------------------------------

def _one_folder_layout(tmp_path: Path) -> Path:
    """A committed sweep's runs laid out as `modformer llm-modules` once wrote them."""
    folder = tmp_path / "disk" / "two_bridges"
    lay_out_one_folder(folder)
    return folder


def test_the_one_folder_layout_is_migrated_beside_itself_never_in_the_system_temp_folder(tmp_path, monkeypatch):
    """The migration writes its sweep file and its new folder next to the folder it rewrites
    (one disk: the final rename is atomic, and works where /tmp is another file system): with
    the system's temporary folder unusable it still succeeds, and leaves nothing beside it."""
    from modformer.papers.llm_modules.migrations import one_folder_layout

    folder = _one_folder_layout(tmp_path)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "no-such-temp-folder"))
    assert one_folder_layout(folder)
    assert sorted(p.name for p in folder.parent.iterdir()) == ["two_bridges"]
    assert (folder / "results.jsonl").is_file() and (folder / "report.md").is_file()
    assert (folder / "commands.txt").read_text() == f"modformer sweep {folder / 'sweep.yaml'} --out {folder}\n"


def test_the_migrated_sweep_file_lists_its_keys_as_a_sweep_writes_them(tmp_path):
    """sweep.yaml of a migrated folder: its records format first, then the experiment's
    sections in the config's order and the sweep section last, as `modformer sweep` writes it
    (the committed sweep's file), not sorted by name."""
    from modformer.papers.llm_modules.migrations import one_folder_layout

    folder = _one_folder_layout(tmp_path)
    assert one_folder_layout(folder)
    text = (folder / "sweep.yaml").read_text()
    migrated = yaml.safe_load(text)
    committed = yaml.safe_load((RESULTS / "facts_two_bridges_one_layer" / "sweep.yaml").read_text())
    assert list(migrated) == list(committed) == ["format", "teacher", "student", "bridge", "data", "train", "arms",
                                                 "seeds", "sweep"]
    assert list(migrated["sweep"])[:3] == ["experiment", "variants", "grid"] == list(committed["sweep"])[:3]
    assert text.startswith("format: ")
