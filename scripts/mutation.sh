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
# reason, in results/mutation/README.md.
set -euo pipefail
cd "$(dirname "$0")/.."
module=$1; shift
[ $# -ge 1 ] || { echo "usage: bash scripts/mutation.sh MODULE.py TEST_FILE..." >&2; exit 2; }
[ -f "$module" ] || { echo "no such module: $module" >&2; exit 2; }
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
paths_to_mutate = ["$module"]
tests_dir = [${tests%, }]
pytest_add_cli_args = ["-n", "0", "-p", "no:cacheprovider"]
TOML
(cd "$work" && .venv/bin/mutmut run >"$work/mutmut.log" 2>&1 || true
 .venv/bin/mutmut export-cicd-stats >/dev/null 2>&1
 .venv/bin/mutmut results 2>/dev/null | grep -v "no tests\|not checked" || true
 # each survivor's change, to be killed by a test or listed as equivalent with a reason
 for name in $(.venv/bin/mutmut results 2>/dev/null | grep ": survived" | sed 's/: survived//'); do
   .venv/bin/mutmut show "$name" 2>/dev/null | sed 's/^/      /' || true
 done)
.venv/bin/python - "$work/mutants/mutmut-cicd-stats.json" "$version" "$module" "$@" <<'PY' || { tail -5 "$work/mutmut.log" >&2; exit 2; }
import json, sys, time
from pathlib import Path
from modformer.version import machine
stats = json.loads(Path(sys.argv[1]).read_text()) if Path(sys.argv[1]).exists() else {}
if not stats.get("killed", 0) + stats.get("survived", 0) + stats.get("no_tests", 0):
    # mutmut checked nothing: its clean run failed, or the tests run the code in another process
    # (a subprocess imports the installed package, not the mutated copy); nothing is recorded.
    print(f"mutmut checked no mutant of {sys.argv[3]}: nothing recorded. Its clean run failed, or the tests run "
          f"the module in another process; its log ends:", file=sys.stderr)
    sys.exit(3)
sys.argv = [sys.argv[0], *sys.argv[2:]]
record = {"date": time.strftime("%Y-%m-%d"), "code_version": sys.argv[1], "machine": machine(),
          "module": sys.argv[2], "tests": sys.argv[3:],  # argv: version, module, tests
          **{k: stats[k] for k in ("killed", "survived", "no_tests", "timeout", "total")}}
with open("results/mutation/scores.jsonl", "a") as f:
    f.write(json.dumps(record) + "\n")
print(f"{record['module']}: {record['killed']} of {record['total']} killed "
      f"({record['killed'] / record['total']:.0%}), {record['survived']} survived, {record['no_tests']} untested")
PY
