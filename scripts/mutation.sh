#!/usr/bin/env bash
# Mutation testing of one module against the tests that exercise it (mutmut 3, from PyPI; not
# part of the fast tests). Run from the repository root on a clean commit:
#
#     bash scripts/mutation.sh modformer/stats.py tests/test_stats.py
#
# It copies the committed tree (git archive HEAD) to a temporary folder, runs mutmut there
# (its mutants/ stay out of the checkout), lists each surviving mutant with its change, and appends one line to
# results/mutation/scores.jsonl: the date, the commit, the machine, the module, the tests, and
# mutmut's counts (killed, survived, no_tests: mutants no listed test reaches, timeout, total).
# A survivor is either killed by a new test of a real property or listed as equivalent, with a
# reason, in results/mutation/README.md. MODULE may be a package's folder (modformer/sweep).
#
# Where a module's mutants are too many to run in a session, MUTATION_SAMPLE=N scores a fixed
# random sample of N of them, drawn by MUTATION_SEED (default 0) from the sorted list of every
# mutant; the record says so (sample, seed, and of: how many there were).
set -euo pipefail
cd "$(dirname "$0")/.."
module=${1%/}; shift
[ $# -ge 1 ] || { echo "usage: bash scripts/mutation.sh MODULE.py|PACKAGE TEST_FILE..." >&2; exit 2; }
[ -e "$module" ] || { echo "no such module: $module" >&2; exit 2; }
sample=${MUTATION_SAMPLE:-}
pattern=$module; [ -d "$module" ] && pattern="$module/*"
seed=${MUTATION_SEED:-0}
# mutmut forks each mutant's test process from one that has already run the tests: a torch
# that started its OpenMP threads there deadlocks in the child (seen: every mutant of a
# function the trainings reach hung in a futex, and mutmut's CPU-time limit never fires on a
# process that waits). One thread each, and there are none to inherit.
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
if [ -n "$(git status --porcelain -- modformer tests)" ]; then
  echo "commit first: the scores name the commit they measured, and modformer/ or tests/ has changes" >&2; exit 2
fi
.venv/bin/python -c "import mutmut" 2>/dev/null || .venv/bin/python -m pip install -q "mutmut>=3.3,<4"
version=$(.venv/bin/python -c "from modformer.version import code_version; print(code_version())")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
git archive HEAD | tar -x -C "$work"
ln -s "$PWD/.venv" "$work/.venv"
tests=$(printf '"%s", ' "$@")
cat >> "$work/pyproject.toml" <<TOML

[tool.mutmut]
# The whole package is copied (tests import the papers' plugins and everything else), only
# the module's files mutated.
paths_to_mutate = ["modformer"]
only_mutate = ["$pattern"]
tests_dir = [${tests%, }]
also_copy = ["configs", "examples", "docs", "results", "README.md"]  # what tests read beside the code
pytest_add_cli_args = ["-n", "0", "-p", "no:cacheprovider"]
TOML
(cd "$work"
 # A test that starts another Python (a sweep's workers, the CLI in a subprocess) imports the
 # mutated copy too, not the checkout the virtual environment installs: it honours the mutant
 # that mutmut names in MUTANT_UNDER_TEST, and reads the same code version as the test.
 # (Imported there, mutmut's trampoline reads its configuration and warns that
 # paths_to_mutate is deprecated, on a stderr that tests read word for word.)
 export PYTHONPATH="$work/mutants${PYTHONPATH:+:$PYTHONPATH}" PYTHONWARNINGS="ignore::UserWarning:mutmut.configuration"
 if [ -n "$sample" ]; then
   # A filter that matches nothing makes mutmut generate every mutant and record which tests
   # reach which code, then stop; the sample is drawn from what it generated.
   .venv/bin/mutmut run "modformer.none_of_these" >"$work/mutmut.log" 2>&1 || true
   .venv/bin/python - "$sample" "$seed" > "$work/sample.txt" <<'PY'
import random, re, sys
from pathlib import Path
names = sorted(f"{'.'.join(path.with_suffix('').parts[1:])}.{m}"
               for path in Path("mutants").rglob("*.py") if path.parts[1] == "modformer"
               for m in re.findall(r"^\s*def (x\S*__mutmut_\d+)\(", path.read_text(), re.M))
print("\n".join(random.Random(int(sys.argv[2])).sample(names, min(int(sys.argv[1]), len(names)))))
Path("count.txt").write_text(str(len(names)))
PY
   xargs -a "$work/sample.txt" -d '\n' .venv/bin/mutmut run >>"$work/mutmut.log" 2>&1 || true
 else
   .venv/bin/mutmut run >"$work/mutmut.log" 2>&1 || true
 fi
 .venv/bin/mutmut export-cicd-stats >/dev/null 2>&1
 .venv/bin/mutmut results --all true > "$work/results.txt" 2>/dev/null || true
 .venv/bin/mutmut results 2>/dev/null | grep -v "no tests\|not checked" || true
 # each survivor's change (and each that no listed test reaches), to be killed by a test or
 # listed as equivalent with a reason
 for name in $(.venv/bin/mutmut results 2>/dev/null | grep ": survived\|: no tests\|: suspicious\|: segfault" | sed 's/: [a-z ]*$//'); do
   .venv/bin/mutmut show "$name" 2>/dev/null | sed 's/^/      /' || true
 done)
.venv/bin/python - "$work" "$version" "$module" "$@" <<'PY' || { tail -40 "$work/mutmut.log" | tr '\r' '\n' | grep -v "^⠋\|^⠙\|^⠹\|^⠸\|^⠼\|^⠴\|^⠦\|^⠧\|^⠇\|^⠏" | tail -30 >&2; exit 2; }
import json, os, sys, time
from collections import Counter
from pathlib import Path
from modformer.version import machine
work, version, module, *tests = sys.argv[1:]
work, sample = Path(work), os.environ.get("MUTATION_SAMPLE")
if sample:  # the sample's statuses, as `mutmut results --all true` lists them
    names = set((work / "sample.txt").read_text().split())
    status = {n: w for n, _, w in (line.strip().rpartition(": ") for line in
                                   (work / "results.txt").read_text().splitlines()) if n in names}
    words = Counter(status.get(n, "not checked") for n in names)
    counts = {"killed": words["killed"], "survived": words["survived"], "no_tests": words["no tests"],
              "timeout": words["timeout"], "total": len(names)}
    # mutmut's other verdicts (suspicious: its tests ran far slower than unmutated; segfault;
    # skipped) are checked but neither killed nor survived: recorded by their words.
    other = {w: n for w, n in words.items() if w not in ("killed", "survived", "no tests", "timeout", "not checked")}
    if other:
        counts["other"] = other
    unchecked = words["not checked"]
    if unchecked:  # mutmut left these out of its run (seen: 5 of train/'s 200); counted, never as killed
        counts["not_checked"] = unchecked
else:
    stats_file = work / "mutants" / "mutmut-cicd-stats.json"
    stats = json.loads(stats_file.read_text()) if stats_file.exists() else {}
    counts = {k: stats.get(k, 0) for k in ("killed", "survived", "no_tests", "timeout", "total")}
    unchecked = 0
if not counts["killed"] + counts["survived"] + counts["no_tests"]:
    # mutmut checked nothing: its clean run failed (its log's end says why).
    print(f"mutmut checked no mutant of {module} ({unchecked} of the sample unchecked): nothing recorded. "
          f"Its clean run failed; its log ends:", file=sys.stderr)
    sys.exit(3)
record = {"date": time.strftime("%Y-%m-%d"), "code_version": version, "machine": machine(), "module": module,
          "tests": tests, **counts}
if sample:
    record.update(sample=int(sample), seed=int(os.environ.get("MUTATION_SEED", "0")),
                  of=int((work / "count.txt").read_text()))
with open("results/mutation/scores.jsonl", "a") as f:
    f.write(json.dumps(record) + "\n")
print(f"{module}: {record['killed']} of {record['total']} killed ({record['killed'] / record['total']:.0%}), "
      f"{record['survived']} survived, {record['no_tests']} untested"
      + (f", other: {record['other']}" if "other" in record else "")
      + (f", {record['not_checked']} not checked" if "not_checked" in record else "")
      + (f" (a sample of {record['total']} of its {record['of']} mutants, seed {record['seed']})" if sample else ""))
PY
