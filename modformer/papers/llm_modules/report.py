"""The report of an LLM-Modules experiment: every arm over its seeds, the decisive control,
and the size of the leak, from a sweep's records (`sweep.experiment: llm_modules`: one
section per grid point; `modformer report DIR` rewrites it)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from ...configtools import from_dict
from ...figures import plt, save_figure
from ...stats import summarize
from ...train.records import read_records
from .arms import ARMS
from .config import LLMModulesConfig

UNIT = (0.0, 1.0)
POSITIVE = (0.0, float("inf"))


def _cell(runs: list[dict[str, Any]], key: str, bounds, digits: int = 3) -> str:
    return summarize([r[key] for r in runs]).format(digits, bounds)


def _paired(a: list[dict[str, Any]], b: list[dict[str, Any]], key: str) -> str:
    """Mean difference a - b over the seeds both have, with its 95% interval."""
    b_by_seed = {r["seed"]: r[key] for r in b}
    diffs = [r[key] - b_by_seed[r["seed"]] for r in a if r["seed"] in b_by_seed]
    return summarize(diffs).format(3) if diffs else "no common seed"


def _corpus(data: dict[str, Any]) -> str:
    if data["corpus"] is None:
        return "no corpus"
    return (f"corpus: {data['corpus']} ({data['corpus_rows']} texts, {data['task_fraction']:.0%} of each batch from "
            f"the task)")


def _epochs(train: dict[str, Any]) -> str:
    """The text " (N epochs)" when train.epochs set the steps."""
    return f" ({train['epochs']:g} epochs)" if train["epochs"] is not None else ""


def _student(cfg: dict[str, Any]) -> str:
    """The student in words."""
    s = cfg["student"]
    model = s["model"]
    tokenizer = s["tokenizer"] or ("teacher" if model == "modformer" else "own")
    if model == "modformer":
        what = f"student {s['n_layers']} layers, {s['embeddings']} embeddings"
    else:
        what = f"student {model} ({'pretrained, fine-tuned' if s['pretrained'] else 'fresh weights'})"
    reads = {"teacher": "the teacher's tokenizer", "own": "its own tokenizer"}.get(
        tokenizer, f"its own {tokenizer[4:]}-token BPE" if tokenizer.startswith("bpe:") else f"the tokenizer {tokenizer}")
    return f"{what}, reading with {reads}"


def _distinct(runs: list[dict[str, Any]], key: str) -> str:
    """The values of `key` over the runs, each once."""
    values = sorted({str(r[key]) for r in runs})
    return ", ".join(values)


def report_lines(cfg: dict[str, Any], split: dict[str, Any], by_arm: dict[str, list[dict[str, Any]]],
                 metrics_of: Callable[[str], list[Path]], figure: Path, level: int = 1) -> list[str]:
    """The report of one setting: its arms' results (by_arm: arm -> its seeds' summaries),
    their metrics files (`metrics_of(arm)`) drawn into `figure`, headings from `level`.

    Args:
        cfg: the experiment's config as saved (its `arms` give the order).
        split: the task's training and held-out items (split.json).
        by_arm: arm -> the summaries of its finished seeds.
        metrics_of: arm -> its runs' metrics.jsonl files.
        figure: where the training curves go (linked by its name, beside the report).
        level: the level of the report's title (1; a sweep's settings 2).

    Returns:
        The Markdown lines.
    """
    title, section = "#" * level, "#" * (level + 1)
    by_arm = {a: sorted(runs, key=lambda r: r["seed"]) for a, runs in by_arm.items()}
    arms = [a for a in cfg["arms"] if a in by_arm]
    lines = [f"{title} LLM Modules: {cfg['data']['task']}, teacher {cfg['teacher']['name']} "
             f"({from_dict(LLMModulesConfig, cfg).reading()})",
             "", f"{len(split['train'])} training items, {len(split['held_out'])} held out (never trained on); "
                 f"{_corpus(cfg['data'])}; loss on the {cfg['data']['loss_on']}; {cfg['train']['steps']} steps"
                 f"{_epochs(cfg['train'])} of "
                 f"{cfg['train']['batch_size']}; student lr {cfg['train']['student_lr']}, bridge lr "
                 f"{cfg['train']['bridge_lr']}; bridges at {', '.join(cfg['bridge']['places'])}; {_student(cfg)}.",
             "", "Mean ± std [95% interval] over seeds. Exact match: the greedily generated answer (the student "
                 "reads the teacher's states of the text it has generated so far). Answer loss: teacher-forced "
                 "cross-entropy per answer token.", "",
             "| arm | seeds | held-out exact match | training-item exact match | held-out answer loss | "
             "final training loss | trained (student + bridge) |",
             "|---|---|---|---|---|---|---|"]
    for arm in arms:
        runs = by_arm[arm]
        t = runs[0]["trainable"]
        lines.append(f"| {arm} | {len(runs)} | {_cell(runs, 'held_out_exact', UNIT)} | {_cell(runs, 'train_exact', UNIT)} | "
                     f"{_cell(runs, 'held_out_answer_loss', POSITIVE)} | {_cell(runs, 'train_loss', POSITIVE)} | "
                     f"{t['student']:,} + {t['bridge']:,} |")
    lines += ["", *(f"- **{a}**: {ARMS[a].description}" for a in arms if a in ARMS)]
    runs = [r for a in arms for r in by_arm[a]]
    lines += ["", f"Code: {_distinct(runs, 'code_version')}; machine: {_distinct(runs, 'machine')}."]
    if "teacher" in by_arm and "random_teacher" in by_arm:
        real, noise = by_arm["teacher"], by_arm["random_teacher"]
        lines += ["", f"{section} The decisive control: real teacher against random teacher (paired by seed)", "",
                  f"- held-out exact match, teacher - random: {_paired(real, noise, 'held_out_exact')}",
                  f"- held-out answer loss, teacher - random: {_paired(real, noise, 'held_out_answer_loss')}"]
    if "alone" in by_arm and "teacher" in by_arm:
        lines.append(f"- held-out exact match, teacher - alone: "
                     f"{_paired(by_arm['teacher'], by_arm['alone'], 'held_out_exact')}")
    if "alone" in by_arm and "scratch" in by_arm:
        alone, scratch = by_arm["alone"], by_arm["scratch"]
        lines += ["", f"{section} What pretraining buys: the student fine-tuned against the same student from scratch", "",
                  f"- held-out exact match, fine-tuned - scratch: {_paired(alone, scratch, 'held_out_exact')}",
                  f"- held-out answer loss, fine-tuned - scratch: {_paired(alone, scratch, 'held_out_answer_loss')}"]
    if "leaky" in by_arm and "teacher" in by_arm:
        lines += ["", f"{section} The leak: the reference's bridge against the causal one (paired by seed)", "",
                  f"- final training loss, leaky - causal: {_paired(by_arm['leaky'], by_arm['teacher'], 'train_loss')}",
                  f"- held-out answer loss with the answer's own teacher states visible, leaky - causal: "
                  f"{_paired(by_arm['leaky'], by_arm['teacher'], 'held_out_answer_loss')}",
                  f"- held-out exact match when generating (no answer to see), leaky - causal: "
                  f"{_paired(by_arm['leaky'], by_arm['teacher'], 'held_out_exact')}"]
    lines += _forced_gate_lines(by_arm, arms, section)
    if _plot_curves(metrics_of, arms, figure):
        lines += ["", f"![training and held-out loss]({figure.name})"]
    return lines


def _forced_gate_lines(by_arm: dict[str, list[dict[str, Any]]], arms: list[str], section: str) -> list[str]:
    """The section of runs scored again with their gates forced (bridge.eval_gates), if any."""
    gated = [a for a in arms if all("forced_gate" in r for r in by_arm[a])]
    if not gated:
        return []
    keys = list(by_arm[gated[0]][0]["forced_gate"])
    lines = ["", f"{section} The gate forced after training (bridge.eval_gates)", "",
             "Each trained run scored again with every bridge's gate set to the value at every position and feature "
             "(0: the student with its bridge cut off; 1: the bridge's output replaces the student's states); "
             "'learned' is the run as trained, its gate's mean over the held-out texts in brackets.", "",
             "| arm | gate | held-out exact match | training-item exact match | held-out answer loss |",
             "|---|---|---|---|---|"]
    for arm in gated:
        runs = by_arm[arm]
        means = [m for r in runs for m in r.get("gate_mean", {}).values()]
        mean = f" ({sum(means) / len(means):.2f})" if means else ""
        lines.append(f"| {arm} | learned{mean} | {_cell(runs, 'held_out_exact', UNIT)} | "
                     f"{_cell(runs, 'train_exact', UNIT)} | {_cell(runs, 'held_out_answer_loss', POSITIVE)} |")
        for key in keys:
            forced = [r["forced_gate"][key] for r in runs]
            lines.append(f"| {arm} | {forced[0]['gate']:g} | {_cell(forced, 'held_out_exact', UNIT)} | "
                         f"{_cell(forced, 'train_exact', UNIT)} | {_cell(forced, 'held_out_answer_loss', POSITIVE)} |")
    if "teacher" in gated and "random_teacher" in gated:
        real = {r["seed"]: r for r in by_arm["teacher"]}
        lines += ["", "Held-out answer loss, teacher - random teacher, paired by seed, at each forced gate:", ""]
        for key in keys:
            a = [{"seed": s, "v": r["forced_gate"][key]["held_out_answer_loss"]} for s, r in real.items()]
            b = [{"seed": r["seed"], "v": r["forced_gate"][key]["held_out_answer_loss"]} for r in by_arm["random_teacher"]]
            lines.append(f"- gate {by_arm['teacher'][0]['forced_gate'][key]['gate']:g}: {_paired(a, b, 'v')}")
    return lines


def _plot_curves(metrics_of: Callable[[str], list[Path]], arms: list[str], path: Path) -> bool:
    """Training loss and teacher-forced held-out answer loss against step, mean over seeds."""
    fig, (ax_train, ax_held) = plt.subplots(1, 2, figsize=(11, 4))
    drawn = False
    for arm in arms:
        for ax, kind, key in ((ax_train, "train", "loss"), (ax_held, "eval", "held_out_answer_loss")):
            by_step: dict[int, list[float]] = {}
            for metrics in metrics_of(arm):
                for r in read_records(metrics):
                    if r.get("kind") == kind:
                        by_step.setdefault(r["step"], []).append(r[key])
            if by_step:
                steps = sorted(by_step)
                ax.plot(steps, [sum(by_step[s]) / len(by_step[s]) for s in steps], "o-" if kind == "eval" else "-",
                        label=arm, markersize=3)
                drawn = True
    ax_train.set(xlabel="step", ylabel="cross-entropy", title="training loss")
    ax_held.set(xlabel="step", ylabel="cross-entropy per answer token", title="held-out answer loss (teacher-forced)")
    for ax in (ax_train, ax_held):
        ax.grid(alpha=0.3)
        if ax.lines:  # a run too short for an evaluation draws no held-out curve
            ax.legend()
    fig.tight_layout()
    if not drawn:
        plt.close(fig)
        return False
    save_figure(fig, path)
    return True
