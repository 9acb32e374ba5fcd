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

Where the reference itself has two readings, a named option chooses
(`model.construction_options`, `ReferenceOptions`): `transformers` (the classifier's
attention is causal under transformers 4.50-4.52, bidirectional from 4.53) and `init` (the
0.02 its code runs, or the 1/sqrt(width) its comment asks for). What the reference changes
in a model beyond the library's config keys, its skip and branch scales and its scaled
projections, is an option too (`residual_scale`, `skip_scale`, `scaled_linear`), filled per
variant and trainer like any point and applied to the built model by `adapt_reference`.
Each point names where in the reference it comes from; README.md ("The reference
construction") lists them beside our corrected defaults; `scripts/reference_parity.py`
measures the built models against the reference's own.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal, get_args

from torch import nn

from ...configtools import from_dict, option
from ...constructions import CONSTRUCTIONS, Construction
from ...errors import ConfigError
from ...model.block import Block
from ...model.transformer import Transformer
from ...model.config import ModelConfig
from ...registry import MIXERS, VARIANTS
from ...variants.base import model_mixer
from ...tasks.base import TaskConfig
from .scaled_linear import scale_projections


@dataclass
class ReferenceOptions:
    """The readings of `model.construction: reference` (`model.construction_options`)."""

    transformers: Reading = option(
        "v4.50", "the transformers version the reference runs under, where its behaviour depends on it: its "
                 "sentiment classifier's attention is causal under 4.50-4.52 (v4.50, the default: the paper's runs "
                 "predate 4.53, released 2025-06-26, after the paper) and bidirectional from 4.53 on (v4.53)")
    init: InitReading = option(
        "released", "the initialisation scale: released (initializer_range = 0.02, as its code runs: utils.py ~99, "
                    "hdmemorize_exp.py ~165) or commented (1/sqrt(d_model), the line utils.py comments out under "
                    "'TODO make sure it's 1/sqrt(width)'); fills model.init_std")
    residual_scale: float = option(
        1.0, "factor on each residual branch, x -> skip_scale * x + residual_scale * branch (MixiT: sqrt(1 - "
             "skip_scale^2), as the reference's LlamaDecoderLayer scales it)")
    skip_scale: float = option(1.0, "factor on each skip connection (MixiT: the reference's skip_scaling, sqrt(0.5) "
                                    "or trainer.py's 0.5)")
    scaled_linear: tuple[float, float] | None = option(
        None, "[stream base, hidden base]: multiply each projection's output by sqrt(base / fan_in), with the stream "
              "base for projections reading the residual stream (V, O, gate, up, head; never Q and K, which would scale "
              "attention logits) and the hidden base for the feed-forward down projection (MixiT: [512, 1]); null: "
              "plain linear layers (scaled_linear.py)")

    def __post_init__(self) -> None:
        for key in ("residual_scale", "skip_scale"):
            if not getattr(self, key) > 0:
                raise ValueError(f"{key} must be positive, got {getattr(self, key)}")
        if self.scaled_linear is not None and min(self.scaled_linear) <= 0:
            raise ValueError(f"scaled_linear bases must be positive, got {list(self.scaled_linear)}")


def adapt_reference(model: nn.Module, options: ReferenceOptions) -> None:
    """The reference's branch and skip scales on every block, and its scaled projections
    (`Construction.adapt`: on the built model, before initialisation)."""
    for block in model.modules():
        if isinstance(block, Block):
            block.residual_scale, block.skip_scale = options.residual_scale, options.skip_scale
    if options.scaled_linear is not None:
        if isinstance(model, Transformer) and model.lm_head is None:
            raise ConfigError("model.construction_options.scaled_linear scales the output head, which "
                              "model.tie_embeddings replaces by the embedding: set one of them only")
        scale_projections(model, *options.scaled_linear)


def reading(data: dict[str, Any], key: str) -> Any:
    """One of `ReferenceOptions`' readings of raw or resolved config data, its default where unset."""
    model = data.get("model") or {}
    options = model.get("construction_options") if isinstance(model, dict) else None
    value = options.get(key) if isinstance(options, dict) else None
    return getattr(ReferenceOptions, key) if value is None else value

DEPTH, MEMORIZE, LM_TRAINER, CLASSIFIER = "depth.py", "hdmemorize_exp.py", "trainer.py", "trainer_classifier.py"
TRAINERS = (DEPTH, MEMORIZE, LM_TRAINER, CLASSIFIER)
NAME = "random_attention.reference"  # the construction's registered name; `reference` finds it too
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

    def applies(self, mode: str, trainer: str, model: dict[str, Any]) -> bool:
        """Whether the reference sets this key for a model of `mode` built by `trainer`; an
        option of the mixer (`model.mixer_options.*`) only where the model's mixer is the
        reference's own for the mode (attention, or MixiT's mixing), not a part of yours."""
        if self.key.startswith(OPTIONS) and not MIXERS.same(model_mixer(model), MODE_MIXER[mode]):
            return False
        return mode in self.modes and trainer in self.trainers

    def plain(self, data: dict[str, Any]) -> Any:
        """The value for this config, as plain config data holds it (YAML has lists, not tuples)."""
        value = self.value(data) if callable(self.value) else self.value
        return list(value) if isinstance(value, tuple) else value


BOTH = ("vanilla", "mixing")
MODE_MIXER = {"vanilla": "attention", "mixing": "mixing"}  # the mixer the reference builds in each mode
OPTIONS = "model.mixer_options."
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
SAMPLE_TASKS = ("retrieval", "addition", "dyck", "memorization")


def task_name(data: dict[str, Any]) -> str | None:
    """A raw config's task name (TaskConfig's default where it names none), None where the
    value is not a name (the strict loader refuses it, naming its key)."""
    task = data.get("task") or {}
    name = task.get("name", TaskConfig().name) if isinstance(task, dict) else None
    return name if isinstance(name, str) else None


def sample_extra(data: dict[str, Any]) -> int:
    """1 for the reference's own algorithmic tasks, else 0."""
    return 1 if task_name(data) in SAMPLE_TASKS else 0


Reading = Literal["v4.50", "v4.53"]  # model.construction_options.transformers
InitReading = Literal["released", "commented"]  # model.construction_options.init
READINGS, INIT_READINGS = get_args(Reading), get_args(InitReading)


def init_std(data: dict[str, Any]) -> float:
    """0.02 as the reference's code runs (released), or 1/sqrt(width) as its commented-out line
    reads (commented): utils.py ~99-102."""
    if reading(data, "init") != "commented":
        return 0.02
    width = (data.get("model") or {}).get("d_model", ModelConfig().d_model)
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
    return reading(data, "transformers") != "v4.53"


POINTS: tuple[Point, ...] = (
    Point("model.learned_positions", True, MIXING,
          "modeling_llama.py ~781 and ~847: learned absolute positions (wpe) added to the token embeddings"),
    Point("model.mixer_options.sink_head", True, MIXING,
          "modeling_llama.py ~471-473: head 0 is eye * 0.5 with column 0 then set to 0.5 ([0, 0] = 0.5)"),
    Point("model.construction_options.skip_scale", SQRT_HALF, MIXING,
          "depth.py get_model_config: skip_scaling = np.sqrt(0.5); LlamaDecoderLayer scales the skip by it",
          DEPTH_MODEL),
    Point("model.construction_options.residual_scale", SQRT_HALF, MIXING,
          "LlamaDecoderLayer: branch scaled by sqrt(1 - skip_scaling^2) (as GPT2Block in modeling_gpt2.py)",
          DEPTH_MODEL),
    Point("model.construction_options.skip_scale", 0.5, MIXING,
          "trainer.py get_model_config passes args.skip_scaling, utils.py ScriptArguments default 0.5", (LM_TRAINER,)),
    Point("model.construction_options.residual_scale", math.sqrt(0.75), MIXING,
          "LlamaDecoderLayer ~581-583: branch scaled by sqrt(1 - 0.5^2)", (LM_TRAINER,)),
    Point("model.construction_options.skip_scale", SQRT_HALF, MIXING,
          "trainer_classifier.py get_model_config: skip_scaling = np.sqrt(0.5)", (CLASSIFIER,)),
    Point("model.construction_options.residual_scale", SQRT_HALF, MIXING,
          "LlamaDecoderLayer: branch scaled by sqrt(1 - skip_scaling^2)", (CLASSIFIER,)),
    Point("model.ffn", "shaped_leaky_glu", MIXING,
          "LlamaMLP in mixing mode: down(gain * LeakyReLU_s(gate x) * up x), s = 1 + activation_cminus/sqrt(d), "
          "activation_cminus = -1 (utils.py ScriptArguments), gain = calculate_gain('leaky_relu', s)"),
    Point("model.construction_options.scaled_linear", (512.0, 1.0), MIXING,
          "ScaledLinear in mixing mode: output x sqrt(base / fan_in), base_hidden_size = 512 (utils.py "
          "ScriptArguments) for V, O, gate, up and the head, base_intermediate_size = 1 for down",
          (*DEPTH_MODEL, LM_TRAINER)),
    Point("model.construction_options.scaled_linear", (1.0, 1.0), MIXING,
          "trainer_classifier.py ~249-279 passes no base_hidden_size: MixingLlamaConfig's default 1.0 "
          "(modeling_llama.py ~74, 98, 101) for V, O, gate, up and the score head, and 1 for down", (CLASSIFIER,)),
    Point("model.mixer_options.causal", False, MIXING,
          "trainer_classifier.py ~263: is_causal=False, which the mixing attention reads (no tril)", (CLASSIFIER,)),
    Point("model.mixer_options.extra_positions", sample_extra, MIXING,
          "depth.py and hdmemorize_exp.py get_model_config: max_position_embeddings = len(sample), the whole "
          "sequence with its answer, which sets the mixing's size and noise scale (config.max_seq_len, "
          "modeling_llama.py ~443-452); the model is fed all of it, ours all but its last token", DEPTH_MODEL),
    Point("model.mixer_options.bidirectional_drift", "reference", MIXING,
          "mixing attention: the drift divides row i's noise sum by i + 1 also when not causal "
          "(trainer_classifier.py's bidirectional classifier)"),
    Point("model.learned_positions", False, VANILLA, LLAMA + ": RoPE only"),
    Point("model.rope", True, VANILLA, LLAMA + ": RoPE (utils.py TrainingArguments do_rope = True)"),
    Point("model.construction_options.skip_scale", 1.0, VANILLA, LLAMA + ": x + branch"),
    Point("model.construction_options.residual_scale", 1.0, VANILLA, LLAMA + ": x + branch"),
    Point("model.ffn", "swiglu", VANILLA, LLAMA + ": LlamaMLP down(silu(gate x) * up x)"),
    Point("model.construction_options.scaled_linear", None, VANILLA, LLAMA + ": plain nn.Linear"),
    Point("model.mixer_options.causal", classifier_causal, VANILLA,
          "trainer_classifier.py ~263 sets is_causal=False on the attention module, which only stores it "
          "(modeling_llama.py ~424, ~553-562): SDPA decides causality itself under transformers 4.50-4.52 "
          "(causal) and reads the flag from 4.53 (bidirectional); model.construction_options.transformers chooses",
          (CLASSIFIER,)),
    Point("model.pad_embedding_frozen", True, BOTH,
          "trainer_classifier.py passes pad_token_id (= eos): the embedding's padding_idx, a row zeroed at init "
          "(modeling_llama.py _init_weights) that never receives a gradient", (CLASSIFIER,)),
    Point("model.attn_bias", True, BOTH, "depth.py get_model_config: config.attention_bias = True (so do the others)"),
    Point("model.ffn_bias", True, BOTH, "depth.py get_model_config: config.mlp_bias = True (so do the others)"),
    Point("model.init_std", init_std, BOTH,
          "depth.py get_model_config: initializer_range = 0.02 (utils.py ~99: 'TODO make sure it's 1/sqrt(width)', "
          "its 1/sqrt(n_embd) line commented out); model.construction_options.init chooses"),
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
    """'mixing' when the model's mixer is `mixing` (MixiT), else 'vanilla'. A per-layer stack
    (`model.layers`) has one mode only if every layer has it: the reference builds every
    layer of a model in one mode, and its model-wide points (positions, skip scaling, the
    feed-forward module) have no per-layer reading, so a stack of both is refused."""
    name = model.get("variant", "standard")
    if not isinstance(name, str):
        return "vanilla"  # the strict loader refuses the value, naming its key
    mixer = VARIANTS[name].mixer or model.get("mixer", "attention")
    layers = model.get("layers")
    if not layers or not isinstance(layers, (list, dict)):
        return "mixing" if mixer == "mixing" else "vanilla"
    entries = list(layers.values()) if isinstance(layers, dict) else list(layers)
    mixers = {mixer} if isinstance(layers, dict) and len(entries) < model.get("n_layers", 2) else set()
    for entry in entries:
        entry = {"variant": entry} if isinstance(entry, str) else entry if isinstance(entry, dict) else {}
        own = VARIANTS[entry["variant"]].mixer if isinstance(entry.get("variant"), str) else None
        mixers.add(own or entry.get("mixer") or (mixer if VARIANTS[name].mixer is None or not entry.get("variant")
                                                   else "attention"))
    modes = {"mixing" if m == "mixing" else "vanilla" for m in mixers}
    if len(modes) > 1:
        raise ConfigError("model.construction=reference builds every layer of a model in one mode, and model.layers "
                          "mixes mixing layers (MixiT) with attention ones: the reference has no such model; use "
                          "model.construction=corrected and set the model-wide keys yourself")
    return modes.pop()


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


def fill_reference(data: dict[str, Any]) -> dict[str, Any]:
    """Fill the reference's values into raw config data (in place) for every key it does not set."""
    model = data.get("model") or {}
    if not isinstance(model, dict):
        return data  # the strict loader refuses it, naming its key
    mode, trainer = mode_of(model), trainer_of(data)
    name = model.get("variant", "standard")
    # A variant that builds its own feed-forward modules (knowledge) does not read model.ffn.
    unread = {"model.ffn"} if isinstance(name, str) and VARIANTS[name].own_ffn else set()
    for point in POINTS:
        if point.applies(mode, trainer, model) and point.key not in unread and not _lookup(data, point.key)[0]:
            _fill(data, point.key, point.plain(data))
    return data


def is_reference(model: dict[str, Any]) -> bool:
    """Whether a raw or resolved model section names the reference construction (by its name,
    `random_attention.reference`, or its alias `reference`)."""
    return CONSTRUCTIONS.canonical(model.get("construction", "corrected")) == NAME


def reference_model_config(variant: str, **model: Any) -> ModelConfig:
    """The model config of `variant` in the reference construction, with `model`'s keys set
    explicitly (e.g. sizes)."""
    data = fill_reference({"model": {**model, "variant": variant, "construction": "reference"}})
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
        if not point.applies(mode, trainer, model):
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
    if not is_reference(model):
        return "corrected"
    trainer = trainer_of(config)
    form = [trainer]
    if trainer == CLASSIFIER:
        form.append(f"transformers {reading(config, 'transformers')} reading")
    if reading(config, "init") == "commented":
        form.append("init 1/sqrt(width)")
    changed = departures(config)
    return f"reference ({', '.join(form)})" + (" except " + ", ".join(changed) if changed else "")


# Registered by the paper's `register` as `random_attention.reference`, `reference` its alias.
REFERENCE = Construction(
    "the random-attention paper's reference code (princeton-pli/MixiT): its models and optimizer for each variant "
    "and task (docs/papers/random-attention.md, 'The reference construction')",
    fill_reference, construction_label, ReferenceOptions, adapt=adapt_reference)

