"""Every committed report.md is what `modformer report` writes from its folder's records today,
word for word (but for the folder's path in its own command line): a report can be neither
stale nor hand-edited, and a change to the report writer shows in every report it changes.

A few folders of each kind of run are redrawn in the fast tests; every folder under `-m slow`
(matplotlib redraws each figure: about 10 s a folder)."""

import shutil
from pathlib import Path

import pytest

from modformer.cli import main

ROOT = Path(__file__).parent.parent
RESULTS = ROOT / "results"
# Folders whose paper is an outside plugin that the project's environment need not have.
PLUGIN = {"decon_attention/retrieval_placements"}
FOLDERS = sorted(str(p.parent.relative_to(RESULTS)) for p in RESULTS.rglob("sweep.yaml")
                 if (p.parent / "report.md").exists() and str(p.parent.relative_to(RESULTS)) not in PLUGIN)
# a train sweep, one with the random-attention paper's section, an LLM-Modules sweep, a
# pretrained-knowledge run kind's
FAST = ["knowledge/lm", "random_attention/retrieval_layers_mixit_2x", "llm_modules/facts_gate",
        "knowledge/pretrained/repair"]


def redrawn(tmp_path: Path, folder: str) -> tuple[str, str]:
    """(the committed report, the one `modformer report` writes from a copy of the folder)."""
    copy = tmp_path / "results" / folder
    shutil.copytree(RESULTS / folder, copy)
    assert main(["report", str(copy)]) == 0
    return (RESULTS / folder / "report.md").read_text(), (copy / "report.md").read_text().replace(
        str(tmp_path / "results"), "results")


def test_the_fast_sample_is_a_list_of_committed_folders():
    assert set(FAST) <= set(FOLDERS) and len(FOLDERS) > 60


@pytest.mark.parametrize("folder", FAST)
def test_a_committed_report_is_what_its_records_give_today(tmp_path, folder):
    committed, today = redrawn(tmp_path, folder)
    assert today == committed


@pytest.mark.slow
@pytest.mark.parametrize("folder", [f for f in FOLDERS if f not in FAST])
def test_every_committed_report_is_what_its_records_give_today(tmp_path, folder):
    committed, today = redrawn(tmp_path, folder)
    assert today == committed
