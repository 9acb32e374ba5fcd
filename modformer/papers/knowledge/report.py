"""report.md and plots of a pretrained knowledge-base experiment folder, read from its records
only (ladder.jsonl, edits.jsonl, repair.jsonl): rerunning it never recomputes anything."""

from __future__ import annotations

import math
from collections import defaultdict
from pathlib import Path
from typing import Any

from ...figures import plt, save_figure
from ...files import atomic_write_text
from ...stats import summarize
from .records import read_records

_ARM_NAMES = {"original": "original model", "shared": "one shared base E", "own": "each layer its own base",
              "shared_pruned": "one shared base E over the most important n_E < d_ff units",
              "lowrank": "per-layer low-rank FFNs (control)", "entries": "repair: E only",
              "entries_and_maps": "repair: E + per-layer maps"}


def _versions(records: list[dict[str, Any]]) -> str:
    return ", ".join(sorted({r["code_version"] for r in records}))


def _ladder(records: list[dict[str, Any]], repair: list[dict[str, Any]], out: Path) -> list[str]:
    orig = next((r for r in records if r["arm"] == "original"), None)
    lines = ["## Compression ladder", "",
             f"{records[0]['model']}: {records[0]['n_layers']} layers, width {records[0]['d_model']}, SwiGLU width "
             f"{records[0]['d_ff']}; held-out perplexity on {records[0]['tokens']:,} tokens of {records[0]['corpus']} "
             f"(blocks of {records[0]['block_len']}); known facts answered (greedy decoding starts with the answer). "
             f"Code: {_versions(records + repair)}.", "",
             "| arm | n_E | d_E / rank | FFN parameters | of the original | mean output error per layer | "
             "perplexity | known facts | time (s) |", "|---|---|---|---|---|---|---|---|---|"]
    for r in records + repair:
        errs = r.get("layer_errors")
        err = f"{sum(e['output'] for e in errs) / len(errs):.3f}" if errs else "-"
        width = r.get("rank", r.get("d_entry"))
        name = _ARM_NAMES.get(r["arm"], r["arm"])
        if "steps" in r:
            name += f" ({r['steps']} steps, {r['tokens_trained']:,} tokens)"
        share = f"{r['parameters'] / orig['parameters']:.1%}" if orig else "-"
        lines.append(f"| {name} | {r.get('n_entries', '-') if r['arm'] != 'lowrank' else '-'} | {width} | "
                     f"{r['parameters']:,} | {share} | {err} | {r['perplexity']:.3f} | "
                     f"{r['facts_answered']}/{r['facts_total']} | {r['seconds']:.0f} |")
    fig, ax = plt.subplots(figsize=(7, 4.5))
    groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in records + repair:  # a shared base over pruned units is another kind of point: its own line
        pruned = r["arm"] == "shared" and r["n_entries"] < r["d_ff"]
        groups["shared_pruned" if pruned else r["arm"]].append(r)
    for arm, rs in groups.items():
        rs = sorted(rs, key=lambda r: r["parameters"])
        ax.plot([r["parameters"] / 1e6 for r in rs], [r["perplexity"] for r in rs], "o-" if len(rs) > 1 else "o",
                label=_ARM_NAMES.get(arm, arm))
    ax.set(xlabel="FFN parameters (millions)", ylabel="held-out perplexity (log scale)", yscale="log",
           title="Perplexity against FFN parameters")
    ax.legend(fontsize=8)
    fig.tight_layout()
    save_figure(fig, out / "perplexity_vs_parameters.png")
    return lines + ["", "![perplexity against parameters](perplexity_vs_parameters.png)", ""]


def _repair(records: list[dict[str, Any]]) -> list[str]:
    """The repair runs alone (a repair sweep's report): each arm's training and its measures."""
    lines = ["## Repair after compression", "",
             f"E (or E and every layer's maps) trained on text the evaluation never sees, then measured as the "
             f"ladder measures (held-out perplexity, known facts). Code: {_versions(records)}.", "",
             "| arm | n_E | d_E | steps | tokens trained | parameters trained | loss, first -> last | perplexity | "
             "known facts | time (s) |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in records:
        lines.append(f"| {_ARM_NAMES.get(r['arm'], r['arm'])} | {r['n_entries']} | {r['d_entry']} | {r['steps']} | "
                     f"{r['tokens_trained']:,} | {r['trained_parameters']:,} | {r['losses'][0]:.3f} -> "
                     f"{r['losses'][-1]:.3f} | {r['perplexity']:.3f} | {r['facts_answered']}/{r['facts_total']} | "
                     f"{r['seconds']:.0f} |")
    return lines + [""]


def _mean(values: list[float]) -> str:
    values = [v for v in values if not (isinstance(v, float) and math.isnan(v))]
    if not values:
        return "-"
    if len(values) == 1:
        return f"{values[0]:.3f}"
    return summarize(values).format(3)


def _edits(records: list[dict[str, Any]], out: Path) -> list[str]:
    before = next((r for r in records if r["key"] == "before"), None)
    runs = [r for r in records if r["key"] != "before"]
    lines = ["## Editing facts", "", f"Code: {_versions(records)}."]
    if before:
        m = before["measures"]
        lines += ["", f"Before any edit ({len(before['facts'])} capital facts the model answers, "
                      f"{before['known_facts']} known facts in all): new answers given {m['efficacy']:.2f}, "
                      f"true answers on the paraphrases {before['true_paraphrases_answered']:.2f}, other known facts "
                      f"{m['specificity']:.3f}, unrelated prompts {m['unrelated']:.2f}, perplexity "
                      f"{m['perplexity']:.3f}."]
    fe = before.get("fact_entries", {}) if before else {}
    if fe.get("top_share_mean") is not None:
        lines += ["", f"Which entries hold a fact: over the {len(fe['top'])} known facts, the top "
                      f"{fe['k']} of the {fe['n_entries']} entries (score mass at the answer position, summed over "
                      f"the layers) hold {fe['top_share_mean']:.1%} of the mass on average (uniform: "
                      f"{fe['uniform_share']:.1%}); two facts of one kind share {fe['overlap_within_kind']:.1%} of "
                      f"their top entries, facts of different kinds {fe['overlap_across_kinds']:.1%}."]
    whole = f"the {len(before['facts'])}-fact edit" if before else "an edit of every fact drawn from"
    lines += ["", f"Mean ± std over seeds ({whole} has no randomness: one run).", "",
              "| method | facts edited | runs | steps | all answered | efficacy | generalisation | specificity | "
              "unrelated unchanged | perplexity | change in perplexity | edit time (s) |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    groups: dict[tuple[str, int], list[dict[str, Any]]] = defaultdict(list)
    for r in runs:
        groups[(r["method"], r["size"])].append(r)
    ppl0 = before["measures"]["perplexity"] if before else None
    for (method, size), rs in sorted(groups.items(), key=lambda kv: (kv[0][0], kv[0][1])):
        ms = [r["measures"] for r in rs]
        delta = _mean([m["perplexity"] - ppl0 for m in ms]) if ppl0 else "-"
        lines.append(f"| {method} | {size} | {len(rs)} | {_mean([r['steps'] for r in rs])} | "
                     f"{sum(r['answered'] for r in rs)}/{len(rs)} | {_mean([m['efficacy'] for m in ms])} | "
                     f"{_mean([m['generalisation'] for m in ms])} | {_mean([m['specificity'] for m in ms])} | "
                     f"{_mean([m['unrelated'] for m in ms])} | {_mean([m['perplexity'] for m in ms])} | {delta} | "
                     f"{_mean([r['edit_seconds'] for r in rs])} |")
    kinds = sorted({k for r in runs for k in r.get("specificity_by_kind", {})})
    if kinds:
        lines += ["", "Specificity by kind of fact (share of the other known facts still answered):", "",
                  "| method | facts edited | " + " | ".join(kinds) + " |", "|---|---|" + "---|" * len(kinds)]
        for (method, size), rs in sorted(groups.items(), key=lambda kv: (kv[0][0], kv[0][1])):
            lines.append(f"| {method} | {size} | " + " | ".join(
                _mean([r["specificity_by_kind"][k] for r in rs if k in r.get("specificity_by_kind", {})])
                for k in kinds) + " |")
    entry_runs = [r for r in runs if "overlap_changed_vs_mass" in r]
    if entry_runs:
        k = len(entry_runs[0]["top_changed_entries"])
        lines += ["", "### Which entries hold a fact, and did the edit touch them", "",
                  f"For each edited fact, its top {k} entries by score mass at the last prompt position (summed "
                  f"over the 30 layers reading E) against the top {k} rows of E the edit changed most (by norm of "
                  f"the change). Chance overlap: {entry_runs[0]['chance_overlap']:.3f}.", "",
                  "The last column is the control: the same overlap with the top entries of the known facts NOT "
                  "edited (from the `before` record), averaged over them.", "",
                  "| facts edited | runs | overlap per fact (mean) | overlap with the edited facts' summed mass | "
                  "overlap with the facts not edited |", "|---|---|---|---|---|"]
        tops = fe.get("top", {})
        by_size: dict[int, list[dict[str, Any]]] = defaultdict(list)
        for r in entry_runs:
            by_size[r["size"]].append(r)
        for size, rs in sorted(by_size.items()):
            per_fact = [v for r in rs for v in r["overlap_changed_vs_mass"]]
            control = [overlap_with_others(r, tops) for r in rs]
            lines.append(f"| {size} | {len(rs)} | {_mean(per_fact)} | "
                         f"{_mean([r['overlap_changed_vs_mass_of_all'] for r in rs])} | "
                         f"{_mean(control) if tops else '-'} |")
    return lines + [""]


def overlap_with_others(record: dict[str, Any], tops: dict[str, list[int]]) -> float:
    """The control of an edit through E: the share of its k most-changed entries among the top
    k entries of each known fact it did not edit (`tops`: the `before` record's
    `fact_entries.top`), averaged over those facts."""
    k = len(record["top_changed_entries"])
    changed, edited = set(record["top_changed_entries"]), {f"The capital of {s} is" for s in record["facts"]}
    others = [set(t) for prompt, t in tops.items() if prompt not in edited]
    return sum(len(changed & t) / k for t in others) / max(len(others), 1)


def write_report(out: Path) -> Path:
    """report.md (and its plots) of an experiment folder, from its records."""
    return write_records_report(out, *(read_records(out / f) for f in ("ladder.jsonl", "edits.jsonl", "repair.jsonl")))


def write_records_report(out: Path, ladder: list[dict[str, Any]], edits: list[dict[str, Any]],
                         repair: list[dict[str, Any]],
                         where: str = "every record's `command` and `seconds` in the folder's *.jsonl") -> Path:
    """report.md and its plots in `out` from the given records (a folder's, or a ladder sweep's
    runs' gathered).

    Args:
        out: the folder the report and its plots go to.
        ladder: the compression ladder's records.
        edits: the edit runs' records.
        repair: the repair runs' records.
        where: where the records' commands and times are, in words.

    Returns:
        The report.
    """
    lines = ["# The knowledge base on a pretrained model", ""]
    if ladder:
        lines += _ladder(ladder, repair, out)
    elif repair:
        lines += _repair(repair)
    if edits:
        lines += _edits(edits, out)
    lines += [f"Commands and times: {where}.", ""]
    path = out / "report.md"
    atomic_write_text(path, "\n".join(lines))
    return path
