"""The pretrained knowledge-base experiments' ladder, reports and command, in process and on
tiny inputs (modformer/papers/knowledge/): the records a ladder run writes for each arm, the
order and the lines of the reports researchers read, and what the command reads from its
config. Written for survivors of the papers package's mutation sample."""

import json
import os

import pytest
import torch
import yaml

from conftest import pretrained_settings
from modformer.cli import main
from modformer.papers.knowledge import report as report_module
from modformer.papers.knowledge.command import _settings
from modformer.papers.knowledge.ladder import LadderConfig, coefficient_parameters, low_rank, run_ladder
from modformer.papers.knowledge.loading import load_pretrained, text_blocks
from modformer.papers.knowledge.records import read_records
from modformer.papers.knowledge.report import write_records_report
from modformer.papers.knowledge.sweep_kind import _describe, _point, write_ladder_sweep_report
from modformer.knowledge.editing import perplexity

COMMON = {"model": "tiny", "tokens": 1024, "block_len": 16, "corpus": "imdb", "n_layers": 2, "d_model": 32,
          "d_ff": 64, "facts_answered": 3, "facts_total": 5, "facts_missed": [1, 4], "seconds": 2.0,
          "code_version": "0.1.0+abc"}


def _ladder_record(key, perplexity_value, parameters, **fields):
    arm = key.split("/")[0]
    return {"key": key, **COMMON, "arm": arm, "parameters": parameters, "perplexity": perplexity_value, **fields}


ORIGINAL = _ladder_record("original", 10.0, 12288, n_entries=64, d_entry=64)
SHARED = _ladder_record("shared/64/32", 12.5, 8192, n_entries=64, d_entry=32,
                        layer_errors=[{"output": 0.1}, {"output": 0.3}])
PRUNED = _ladder_record("shared/48/32", 14.0, 7680, n_entries=48, d_entry=32,
                        layer_errors=[{"output": 0.2}, {"output": 0.4}])
LOWRANK = _ladder_record("lowrank/14", 13.25, 8064, rank=14, budget_of="shared/64/32")

HEADER = ("| arm | n_E | d_E / rank | FFN parameters | of the original | mean output error per layer | "
          "perplexity | known facts | time (s) |")


# -- the ladder's runs -------------------------------------------------------------------------

def test_a_ladder_point_records_each_arm_with_its_sizes_parameters_and_the_scored_model(tiny_teacher, tmp_path):
    """At (n_E, d_E) = (d_ff, d_ff / 2) on a 2-layer Llama of width 32 and d_ff 64: the shared
    base's budget, each layer its own base (n_E, d_E recorded), and the low-rank control of
    the rank closest to that budget (rank recorded), scored as the truncated model itself."""
    run_ladder(LadderConfig(**pretrained_settings(tiny_teacher), points=[[1, 0.5]], threads=1), tmp_path)
    records = {r["key"]: r for r in read_records(tmp_path / "ladder.jsonl")}
    assert list(records) == ["original", "shared/64/32", "own/64/32", "lowrank/14"]
    budget = coefficient_parameters(2, 32, 64, 32, shared=True)
    assert budget == 64 * 32 + 2 * 3 * 32 * 32 == records["shared/64/32"]["parameters"]
    own = records["own/64/32"]
    assert (own["arm"], own["n_entries"], own["d_entry"]) == ("own", 64, 32)
    assert own["parameters"] == 2 * 64 * 32 + 2 * 3 * 32 * 32 and len(own["layer_errors"]) == 2
    control = records["lowrank/14"]
    assert (control["arm"], control["rank"], control["budget_of"]) == ("lowrank", 14, "shared/64/32")
    assert control["parameters"] == 3 * 2 * 14 * (32 + 64) and round(budget / (3 * 2 * 96)) == 14
    pre = load_pretrained(str(tiny_teacher))
    blocks = text_blocks(pre.tokenizer, source=str(tiny_teacher / "corpus.txt"), n_blocks=2, length=16)
    assert control["perplexity"] == pytest.approx(perplexity(low_rank(pre.model, 14), blocks), rel=1e-6)
    assert own["perplexity"] != records["original"]["perplexity"] != control["perplexity"]
    assert all(r["facts_total"] == 0 and r["facts_missed"] == [] for r in records.values())  # a random model


def test_low_rank_at_full_rank_or_more_gives_the_ffns_back_and_below_it_truncates(tiny_teacher):
    """A rank at or past min(d, d_ff) (32 here) keeps every singular value: the same FFN
    matrices up to rounding; a smaller rank leaves matrices of exactly that rank."""
    model = load_pretrained(str(tiny_teacher)).model
    for rank in (32, 64):
        same = low_rank(model, rank)
        for a, b in zip(model.blocks, same.blocks):
            for name in ("gate_proj", "up_proj", "down_proj"):
                torch.testing.assert_close(getattr(b.ffn, name).weight, getattr(a.ffn, name).weight,
                                           rtol=1e-5, atol=1e-6)
    cut = low_rank(model, 5)
    for b in cut.blocks:
        for name in ("gate_proj", "up_proj", "down_proj"):
            s = torch.linalg.svdvals(getattr(b.ffn, name).weight.double())
            assert s[4] > 1e-3 * s[0] and s[5] < 1e-5 * s[0]  # rank 5, up to float32 rounding


# -- the command -------------------------------------------------------------------------------

def test_a_runs_settings_are_the_config_without_its_sweep_and_profiles_then_the_overrides(tmp_path):
    config = tmp_path / "ladder.yaml"
    config.write_text(yaml.safe_dump({"model": "m", "eval_blocks": 3, "points": [[1, 0.75]],
                                      "sweep": {"experiment": "knowledge_ladder", "seeds": [0]},
                                      "profiles": {"quick": {"eval_blocks": 1}}}))
    assert _settings(str(config), ["eval_blocks=2", "points=[[1, 0.5]]"]) == {
        "model": "m", "eval_blocks": 2, "points": [[1, 0.5]]}


def test_the_ladder_command_runs_offline_and_marks_its_folder_done(tiny_teacher, tmp_path, monkeypatch, capsys):
    """`modformer knowledge-pretrained ladder`: with HF_HUB_OFFLINE unset it sets it (nothing
    here is on the hub), reads a sweep's config file as one run, and writes summary.json."""
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    config = tmp_path / "ladder.yaml"
    config.write_text(yaml.safe_dump({**pretrained_settings(tiny_teacher), "threads": 1,
                                      "sweep": {"experiment": "knowledge_ladder", "seeds": [0]}}))
    out = tmp_path / "run"
    assert main(["knowledge-pretrained", "ladder", str(config), "arms=[original]", "points=[[1, 0.5]]",
                 "--out", str(out)]) == 0
    assert os.environ.get("HF_HUB_OFFLINE") == "1"
    assert capsys.readouterr().out.splitlines()[-1] == f"run: {out}"
    summary = json.loads((out / "summary.json").read_text())
    assert [r["key"] for r in summary["records"]] == ["original"] and summary["arm"] == "original"


# -- the ladder sweep ----------------------------------------------------------------------------

def test_a_run_summary_is_described_by_its_records_else_its_note_else_nothing():
    record = {"key": "shared/64/32", "perplexity": 12.3456, "facts_answered": 3, "facts_total": 5}
    assert _describe({"records": [record, {**record, "key": "own/64/32"}]}) == (
        "shared/64/32: perplexity 12.346, facts 3/5; own/64/32: perplexity 12.346, facts 3/5")
    assert _describe({"records": [], "note": "nothing to measure"}) == "nothing to measure"
    assert _describe({"records": []}) == "" and _describe({}) == ""


def test_a_records_place_on_the_ladder_is_its_bases_size_largest_first():
    """A low-rank control sits at the point whose budget it matches; a record without a base's
    sizes (none written today) sorts after every sized point rather than failing."""
    assert _point({"arm": "shared", "n_entries": 64, "d_entry": 32}) == (-64, -32)
    assert _point({"arm": "own", "n_entries": 48, "d_entry": 48}) == (-48, -48)
    assert _point({"arm": "lowrank", "rank": 14, "budget_of": "shared/64/32"}) == (-64, -32)
    assert _point({"arm": "original"}) == (0, 0) > _point({"arm": "shared", "n_entries": 1, "d_entry": 1})


def test_the_ladder_sweeps_report_orders_the_rows_by_point_and_keeps_the_original_once(tmp_path):
    """Runs finish in any order: the report puts the original first (once, though every run of
    the original arm records it), then each point from the largest base, larger d_E first,
    its arms in the order shared, own, low-rank control."""
    own = _ladder_record("own/64/32", 12.0, 10240, n_entries=64, d_entry=32)
    wide = _ladder_record("shared/64/48", 11.0, 12288, n_entries=64, d_entry=48)
    wide_control = _ladder_record("lowrank/21", 10.5, 12096, rank=21, budget_of="shared/64/48")
    small = _ladder_record("shared/48/48", 15.0, 11520, n_entries=48, d_entry=48)
    small_control = _ladder_record("lowrank/20", 14.5, 11520, rank=20, budget_of="shared/48/48")
    runs = [[small_control], [LOWRANK], [own], [ORIGINAL], [SHARED], [small, ORIGINAL], [wide_control], [wide], []]
    lines = [json.dumps({"run_id": f"run{i}", "status": "done", "summary": {"records": records}})
             for i, records in enumerate(runs)]
    (tmp_path / "results.jsonl").write_text("\n".join(lines) + "\n")
    text = write_ladder_sweep_report(tmp_path).read_text()
    rows = [line.split(" | ")[0] + " | " + line.split(" | ")[2] for line in text.splitlines()
            if line.startswith("| ") and not line.startswith("| arm ")]
    assert rows == ["| original model | 64", "| one shared base E | 48", "| per-layer low-rank FFNs (control) | 21",
                    "| one shared base E | 32", "| each layer its own base | 32",
                    "| per-layer low-rank FFNs (control) | 14",
                    "| one shared base E | 48", "| per-layer low-rank FFNs (control) | 20"]
    assert text.count("| original model |") == 1


# -- the report ----------------------------------------------------------------------------------

def test_the_ladder_section_reads_every_row_of_the_records(tmp_path):
    path = write_records_report(tmp_path, [ORIGINAL, SHARED, PRUNED, LOWRANK], [], [])
    lines = path.read_text().splitlines()
    assert lines[:14] == [
        "# The knowledge base on a pretrained model", "",
        "## Compression ladder", "",
        "tiny: 2 layers, width 32, SwiGLU width 64; held-out perplexity on 1,024 tokens of imdb (blocks of 16); "
        "known facts answered (greedy decoding starts with the answer). Code: 0.1.0+abc.", "",
        HEADER, "|---|---|---|---|---|---|---|---|---|",
        "| original model | 64 | 64 | 12,288 | 100.0% | - | 10.000 | 3/5 | 2 |",
        "| one shared base E | 64 | 32 | 8,192 | 66.7% | 0.200 | 12.500 | 3/5 | 2 |",
        "| one shared base E | 48 | 32 | 7,680 | 62.5% | 0.300 | 14.000 | 3/5 | 2 |",
        "| per-layer low-rank FFNs (control) | - | 14 | 8,064 | 65.6% | - | 13.250 | 3/5 | 2 |",
        "", "![perplexity against parameters](perplexity_vs_parameters.png)"]
    assert (tmp_path / "perplexity_vs_parameters.png").stat().st_size > 0


def test_a_ladder_of_the_original_alone_is_reported(tmp_path):
    """The first run of a ladder sweep to finish may be the original's: its section stands alone."""
    lines = write_records_report(tmp_path, [{**ORIGINAL, "d_ff": 96}], [], []).read_text().splitlines()
    assert lines[4].startswith("tiny: 2 layers, width 32, SwiGLU width 96; held-out perplexity on 1,024 tokens")
    assert lines[8] == "| original model | 64 | 64 | 12,288 | 100.0% | - | 10.000 | 3/5 | 2 |"


def test_the_ladder_plot_draws_a_shared_base_over_pruned_units_as_its_own_line(tmp_path, monkeypatch):
    """n_E < d_ff keeps only the most important units: another kind of point than a shared base
    over all d_ff units, so the figure gives it its own line and legend entry."""
    drawn = {}
    save = report_module.save_figure

    def keep(fig, path):
        ax = fig.axes[0]
        drawn.update({text.get_text(): list(line.get_xdata())
                      for text, line in zip(ax.get_legend().get_texts(), ax.get_lines())})
        return save(fig, path)

    monkeypatch.setattr(report_module, "save_figure", keep)
    write_records_report(tmp_path, [ORIGINAL, SHARED, PRUNED, LOWRANK], [], [])
    assert drawn == {"original model": [0.012288], "one shared base E": [0.008192],
                     "one shared base E over the most important n_E < d_ff units": [0.00768],
                     "per-layer low-rank FFNs (control)": [0.008064]}


BEFORE = {"key": "before", "code_version": "0.1.0+abc", "facts": ["France", "Japan"], "known_facts": 40,
          "true_paraphrases_answered": 0.9,
          "measures": {"efficacy": 0.0, "specificity": 1.0, "unrelated": 1.0, "perplexity": 20.0}}
EDIT = {"key": "entries/2/0", "code_version": "0.1.0+abc", "method": "entries", "size": 2, "steps": 10,
        "answered": True, "edit_seconds": 1.5,
        "measures": {"efficacy": 1.0, "generalisation": 0.5, "specificity": 0.95, "unrelated": 1.0, "perplexity": 21.0}}
EDITS_HEADER = ["| method | facts edited | runs | steps | all answered | efficacy | generalisation | specificity | "
                "unrelated unchanged | perplexity | change in perplexity | edit time (s) |",
                "|---|---|---|---|---|---|---|---|---|---|---|---|"]


def test_the_editing_section_opens_with_its_heading_and_code_then_the_model_before_any_edit(tmp_path):
    text = write_records_report(tmp_path, [], [BEFORE, EDIT], []).read_text()
    assert text.splitlines() == [
        "# The knowledge base on a pretrained model", "",
        "## Editing facts", "", "Code: 0.1.0+abc.", "",
        "Before any edit (2 capital facts the model answers, 40 known facts in all): new answers given 0.00, "
        "true answers on the paraphrases 0.90, other known facts 1.000, unrelated prompts 1.00, perplexity 20.000.",
        "", "Mean ± std over seeds (the 2-fact edit has no randomness: one run).", "", *EDITS_HEADER,
        "| entries | 2 | 1 | 10.000 | 1/1 | 1.000 | 0.500 | 0.950 | 1.000 | 21.000 | 1.000 | 1.500 |", "",
        "Commands and times: every record's `command` and `seconds` in the folder's *.jsonl."]


def test_the_editing_section_without_a_before_record_says_so_and_leaves_the_change_out(tmp_path):
    text = write_records_report(tmp_path, [], [EDIT], []).read_text()
    assert text.splitlines()[2:10] == [
        "## Editing facts", "", "Code: 0.1.0+abc.", "",
        "Mean ± std over seeds (an edit of every fact drawn from has no randomness: one run).", "", *EDITS_HEADER]
    assert text.splitlines()[10] == ("| entries | 2 | 1 | 10.000 | 1/1 | 1.000 | 0.500 | 0.950 | 1.000 | 21.000 | - | "
                                     "1.500 |")  # no change in perplexity without the model before
