"""Every committed result can be traced: a clean code version, and its per-run records beside it.

The project's rule for `results/`: a figure counts only if the commit that made it is known
(a version `X.Y.Z+<commit>`, never `-dirty` or a bare package version) and the records it
was computed from are committed (a sweep's `runs/<run>/summary.json` and `metrics.jsonl`
for every row of its `results.jsonl`, and no run that its `results.jsonl` does not list).
A superseded or hand-edited folder breaks one of these, and this test names it.
"""

import json
import re
from pathlib import Path

import pytest

import modformer  # noqa: F401  (the papers' run kinds)
from modformer.sweep.kinds import kind_of

ROOT = Path(__file__).parent.parent
RESULTS = ROOT / "results"
CLEAN = re.compile(r"^\d+\.\d+\.\d+\+[0-9a-f]{12}$")
# Inputs an experiment wrote down, not results: the LLM-Modules facts' train/held-out split.
DATA = {"split.json"}


def versions_of(record) -> list:
    """The code versions a JSON record names: at its top, in its `settings`, or (a run's `run.json`)
    one for each time the run was started or resumed."""
    if not isinstance(record, dict):
        return [None]
    if "starts" in record:
        return [start.get("code_version") for start in record["starts"]] or [None]
    return [record.get("code_version", (record.get("settings") or {}).get("code_version"))]


def rel(path: Path) -> str:
    return str(path.relative_to(RESULTS))


JSON_RECORDS = sorted(p for p in RESULTS.rglob("*.json") if p.name not in DATA)
# One test per experiment folder (results/<paper>/<experiment>), naming every record it fails on.
EXPERIMENTS = sorted({p.relative_to(RESULTS).parts[:2] for p in JSON_RECORDS})
SWEEPS = sorted(p.parent for p in RESULTS.rglob("results.jsonl") if "run_dir" in p.read_text().partition("\n")[0])
REPORTS = sorted(RESULTS.rglob("report.md"))


def test_the_tree_holds_records_to_check():
    assert len(JSON_RECORDS) > 400 and len(SWEEPS) > 30 and len(REPORTS) > 30


@pytest.mark.parametrize("experiment", EXPERIMENTS, ids="/".join)
def test_every_json_record_names_a_clean_commit(experiment):
    records = [p for p in JSON_RECORDS if p.relative_to(RESULTS).parts[:2] == experiment]
    unclean = [f"{rel(p)} ({v!r})" for p in records for v in versions_of(json.loads(p.read_text()))
               if not (isinstance(v, str) and CLEAN.match(v))]
    assert not unclean, f"records made by no clean commit (run their command again from a clean checkout): {unclean[:5]}"


@pytest.mark.parametrize("folder", SWEEPS, ids=rel)
def test_every_sweep_row_has_its_run_records_and_every_run_a_row(folder):
    rows = [json.loads(line) for line in (folder / "results.jsonl").read_text().splitlines() if line.strip()]
    listed = {row["run_dir"] for row in rows}
    done = [row["run_dir"] for row in rows if row["status"] == "done"]
    assert len(set(done)) == len(done), f"{rel(folder)}: a run done twice in results.jsonl (superseded?)"
    last = {row["run_dir"]: row["status"] for row in rows}  # a failure retried by the same command comes before
    assert set(last.values()) == {"done"}, f"{rel(folder)}: runs whose last record is not done: " \
        f"{sorted(r for r, s in last.items() if s != 'done')[:3]}"
    files = kind_of(folder).files  # summary, records, config: what a finished run of its kind leaves
    for run_dir in sorted(listed):
        for name in files:
            assert (folder / run_dir / name).is_file(), f"{rel(folder)}: {run_dir}/{name} is not committed"
    on_disk = {str(p.parent.relative_to(folder)) for p in (folder / "runs").rglob("summary.json")}
    assert on_disk <= listed, f"{rel(folder)}: runs not in results.jsonl (superseded?): {sorted(on_disk - listed)[:3]}"


@pytest.mark.parametrize("report", REPORTS, ids=rel)
def test_every_report_sits_beside_the_versioned_records_it_was_made_from(report):
    folder = report.parent
    versioned = [p for p in folder.glob("*.json") if p.name not in DATA] + list(folder.glob("runs/**/summary.json"))
    assert versioned, f"{rel(report)} has no versioned record beside it (a *.json, or runs/*/summary.json)"


def test_a_run_beside_changed_records_is_not_dirty_and_one_beside_changed_code_is(tmp_path):
    """A sweep that extends a committed results folder changes tracked files under results/;
    the code that trains is still the commit's, so its runs must not be recorded -dirty (they
    were, on 2026-12-03, and those records were dropped). A changed code file is dirty."""
    import subprocess

    from modformer.version import changed_code

    def git(*args):
        subprocess.run(["git", *args], cwd=tmp_path, check=True, capture_output=True)

    git("init", "-q")
    (tmp_path / "modformer").mkdir()
    (tmp_path / "results").mkdir()
    (tmp_path / "modformer" / "code.py").write_text("x = 1\n")
    (tmp_path / "results" / "results.jsonl").write_text("{}\n")
    git("add", ".")
    git("-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "one")
    assert not changed_code(tmp_path)
    (tmp_path / "results" / "results.jsonl").write_text("{}\n{}\n")
    (tmp_path / "results" / "new.json").write_text("{}")
    assert not changed_code(tmp_path)
    (tmp_path / "modformer" / "code.py").write_text("x = 2\n")
    assert changed_code(tmp_path)


@pytest.mark.parametrize("page", ["random_attention/README.md", "knowledge/README.md", "llm_modules/README.md"])
def test_every_verdict_cell_of_a_results_page_is_computed(page):
    """A verdict typed beside its figures can say more than they do (issue 52): in every table
    of the three papers' pages with a verdict column, each row's cell holds a verdict quote
    (`verdict=RULE`), whose word `modformer quote --check` recomputes."""
    typed, checked = [], 0
    columns = None
    for number, line in enumerate((RESULTS / page).read_text().splitlines(), 1):
        if not line.startswith("|"):
            columns = None
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")] if "<!--" not in line else \
            re.split(r"\s\|\s(?![^<]*-->)", line.strip().strip("|"))  # a quote's spec holds no cell
        if columns is None:
            columns = [c.lower() for c in cells]
        elif "verdict" in columns and not set(line) <= set("|-: "):
            checked += 1
            cell = cells[columns.index("verdict")] if len(cells) == len(columns) else line
            if "verdict=" not in cell:
                typed.append(f"line {number}: {cell[:80]}")
    assert checked, f"{page} has no table with a verdict column"
    assert not typed, f"{page}: verdict cells not computed:\n" + "\n".join(typed)


def test_no_record_of_a_results_folder_is_hidden_by_gitignore():
    """A record on disk but ignored by .gitignore (its `runs/` rule reaches any depth) passes
    every test here and is missing from a fresh clone: a folder one level deeper than the
    rule's exceptions, or a run folder renamed, would lose its records silently."""
    import shutil
    import subprocess

    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    records = [p.relative_to(ROOT).as_posix() for name in ("config.yaml", "summary.json", "metrics.jsonl", "run.json")
               for p in RESULTS.rglob(name) if "/runs/" in p.as_posix()]
    assert len(records) > 1000
    ignored = subprocess.run(["git", "check-ignore", "--no-index", "--stdin"], cwd=ROOT, input="\n".join(records),
                             capture_output=True, text=True).stdout.split()
    assert not ignored, f"{len(ignored)} record(s) .gitignore hides, e.g. {ignored[:3]}"
