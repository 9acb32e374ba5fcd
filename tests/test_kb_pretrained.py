"""`modformer knowledge-pretrained` end to end on a local Hugging Face Llama folder (a tiny random one
with a word-level tokenizer, `tiny_teacher`): the ladder, an edit run and the report, offline."""

import json

import pytest

from modformer.cli import main
from modformer.errors import ModformerError


@pytest.mark.slow
def test_ladder_edits_and_report_on_a_local_llama_folder(tiny_teacher, tmp_path, capsys):
    out = tmp_path / "kb"
    common = [f"model={tiny_teacher}", f"corpus={tiny_teacher / 'corpus.txt'}", "eval_blocks=2", "block_len=16"]
    config = tmp_path / "ladder.yaml"  # a config file, then overrides: the one argument style
    config.write_text(f"model: {tiny_teacher}\ncorpus: {tiny_teacher / 'corpus.txt'}\neval_blocks: 3\n")
    assert main(["knowledge-pretrained", "ladder", str(config), "eval_blocks=2", "block_len=16", "points=[[1, 0.5]]",
                 "--out", str(out)]) == 0
    ladder = [json.loads(line) for line in (out / "ladder.jsonl").read_text().splitlines()]
    arms = {r["arm"]: r for r in ladder}
    assert set(arms) == {"original", "shared", "own", "lowrank"} and len(ladder) == 4
    assert arms["shared"]["n_entries"] == 64 and arms["shared"]["d_entry"] == 32
    # One base of 64 x 32 for both layers plus their maps: fewer parameters than each layer its own base.
    assert arms["shared"]["parameters"] < arms["own"]["parameters"] < arms["original"]["parameters"]
    assert all(r["perplexity"] > 1 and r["code_version"] for r in ladder)
    known = json.loads((out / "known_facts.json").read_text())  # the cache names what found it, as the records do
    assert known["code_version"].startswith("0.1.0") and "CPUs" in known["machine"]
    assert main(["knowledge-pretrained", "edit", *common, "sizes=[1, 2]", "seeds=[0]", "require_known=false",
                 "max_steps=40", "lr={entries: 0.03, one_down_proj: 0.03, all_ffns: 0.01}", "--out", str(out)]) == 0
    edits = {r["key"]: r for r in map(json.loads, (out / "edits.jsonl").read_text().splitlines())}
    assert {"before", "entries/1/0", "entries/2/0", "one_down_proj/2/0", "all_ffns/1/0"} <= set(edits)
    assert edits["entries/2/0"]["parameters"] == ["knowledge.entries"]
    assert edits["one_down_proj/1/0"]["parameters"] == ["blocks.1.ffn.down_proj.weight"]
    assert all(0 <= v <= 1 for v in edits["entries/1/0"]["overlap_changed_vs_mass"])
    assert main(["knowledge-pretrained", "repair", *common, "point=[1, 0.5]", "steps=2", "train_len=8", "lr=0.001",
                 "eval_blocks=1", "block_len=8", "batch_size=1", "--out", str(out)]) == 0
    repair = {r["arm"]: r for r in map(json.loads, (out / "repair.jsonl").read_text().splitlines())}
    assert set(repair) == {"entries", "entries_and_maps"} and len(repair["entries"]["losses"]) == 2
    assert repair["entries"]["trained_parameters"] == 64 * 32 < repair["entries_and_maps"]["trained_parameters"]
    (out / "report.md").unlink()
    assert main(["report", str(out)]) == 0  # the one report command knows this kind of folder
    report = (out / "report.md").read_text()
    assert "Compression ladder" in report and "Editing facts" in report
    assert (out / "perplexity_vs_parameters.png").stat().st_size > 0
    # A second run finds everything recorded and only rewrites the report.
    assert main(["kb-pretrained", "edit", *common, "sizes=[1, 2]", "seeds=[0]", "require_known=false",
                 "--out", str(out)]) == 0
    assert len((out / "edits.jsonl").read_text().splitlines()) == len(edits)


@pytest.mark.slow
def test_the_ladder_as_a_sweep_gives_the_folders_records(tiny_teacher, tmp_path, capsys):
    """`sweep.experiment: knowledge_ladder`: each arm at each point its own process; the
    records equal those of the one-folder ladder (but for time and command), the original is
    reported once, an arm with nothing at a point records nothing, and --status reads it."""
    import yaml

    settings = {"model": str(tiny_teacher), "corpus": str(tiny_teacher / "corpus.txt"), "eval_blocks": 2,
                "block_len": 16}
    folder = tmp_path / "folder"
    assert main(["knowledge-pretrained", "ladder", *(f"{k}={v}" for k, v in settings.items()),
                 "points=[[1, 0.5], [0.5, 0.5]]", "--out", str(folder)]) == 0
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
