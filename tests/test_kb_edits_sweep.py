"""Fact editing as a sweep (`sweep.experiment: knowledge_edits`): each method, size and seed one
process; the records those of the one-folder experiment, one `before` in the report, a run
of the whole pool at a seed other than 0 recording nothing; the sweeps it refuses; and an
edit folder of the one-process layout laid out as the sweep, exactly or not at all."""

import json
import shutil

import pytest
import torch
import yaml

from conftest import pretrained_settings
from modformer.cli import main
from modformer.papers.knowledge.edits import EditRunConfig, draw, run_edits
from modformer.migrate import FORMAT
from modformer.papers.knowledge.migrations import edits_as_sweep
from modformer.papers.knowledge.report import write_report

UNTIMED = ("seconds", "command", "edit_seconds")


def untimed(record):
    return {k: v for k, v in record.items() if k not in UNTIMED}


def sweep_file(tmp_path, settings, **sweep):
    path = tmp_path / "edits.yaml"
    path.write_text(yaml.safe_dump({**settings, "sweep": {"experiment": "knowledge_edits", "seeds": [0, 1],
                                                          "variants": ["entries"], **sweep}}))
    return path


def but_last_line(report: str) -> str:
    return report.rstrip("\n").rsplit("\n", 1)[0]


@pytest.mark.slow  # eight processes on a tiny random Llama: about a minute on 2 cores
def test_the_edits_as_a_sweep_give_the_folders_records(tiny_teacher, tmp_path, capsys):
    settings = {**pretrained_settings(tiny_teacher), "require_known": False, "max_steps": 40,
                "lr": {"entries": 0.03, "one_down_proj": 0.03, "all_ffns": 0.01}}
    folder = tmp_path / "folder"  # the same edits measured in this process, into one folder's edits.jsonl
    threads = torch.get_num_threads()
    try:  # one thread, as each of the sweep's two workers on two cores
        run_edits(EditRunConfig(**settings, sizes=[1, 2], seeds=[0, 1], methods=["entries", "one_down_proj"],
                                threads=1), folder)
    finally:
        torch.set_num_threads(threads)
    wanted = {r["key"]: untimed(r) for r in map(json.loads, (folder / "edits.jsonl").read_text().splitlines())}
    assert set(wanted) == {"before", *(f"{m}/{k}/{s}" for m in ("entries", "one_down_proj") for k, s in
                                       ((1, 0), (1, 1), (2, 0)))}
    path = sweep_file(tmp_path, {**settings, "pool": 2}, variants=["entries", "one_down_proj"], workers=2,
                      grid={"sizes": [[1], [2]]})
    out = tmp_path / "sweep"
    assert main(["sweep", str(path), "--out", str(out)]) == 0
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert len(rows) == 8 and all(r["status"] == "done" for r in rows)
    by_key = {}
    for row in rows:
        records = [json.loads(line) for line in (out / row["run_dir"] / "edits.jsonl").read_text().splitlines()]
        if row["point"] == {"sizes": [2]} and row["seed"] == 1:  # the whole pool at seed 1: nothing
            assert records == [] and "nothing to edit" in row["summary"]["note"]
            continue
        assert [r["key"] for r in records] == ["before", f"{row['variant']}/{row['point']['sizes'][0]}/{row['seed']}"]
        assert untimed(records[0]) == wanted["before"]  # every run measures the same model before
        by_key[records[1]["key"]] = untimed(records[1])
        summary = row["summary"]
        assert summary["perplexity_change"] == records[1]["measures"]["perplexity"] - \
            records[0]["measures"]["perplexity"]
        assert "top" not in summary["before"]["fact_entries"] and summary["pool"] == 2
    assert by_key == {k: v for k, v in wanted.items() if k != "before"}
    report = (out / "report.md").read_text()
    assert report.count("Before any edit") == 1 and "the 2-fact edit has no randomness" in report
    gathered = tmp_path / "gathered"  # the folder form's report of the same records: the same report
    gathered.mkdir()
    runs = [lines for row in rows if (lines := (out / row["run_dir"] / "edits.jsonl").read_text().splitlines())]
    (gathered / "edits.jsonl").write_text("".join(line + "\n" for line in [runs[0][0], *(r[1] for r in runs)]))
    assert but_last_line(report) == but_last_line(write_report(gathered).read_text())
    capsys.readouterr()
    assert main(["sweep", "--status", str(out)]) == 0
    status = capsys.readouterr().out
    assert "8 runs: 8 done" in status and "efficacy" in status and "nothing to edit" in status


@pytest.mark.parametrize("settings, sweep, message", [
    ({}, {"grid": {"sizes": [[1], [2]]}}, "set pool, the facts every run draws from"),
    ({"pool": 2}, {"grid": {"sizes": [[1], [2]]}, "seeds": [1, 2]}, "sweep.seeds must include 0"),
    ({"pool": 2}, {"grid": {"sizes": [[1]], "max_steps": [5, 10]}}, "grid takes sizes only"),
    ({"sizes": [1, 2], "pool": 2}, {}, "a knowledge_edits run edits one size"),
])
def test_a_sweep_whose_runs_are_not_one_edit_each_of_one_pool_is_refused(tmp_path, capsys, settings, sweep, message):
    out = tmp_path / "sweep"
    assert main(["sweep", str(sweep_file(tmp_path, {"model": "no/such/model", **settings}, **sweep)),
                 "--out", str(out)]) == 2
    assert message in capsys.readouterr().err and not out.exists()  # refused before anything starts


def test_one_run_edits_one_method_size_and_seed(tmp_path, capsys):
    out = tmp_path / "run"
    config = tmp_path / "run.yaml"
    config.write_text("model: no/such/model\n")
    assert main(["knowledge-pretrained", "edit", str(config), "sizes=[1, 2]", "seeds=[0]", "--out", str(out)]) == 2
    assert "an edit run edits one method, one size and one seed" in capsys.readouterr().err and not out.exists()
    assert main(["knowledge-pretrained", "repair", str(config), "--out", str(tmp_path / "repair")]) == 2
    assert "a repair run trains one arm" in capsys.readouterr().err and not (tmp_path / "repair").exists()
    with pytest.raises(Exception, match=r"pool \(1\) must hold the largest size"):
        EditRunConfig(sizes=[1, 2], pool=1)
    # A run of the whole pool at seed 1 has nothing to do: it loads nothing, and is done.
    assert main(["knowledge-pretrained", "edit", str(config), "sizes=[2]", "seeds=[1]", "pool=2",
                 "methods=[entries]", "--out", str(out)]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert "nothing to edit" in summary["note"] and (out / "edits.jsonl").read_text() == ""
    assert yaml.safe_load((out / "config.yaml").read_text())["pool"] == 2


def one_process_folder(folder, pool=3, keys=(("entries", 1, 0), ("entries", 1, 1), ("entries", 3, 0))):
    """An edit folder as `knowledge-pretrained edit` leaves it (synthetic records), its lines."""
    facts = ["A", "B", "C", "D"][:pool]
    measures = {"efficacy": 0.0, "generalisation": 0.0, "specificity": 1.0, "unrelated": 1.0, "perplexity": 50.0}
    common = {"code_version": "0.1.0+0123456789ab", "command": "modformer knowledge-pretrained edit --out X"}
    top = {f"The capital of {f} is": [i + 1, 4] for i, f in enumerate(facts)}
    lines = [{"key": "before", "facts": facts, "known_facts": pool, "true_paraphrases_answered": 0.5,
              "fact_entries": {"k": 2, "n_entries": 8, "top": top, "top_share_mean": 0.4, "uniform_share": 0.25,
                               "overlap_within_kind": 0.5, "overlap_across_kinds": 0.0},
              "measures": measures, "seconds": 9.0, **common}]
    for i, (method, size, seed) in enumerate(keys):
        lines.append({"key": f"{method}/{size}/{seed}", "method": method, "size": size, "seed": seed,
                      "facts": [facts[j] for j in draw(seed, size, pool)], "parameters": ["knowledge.entries"],
                      "steps": 3 + i, "answered": True, "final_loss": 0.1, "edit_seconds": 1.5,
                      "measures": {**measures, "efficacy": 1.0, "perplexity": 50.5 + i},
                      "top_changed_entries": [0, 4], "overlap_changed_vs_mass": [0.5] * size,
                      "overlap_changed_vs_mass_of_all": 0.5, "chance_overlap": 0.25,
                      "specificity_by_kind": {"capital": 0.5}, "seconds": 2.0, **common})
    folder.mkdir()
    text = "".join(json.dumps(r) + "\n" for r in lines)
    (folder / "edits.jsonl").write_text(text)
    (folder / "known_facts.json").write_text(json.dumps({"model": "m", "facts": [], **common}))
    return text.splitlines()


def test_an_edit_folder_is_laid_out_as_its_sweep_exactly_or_not_at_all(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    config = sweep_file(tmp_path, {"model": "no/such/model", "pool": 3}, grid={"sizes": [[1], [3]]})
    folder = tmp_path / "edits"
    lines = one_process_folder(folder)
    report = write_report(folder).read_text()
    assert main(["migrate", str(folder)]) == 2  # the one-folder form does not say its sweep
    assert "give the sweep file that rebuilds it" in capsys.readouterr().err and (folder / "edits.jsonl").exists()
    assert main(["migrate", str(folder), "--config", str(config)]) == 0
    rows = [json.loads(line) for line in (folder / "results.jsonl").read_text().splitlines()]
    assert len(rows) == 4 and {r["status"] for r in rows} == {"done"}
    moved = [line for row in rows for line in (folder / row["run_dir"] / "edits.jsonl").read_text().splitlines()]
    assert sorted(set(moved)) == sorted(lines) and moved.count(lines[0]) == 3  # as they were; `before` in each edit
    whole_at_1 = folder / "runs/entries/sizes=3/seed1"
    assert (whole_at_1 / "edits.jsonl").read_text() == "" and not (whole_at_1 / "known_facts.json").exists()
    summary = json.loads((folder / "runs/entries/sizes=1/seed1/summary.json").read_text())
    assert summary["code_version"] == "0.1.0+0123456789ab" and summary["machine"] is None and summary["converted"]
    assert summary["overlap_with_others"] == 0.5  # entry 4 is among each other fact's top 2, entry 0 in none
    assert but_last_line((folder / "report.md").read_text()) == but_last_line(report)
    assert yaml.safe_load((folder / "sweep.yaml").read_text())["format"] == FORMAT  # and today's records
    assert not (folder / "edits.jsonl").exists() and (folder / "commands.txt").read_text().startswith(
        f"modformer sweep {config} --out {folder}")
    capsys.readouterr()
    assert main(["sweep", "--status", str(folder)]) == 0 and "4 runs: 4 done" in capsys.readouterr().out
    assert main(["sweep", str(config), "--out", str(folder)]) == 0
    assert "4 already finished, 0 to run" in capsys.readouterr().err

    # A record drawn otherwise than the config draws, or one no run holds: refused, the folder unchanged.
    for name, keys, message in [("other", (("entries", 1, 0), ("entries", 1, 1), ("entries", 3, 0),
                                            ("entries", 1, 2)), "names no run of: entries/1/2"),
                                ("short", (("entries", 1, 0), ("entries", 3, 0)), "has no record entries/1/1")]:
        other = tmp_path / name
        before = one_process_folder(other, keys=keys)
        with pytest.raises(Exception, match=message):
            edits_as_sweep(other, config, other)
        assert (other / "edits.jsonl").read_text().splitlines() == before and not (other / "runs").exists()
    wrong = tmp_path / "wrong"
    one_process_folder(wrong)
    text = (wrong / "edits.jsonl").read_text().replace('"key": "entries/1/1", "method": "entries", "size": 1, '
                                                       '"seed": 1, "facts": ["', '"key": "entries/1/1", "method": '
                                                       '"entries", "size": 1, "seed": 1, "facts": ["X')
    (wrong / "edits.jsonl").write_text(text)
    with pytest.raises(Exception, match="entries/1/1 of .* edited"):
        edits_as_sweep(wrong, config, wrong)
    assert not list(tmp_path.glob(".*partial*"))
    shutil.rmtree(wrong)
