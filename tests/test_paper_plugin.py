"""A paper installed from outside the repository reaches every place a paper can: the worked
plugin of examples/paper_plugin, copied into a temporary folder and installed there (pip
--target), beside a broken one and one declared in a misspelt group, loaded by stock
`modformer` through the entry-point group `modformer.papers` alone (PYTHONPATH points at the
installation; nothing imports the package by name)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "paper_plugin"

BROKEN = {
    "pyproject.toml": """
        [build-system]
        requires = ["setuptools>=61"]
        build-backend = "setuptools.build_meta"
        [project]
        name = "broken-paper"
        version = "0.0.1"
        [project.entry-points."modformer.papers"]
        broken_paper = "broken_paper:register"
        [project.entry-points."modformer.paper"]
        misspelt = "broken_paper:register"
        [tool.setuptools]
        packages = ["broken_paper"]
        """,
    "broken_paper/__init__.py": """
        from modformer.commands import Command


        def register(paper):
            paper.command(Command("broken-paper-cmd", "never applied", lambda p: None))
            raise RuntimeError("the broken paper's register fails")
        """,
}


@pytest.fixture(scope="module")
def env(tmp_path_factory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("plugins")
    shutil.copytree(EXAMPLE, root / "paper_plugin", ignore=shutil.ignore_patterns("*.egg-info", "build"))
    for name, text in BROKEN.items():
        (root / "broken" / name).parent.mkdir(parents=True, exist_ok=True)
        (root / "broken" / name).write_text(textwrap.dedent(text))
    site = root / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--no-index",
                    "--disable-pip-version-check", "--target", str(site), str(root / "paper_plugin"),
                    str(root / "broken")], check=True, capture_output=True)
    return {**os.environ, "PYTHONPATH": str(site), "MODFORMER_THREADS": "1"}


def modformer(env: dict[str, str], *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "modformer.cli", *args], env=env, cwd=cwd, capture_output=True,
                          text=True, timeout=300)


def test_its_commands_are_listed_and_a_broken_plugin_or_a_misspelt_group_is_named(env):
    help_ = modformer(env, "--help")
    assert help_.returncode == 0, help_.stderr
    assert "minimal-paper-summary" in help_.stdout
    assert "minimal-paper-run" not in help_.stdout  # registered without help: unlisted, as old names are
    assert "broken-paper-cmd" not in help_.stdout  # nothing of a paper whose register raises is applied
    listed = modformer(env, "list")
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    paper = next(line for line in lines if line.strip().startswith("minimal_paper "))
    assert "modformer-minimal-paper 0.1.0" in paper
    for added in ("construction minimal_paper.tiny", "run kind minimal_count", "command minimal-paper-summary",
                  "report section ## Minimal paper", "curve mark"):
        assert added in paper
    broken = [line for line in lines if "broken_paper" in line and "BROKEN" in line]
    assert len(broken) == 1 and "RuntimeError: the broken paper's register fails" in broken[0]
    assert any("unknown entry-point group modformer.paper " in line and "misspelt" in line for line in lines)
    # the others load, and the in-tree papers with them
    assert any(line.strip().startswith("random_attention ") for line in lines)


def test_a_sweep_of_its_run_kind_with_two_workers_and_its_command(env, tmp_path):
    config = tmp_path / "count.yaml"
    config.write_text(yaml.safe_dump({"n": 3, "sweep": {"experiment": "minimal_count", "variants": ["up", "down"],
                                                        "seeds": [0, 1], "workers": 2}}))
    out = tmp_path / "sweep"
    run = modformer(env, "sweep", str(config), "--out", str(out))
    assert run.returncode == 0, run.stderr + run.stdout
    totals = {r["run_id"]: r["summary"]["total"]
              for r in map(json.loads, (out / "results.jsonl").read_text().splitlines()) if r["status"] == "done"}
    assert totals == {"up/default/seed0": 3, "up/default/seed1": 6, "down/default/seed0": -3,
                      "down/default/seed1": 0}
    assert "| down/default/seed1 | 0 |" in (out / "report.md").read_text()
    summary = modformer(env, "minimal-paper-summary", str(out))
    assert summary.returncode == 0 and "4 of 4 recorded runs finished" in summary.stdout


def test_its_construction_section_mark_and_run_record(env, tmp_path):
    config = tmp_path / "tiny.yaml"
    config.write_text(yaml.safe_dump({
        "model": {"construction": "minimal_paper.tiny"},
        "task": {"name": "retrieval", "n_pairs": 2, "test_size": 40, "validation_size": 40},
        "train": {"steps": 2, "batch_size": 8, "eval_every": 2, "warmup_steps": 0, "threads": 1},
        "sweep": {"variants": ["standard"], "seeds": [0, 1], "workers": 2}}))
    out = tmp_path / "sweep"
    run = modformer(env, "sweep", str(config), "--out", str(out))
    assert run.returncode == 0, run.stderr + run.stdout
    assert "## Minimal paper" in run.stdout  # printed with the report's own tables
    report = (out / "report.md").read_text()
    assert "## Minimal paper" in report and "| standard | `default` | 2 |" in report
    saved = yaml.safe_load((out / "runs" / "standard" / "default" / "seed0" / "config.yaml").read_text())
    assert saved["model"]["d_model"] == 16 and saved["model"]["n_layers"] == 1
    started = json.loads((out / "runs" / "standard" / "default" / "seed0" / "run.json").read_text())["starts"][0]
    assert started["papers"]["minimal_paper"]["version"] == "modformer-minimal-paper 0.1.0"
    assert started["papers"]["minimal_paper"]["import_path"] == "minimal_paper:register"
    curve = modformer(env, "curve", str(out), "--out", str(tmp_path / "curve.png"))
    assert curve.returncode == 0, curve.stderr
    assert "marked: the minimal paper's budget (10,000 sequences)" in (tmp_path / "curve.md").read_text()
    # `modformer report` writes the same section
    (out / "report.md").unlink()
    again = modformer(env, "report", str(out))
    assert again.returncode == 0 and "## Minimal paper" in (out / "report.md").read_text()


def test_a_sweep_naming_a_paper_that_is_missing_or_broken_says_so(env, tmp_path):
    config = tmp_path / "count.yaml"
    config.write_text(yaml.safe_dump({"sweep": {"experiment": "minimal_count", "variants": ["up"], "seeds": [0]}}))
    broken = modformer(env, "sweep", str(config), "sweep.paper=broken_paper", "--out", str(tmp_path / "a"))
    missing = modformer(env, "sweep", str(config), "sweep.paper=no_such_paper", "--out", str(tmp_path / "b"))
    for done, word in ((broken, "did not load: broken_paper:register: RuntimeError"), (missing, "is installed")):
        assert done.returncode == 2 and "Traceback" not in done.stderr
        assert word in done.stderr and len(done.stderr.strip().splitlines()) == 1


def test_a_paper_that_fails_in_any_way_adds_nothing_and_is_named_in_one_line():
    """In process: an entry point that does not import, a register that exits or raises after
    registering, a module without register: each is BROKEN with its reason, and nothing of it
    is applied."""
    import types

    from modformer.commands import COMMANDS, Command
    from modformer.installed_papers import BROKEN, PAPERS
    from modformer.plugins import load_paper

    def registers_then(error):
        def register(paper):
            paper.command(Command(f"would-be-{paper.name}", "never applied", lambda p: None))
            raise error
        return register

    def no_import():
        raise ImportError("No module named 'gone'")

    cases = {"t_import": (no_import, "ImportError: No module named 'gone'"),
             "t_exit": (lambda: registers_then(SystemExit(0)), "exited"),
             "t_raise": (lambda: registers_then(ValueError("bad")), "ValueError: bad"),
             "t_module": (lambda: types.ModuleType("empty"), "has no function register(paper)")}
    try:
        for name, (load, why) in cases.items():
            assert load_paper(name, f"pkg:{name}", load) is None
            assert why in BROKEN[name] and "\n" not in BROKEN[name] and name not in PAPERS
            assert f"would-be-{name}" not in COMMANDS
    finally:
        for name in cases:
            BROKEN.pop(name, None)
