"""The follow-up paper "Deconstructing Attention" as an outside plugin (examples/decon_attention),
copied into a temporary folder, installed there (pip --target) and run by stock `modformer`
through its entry point alone: its variants are nameable per layer, its placements are a
sweep's arms, and its report section compares each arm with Standard."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from test_paper_plugin import modformer

pytestmark = pytest.mark.slow  # a pip install, and a sweep of 4 arms x 2 seeds, each run its own process: ~1 min

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "decon_attention"
SMALL = ["train.steps=4", "train.eval_every=4", "train.checkpoint_every=4", "task.test_size=100",
         "task.validation_size=50", "model.d_model=32", "sweep.seeds=[0, 1]"]


@pytest.fixture(scope="module")
def env(tmp_path_factory) -> dict[str, str]:
    import os

    root = tmp_path_factory.mktemp("decon")
    shutil.copytree(EXAMPLE, root / "decon_attention", ignore=shutil.ignore_patterns("*.egg-info", "build"))
    site = root / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--no-index",
                    "--disable-pip-version-check", "--target", str(site), str(root / "decon_attention")],
                   check=True, capture_output=True)
    return {**os.environ, "PYTHONPATH": str(site), "MODFORMER_THREADS": "1"}


def test_its_parts_and_section_are_listed(env):
    listed = modformer(env, "list")
    assert listed.returncode == 0, listed.stderr
    paper = next(line for line in listed.stdout.splitlines() if line.strip().startswith("decon_attention "))
    assert "modformer-decon-attention 0.1.0" in paper
    for added in ("mixer rndembqk", "variant fixedseqqk", "mixer staticembqk",
                  "report section ## Deconstructing Attention"):
        assert added in paper, added


def test_its_placements_run_as_a_sweeps_arms_with_its_section(env, tmp_path):
    arms = {"standard": {}, "staticembqk": {}, "rndembqk_alternate": {"variant": "rndembqk",
                                                                      "model.layers": {1: "standard", 3: "standard"}},
            "fixedseqqk_first": {"variant": "standard", "model.layers": {0: "fixedseqqk"}}}
    out = tmp_path / "out"
    done = modformer(env, "sweep", str(EXAMPLE / "retrieval.yaml"), "--out", str(out), *SMALL,
                     "sweep.variants=" + yaml.safe_dump(arms, default_flow_style=True, sort_keys=False, width=1000))
    assert done.returncode == 0, done.stderr
    saved = yaml.safe_load((out / "sweep.yaml").read_text())
    assert list(saved["sweep"]["variants"]) == list(arms) and saved["sweep"]["workers"] == 2
    config = yaml.safe_load((out / "runs/fixedseqqk_first/default/seed0/config.yaml").read_text())
    assert config["model"]["variant"] == "standard" and config["model"]["layers"][0]["variant"] == "fixedseqqk"
    # its own mixer's options in layer 0 only, every one filled in (the mixer follows from the variant)
    assert config["model"]["layers"][0]["mixer_options"] == {"text_seed": 0}
    assert all(not layer["mixer_options"] for layer in config["model"]["layers"][1:])
    hybrid = yaml.safe_load((out / "runs/rndembqk_alternate/default/seed1/config.yaml").read_text())["model"]
    assert [layer["variant"] for layer in hybrid["layers"]] == [None, "standard", None, "standard"]
    papers = json.loads((out / "runs/staticembqk/default/seed0/run.json").read_text())["starts"][0]["papers"]
    assert papers["decon_attention"]["version"] == "modformer-decon-attention 0.1.0"
    report = (out / "report.md").read_text()
    assert "## Deconstructing Attention: each arm against Standard" in report
    for arm, placement in (("staticembqk", "every layer"), ("rndembqk_alternate", "standard in layers 1, 3"),
                           ("fixedseqqk_first", "| fixedseqqk in layer 0 |")):
        row = next(line for line in report.splitlines() if line.startswith(f"| {arm} | "))
        assert placement in row and "of 2 (" in row, row
    assert "## Deconstructing Attention" in done.stdout  # printed on the terminal too


def test_its_committed_results_are_rebuilt_by_their_commands(env):
    """results/decon_attention's sweep, whose paper is this plugin: its commands.txt, resolved
    now with the plugin installed, builds exactly each run's recorded config (the check
    tests/test_results_commands.py makes of every other folder)."""
    from test_results_commands import PLUGIN_FOLDERS

    folder = ROOT / "results" / "decon_attention" / "retrieval_placements"
    assert folder in PLUGIN_FOLDERS
    check = ("import sys; sys.path.insert(0, 'tests'); from pathlib import Path; import test_results_commands as t; "
             f"t.check_commands(Path({str(folder)!r})); print('rebuilt')")
    done = subprocess.run([sys.executable, "-c", check], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and done.stdout.strip() == "rebuilt", done.stderr
