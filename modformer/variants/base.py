"""A variant is a model builder plus a freeze specification."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Callable

import torch

from ..constructions import adapt_model
from ..errors import ConfigError
from ..freeze import freeze, freeze_all_but
from ..model.config import ModelConfig
from ..model.init import init_weights
from ..model.transformer import Transformer
from ..registry import FFNS, MIXERS, VARIANTS
from .stack import freeze_patterns, layer_plan, uniform


@dataclass(frozen=True)
class Variant:
    """A variant: how the model is built and which of its parameters stay at their random
    initial values. Write one as (docs/own-parts.md, "Your own variant"):

        frozen_vo = Variant(build_decoder, freeze=("blocks.*.mixer.v_proj.*", "blocks.*.mixer.o_proj.*"),
                            mixer="attention", description="V and O projections fixed at init")

    and name it by import path (`model.variant: mypkg.variants:frozen_vo`), an entry point of
    group `modformer.variants`, or `VARIANTS.register(name)`. Built by `build_decoder` and
    freezing only `blocks.*` globs, it can also be one layer's variant (`model.layers`).

    Attributes:
        build: the builder, called with the model config; architecture only (`build_model`
            draws the weights). `modformer.variants.standard.build_decoder` builds the blocks
            of the configured parts.
        freeze: parameter-name globs fixed at their initial values.
        mixer: the mixer this variant always builds with; None: the configured `model.mixer`.
        description: one line for `modformer list`.
        own_ffn: for a variant that builds its own feed-forward modules, the `model.ffn` they
            stand for; None: it builds the configured one.
    """

    build: Callable[[ModelConfig], Transformer]  # architecture only; weights are set by `build_model`
    freeze: tuple[str, ...] = ()  # parameter-name globs fixed at their initial values
    mixer: str | None = None  # the mixer this variant always builds with; None: the configured model.mixer
    description: str = ""
    # For a variant that builds its own feed-forward modules: the model.ffn they stand for
    # (knowledge: its activation's FFN, which they fold into), the one model.ffn it accepts
    # besides the default; None: the variant builds the configured model.ffn.
    own_ffn: Callable[[ModelConfig], str] | None = None


def fixed_mixer(variant: Any) -> str | None:
    """The mixer a variant is built with (MixiT: mixing); None for one that takes any mixer,
    or a name that is not a registered variant (its loader names that)."""
    return VARIANTS[variant].mixer if isinstance(variant, str) and variant in VARIANTS else None


def model_mixer(model: dict[str, Any]) -> Any:
    """The mixer a raw or resolved model section builds its blocks with: its variant's own,
    else model.mixer, else attention."""
    return fixed_mixer(model.get("variant")) or model.get("mixer") or "attention"  # no variant: standard, no fixed mixer


def same_model(a: Variant, b: Variant) -> bool:
    """Whether `a` built with `b`'s mixer is `b` itself (same builder, same frozen parts)."""
    return a.build is b.build and a.freeze == b.freeze


def model_label(variant: str, mixer: str, ffn: str | None = None) -> str:
    """What ran, for reports and plots: the variant's name, and the mixer where it is not the one
    the variant is known by (its own, or attention for a variant that takes any), and a
    feed-forward module of yours (an import path or an entry point), so that a standard model
    with a part of yours is never called plain 'standard':
    'standard (mixer mypkg.conv:CausalConv, ffn mypkg.moe:MoE)'."""
    own = VARIANTS[variant].mixer or ModelConfig().mixer
    parts = [] if MIXERS.same(mixer, own) else [f"mixer {mixer}"]
    if ffn is not None and (":" in ffn or ffn in FFNS.installed()):
        parts.append(f"ffn {ffn}")
    return f"{variant} ({', '.join(parts)})" if parts else variant


def run_label(cfg: ModelConfig) -> str:
    """`model_label` of a model config; a stack whose layers differ lists them bottom first,
    a run of equal layers once with its count: 'standard [layers: mixit, standard x3]'."""
    if uniform(cfg):
        return model_label(cfg.variant, cfg.mixer, cfg.ffn)
    runs: list[list] = []
    for layer in layer_plan(cfg):
        name = model_label(layer.variant, layer.mixer, layer.ffn)
        extra = []
        if not FFNS.same(layer.ffn, cfg.ffn) and f"ffn {layer.ffn}" not in name:  # ours, where the model's differs
            extra.append(f"ffn {layer.ffn}")
        if MIXERS.same(layer.mixer, cfg.mixer) and layer.mixer_options != cfg.mixer_options \
                or FFNS.same(layer.ffn, cfg.ffn) and layer.ffn_options != cfg.ffn_options:
            extra.append("own options")
        if layer.freeze:
            extra.append("frozen " + ", ".join(layer.freeze))
        if extra:  # inside the label's own parentheses where it has them
            name = f"{name[:-1]}; {'; '.join(extra)})" if name.endswith(")") else f"{name} ({'; '.join(extra)})"
        if runs and runs[-1][0] == name:
            runs[-1][1] += 1
        else:
            runs.append([name, 1])
    return f"{cfg.variant} [layers: {', '.join(n if k == 1 else f'{n} x{k}' for n, k in runs)}]"


def build_model(cfg: ModelConfig, seed: int) -> Transformer:
    """Build, initialise (deterministically from `seed`) and freeze the configured variant.

    Args:
        cfg: the model config, its `vocab_size` and `max_seq_len` resolved (as a `RunConfig`'s
            `model` section is, from its task).
        seed: the seed every parameter is drawn from.

    Returns:
        The model, its variant's frozen parameters with `requires_grad` False.
    """
    if cfg.vocab_size is None or cfg.max_seq_len is None:
        raise ValueError("model.vocab_size and model.max_seq_len must be resolved (from the task) before building")
    variant = VARIANTS[cfg.variant]
    if variant.mixer is not None and not MIXERS.same(cfg.mixer, variant.mixer):
        # A config built in Python holds the default mixer unless told otherwise; another
        # one is refused, as `config_from_dict` refuses it.
        if cfg.mixer != ModelConfig().mixer:
            raise ConfigError(f"model.mixer={cfg.mixer} conflicts with model.variant={cfg.variant}, which is built "
                              f"with the '{variant.mixer}' mixer")
        cfg = replace(cfg, mixer=variant.mixer)
    # Module constructors draw default values from the global RNG: seeded here, so that what
    # `init_weights` leaves as constructed (a foreign module's bias) follows the run's seed
    # too, and forked, so that the caller's global RNG does not notice.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = variant.build(cfg)
        adapt_model(cfg, model)
    init_weights(model, cfg.init_std, torch.Generator().manual_seed(seed))
    freeze(model, freeze_patterns(cfg))
    if cfg.train_only:
        freeze_all_but(model, cfg.train_only)
    return model
