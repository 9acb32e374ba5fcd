"""Figures quoted in a Markdown file, recomputed from the sweep and benchmark records beside it.

A quoted figure is written between two HTML comments, which Markdown does not show:

    <!--q retrieval_budget mixit train.steps=3200 test.accuracy %1 ci-->33.9% ± 5.0 [21.5, 46.2]<!--/q-->

The opening comment names what the figure is: a sweep folder (relative to the Markdown
file), a variant, any grid values that pick one point of its grid (and `seed=N` to pick one
seed's run, for a figure that names one seed), a metric (a dotted path
into each run's `summary.json`, e.g. `test.accuracy` or `test.slices.n_pairs.3.accuracy`;
or `induction.max`, the strongest head's induction score at the run's last evaluation, from
its `metrics.jsonl`; or `NAME.json:PATH`, a dotted path into an analysis record beside the
run's summary, e.g. `circuits.json:summary.value_mass_max`), and how to write it:

- `%N`: a percentage with N decimals (`33.9% ± 5.0`: the mean and the standard deviation
  over seeds, in points); `.N`: a plain number with N decimals (`5.568 ± 0.097`); `,N`: the
  same with thousands separated (`196,928`, for counts);
- then, optionally, `ci` (the 95% t interval after it, clipped to the metric's range),
  `mean` (the mean alone), `seeds` (each seed's value, in seed order), `min` or `max` (the
  smallest or largest seed's value), `range` (both: `0.83-0.98`, `26.9-28.4%`) or `n` (the
  number of runs);
- or `above=T`: the success rate where outcomes are bimodal, the seeds whose value exceeds
  the threshold T (in the metric's own scale: `above=0.9` for 90%), with the 95% Wilson
  interval of the rate and, in N decimals of the format, the mean of each mode:
  `4 of 8 seeds above 90% (50% [22, 78]); means 99.9% and 27.3%`.

A difference between two settings, paired by seed, appends `minus`, a variant and any
grid values of the second (the first's grid values are kept unless named again); the flags
then describe the per-seed differences, and both settings must hold the same seeds:

    <!--q lm_reference mixit test.loss .2 mean minus standard-->0.09<!--/q-->

(`metric=PATH` among the second setting's words names its own metric: a difference between
two figures of the same runs, such as one measured twice, `... forced_gate.0.train_exact %1 ci
minus teacher metric=train_exact`; `folder=NAME` its own sweep folder, for a variant that
another sweep of the same task and seeds ran, whose grid values it then names itself (the
first setting's are not carried over, but for `seed`): `... minus frozen_qk
folder=memorization_reference train.lr=0.01`),
and a ratio, paired the same way, appends `of` (a percentage format writes it as one):

    <!--q ladder_sweep shared points=[[1,0.875]] parameters %0 of original-->90%<!--/q-->

A verdict is a quote too: the word a page writes for a claim (agrees, does not, no order at
this budget, unconverged, or a success rate), computed by a stated rule from the same
records, with the rule's parameters declared in the sweep file (`sweep.verdict`); the rules
are in modformer/sweep/verdict.py:

    <!--q retrieval_budget frozen_qk train.steps=3200 test.accuracy verdict=solves vs standard-->does not<!--/q-->

A sweep of another kind of run is read the same way: an LLM-Modules sweep's arms are its
variants:

    <!--q facts teacher held_out_exact %1 ci minus random_teacher-->1.5% ± 1.3 [-1.7, 4.8]<!--/q-->

A benchmark's figure names its JSON record (a path ending in `.json`), the values of text
fields that pick one row, a numeric field and a format, and optionally `over` and the
field values that pick a second row to divide by:

    <!--q ../bench/llama_throughput.json contender="modformer mixit" precision=fp32 tokens_per_s ,0-->9,346<!--/q-->
    <!--q ../bench/llama_throughput.json "contender=modformer mixit" precision=fp32 tokens_per_s .2 over "contender=modformer standard"-->1.30<!--/q-->

(the second row keeps every field value of the first that `over` does not name; `minus`
in its place subtracts that row's number). Its
verdict drops the format and ends with the rule and the threshold the claim names (one
measurement: agrees or does not, `measured_verdict` in modformer/sweep/verdict.py):

    <!--q ../bench/llama_throughput.json "contender=modformer mixit" tokens_per_s over "contender=modformer standard" verdict=above threshold=1-->agrees<!--/q-->

A record that names no clean commit or no machine is refused (`modformer.sweep.bench_records`).
An experiment's JSON-lines records (a path ending in `.jsonl`, each line one measurement
naming its clean commit) are quoted the same way, each line a row, the field a dotted path:

    <!--q scores.jsonl module=modformer/stats.py killed ,0-->104<!--/q-->

`modformer quote FILE` rewrites every quoted figure from the records; `--check` changes
nothing and fails naming each figure that the records no longer give, so that a figure in
a results README can be neither typed nor stale. The points a figure pools must be seeds of
one setting: a filter that leaves two grid points is refused (their mean would be no
setting's), as is a point that no finished run has.
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
from pathlib import Path
from typing import Any

import yaml

from ..commands import describe_parser
from ..configtools import from_dict
from .bench_records import bench_value, read_bench, read_record_lines
from ..errors import ModformerError
from ..files import atomic_write_text
from ..stats import metric_bounds, rate_interval, summarize
from ..train.records import read_records
from .kinds import saved_sweep
from .runner import read_results
from .verdict import COMPARING, RULES, VerdictConfig, measured_verdict, verdict

QUOTE = re.compile(r"<!--q (?P<spec>[^>]*?)-->(?P<value>.*?)<!--/q-->", re.S)
FLAGS = {"ci", "mean", "seeds", "min", "max", "range", "n"}


def _metric(run: dict[str, Any], path: str, folder: Path) -> float:
    """One run's value of a metric: a dotted path into its summary, `induction.max`, or
    `NAME.json:PATH`, a dotted path (list items by index) into an analysis record the run's
    folder holds beside its summary (e.g. `circuits.json:summary.value_mass_max`)."""
    run_id, value = run["run_id"], run["summary"]
    if ".json:" in path:
        name, path = path.split(":", 1)
        record = folder / run["run_dir"] / name
        try:
            value = json.loads(record.read_text())
        except (OSError, ValueError) as e:
            raise ModformerError(f"run {run_id} has no readable {name} ({e.__class__.__name__})") from None
        for key in path.split("."):
            if isinstance(value, list) and key.isdigit() and int(key) < len(value):
                value = value[int(key)]
            elif isinstance(value, dict) and key in value:
                value = value[key]
            else:
                raise ModformerError(f"run {run_id} records no '{path}' in its {name}")
        if not isinstance(value, (int, float)):
            raise ModformerError(f"'{path}' of run {run_id}'s {name} is not a number")
        return float(value)
    if path == "induction.max":
        scores = [r["scores"] for r in read_records(folder / run["run_dir"] / "metrics.jsonl")
                  if r["kind"] == "induction"]
        if not scores:
            raise ModformerError(f"run {run_id} logged no induction scores (train.induction_scores)")
        return max(max(row) for row in scores[-1])
    for key in path.split("."):
        if not isinstance(value, dict) or key not in value:
            raise ModformerError(f"run {run_id} records no '{path}' in its summary")
        value = value[key]
    if not isinstance(value, (int, float)):
        raise ModformerError(f"'{path}' of run {run_id} is not a number")
    return float(value)


def _read_runs(folder: Path) -> list[dict[str, Any]]:
    """The finished runs of a sweep folder (every kind of run's: an LLM-Modules sweep's arms
    are its variants)."""
    return [r for r in read_results(folder).values() if r["status"] == "done"]


def _at(run: dict[str, Any], variant: str, where: dict[str, Any]) -> bool:
    """Whether a finished run is `variant`'s with the `where` grid values (`seed`: its seed)."""
    return run["variant"] == variant and all((run["seed"] if k == "seed" else run["point"].get(k)) == v
                                             for k, v in where.items())


class Records:
    """The finished runs of the sweep folders that a file quotes, each folder read once."""

    def __init__(self, root: Path):
        self.root = root
        self._runs: dict[str, list[dict[str, Any]]] = {}
        self._bench: dict[str, list[dict[str, Any]]] = {}
        self._verdicts: dict[str, VerdictConfig] = {}

    def verdict(self, folder: str) -> VerdictConfig:
        """The parameters of a sweep folder's verdicts (`sweep.verdict` of its sweep.yaml), read once."""
        if folder not in self._verdicts:
            sweep = saved_sweep(self.root / folder).get("sweep") or {}
            self._verdicts[folder] = from_dict(VerdictConfig, sweep.get("verdict"), "sweep.verdict")
        return self._verdicts[folder]

    def bench(self, file: str) -> list[dict[str, Any]]:
        """The rows of a benchmark record (or the lines of a JSON-lines one), read once."""
        if file not in self._bench:
            path = self.root / file
            self._bench[file] = read_record_lines(path) if file.endswith(".jsonl") else read_bench(path)
        return self._bench[file]

    def runs(self, folder: str, variant: str, where: dict[str, Any]) -> list[dict[str, Any]]:
        """The seeds of one setting: the finished runs of `variant` in `folder` whose grid
        point has the `where` values (`seed` is the run's seed, not a grid key), refused
        where they hold two points or none."""
        runs = [r for r in self._finished(folder) if _at(r, variant, where)]
        points = sorted({repr(sorted(r["point"].items())) for r in runs})
        if not runs:
            raise ModformerError(f"{folder} has no finished run of {variant} at {where or 'any point'}")
        if len(points) > 1:
            raise ModformerError(f"{folder}: {variant} at {where or 'any point'} holds {len(points)} grid points "
                                 f"({'; '.join(points)}); name the point's values")
        return sorted(runs, key=lambda r: r["seed"])

    def _finished(self, folder: str) -> list[dict[str, Any]]:
        """The finished runs of a sweep folder, read once."""
        if folder not in self._runs:
            path = self.root / folder
            if not (path / "results.jsonl").is_file():
                raise ModformerError(f"{path} holds no sweep records (results.jsonl)")
            self._runs[folder] = _read_runs(path)
        return self._runs[folder]

    def values_of(self, folder: str, variant: str, where: dict[str, Any], axis: str) -> list[Any]:
        """The values of grid axis `axis` at which `variant` has finished runs with the `where`
        values, increasing (a budget curve's budgets)."""
        found = {r["point"][axis] for r in self._finished(folder) if _at(r, variant, where) and axis in r["point"]}
        if not found:
            raise ModformerError(f"{folder} has no finished run of {variant} along {axis} at {where or 'any point'}")
        return sorted(found)


def _number(v: float, kind: str, digits: int) -> str:
    """One number in a format: `%` (times 100, no sign), `.` plain, `,` thousands separated."""
    return f"{v * (100.0 if kind == '%' else 1.0):{',' if kind == ',' else ''}.{digits}f}"


def _figure(values: list[float], kind: str, digits: int, flag: str | None, bounds: tuple[float, float] | None) -> str:
    unit = "%" if kind == "%" else ""

    def write(v: float) -> str:
        return _number(v, kind, digits)

    s = summarize(values)
    number = write(s.mean) + unit
    if flag == "mean":
        return number
    if flag == "seeds":
        return ", ".join(write(v) + unit for v in values)
    if flag in ("min", "max"):
        return write(min(values) if flag == "min" else max(values)) + unit
    if flag == "range":
        return f"{write(min(values))}-{write(max(values))}{unit}"
    if s.n < 2:
        return f"{number} (one run)"
    text = f"{number} ± {write(s.std)}"
    if flag == "ci":
        low, high = s.interval(bounds)
        text += f" [{write(low)}, {write(high)}]"
    return text


def _threshold(spec: str, flag: str) -> float:
    return _parse_number(spec, flag.split("=", 1)[1], "above= takes a number (the metric's threshold)")


def _rate(values: list[float], kind: str, digits: int, threshold: float) -> str:
    """'4 of 8 seeds above 90% (50% [22, 78]); means 99.9% and 27.3%': the seeds past the
    threshold, the rate's 95% Wilson interval, and each mode's mean (one where all agree)."""
    unit = "%" if kind == "%" else ""
    above = [v for v in values if v > threshold]
    below = [v for v in values if v <= threshold]
    low, high = rate_interval(len(above), len(values))
    limit = _number(threshold, kind, 0) if kind == "%" else f"{threshold:g}"  # 0.5, not 0
    text = (f"{len(above)} of {len(values)} seeds above {limit}{unit} "
            f"({100 * len(above) / len(values):.0f}% [{100 * low:.0f}, {100 * high:.0f}])")
    modes = [_number(sum(m) / len(m), kind, digits) + unit for m in (above, below) if m]
    return text + ("; means " + " and ".join(modes) if len(modes) == 2 else f"; mean {modes[0]}")


def _fields(words: list[str]) -> dict[str, str]:
    """Leading KEY=VALUE words, taken off `words`."""
    where = {}
    while words and "=" in words[0]:
        key, value = words.pop(0).split("=", 1)
        where[key] = value
    return where


def _render_bench(spec: str, words: list[str], records: Records) -> str:
    """A benchmark record's figure: FILE.json KEY=VALUE ... FIELD FORMAT [over|minus KEY=VALUE ...], or
    its verdict: the same without FORMAT, ending verdict=above|below threshold=T."""
    file, rest = words[0], words[1:]
    judged = None
    if len(rest) >= 2 and rest[-2].startswith("verdict=") and rest[-1].startswith("threshold="):
        judged = rest[-2].split("=", 1)[1], _number_word(spec, rest[-1].split("=", 1)[1])
        rest = rest[:-2]
    where = _fields(rest)
    other = keyword = None
    for keyword in ("over", "minus"):
        if keyword in rest:
            at = rest.index(keyword)
            other_words = rest[at + 1:]
            other = _fields(other_words)
            if other_words or not other:
                raise ModformerError(f"quote '{spec}': '{keyword}' takes only KEY=VALUE words")
            rest = rest[:at]
            break
    if len(rest) != (1 if judged else 2) or not judged and not re.fullmatch(r"[%.,]\d", rest[1]):
        raise ModformerError(f"quote '{spec}': expected FILE.json (or .jsonl) KEY=VALUE ... FIELD then %N, .N or ,N, "
                             f"then optionally over (or minus) KEY=VALUE ...; or, for a verdict, FIELD [over ...] then "
                             f"verdict=above|below threshold=T")
    field, fmt = rest[0], rest[-1]
    rows = records.bench(file)
    value = bench_value(rows, where, field, file)
    if other is not None:
        base = bench_value(rows, {**where, **other}, field, file)
        if keyword == "over" and base == 0:
            raise ModformerError(f"quote '{spec}': the row it divides by has {field} 0")
        value = value / base if keyword == "over" else value - base
    if judged is not None:
        return measured_verdict(judged[0], value, judged[1])
    return _number(value, fmt[0], int(fmt[1])) + ("%" if fmt[0] == "%" else "")


def render(spec: str, records: Records) -> str:
    """The text of one quoted figure (the grammar in the module docstring)."""
    try:
        words = shlex.split(spec)
    except ValueError as e:
        raise ModformerError(f"quote '{spec}': {e}") from None
    if words and words[0].endswith((".json", ".jsonl")):
        return _render_bench(spec, words, records)
    if len(words) < 4:
        raise ModformerError(f"quote '{spec}': expected FOLDER VARIANT [KEY=VALUE ...] METRIC FORMAT [FLAG]")
    folder, variant, *rest = words
    rest, vs = _other(spec, rest, "vs")
    rest, minus = _other(spec, rest, "minus")
    rest, of = _other(spec, rest, "of")
    where = _grid_values(rest)
    if of is not None and (minus is not None or any(w.startswith(("verdict=", "above=")) for w in rest)):
        raise ModformerError(f"quote '{spec}': 'of' (a ratio) takes no 'minus', verdict or above= besides")
    if any(w.startswith("verdict=") for w in rest):
        return _render_verdict(spec, folder, variant, where, rest, minus, vs, records)
    if vs is not None:
        raise ModformerError(f"quote '{spec}': 'vs' names the reference of a verdict (verdict=solves)")
    if len(rest) not in (2, 3) or not re.fullmatch(r"[%.,]\d", rest[1]):
        raise ModformerError(f"quote '{spec}': expected METRIC then %N, .N or ,N then at most one flag "
                             f"({', '.join(sorted(FLAGS))})")
    metric, fmt, flag = rest[0], rest[1], rest[2] if len(rest) == 3 else None
    if flag is not None and flag.startswith("above=") and minus is None:
        runs = records.runs(folder, variant, where)
        return _rate([_metric(r, metric, records.root / folder) for r in runs], fmt[0], int(fmt[1]),
                     _threshold(spec, flag))
    if flag is not None and flag not in FLAGS:
        raise ModformerError(f"quote '{spec}': unknown flag '{flag}' (known: {', '.join(sorted(FLAGS))})")
    values = _values(spec, records, folder, variant, where, metric, minus if of is None else of, ratio=of is not None)
    bounds = metric_bounds(metric) if minus is None and of is None else None  # a difference may take either sign
    if flag == "n":
        return str(len(values))
    return _figure(values, fmt[0], int(fmt[1]), flag, bounds)


def _other(spec: str, words: list[str], keyword: str) -> tuple[list[str], list[str] | None]:
    """`words` split at `keyword` (minus, of, vs): the words before it, and the setting after
    it (a variant, then only KEY=VALUE words) up to the next keyword; None where it is absent."""
    if keyword not in words:
        return words, None
    at = words.index(keyword)
    end = next((i for i in range(at + 1, len(words)) if words[i] in ("minus", "of", "vs")), len(words))
    other = words[at + 1:end]
    if not other or "=" in other[0] or any("=" not in w for w in other[1:]):
        raise ModformerError(f"quote '{spec}': '{keyword}' takes a variant, then only KEY=VALUE words")
    return words[:at] + words[end:], other


def _values(spec: str, records: Records, folder: str, variant: str, where: dict[str, Any], metric: str,
            other: list[str] | None, ratio: bool = False) -> list[float]:
    """One setting's metric per seed, in seed order; with `other` (the words after `minus` or
    `of`), the differences from that setting (its grid values over the first's), paired by seed
    (`ratio`: the quotients)."""
    runs = records.runs(folder, variant, where)
    folder_path = records.root / folder
    values = [_metric(r, metric, folder_path) for r in runs]
    if other is None:
        return values
    named = _grid_values(other[1:])
    carried = where if "folder" not in named else {k: v for k, v in where.items() if k == "seed"}
    other_where = {**carried, **named}  # another folder has a grid of its own
    other_metric, other_folder = other_where.pop("metric", metric), other_where.pop("folder", folder)
    if not isinstance(other_metric, str) or not isinstance(other_folder, str):
        raise ModformerError(f"quote '{spec}': metric= names a metric (a dotted path into the summary), folder= a "
                             f"sweep folder")
    others = {r["seed"]: _metric(r, other_metric, records.root / other_folder)
              for r in records.runs(other_folder, other[0], other_where)}
    seeds = [r["seed"] for r in runs]
    if sorted(others) != seeds:
        raise ModformerError(f"quote '{spec}': a {'ratio' if ratio else 'difference'} is paired by seed, but "
                             f"{variant} has seeds {seeds} and {other[0]} {sorted(others)}")
    if ratio and 0 in others.values():
        raise ModformerError(f"quote '{spec}': {other[0]}'s {other_metric} is 0; a ratio cannot divide by it")
    return [v / others[seed] if ratio else v - others[seed] for v, seed in zip(values, seeds)]


def _render_verdict(spec: str, folder: str, variant: str, where: dict[str, Any], rest: list[str],
                    minus: list[str] | None, vs: list[str] | None, records: Records) -> str:
    """A verdict word: FOLDER VARIANT [KEY=VALUE ...] METRIC verdict=RULE [over AXIS]
    [minus|vs VARIANT ...]."""
    axis = None
    if "over" in rest:
        at = rest.index("over")
        if at + 2 != len(rest):
            raise ModformerError(f"quote '{spec}': 'over' takes one grid axis, the budget curve's (e.g. train.steps)")
        rest, axis = rest[:at], rest[at + 1]
    rule, _, argument = rest[-1].split("=", 1)[1].partition("=")
    if len(rest) != 2 or rule not in RULES or bool(argument) != (rule == "near"):
        raise ModformerError(f"quote '{spec}': expected METRIC then verdict=RULE, a rule of {', '.join(RULES)} "
                             f"(near=VALUE names the value the claim gives)")
    target = _number_word(spec, argument) if argument else None
    if (rule in COMPARING) != (minus is not None):
        raise ModformerError(f"quote '{spec}': verdict={rule} " + ("compares two settings: name the second with "
                             "'minus'" if rule in COMPARING else "judges one setting; a difference takes below, "
                             "above or equal"))
    if vs is not None and rule != "solves":
        raise ModformerError(f"quote '{spec}': 'vs' names the reference of verdict=solves only")
    curve = None
    if axis is not None:
        if rule != "solves" or axis in where:
            raise ModformerError(f"quote '{spec}': 'over AXIS' reads verdict=solves along a grid axis it does not fix")
        budgets = records.values_of(folder, variant, where, axis)
        curve = [(b, _values(spec, records, folder, variant, {**where, axis: b}, rest[0], None)) for b in budgets]
        where = {**where, axis: budgets[-1]}  # the verdict is read at the largest budget
    values = _values(spec, records, folder, variant, where, rest[0], minus)
    if rule in COMPARING and len(values) < 2:
        raise ModformerError(f"quote '{spec}': a difference's verdict needs at least 2 seeds, got {len(values)}")
    reference = None if vs is None else _values(spec, records, folder, vs[0], {**where, **_grid_values(vs[1:])},
                                                rest[0], None)
    return verdict(rule, values, records.verdict(folder), folder, reference, curve, target)


def _number_word(spec: str, word: str) -> float:
    return _parse_number(spec, word, f"expected a number, got '{word}'")


def _parse_number(spec: str, word: str, refusal: str) -> float:
    """`word` as a number; otherwise refused in one line, `refusal` saying what was expected."""
    try:
        return float(word)
    except ValueError:
        raise ModformerError(f"quote '{spec}': {refusal}") from None


def _grid_values(words: list[str]) -> dict[str, Any]:
    """Leading KEY=VALUE words, taken off `words`, their values read as YAML (grid values are numbers)."""
    return {key: yaml.safe_load(value) for key, value in _fields(words).items()}


def quote_file(path: str | Path, check: bool = False) -> list[str]:
    """Rewrite the quoted figures of a Markdown file from its records (or, with `check`, only
    compare); returns one line per figure that changed: 'line N: OLD -> NEW (SPEC)'."""
    path = Path(path)
    if not path.is_file():
        raise ModformerError(f"{path} does not exist")
    text = path.read_text()
    records = Records(path.parent)
    changes: list[str] = []

    def replace(match: re.Match) -> str:
        spec, old = match["spec"].strip(), match["value"]
        new = render(spec, records)
        if new != old:
            line = text.count("\n", 0, match.start()) + 1
            changes.append(f"line {line}: {old!r} -> {new!r} ({spec})")
        return f"<!--q {spec}-->{new}<!--/q-->"

    new_text = QUOTE.sub(replace, text)
    if not QUOTE.search(text):
        raise ModformerError(f"{path} quotes no figure (no <!--q ...--> ... <!--/q--> in it)")
    if changes and not check:
        atomic_write_text(path, new_text)
    return changes


def cmd_quote(args: argparse.Namespace) -> int:
    changes = quote_file(args.file, check=args.check)
    for line in changes:
        print(line)
    if args.check and changes:
        raise ModformerError(f"{len(changes)} figure(s) of {args.file} differ from their records; "
                             f"run `modformer quote {args.file}`")
    # --check with changes has raised above, so any changes here were rewritten
    print(f"{args.file}: {len(changes)} figure(s) rewritten" if changes
          else f"{args.file}: every quoted figure matches its records")
    return 0


def quote_arguments(qt: argparse.ArgumentParser) -> None:
    """The arguments and handler of `modformer quote`."""
    describe_parser(qt, __doc__.split("\n\n")[0] + " Every <!--q SPEC-->VALUE<!--/q--> is rewritten "
                        "from the records SPEC names (see modformer.sweep.quote).")
    qt.add_argument("file", help="a Markdown file, e.g. results/random_attention/README.md")
    qt.add_argument("--check", action="store_true",
                    help="change nothing; exit 2 naming each figure its records no longer give")
    qt.set_defaults(func=cmd_quote)
