"""Parts of an installed package (a distribution with entry points) beside a copy of the same
package on PYTHONPATH: `modformer list` shows the installed parts and marks a broken one
instead of failing, and a run records the file that was actually imported.

The "installed" package is a folder holding the package and its `.dist-info` (what pip
leaves in site-packages), put on the path as site-packages is; nothing is installed."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent
PART = '''from torch import nn
from modformer.variants import Variant
from modformer.variants.standard import build_decoder


class Mix(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.proj = nn.Linear(cfg.d_model, cfg.d_model)

    def forward(self, x):
        return self.proj(x).cumsum(1){tail}


frozen_v = Variant(build_decoder, freeze=("blocks.*.mixer.v_proj.*",), mixer="attention", description="V frozen")


class NotDataclassOptions:
    pass


class BadOptions(Mix):
    Options = NotDataclassOptions
'''


@pytest.fixture
def installed(tmp_path):
    """site/: package `mypart` 1.0 installed (dist-info with entry points, one of them broken);
    shadow/: an edited copy of it, as a checkout on PYTHONPATH would be."""
    site, shadow = tmp_path / "site", tmp_path / "shadow"
    for folder, tail in ((site, ""), (shadow, " * 2")):
        (folder / "mypart").mkdir(parents=True)
        (folder / "mypart" / "__init__.py").write_text(PART.replace("{tail}", tail))
    info = site / "mypart-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: mypart\nVersion: 1.0\n")
    (info / "RECORD").write_text("mypart/__init__.py,,\nmypart-1.0.dist-info/METADATA,,\n")
    (info / "entry_points.txt").write_text("[modformer.mixers]\ngoodmix = mypart:Mix\nbrokenmix = mypart:Nope\n"
                                           "badoptions = mypart:BadOptions\n"
                                           "[modformer.variants]\nfrozen_v = mypart:frozen_v\n")
    return site, shadow


def modformer(*args, path: list[Path], cwd: Path):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(str(p) for p in path)}
    # The installed command (not `python -m`, which would search the current folder first).
    return subprocess.run([str(Path(sys.executable).parent / "modformer"), *args], capture_output=True, text=True,
                          env=env, cwd=cwd, timeout=300)


def test_list_shows_installed_parts_and_marks_a_broken_one(installed, tmp_path):
    site, _ = installed
    listed = modformer("list", path=[site], cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    assert "frozen_v            V frozen; freezes blocks.*.mixer.v_proj.* [entry point]" in listed.stdout
    assert "goodmix [entry point]" in listed.stdout and "brokenmix: BROKEN" in listed.stdout
    assert "badoptions: BROKEN: its Options must be a dataclass" in listed.stdout
    options = modformer("list", "--options", path=[site], cwd=tmp_path)
    assert options.returncode == 0, options.stderr
    assert "variants (model.variant" in options.stdout and "frozen_v" in options.stdout
    assert "model.mixer=brokenmix BROKEN [entry point]: " in options.stdout
    assert "model.mixer=goodmix (mypart:Mix, mypart 1.0)" in options.stdout
    assert "model.mixer=badoptions BROKEN [entry point]: its Options must be a dataclass" in options.stdout


@pytest.mark.slow
def test_a_sweeps_runs_import_parts_as_the_command_does(installed, tmp_path):
    """An edited copy of the package in the current folder, the installed one on the path:
    `modformer train` imports the installed one (the current folder is searched last), and so
    must a sweep's runs (`python -m` would put the current folder first)."""
    site, shadow = installed
    work = tmp_path / "work"
    work.mkdir()
    (work / "mypart").mkdir()
    (work / "mypart" / "__init__.py").write_text((shadow / "mypart" / "__init__.py").read_text())
    args = [str(ROOT / "configs/retrieval.yaml"), "model.mixer=goodmix", "model.d_model=16", "train.steps=2",
            "train.batch_size=4", "task.test_size=20", "task.validation_size=10", "train.eval_every=2",
            "train.progress=false"]
    assert modformer("train", *args, "--out", "one", path=[site], cwd=work).returncode == 0
    swept = modformer("sweep", *args, "sweep.seeds=[0]", "--out", "sweep", path=[site], cwd=work)
    assert swept.returncode == 0, swept.stderr
    version = [json.loads(run.read_text())["starts"][0]["parts"]["model.mixer"]["version"]
               for run in (work / "one" / "run.json", *(work / "sweep").glob("runs/*/*/*/run.json"))]
    assert version == ["mypart 1.0", "mypart 1.0"]


def test_the_run_records_the_copy_that_ran(installed, tmp_path):
    """With the package installed and an edited copy first on PYTHONPATH, Python imports the
    copy: run.json names its file and hash, not the installed version; without the copy,
    the installed distribution's version."""
    site, shadow = installed
    args = ["train", str(ROOT / "configs/retrieval.yaml"), "model.mixer=goodmix", "model.d_model=16",
            "train.steps=2", "train.batch_size=4", "task.test_size=20", "task.validation_size=10",
            "train.eval_every=2", "train.progress=false"]
    for name, path in (("shadowed", [shadow, site]), ("installed", [site])):
        result = modformer(*args, "--out", str(tmp_path / name), path=path, cwd=tmp_path)
        assert result.returncode == 0, result.stderr
    version = {name: json.loads((tmp_path / name / "run.json").read_text())["starts"][0]["parts"]["model.mixer"]
               for name in ("shadowed", "installed")}
    assert version["shadowed"]["version"].startswith("sha256:")
    assert version["shadowed"]["version"].endswith(str(shadow / "mypart" / "__init__.py"))
    assert version["installed"]["version"] == "mypart 1.0"
