"""Resolving a per-layer stack (`model.layers`, modformer/model/layers.py) into what each
layer builds: its variant, mixer, feed-forward module, their options, and what it freezes.

The rules, per layer (a key the layer leaves empty takes the model's):
- variant: the layer's, else model.variant. A layer's own variant must be built by the decoder
  builder (it may change the mixer and freeze inside a block, nothing else) and freeze only
  inside blocks (`blocks.*...` patterns), which then apply to this layer alone; a model whose
  variant builds its own feed-forward modules (knowledge) takes no layer variant;
- mixer: the variant's own (MixiT: mixing; Frozen-QK: attention; another given is an error),
  else the layer's, else model.mixer, except that a layer naming a variant that takes any
  mixer in a model whose variant fixes one (a standard layer in MixiT) gets attention;
- options: the layer's, merged over the model's where the part is the model's (else over the
  part's defaults); every option is filled in;
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
    if VARIANTS[cfg.variant].own_ffn is not None:
        raise ConfigError(f"model.layers[{i}].variant={name}: model.variant={cfg.variant} builds every layer's "
                          f"feed-forward module itself, so a layer of another variant would still have its; give "
                          f"the layer a mixer or freeze patterns instead (e.g. freeze: ['mixer.q_proj.*'])")
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
    if VARIANTS[cfg.variant].own_ffn is not None and (layer.ffn not in (None, cfg.ffn) or layer.ffn_options):
        key = "ffn" if layer.ffn not in (None, cfg.ffn) else "ffn_options"
        raise ConfigError(f"model.layers[{i}].{key} is not read by model.variant={cfg.variant}, which builds every "
                          f"layer's feed-forward module itself")
    ffn = layer.ffn or cfg.ffn
    # Options merge over the model's where the part is the model's; another part starts from its defaults.
    mixer_options = {**(cfg.mixer_options if MIXERS.same(mixer, cfg.mixer) else {}), **layer.mixer_options}
    ffn_options = {**(cfg.ffn_options if FFNS.same(ffn, cfg.ffn) else {}), **layer.ffn_options}
    return LayerConfig(
        variant=variant, mixer=mixer,
        mixer_options=resolved_options(MIXERS, mixer, mixer_options, f"model.layers[{i}].mixer_options"),
        ffn=ffn, ffn_options=resolved_options(FFNS, ffn, ffn_options, f"model.layers[{i}].ffn_options"),
        freeze=list(layer.freeze))


def _departure(cfg: ModelConfig, resolved: LayerConfig, i: int) -> LayerConfig:
    """What resolved layer `i` keeps of its own: each key inheritance would not give it, and
    every option of a part that is not the model's (filled in, so that a part's later defaults
    change nothing); only the options that differ from the model's where the part is its."""
    variant = resolved.variant if resolved.variant != cfg.variant else None
    inherited = resolve_layer(cfg, LayerConfig(variant=variant), i)

    def options(own: dict, model: dict, same_part: bool) -> dict:
        return {k: v for k, v in own.items() if k not in model or model[k] != v} if same_part else own

    return LayerConfig(
        variant=variant, mixer=None if resolved.mixer == inherited.mixer else resolved.mixer,
        mixer_options=options(resolved.mixer_options, cfg.mixer_options, MIXERS.same(resolved.mixer, cfg.mixer)),
        ffn=None if resolved.ffn == inherited.ffn else resolved.ffn,
        ffn_options=options(resolved.ffn_options, cfg.ffn_options, FFNS.same(resolved.ffn, cfg.ffn)),
        freeze=list(resolved.freeze))


def resolve_layers(cfg: ModelConfig) -> ModelConfig:
    """`cfg` with its stack checked (every layer resolved) and written as each layer's
    departures from the model ([] where no layer departs): what config.yaml records. A
    model-wide key changed later (`model.ffn=gelu` on a run's config) reaches every layer that
    does not set its own, and resolving the record again builds the same layers."""
    if not cfg.layers:
        return cfg
    layers = [_departure(cfg, resolve_layer(cfg, layer, i), i) for i, layer in enumerate(cfg.layers)]
    return replace(cfg, layers=[] if all(layer == LayerConfig() for layer in layers) else layers)


def layer_plan(cfg: ModelConfig) -> list[LayerConfig]:
    """What each of the `cfg.n_layers` blocks builds, bottom first: the resolved stack, or every
    layer the model's own variant, mixer and feed-forward module."""
    if cfg.layers:
        return [resolve_layer(cfg, layer, i) for i, layer in enumerate(cfg.layers)]
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
