"""The pretrained knowledge base's sweeps (the ladder, `knowledge_ladder`, and the fact edits,
`knowledge_edits`) as Slurm job arrays on the local single-node Slurm (scripts/slurm_local.sh):
the same records as the same sweeps trained by local workers, a report, and `--status`."""

import json

import pytest
import yaml

from modformer.cli import main

UNTIMED = {"seconds", "edit_seconds", "command", "machine"}  # times; the run folder in each command


def untimed(value):
    """`value` without its times and commands, at any depth (a summary's records, its `before`)."""
    if isinstance(value, dict):
        return {k: untimed(v) for k, v in value.items() if k not in UNTIMED}
    if isinstance(value, list):
        return [untimed(v) for v in value]
    return value


def summaries(out):
    return {r["run_id"]: untimed(r["summary"]) for r in map(json.loads, (out / "results.jsonl").read_text().splitlines())
            if r["status"] == "done"}


@pytest.mark.slow  # a real single-node Slurm; six small jobs and the same six runs by local workers
@pytest.mark.xdist_group("slurm")
def test_the_ladder_and_the_edits_on_slurm_give_the_local_sweeps_results(tiny_teacher, tmp_path, monkeypatch,
                                                                         slurm_cluster, capsys):
    monkeypatch.setenv("MODFORMER_CACHE", str(tmp_path / "cache"))  # the jobs inherit the environment
    common = {"model": str(tiny_teacher), "corpus": str(tiny_teacher / "corpus.txt"), "eval_blocks": 2,
              "block_len": 16}
    slurm = {"poll_seconds": 0.5, "time": "0:10:00"}
    sweeps = {
        "ladder": {**common, "sweep": {"experiment": "knowledge_ladder", "variants": ["original", "shared"],
                                       "grid": {"points": [[[1, 0.5]]]}, "seeds": [0], "workers": 2, "slurm": slurm}},
        "edits": {**common, "pool": 2, "require_known": False, "max_steps": 40,
                  "lr": {"entries": 0.03, "one_down_proj": 0.03, "all_ffns": 0.01},
                  "sweep": {"experiment": "knowledge_edits", "variants": ["entries"], "grid": {"sizes": [[1], [2]]},
                            "seeds": [0, 1], "workers": 2, "slurm": slurm}},
    }
    for name, data in sweeps.items():
        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump(data))
        on_slurm, local = tmp_path / f"{name}_slurm", tmp_path / f"{name}_local"
        assert main(["sweep", str(path), "--out", str(on_slurm), "--launcher", "slurm", "--wait"]) == 0
        assert main(["sweep", str(path), "--out", str(local)]) == 0
        assert summaries(on_slurm) == summaries(local)
        assert (on_slurm / "slurm" / "jobs.jsonl").is_file() and not (local / "slurm").exists()
        capsys.readouterr()
        assert main(["sweep", "--status", str(on_slurm)]) == 0
        assert f"{len(summaries(local))} runs: {len(summaries(local))} done" in capsys.readouterr().out
    ladder, edits = summaries(tmp_path / "ladder_slurm"), summaries(tmp_path / "edits_slurm")
    assert len(ladder) == 2 and {r["key"] for s in ladder.values() for r in s["records"]} == {"original", "shared/64/32"}
    assert len(edits) == 4 and sum("note" in s for s in edits.values()) == 1  # all of the pool at seed 1: nothing
    assert {s["key"] for s in edits.values() if "key" in s} == {"entries/1/0", "entries/1/1", "entries/2/0"}
    assert "Compression ladder" in (tmp_path / "ladder_slurm" / "report.md").read_text()
    assert (tmp_path / "edits_slurm" / "report.md").read_text().count("Before any edit") == 1
