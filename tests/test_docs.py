"""The documentation: the site's tutorials (docs/tutorials/*.py, jupytext percent scripts) run
as they are, from the repository root as a reader runs them, so that one whose code no longer
works fails here (the site's build executes them again to show their outputs); the README's
links reach files. The rest of the site is checked by `mkdocs build --strict` (.ci/run)."""

import os
import re
import runpy
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent
TUTORIALS = sorted((ROOT / "docs" / "tutorials").glob("*.py"))
# Tutorials that run a sweep start a process per run (about 5 s of CPU each, most of it
# importing torch): the slow tier, which CI runs, as it runs the other end-to-end sweeps,
# keeps the README's test command within its time. The build runs every tutorial as well.
SWEEPING = {"own_mixer", "main_verdict"}


def test_every_tutorial_is_on_the_site():
    nav = (ROOT / "mkdocs.yml").read_text()
    assert TUTORIALS and all(f"tutorials/{t.name}" in nav for t in TUTORIALS)


@pytest.mark.parametrize("tutorial", [
    pytest.param(t, id=t.stem, marks=[pytest.mark.slow] if t.stem in SWEEPING else []) for t in TUTORIALS])
def test_tutorial_runs(tutorial, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(ROOT)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # what the tutorial writes goes here
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setenv("MPLBACKEND", "Agg")
    # A tutorial may extend PYTHONPATH and sys.path for its own parts: both are put back after.
    if "PYTHONPATH" in os.environ:
        monkeypatch.setenv("PYTHONPATH", os.environ["PYTHONPATH"])
    else:
        monkeypatch.delenv("PYTHONPATH", raising=False)
    monkeypatch.setattr(sys, "path", list(sys.path))
    modules = set(sys.modules)
    try:
        names = runpy.run_path(str(tutorial), run_name="__main__")
    finally:
        for name in set(sys.modules) - modules:
            if not name.startswith(("modformer", "torch", "matplotlib")):  # a tutorial's own parts
                sys.modules.pop(name, None)
    out = capsys.readouterr().out
    assert out.strip(), "a tutorial shows what it does"
    assert any(tmp_path.iterdir()), "a tutorial writes under the temporary folder only"
    if tutorial.stem == "main_verdict":
        # Its tiny sweep's report chose a setting for every variant (one seed of one: complete).
        report = names["report"].read_text()
        rows = report.split("## Chosen setting per variant", 1)[1].split("\n## ", 1)[0].splitlines()
        assert [row.split("|")[1].strip() for row in rows if row.startswith("| ") and "| variant |" not in row] == [
            "standard", "frozen_qk", "mixit"], report
        assert "never chosen" not in report, report


def test_the_readme_links_reach_files():
    """The README is read on the repository's page, not on the site, so the site's strict
    build does not check it: every relative link of it must name a file of the checkout."""
    import re

    readme = (ROOT / "README.md").read_text()
    targets = {t.split("#")[0] for t in re.findall(r"\]\(([^)\s]+)\)", readme) if "://" not in t}
    missing = sorted(t for t in targets if t and not (ROOT / t).exists())
    assert not missing, missing
    assert "bash scripts/setup.sh && .venv/bin/python -m pytest -q" in (ROOT / ".ci" / "run").read_text()


def test_every_class_and_function_on_the_api_pages_has_a_docstring():
    """Each page of docs/api names modules (`::: modformer.x`); every public class and function
    defined in them has a docstring of its own (a class does not inherit nn.Module's)."""
    import importlib
    import inspect

    import modformer  # noqa: F401  (registers what the papers add)

    missing, seen = [], 0
    for page in sorted((ROOT / "docs" / "api").glob("*.md")):
        for name in re.findall(r"^::: ([\w.]+)", page.read_text(), flags=re.M):
            try:
                found = vars(importlib.import_module(name)).items()
            except ImportError:  # an object, not a module
                module, attr = name.rsplit(".", 1)
                found = [(attr, getattr(importlib.import_module(module), attr))]
                name = module
            for attr, obj in found:
                if attr.startswith("_") or not (inspect.isclass(obj) or inspect.isfunction(obj)) \
                        or obj.__module__ != name:
                    continue
                seen += 1
                if not (obj.__doc__ or "").strip():
                    missing.append(f"{name}.{attr} ({page.name})")
    assert seen > 50 and not missing, f"without a docstring: {missing}"
