"""Editing facts as a sweep (`sweep.experiment: knowledge_edits`): its methods are the
variants, `sizes` a grid axis and its seeds the seeds; each (method, size, seed) is one
`modformer knowledge-pretrained edit CONFIG --out RUN` process, with workers,
`--launcher slurm`, `--status`, resume and `modformer report` as for every sweep.

    model: smollm2-135m-instruct
    pool: 20                     # every run draws its facts from the same 20
    sweep:
      experiment: knowledge_edits
      variants: [entries, one_down_proj, all_ffns]
      grid: {sizes: [[1], [5], [20]]}
      seeds: [0, 1, 2]

Each run records the model before any edit (`before`: the same in every run, the report
keeps one), then its edit. An edit of the whole pool has no randomness: the run at seed 0
makes it (labelled seed 0, as the one-process experiment labels it), and a run of the whole
pool at another seed loads nothing and records nothing, its summary saying why. The sweep
therefore needs seed 0 when a size is the pool's, and `pool` set when sizes differ (else
each run would draw from as many facts as its own size); its grid takes `sizes` only, since
the report pools each method and size over the seeds.

A run's summary (what marks it done) holds its edit record's fields at the top
(`measures.efficacy`, `steps`, `specificity_by_kind.capital`, ...), `perplexity_change`
against `before`, `before` itself without the per-fact entries of its `fact_entries` (those
stay in the run's edits.jsonl, which the report reads), and for edits through E the mean
overlap per fact and the control overlap with the facts not edited.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable, Sequence

from ...configtools import from_dict
from ...errors import ModformerError
from ...files import atomic_write_text
from ...sweep.kinds import RunKind
from ...sweep.runner import read_results
from ...version import code_version, machine
from .edits import EditRunConfig
from .records import read_records
from .report import overlap_with_others, write_records_report

NAME = "knowledge_edits"


def edit_summary(records: list[dict[str, Any]], cfg: EditRunConfig) -> dict[str, Any]:
    """The summary of one edit run from its records (`before`, then at most one edit)."""
    before = next((r for r in records if r["key"] == "before"), None)
    edits = [r for r in records if r["key"] != "before"]
    summary: dict[str, Any] = dict(edits[0]) if len(edits) == 1 else {}
    if before is not None:
        entries = {k: v for k, v in before.get("fact_entries", {}).items() if k != "top"}
        summary["before"] = {**{k: v for k, v in before.items() if k != "fact_entries"}, "fact_entries": entries}
    if len(edits) == 1 and before is not None:
        edit = edits[0]
        summary["perplexity_change"] = edit["measures"]["perplexity"] - before["measures"]["perplexity"]
        if "overlap_changed_vs_mass" in edit:
            per_fact = edit["overlap_changed_vs_mass"]
            summary["overlap_per_fact"] = sum(per_fact) / len(per_fact)
            summary["overlap_with_others"] = overlap_with_others(edit, before.get("fact_entries", {}).get("top", {}))
    summary.update(methods=cfg.methods, sizes=cfg.sizes, seeds=cfg.seeds, pool=cfg.pool_size)
    if not edits:
        summary["note"] = (f"nothing to edit at seed {', '.join(map(str, cfg.seeds))}: an edit of all "
                           f"{cfg.pool_size} facts of the pool has no randomness, and the run at seed 0 makes it")
    return summary


def write_edit_summary(out: Path, cfg: EditRunConfig, converted: str | None = None) -> dict[str, Any]:
    """summary.json of one edit run (what marks it done in a sweep), from its records; an
    empty edits.jsonl where it recorded nothing.

    Args:
        out: the run's folder.
        cfg: its config (one method, one size, one seed).
        converted: for records made before the protocol and laid out as a run (`migrations.edits_as_sweep`):
            where they came from. The summary then names the code version of its edit record
            and no machine (the one-process records name none).

    Returns:
        The summary.
    """
    if not (out / "edits.jsonl").exists():
        atomic_write_text(out / "edits.jsonl", "")
    summary = edit_summary(read_records(out / "edits.jsonl"), cfg)
    if converted is None:
        summary.update(code_version=code_version(), machine=machine())
    else:
        summary.update(code_version=summary.get("code_version", code_version()), machine=None, converted=converted)
    atomic_write_text(out / "summary.json", json.dumps(summary, indent=1) + "\n")
    return summary


def _command(config: Path, run_dir: Path) -> list[str]:
    return ["knowledge-pretrained", "edit", str(config), "--out", str(run_dir)]


def _describe(summary: dict[str, Any]) -> str:
    if "measures" not in summary:
        return summary.get("note", "")
    m, change = summary["measures"], summary.get("perplexity_change")
    return (f"{summary['steps']} steps, efficacy {m['efficacy']:.2f}, generalisation {m['generalisation']:.2f}, "
            f"specificity {m['specificity']:.3f}, perplexity {m['perplexity']:.3f}"
            + (f" ({change:+.3f})" if change is not None else ""))


def _started(run_dir: Path) -> str:
    keys = [r["key"] for r in read_records(run_dir / "edits.jsonl")]
    return f"recorded {', '.join(keys)}" if keys else ""


def _check(runs: Sequence[Any], folder: Callable[[Any], Path]) -> None:
    """Refuse, before any run starts, a sweep whose runs would not be one edit each of one pool."""
    for run in runs:
        other = [key for key, _ in run.point if key != "sizes"]
        if other:
            raise ModformerError(f"sweep.grid.{other[0]}: a {NAME} sweep's grid takes sizes only (its report pools "
                                 f"each method and size over the seeds); run one sweep per value of {other[0]}")
        if len(run.config.sizes) != 1:
            raise ModformerError(f"a {NAME} run edits one size: put the sizes in the grid (sweep.grid: {{sizes: "
                                 f"[[1], [5], [20]]}}), got sizes {run.config.sizes}")
    sizes = sorted({run.config.sizes[0] for run in runs})
    cfg = runs[0].config
    if cfg.pool is None and len(sizes) > 1:
        raise ModformerError(f"set pool, the facts every run draws from (e.g. pool={max(sizes)}, the largest size): "
                             f"without it each run draws from as many facts as its own size")
    whole = [s for s in sizes if s >= cfg.pool_size]
    if whole and 0 not in {run.config.seeds[0] for run in runs}:
        raise ModformerError(f"sweep.seeds must include 0: an edit of all {cfg.pool_size} facts of the pool has no "
                             f"randomness and is made once, by the run at seed 0")


def write_edits_sweep_report(sweep_dir: Path) -> Path:
    """report.md of an edit sweep: the folder form's report (`report.py`) of every finished
    run's records, the `before` record kept once."""
    done = [r for r in read_results(sweep_dir).values() if r["status"] == "done"]
    if not done:
        raise ModformerError(f"{sweep_dir} has no finished run yet")
    records: dict[str, dict[str, Any]] = {}
    for run in done:
        for record in read_records(sweep_dir / run["run_dir"] / "edits.jsonl"):
            records.setdefault(record["key"], record)
    return write_records_report(sweep_dir, [], list(records.values()), [],
                                "each record's `command` and `seconds` in its run's edits.jsonl (runs/), the "
                                "sweep's commands in commands.txt")


KIND = RunKind(NAME, "methods", "seeds", lambda data: from_dict(EditRunConfig, data), _command, _describe,
               write_edits_sweep_report, check=_check, started=_started, variant_list=True, seed_list=True,
               threads_key="threads", files=("summary.json", "edits.jsonl", "config.yaml"))

