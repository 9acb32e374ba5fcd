"""Per-layer stacks: `model.layers`, what each layer builds where it departs from the model.

By default every block is built alike, from `model.variant`, `model.mixer` and `model.ffn`.
`model.layers` gives a layer its own, in either of two forms:

    layers: [mixit, standard, standard, standard]    # one entry per layer, bottom first
    layers: {0: mixit}                              # only the layers that differ; -1 is the last
    layers: {-1: {variant: frozen_qk}, 0: {mixer: mypkg.conv:CausalConv, mixer_options: {kernel: 3}}}

An entry is a variant's name or a mapping of `LayerConfig`'s keys. A layer's variant must be
one built block by block (standard, frozen_qk, frozen_mlp, mixit, or a variant of yours built
by the decoder builder): it brings its mixer and the freezing it does inside a block, here
only in this layer. The resolved config (config.yaml) records each layer's departures from
the model, a part that is not the model's with every option filled in, so a run rebuilds its
stack exactly (`modformer.variants.stack` resolves them).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..configtools import option
from ..errors import ConfigError


@dataclass
class LayerConfig:
    """One layer of `model.layers`; a key left null (or empty) takes the model's."""

    variant: str | None = option(
        None, "this layer's variant, one built block by block (`modformer list`): its mixer, and its freezing "
              "inside a block applied to this layer only; null: model.variant")
    mixer: str | None = option(
        None, "this layer's mixer (a name, import path or entry point); null: its variant's own mixer, else "
              "model.mixer (attention where model.variant fixes another mixer, e.g. a standard layer in MixiT)")
    mixer_options: dict[str, Any] = option(
        default_factory=dict, help="the mixer's options; empty: model.mixer_options where the mixer is model.mixer")
    ffn: str | None = option(None, "this layer's feed-forward module; null: model.ffn")
    ffn_options: dict[str, Any] = option(
        default_factory=dict, help="the feed-forward module's options; empty: model.ffn_options where it is model.ffn")
    freeze: list[str] = option(
        default_factory=list, help="parameter globs inside this block to freeze too, e.g. 'mixer.q_proj.*'")


LayersValue = list[LayerConfig | str] | dict[int, LayerConfig | str]


def layer_list(value: LayersValue | None, n_layers: int) -> list[LayerConfig]:
    """`model.layers` as one `LayerConfig` per layer, bottom first ([] for none given).

    Args:
        value: the list (one entry per layer) or mapping (layer index, negative from the top,
            to entry) the config gives; an entry is a variant's name or a `LayerConfig`.
        n_layers: the model's number of layers.

    Returns:
        n_layers entries (a layer the mapping leaves out: `LayerConfig()`, the model's own), or
            [] where `value` is empty.
    """
    if not value:
        return []
    if isinstance(value, dict):
        entries: list[LayerConfig | str] = [LayerConfig() for _ in range(n_layers)]
        placed: dict[int, int] = {}
        for index, entry in value.items():
            if not -n_layers <= index < n_layers:
                raise ConfigError(f"model.layers: layer {index} does not exist in a model of {n_layers} layers "
                                  f"(0 to {n_layers - 1}, or -1 to -{n_layers} from the top)")
            at = index % n_layers
            if at in placed:
                raise ConfigError(f"model.layers names layer {at} twice ({placed[at]} and {index})")
            placed[at] = index
            entries[at] = entry
    else:
        if len(value) != n_layers:
            raise ConfigError(f"model.layers has {len(value)} entries for model.n_layers={n_layers}: give one per "
                              f"layer, or a mapping of the layers that differ, e.g. {{0: mixit}}")
        entries = list(value)
    return [LayerConfig(variant=e) if isinstance(e, str) else e for e in entries]
