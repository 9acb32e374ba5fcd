"""The random-attention paper's budgets: what the reference script that launches each task
trains one model on, in that script's unit, with where each number comes from, and a run's
fraction of it.

Each task's budget is its reference script's (the algorithmic tasks: depth.py's max_steps x
train_size sequences; memorization: hdmemorize_exp.py's; language modelling and sentiment:
the reference README's commands), with the README's and the Slurm script's launches both
named where they differ; docs/papers/random-attention.md lists them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .construction import CLASSIFIER, DEPTH, LM_TRAINER, MEMORIZE, task_name


@dataclass(frozen=True)
class ReferenceBudget:
    """What the reference script that launches a task trains one model on, in that script's
    unit, with where each number comes from; `other` names another launch of the same task
    (the README's command against the Slurm script) where the two differ."""

    amount: float
    unit: str  # "sequences", or "tokens" for language modelling
    script: str  # the reference trainer: depth.py, hdmemorize_exp.py, trainer.py, trainer_classifier.py
    source: str
    other: str = ""
    width: int = 512  # n_embd of the launch whose budget this is (the paper's 512 but for the classifier)


def _depth_budget(task_file: str, train_size: int, why: str, max_steps: int = 500, other: str = "") -> ReferenceBudget:
    """depth.py trains max_steps x train_size // batch steps of `batch` sequences (depth.py
    ~389, "train_steps in previous repo is actually num_train_epochs"): max_steps x train_size
    sequences whatever the batch."""
    sequences = max_steps * train_size
    return ReferenceBudget(
        sequences, "sequences", DEPTH,
        f"depth.py ~389 trains max_steps x train_size // batch steps of batch sequences: max_steps {max_steps} x "
        f"train_size {train_size:,} ({task_file}: {why}) = {sequences:.3g} sequences, "
        f"{sequences // 1000:,} steps of the task file's batch 1,000 or {sequences // 128:,} of "
        f"scripts/depth_array.sh's 128", other)


# Each paper task's budget in the unit of the reference script that launches it. k-hop has no
# task file in the reference (the paper reports it, no script trains it), so no budget.
REFERENCE_BUDGETS: dict[str, ReferenceBudget] = {
    "retrieval": _depth_budget(
        "task_condattendstream.py ~21", 200_000, "vocab_size 512 > 256",
        other="the README's depth.py command and scripts/depth_array.sh both give max_steps 500"),
    "addition": _depth_budget(
        "task_additionstream.py ~23", 80_000, "additionstream_10 of the README's command, min_len <= 10",
        other="the README's depth.py command (max_steps 500, additionstream_10)"),
    "dyck": _depth_budget(
        "task_dyckstream.py ~21", 200_000, "dyckstream_40 of the README's Slurm command, max_len > 30",
        max_steps=300, other="the README's run_depth_array.sh command (max_steps 300, batch 256); "
                             "scripts/depth_array.sh's default max_steps 500 gives 1e+08"),
    "memorization": ReferenceBudget(
        500 * 32_768, "sequences", MEMORIZE,
        "scripts/depth_array.sh passes max_steps 500 to hdmemorize_exp.py (task=memorize; max_steps > 0 wins over "
        "its num_train_epochs, ~373) of batch min(n^2, 256 x 128) = 32,768 for n = 512 (~94)",
        "hdmemorize_exp.py's own default max_steps 100 (~39) gives 3.28e+06"),
    "lm": ReferenceBudget(
        40_000 * 512 * 256, "tokens", LM_TRAINER,
        "the reference README's trainer.py command: 40,000 steps of 512 sequences of 256 tokens",
        "the README's Slurm command (scripts/run_train.sh): 80,000 steps of 128 per device on 4 GPUs, "
        "256 tokens: 1.05e+10"),
    "sentiment": ReferenceBudget(
        3_000 * 32, "sequences", CLASSIFIER,
        "the reference README's trainer_classifier.py command: 3,000 steps of utils.py's default batch 32, "
        "n_embd 1,024",
        "the README's Slurm command (scripts/run_train_classifier.sh): 10,000 steps of 128 per device on 2 GPUs: "
        "2.56e+06, n_embd 512", width=1024),
}
REFERENCE_WIDTH = 512
# The random-attention paper's tasks, the only ones its budgets and width are compared with.
PAPER_TASKS = ("retrieval", "addition", "dyck", "khop", "memorization", "lm", "sentiment")


def reference_budget(config: dict[str, Any]) -> ReferenceBudget | None:
    """The reference script's budget for a config's task (retrieval where it names none, the
    default), or None for a task no reference script trains."""
    return REFERENCE_BUDGETS.get(task_name(config))


def budget(config: dict[str, Any]) -> dict[str, Any]:
    """What a run trains on in its reference script's unit (sequences, or tokens for language
    modelling), the script's amount and the fraction of it, and its width and fraction of the
    paper's: {"sequences", "amount", "unit", "paper", "script", "fraction", "width",
    "width_fraction"} ("paper": the reference script's amount); for a task that no reference
    script trains, sequences, with paper, script, fraction and width_fraction None (the width
    fraction stays for the paper's k-hop)."""
    train, model, task = (config.get(k) or {} for k in ("train", "model", "task"))
    sequences = int(train.get("steps", 0)) * int(train.get("batch_size", 0))
    ref = reference_budget(config)
    amount = sequences * int(task.get("seq_len", 0)) if ref is not None and ref.unit == "tokens" else sequences
    width = int(model.get("d_model", 0))
    paper_task = task_name(config) in PAPER_TASKS
    return {"sequences": sequences, "amount": amount, "unit": "sequences" if ref is None else ref.unit,
            "paper": None if ref is None else ref.amount, "script": None if ref is None else ref.script,
            "fraction": None if ref is None else amount / ref.amount, "width": width,
            "width_fraction": width / (ref.width if ref else REFERENCE_WIDTH) if paper_task else None,
            "reference_width": (ref.width if ref else REFERENCE_WIDTH) if paper_task else None}


def budget_text(b: dict[str, Any]) -> str:
    """'51,200 sequences (0.0512% of depth.py's 1e+08), width 64 (0.125x the paper's 512)' (the
    classifier: 'width 128 (0.125x trainer_classifier.py's 1,024)', its README command's), or
    '51,200 sequences, width 64' for a task that no reference script trains. A budget recorded
    before scripts were named (an older run's summary, whose "paper" was another count) says
    its amount only; reports compute the budget from the run's config.yaml where it has one."""
    amount, unit = b.get("amount", b["sequences"]), b.get("unit", "sequences")
    paper = b.get("paper") if "script" in b else None
    width = f"width {b['width']}"
    if b.get("width_fraction") is not None:
        reference = b.get("reference_width") or REFERENCE_WIDTH
        whose = "the paper's" if reference == REFERENCE_WIDTH else f"{b.get('script')}'s"
        width += f" ({b['width'] / reference:.3g}x {whose} {reference:,})"
    if paper is None:
        return f"{amount:,} {unit}, {width}"
    script = b.get("script") or "the reference's"
    return f"{amount:,} {unit} ({100 * amount / paper:.3g}% of {script}'s {paper:.3g}), {width}"
