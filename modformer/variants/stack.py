"""Resolving a per-layer stack (`model.layers`, modformer/model/layers.py) into what each
layer builds: its variant, mixer, feed-forward module, their options, and what it freezes.

The rules, per layer (a key the layer leaves empty takes the model's):
- variant: the layer's, else model.variant. A layer's own variant must be built by the decoder
  builder (it may change the mixer and freeze inside a block, nothing else) and freeze only
  inside blocks (`blocks.*...` patterns), which then apply to this layer alone;
- mixer: the variant's own (MixiT: mixing; Frozen-QK: attention; another given is an error),
  else the layer's, else model.mixer, except that a layer naming a variant that takes any
  mixer in a model whose variant fixes one (a standard layer in MixiT) gets attention;
- options: the layer's, else the model's where the part is the model's, else the part's
  defaults; every option is filled in (as config.yaml records them);
- ffn: the layer's, else model.ffn; a model variant that builds its own feed-forward modules
  (knowledge) refuses a layer's.
"""

from __future__ import annotations

from dataclasses import replace

from ..errors import ConfigError
from ..model.config import ModelConfig
from ..model.layers import LayerConfig
from ..model.part_options import resolved_options
from ..registry import FFNS, MIXERS, VARIANTS

BLOCKS = "blocks.*"  # a variant's freeze pattern over every block, e.g. 'blocks.*.mixer.q_proj.*'


def _layer_variant(cfg: ModelConfig, layer: LayerConfig, i: int) -> str:
    name = layer.variant or cfg.variant
    variant = VARIANTS[name]  # an unknown name fails here, naming model.variant
    if name == cfg.variant:
        return name
    if variant.build is not VARIANTS["standard"].build or variant.own_ffn is not None:
        raise ConfigError(f"model.layers[{i}].variant={name} builds a whole model of its own, not one block: it can "
                          f"be model.variant, not a layer's (a layer's variant changes its mixer and what it freezes)")
    outside = [p for p in variant.freeze if not p.startswith(BLOCKS)]
    if outside:
        raise ConfigError(f"model.layers[{i}].variant={name} freezes {outside}, outside the blocks: it can be "
                          f"model.variant, not a layer's")
    return name


def _layer_mixer(cfg: ModelConfig, layer: LayerConfig, variant: str, i: int) -> str:
    fixed = VARIANTS[variant].mixer
    if fixed is not None:
        if layer.mixer is not None and not MIXERS.same(layer.mixer, fixed):
            raise ConfigError(f"model.layers[{i}].mixer={layer.mixer} conflicts with its variant {variant}, which is "
                              f"built with the '{fixed}' mixer")
        return fixed
    if layer.mixer is not None:
        return layer.mixer
    return cfg.mixer if VARIANTS[cfg.variant].mixer is None else ModelConfig().mixer


def resolve_layer(cfg: ModelConfig, layer: LayerConfig, i: int) -> LayerConfig:
    """Layer `i` of `cfg` with every key filled in by the rules above."""
    variant = _layer_variant(cfg, layer, i)
    mixer = _layer_mixer(cfg, layer, variant, i)
    if layer.ffn is not None and VARIANTS[cfg.variant].own_ffn is not None and layer.ffn != cfg.ffn:
        raise ConfigError(f"model.layers[{i}].ffn={layer.ffn} is not read by model.variant={cfg.variant}, which "
                          f"builds every layer's feed-forward module itself")
    ffn = layer.ffn or cfg.ffn
    mixer_options = layer.mixer_options or (cfg.mixer_options if MIXERS.same(mixer, cfg.mixer) else {})
    ffn_options = layer.ffn_options or (cfg.ffn_options if FFNS.same(ffn, cfg.ffn) else {})
    return LayerConfig(
        variant=variant, mixer=mixer,
        mixer_options=resolved_options(MIXERS, mixer, mixer_options, f"model.layers[{i}].mixer_options"),
        ffn=ffn, ffn_options=resolved_options(FFNS, ffn, ffn_options, f"model.layers[{i}].ffn_options"),
        freeze=list(layer.freeze))


def resolve_layers(cfg: ModelConfig) -> ModelConfig:
    """`cfg` with every layer of its stack resolved (itself where it has none); resolving twice
    changes nothing, so a run's recorded config rebuilds what it built."""
    if not cfg.layers:
        return cfg
    return replace(cfg, layers=[resolve_layer(cfg, layer, i) for i, layer in enumerate(cfg.layers)])


def layer_plan(cfg: ModelConfig) -> list[LayerConfig]:
    """What each of the `cfg.n_layers` blocks builds, bottom first: the resolved stack, or every
    layer the model's own variant, mixer and feed-forward module."""
    if cfg.layers:
        return resolve_layers(cfg).layers
    return [LayerConfig(variant=cfg.variant, mixer=cfg.mixer, mixer_options=cfg.mixer_options, ffn=cfg.ffn,
                        ffn_options=cfg.ffn_options) for _ in range(cfg.n_layers)]


def freeze_patterns(cfg: ModelConfig) -> list[str]:
    """The parameter globs `build_model` freezes: the model variant's, with, in a stack, each
    block pattern applied per layer by that layer's variant, and each layer's own freezes."""
    if not cfg.layers:
        return [*VARIANTS[cfg.variant].freeze, *cfg.freeze]
    patterns = [p for p in VARIANTS[cfg.variant].freeze if not p.startswith(BLOCKS)]
    for i, layer in enumerate(layer_plan(cfg)):
        for p in VARIANTS[layer.variant].freeze:
            if p.startswith(BLOCKS):
                rest = p[len(BLOCKS):]
                patterns.append(f"blocks.{i}{rest}" if rest else f"blocks.{i}.*")
        patterns += [f"blocks.{i}.{p}" for p in layer.freeze]
    return [*patterns, *cfg.freeze]


def uniform(cfg: ModelConfig) -> bool:
    """Whether every layer builds the model's own variant, mixer and feed-forward module."""
    return all(layer.variant == cfg.variant and MIXERS.same(layer.mixer, cfg.mixer) and FFNS.same(layer.ffn, cfg.ffn)
               and layer.mixer_options == cfg.mixer_options and layer.ffn_options == cfg.ffn_options
               and not layer.freeze for layer in layer_plan(cfg))
