"""The random-attention reference construction (princeton-pli/MixiT) as one switch.

`model.construction: reference` fills in, for every key the config does not set itself,
the value the reference code uses for the chosen variant and task. The reference has four
trainers, each building and training its own way, all over `modeling_llama.py`: `depth.py`
(the algorithmic tasks), `hdmemorize_exp.py` (memorization: depth.py's model, its own
optimizer), `trainer.py` (language modelling, task `lm`) and `trainer_classifier.py`
(sentiment, task `sentiment`); `trainer_of` says which one a config reproduces. Within it,
attention models get plain Llama ("vanilla" in the reference) and models whose mixer is
`mixing` (MixiT) its mixing mode. Keys set in the file or on the
command line win, so an ablation of one point is one override; `construction_label` then
names the points that differ. The resolved config (config.yaml) holds every filled value.

Where the reference itself has two readings, a named option chooses: `model.reference_transformers`
(the classifier's attention is causal under transformers 4.50-4.52, bidirectional from
4.53). Each point names where in the reference it comes from; README.md ("The reference
construction") lists them beside our corrected defaults; `scripts/reference_parity.py`
measures the built models against the reference's own.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

from .configtools import from_dict
from .model.config import ModelConfig
from .registry import VARIANTS

DEPTH, MEMORIZE, LM_TRAINER, CLASSIFIER = "depth.py", "hdmemorize_exp.py", "trainer.py", "trainer_classifier.py"
TRAINERS = (DEPTH, MEMORIZE, LM_TRAINER, CLASSIFIER)
# The reference trainer of each task; every other task is an algorithmic one (depth.py).
# scripts/depth_array.sh runs hdmemorize_exp.py for memorization and depth.py for the rest.
TRAINER_OF_TASK = {"memorization": MEMORIZE, "lm": LM_TRAINER, "sentiment": CLASSIFIER}
# hdmemorize_exp.py's get_model_config passes what depth.py's does (tau0 fixed at its default 1).
DEPTH_MODEL = (DEPTH, MEMORIZE)


@dataclass(frozen=True)
class Point:
    key: str  # dotted config key
    value: Any  # the reference's value, or a function of the raw config data giving it
    modes: tuple[str, ...]  # "vanilla" (attention models), "mixing" (the mixing mixer), or both
    source: str  # where the reference sets it
    trainers: tuple[str, ...] = TRAINERS  # the reference trainers that build it so

    def applies(self, mode: str, trainer: str) -> bool:
        return mode in self.modes and trainer in self.trainers

    def plain(self, data: dict[str, Any]) -> Any:
        """The value for this config, as plain config data holds it (YAML has lists, not tuples)."""
        value = self.value(data) if callable(self.value) else self.value
        return list(value) if isinstance(value, tuple) else value


BOTH = ("vanilla", "mixing")
MIXING = ("mixing",)
VANILLA = ("vanilla",)
LLAMA = "transformers LlamaForCausalLM, which depth.py builds in vanilla mode"
SQRT_HALF = math.sqrt(0.5)
HF_TRAINERS = (LM_TRAINER, CLASSIFIER)  # both take utils.py TrainingArguments as they are


# train.steps when a config leaves it out: LoopConfig's default, which the training layer above
# this one holds (tests/test_reference_construction.py checks that the two agree).
DEFAULT_STEPS = 1000


def _steps(data: dict[str, Any]) -> int:
    train = data.get("train") or {}
    steps = train.get("steps", DEFAULT_STEPS) if isinstance(train, dict) else DEFAULT_STEPS
    return steps if isinstance(steps, int) else DEFAULT_STEPS  # a bad value: the strict loader names it


def hf_warmup(data: dict[str, Any]) -> int:
    """utils.py TrainingArguments.__post_init__: max(int(0.04 * max_steps), 500)."""
    return max(int(0.04 * _steps(data)), 500)


# The reference's own algorithmic tasks (task_*stream.py, hdmemorize_exp.py): it feeds the whole
# sample, answer included, and its mixing is drawn for that length; our input stops one short.
SAMPLE_TASKS = ("condattend", "addition", "dyck", "memorization")


def task_name(data: dict[str, Any]) -> str | None:
    """A raw config's task name: condattend (TaskConfig's default) where it names none, None
    where the value is not a name (the strict loader refuses it, naming its key)."""
    task = data.get("task") or {}
    name = task.get("name", "condattend") if isinstance(task, dict) else None
    return name if isinstance(name, str) else None


def sample_extra(data: dict[str, Any]) -> int:
    """1 for the reference's own algorithmic tasks, else 0."""
    return 1 if task_name(data) in SAMPLE_TASKS else 0


READINGS = ("v4.50", "v4.53")  # model.reference_transformers
INIT_READINGS = ("released", "commented")  # model.reference_init


def init_std(data: dict[str, Any]) -> float:
    """0.02 as the reference's code runs (released), or 1/sqrt(width) as its commented-out line
    reads (commented): utils.py ~99-102."""
    model = data.get("model") or {}
    if model.get("reference_init", INIT_READINGS[0]) != "commented":
        return 0.02
    width = model.get("d_model", ModelConfig().d_model)
    return 1 / math.sqrt(width) if isinstance(width, int) and width > 0 else 0.02  # the loader names a bad width


def memorization_batch(data: dict[str, Any]) -> int:
    """hdmemorize_exp.py ~94: per_device_train_batch_size = min(full_train_size, 256 * 128), the
    n^2 facts of its table (all of them: frac 1)."""
    task = data.get("task") or {}
    n = task.get("n", 512) if isinstance(task, dict) else 512
    return min(n * n, 256 * 128) if isinstance(n, int) and n > 0 else 256 * 128


def classifier_causal(data: dict[str, Any]) -> bool:
    """The classifier's attention under the chosen transformers: `is_causal=False` is stored on
    the attention module and read by SDPA only from 4.53 on."""
    return (data.get("model") or {}).get("reference_transformers", READINGS[0]) != "v4.53"


POINTS: tuple[Point, ...] = (
    Point("model.learned_positions", True, MIXING,
          "modeling_llama.py ~781 and ~847: learned absolute positions (wpe) added to the token embeddings"),
    Point("model.mixing.sink_head", True, MIXING,
          "modeling_llama.py ~471-473: head 0 is eye * 0.5 with column 0 then set to 0.5 ([0, 0] = 0.5)"),
    Point("model.skip_scale", SQRT_HALF, MIXING,
          "depth.py get_model_config: skip_scaling = np.sqrt(0.5); LlamaDecoderLayer scales the skip by it",
          DEPTH_MODEL),
    Point("model.residual_scale", SQRT_HALF, MIXING,
          "LlamaDecoderLayer: branch scaled by sqrt(1 - skip_scaling^2) (as GPT2Block in modeling_gpt2.py)",
          DEPTH_MODEL),
    Point("model.skip_scale", 0.5, MIXING,
          "trainer.py get_model_config passes args.skip_scaling, utils.py ScriptArguments default 0.5", (LM_TRAINER,)),
    Point("model.residual_scale", math.sqrt(0.75), MIXING,
          "LlamaDecoderLayer ~581-583: branch scaled by sqrt(1 - 0.5^2)", (LM_TRAINER,)),
    Point("model.skip_scale", SQRT_HALF, MIXING,
          "trainer_classifier.py get_model_config: skip_scaling = np.sqrt(0.5)", (CLASSIFIER,)),
    Point("model.residual_scale", SQRT_HALF, MIXING,
          "LlamaDecoderLayer: branch scaled by sqrt(1 - skip_scaling^2)", (CLASSIFIER,)),
    Point("model.ffn", "shaped_leaky_glu", MIXING,
          "LlamaMLP in mixing mode: down(gain * LeakyReLU_s(gate x) * up x), s = 1 + activation_cminus/sqrt(d), "
          "activation_cminus = -1 (utils.py ScriptArguments), gain = calculate_gain('leaky_relu', s)"),
    Point("model.scaled_linear", (512.0, 1.0), MIXING,
          "ScaledLinear in mixing mode: output x sqrt(base / fan_in), base_hidden_size = 512 (utils.py "
          "ScriptArguments) for V, O, gate, up and the head, base_intermediate_size = 1 for down",
          (*DEPTH_MODEL, LM_TRAINER)),
    Point("model.scaled_linear", (1.0, 1.0), MIXING,
          "trainer_classifier.py ~249-279 passes no base_hidden_size: MixingLlamaConfig's default 1.0 "
          "(modeling_llama.py ~74, 98, 101) for V, O, gate, up and the score head, and 1 for down", (CLASSIFIER,)),
    Point("model.mixing.causal", False, MIXING,
          "trainer_classifier.py ~263: is_causal=False, which the mixing attention reads (no tril)", (CLASSIFIER,)),
    Point("model.mixing.extra_positions", sample_extra, MIXING,
          "depth.py and hdmemorize_exp.py get_model_config: max_position_embeddings = len(sample), the whole "
          "sequence with its answer, which sets the mixing's size and noise scale (config.max_seq_len, "
          "modeling_llama.py ~443-452); the model is fed all of it, ours all but its last token", DEPTH_MODEL),
    Point("model.mixing.bidirectional_drift", "reference", MIXING,
          "mixing attention: the drift divides row i's noise sum by i + 1 also when not causal "
          "(trainer_classifier.py's bidirectional classifier)"),
    Point("model.learned_positions", False, VANILLA, LLAMA + ": RoPE only"),
    Point("model.rope", True, VANILLA, LLAMA + ": RoPE (utils.py TrainingArguments do_rope = True)"),
    Point("model.skip_scale", 1.0, VANILLA, LLAMA + ": x + branch"),
    Point("model.residual_scale", 1.0, VANILLA, LLAMA + ": x + branch"),
    Point("model.ffn", "swiglu", VANILLA, LLAMA + ": LlamaMLP down(silu(gate x) * up x)"),
    Point("model.scaled_linear", None, VANILLA, LLAMA + ": plain nn.Linear"),
    Point("model.attention.causal", classifier_causal, VANILLA,
          "trainer_classifier.py ~263 sets is_causal=False on the attention module, which only stores it "
          "(modeling_llama.py ~424, ~553-562): SDPA decides causality itself under transformers 4.50-4.52 "
          "(causal) and reads the flag from 4.53 (bidirectional); model.reference_transformers chooses",
          (CLASSIFIER,)),
    Point("model.pad_embedding_frozen", True, BOTH,
          "trainer_classifier.py passes pad_token_id (= eos): the embedding's padding_idx, a row zeroed at init "
          "(modeling_llama.py _init_weights) that never receives a gradient", (CLASSIFIER,)),
    Point("model.attn_bias", True, BOTH, "depth.py get_model_config: config.attention_bias = True (so do the others)"),
    Point("model.ffn_bias", True, BOTH, "depth.py get_model_config: config.mlp_bias = True (so do the others)"),
    Point("model.init_std", init_std, BOTH,
          "depth.py get_model_config: initializer_range = 0.02 (utils.py ~99: 'TODO make sure it's 1/sqrt(width)', "
          "its 1/sqrt(n_embd) line commented out); model.reference_init chooses"),
    Point("model.norm_eps", 1e-6, BOTH, "transformers LlamaConfig default rms_norm_eps = 1e-6"),
    Point("model.tie_embeddings", False, BOTH, "transformers LlamaConfig default tie_word_embeddings = False"),
    Point("train.lr", 1e-2, BOTH, "depth.py ~49: learning_rate = 1e-2 if arch == 'transformer'", (DEPTH,)),
    Point("train.lr", 5e-3, BOTH, "hdmemorize_exp.py ~48: learning_rate = 1e-3 if 'arch' == 'transformer' else 5e-3 "
                                  "(the string 'arch', never equal: 5e-3), which depth_array.sh does not override",
          (MEMORIZE,)),
    Point("train.lr", 5e-4, BOTH, "the reference README's trainer.py and trainer_classifier.py commands: "
                                 "--learning_rate=5e-4", HF_TRAINERS),
    Point("train.weight_decay", 1e-3, BOTH, "depth.py ~48 and each task file: weight_decay = 0.001", (DEPTH,)),
    Point("train.weight_decay", 1e-4, BOTH, "hdmemorize_exp.py ~47: weight_decay = 0.0001", (MEMORIZE,)),
    Point("train.weight_decay", 0.01, BOTH, "utils.py TrainingArguments ~21-23: weight_decay = 0.01", HF_TRAINERS),
    Point("train.warmup_steps", 500, BOTH,
          "task_*stream.py ~8: warmup_steps = 500, which replaces depth.py's 300 (depth.py ~50, the task file is "
          "exec'd after it)", (DEPTH,)),
    Point("train.warmup_steps", 500, BOTH, "hdmemorize_exp.py ~49: warmup_steps = 500", (MEMORIZE,)),
    Point("train.batch_size", 1000, BOTH,
          "task_*stream.py ~16: per_device_train_batch_size = 1000, as the reference README's depth.py command "
          "runs it (scripts/depth_array.sh passes 128 instead)", (DEPTH,)),
    Point("train.batch_size", memorization_batch, BOTH,
          "hdmemorize_exp.py ~94: per_device_train_batch_size = min(n^2, 256 * 128)", (MEMORIZE,)),
    Point("train.schedule", "cosine", BOTH, "depth.py and hdmemorize_exp.py: lr_scheduler_type = 'cosine'",
          DEPTH_MODEL),
    Point("train.schedule", "linear", BOTH, "trainer.py and trainer_classifier.py: lr_scheduler_type = 'linear'",
          HF_TRAINERS),
    Point("train.warmup_steps", hf_warmup, BOTH,
          "utils.py TrainingArguments.__post_init__: warmup_steps = max(int(0.04 * max_steps), 500)", HF_TRAINERS),
    Point("train.betas", (0.9, 0.999), BOTH, "transformers TrainingArguments defaults adam_beta1/2 (AdamW)"),
    Point("train.min_lr_ratio", 0.0, BOTH, "transformers' cosine and linear schedules decay to 0"),
    Point("train.grad_clip", 1.0, BOTH, "transformers TrainingArguments default max_grad_norm = 1.0"),
)


def mode_of(model: dict[str, Any]) -> str:
    """'mixing' when the model's mixer is `mixing` (MixiT), else 'vanilla'."""
    name = model.get("variant", "standard")
    if not isinstance(name, str):
        return "vanilla"  # the strict loader refuses the value, naming its key
    mixer = VARIANTS[name].mixer or model.get("mixer", "attention")
    return "mixing" if mixer == "mixing" else "vanilla"


def _lookup(data: dict[str, Any], key: str) -> tuple[bool, Any]:
    node: Any = data
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            return False, None
        node = node[part]
    return True, node


def trainer_of(data: dict[str, Any]) -> str:
    """The reference trainer that builds and trains a config's task: depth.py, hdmemorize_exp.py
    (memorization), trainer.py (language modelling) or trainer_classifier.py (sentiment)."""
    return TRAINER_OF_TASK.get(task_name(data), DEPTH)


def apply_construction(data: dict[str, Any]) -> dict[str, Any]:
    """Fill the reference's values into raw config data (in place) for every key it does not
    set, when `model.construction` is `reference`; otherwise leave it as it is."""
    model = data.get("model") or {}
    if not isinstance(model, dict) or model.get("construction", "corrected") != "reference":
        return data
    mode, trainer = mode_of(model), trainer_of(data)
    name = model.get("variant", "standard")
    # A variant that builds its own feed-forward modules (knowledge) does not read model.ffn.
    unread = {"model.ffn"} if isinstance(name, str) and VARIANTS[name].own_ffn else set()
    for point in POINTS:
        if point.applies(mode, trainer) and point.key not in unread and not _lookup(data, point.key)[0]:
            _fill(data, point.key, point.plain(data))
    return data


def reference_model_config(variant: str, **model: Any) -> ModelConfig:
    """The model config of `variant` in the reference construction, with `model`'s keys set
    explicitly (e.g. sizes)."""
    data = apply_construction({"model": {**model, "variant": variant, "construction": "reference"}})
    return from_dict(ModelConfig, data["model"], "model")


def _fill(data: dict[str, Any], key: str, value: Any) -> None:
    """data[a][b] = value for 'a.b', making empty sections; a section that is not a mapping is
    left for the strict loader to refuse."""
    *sections, last = key.split(".")
    node = data
    for part in sections:
        if node.get(part) is None:
            node[part] = {}
        node = node[part]
        if not isinstance(node, dict):
            return
    node[last] = value


# How a label names a departure from the reference's optimizer; model keys keep their dotted name.
SHORT_NAMES = {"train.lr": "lr", "train.warmup_steps": "warm-up", "train.batch_size": "batch",
               "train.weight_decay": "weight decay", "train.schedule": "schedule", "train.betas": "betas",
               "train.min_lr_ratio": "min lr ratio", "train.grad_clip": "grad clip"}


def _value_text(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_value_text(v) for v in value) + "]"
    return str(value)


def departures(config: dict[str, Any]) -> list[str]:
    """Each point of the reference construction a resolved config (plain data, as in
    config.yaml) sets otherwise: ['lr 3e-3', 'warm-up 20', 'batch 256', 'model.skip_scale=0.5']."""
    model = config.get("model") or {}
    mode, trainer = mode_of(model), trainer_of(config)
    changed = []
    for point in POINTS:
        if not point.applies(mode, trainer):
            continue
        found, value = _lookup(config, point.key)
        if found and (list(value) if isinstance(value, tuple) else value) != point.plain(config):
            short = SHORT_NAMES.get(point.key)
            changed.append(f"{short} {_value_text(value)}" if short else f"{point.key}={_value_text(value)}")
    return changed


def construction_label(config: dict[str, Any]) -> str:
    """'corrected', or 'reference (SCRIPT)' for a resolved config (plain data, as in config.yaml),
    with every departure from that script named: 'reference (depth.py) except lr 3e-3, warm-up
    20, batch 256'; for the classifier, the transformers reading: 'reference
    (trainer_classifier.py, transformers v4.50 reading)', and for the commented-out
    initialisation, 'reference (depth.py, init 1/sqrt(width))'."""
    model = config.get("model") or {}
    if model.get("construction", "corrected") != "reference":
        return "corrected"
    trainer = trainer_of(config)
    form = [trainer]
    if trainer == CLASSIFIER:
        form.append(f"transformers {model.get('reference_transformers', READINGS[0])} reading")
    if model.get("reference_init", INIT_READINGS[0]) == "commented":
        form.append("init 1/sqrt(width)")
    changed = departures(config)
    return f"reference ({', '.join(form)})" + (" except " + ", ".join(changed) if changed else "")


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
    "condattend": _depth_budget(
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
        "the reference README's trainer_classifier.py command: 3,000 steps of utils.py's default batch 32",
        "the README's Slurm command (scripts/run_train_classifier.sh): 10,000 steps of 128 per device on 2 GPUs: "
        "2.56e+06"),
}
REFERENCE_WIDTH = 512
# The random-attention paper's tasks, the only ones its budgets and width are compared with.
PAPER_TASKS = ("condattend", "addition", "dyck", "khop", "memorization", "lm", "sentiment")


def reference_budget(config: dict[str, Any]) -> ReferenceBudget | None:
    """The reference script's budget for a config's task (condattend where it names none, the
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
            "width_fraction": width / REFERENCE_WIDTH if paper_task else None}


def budget_text(b: dict[str, Any]) -> str:
    """'51,200 sequences (0.0512% of depth.py's 1e+08), width 64 (0.125x the paper's 512)', or
    '51,200 sequences, width 64' for a task that no reference script trains. A budget recorded
    before scripts were named (an older run's summary, whose "paper" was another count) says
    its amount only; reports compute the budget from the run's config.yaml where it has one."""
    amount, unit = b.get("amount", b["sequences"]), b.get("unit", "sequences")
    paper = b.get("paper") if "script" in b else None
    width = f"width {b['width']}"
    if b.get("width_fraction") is not None:
        width += f" ({b['width'] / REFERENCE_WIDTH:.3g}x the paper's {REFERENCE_WIDTH})"
    if paper is None:
        return f"{amount:,} {unit}, {width}"
    script = b.get("script") or "the reference's"
    return f"{amount:,} {unit} ({100 * amount / paper:.3g}% of {script}'s {paper:.3g}), {width}"
