"""The knowledge base on a pretrained model end to end on a local Hugging Face Llama folder (a
tiny random one with a word-level tokenizer, `tiny_teacher`): a run of each kind, the repair
and the ladder as sweeps, offline."""

import json

import pytest
import torch

from conftest import pretrained_settings
from modformer.cli import main
from modformer.errors import ModformerError
from modformer.papers.knowledge.ladder import LadderConfig, run_ladder


@pytest.mark.slow
def test_one_run_of_each_kind_on_a_local_llama_folder_and_the_repair_as_a_sweep(tiny_teacher, tmp_path, capsys):
    """The command each kind's runs are carried out by: a ladder run, an edit run and a repair
    run measured in their folders, then the repair's two arms as a sweep of two workers."""
    import yaml

    settings = pretrained_settings(tiny_teacher)
    config = tmp_path / "kb.yaml"  # a config file, then overrides: the one argument style
    config.write_text(yaml.safe_dump({**settings, "eval_blocks": 3}))
    ladder_run = tmp_path / "ladder"
    assert main(["knowledge-pretrained", "ladder", str(config), "eval_blocks=2", "points=[[1, 0.5]]",
                 "--out", str(ladder_run)]) == 0
    ladder = [json.loads(line) for line in (ladder_run / "ladder.jsonl").read_text().splitlines()]
    arms = {r["arm"]: r for r in ladder}
    assert set(arms) == {"original", "shared", "own", "lowrank"} and len(ladder) == 4
    assert arms["shared"]["n_entries"] == 64 and arms["shared"]["d_entry"] == 32
    # One base of 64 x 32 for both layers plus their maps: fewer parameters than each layer its own base.
    assert arms["shared"]["parameters"] < arms["own"]["parameters"] < arms["original"]["parameters"]
    assert all(r["perplexity"] > 1 and r["code_version"] for r in ladder)
    assert json.loads((ladder_run / "summary.json").read_text())["records"] == ladder  # done
    known = json.loads((ladder_run / "known_facts.json").read_text())  # the cache names what found it
    assert known["code_version"].startswith("0.1.0") and "CPUs" in known["machine"]
    edit_run = tmp_path / "edit"
    assert main(["knowledge-pretrained", "edit", str(config), "eval_blocks=2", "sizes=[2]", "seeds=[0]",
                 "methods=[entries]", "require_known=false", "max_steps=40", "lr={entries: 0.03}",
                 "--out", str(edit_run)]) == 0
    edits = {r["key"]: r for r in map(json.loads, (edit_run / "edits.jsonl").read_text().splitlines())}
    assert set(edits) == {"before", "entries/2/0"} and edits["entries/2/0"]["parameters"] == ["knowledge.entries"]
    assert all(0 <= v <= 1 for v in edits["entries/2/0"]["overlap_changed_vs_mass"])
    repair = {**settings, "point": [1, 0.5], "steps": 2, "train_len": 8, "lr": 0.001, "eval_blocks": 1,
              "block_len": 8, "batch_size": 1}
    sweep = tmp_path / "repair.yaml"
    sweep.write_text(yaml.safe_dump({**repair, "sweep": {"experiment": "knowledge_repair", "seeds": [0],
                                                         "variants": ["entries", "entries_and_maps"], "workers": 2}}))
    out = tmp_path / "repair"
    assert main(["sweep", str(sweep), "--out", str(out)]) == 0
    rows = {r["variant"]: r for r in map(json.loads, (out / "results.jsonl").read_text().splitlines())}
    assert set(rows) == {"entries", "entries_and_maps"} and all(r["status"] == "done" for r in rows.values())
    entries, maps = rows["entries"]["summary"], rows["entries_and_maps"]["summary"]
    assert len(entries["losses"]) == 2 and entries["trained_parameters"] == 64 * 32 < maps["trained_parameters"]
    report = (out / "report.md").read_text()
    assert "Repair after compression" in report and "| repair: E only | 64 | 32 | 2 |" in report
    (out / "report.md").unlink()
    assert main(["report", str(out)]) == 0 and (out / "report.md").read_text() == report
    # A second sweep finds every run done.
    capsys.readouterr()
    assert main(["sweep", str(sweep), "--out", str(out)]) == 0
    assert "0 to run" in capsys.readouterr().err


@pytest.mark.slow
def test_the_ladder_as_a_sweep_gives_the_folders_records(tiny_teacher, tmp_path, capsys):
    """`sweep.experiment: knowledge_ladder`: each arm at each point its own process; the
    records equal those of the one-folder ladder (but for time and command), the original is
    reported once, an arm with nothing at a point records nothing, and --status reads it."""
    import yaml

    settings = pretrained_settings(tiny_teacher)
    folder = tmp_path / "folder"  # the same ladder measured in this process, into one folder's ladder.jsonl
    threads = torch.get_num_threads()
    try:  # one thread, as each of the sweep's two workers on two cores (the factorizations' sums in its order)
        run_ladder(LadderConfig(**settings, points=[[1, 0.5], [0.5, 0.5]], threads=1), folder)
    finally:
        torch.set_num_threads(threads)
    path = tmp_path / "ladder.yaml"
    path.write_text(yaml.safe_dump({**settings, "sweep": {
        "experiment": "knowledge_ladder", "variants": ["original", "shared", "own"], "seeds": [0], "workers": 2,
        "grid": {"points": [[[1, 0.5]], [[0.5, 0.5]]]}}}))
    out = tmp_path / "sweep"
    assert main(["sweep", str(path), "--out", str(out)]) == 0
    untimed = lambda r: {k: v for k, v in r.items() if k not in ("seconds", "command")}  # noqa: E731
    swept = [json.loads(line)["summary"] for line in (out / "results.jsonl").read_text().splitlines()]
    by_key = {r["key"]: untimed(r) for s in swept for r in s["records"]}
    wanted = {r["key"]: untimed(r) for r in map(json.loads, (folder / "ladder.jsonl").read_text().splitlines())
              if r["arm"] in ("original", "shared", "own")}
    assert by_key == wanted
    assert sum(not s["records"] for s in swept) == 1  # own at (0.5, 0.5): no base of its own there
    report = (out / "report.md").read_text()
    assert report.count("| original model |") == 1 and "Compression ladder" in report
    capsys.readouterr()
    assert main(["sweep", "--status", str(out)]) == 0
    assert "6 runs: 6 done" in capsys.readouterr().out


def test_the_ladders_threads_default_to_torchs_and_a_sweep_shares_the_cores():
    """`threads: null` (the default) leaves torch's choice, and a sweep's worker its share of
    the cores (the sweep fills a null threads key); 0 is refused in one line."""
    from modformer.papers.knowledge.edits import EditRunConfig
    from modformer.papers.knowledge.ladder import LadderConfig

    assert LadderConfig().threads is None and EditRunConfig().threads is None
    with pytest.raises(ModformerError, match="threads must be positive or null, got 0"):
        LadderConfig(threads=0)
