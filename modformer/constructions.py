"""Constructions: named ways to fill in the keys a config leaves unset.

`model.construction` names one. `corrected` (the default) is the library's own: every
option as its declaration writes it, nothing filled in. Another construction fills in, for
each key the config does not set itself, the value some other codebase uses, so that one
key builds and trains a model as that codebase does while every explicit key still wins
(one override ablates one point). A paper plugin registers its own as `<paper>.<name>`
(`Paper.construction`, modformer/plugins.py); a package of yours can too, by import path or by
an entry point of the group `modformer.constructions`, like any part.

A construction is a `Construction`: what it fills (`fill`, on the raw config data, before
the strict loader reads it), how it names a resolved config (`label`, e.g. "reference
(SCRIPT) except lr 0.003"), its own options (`Options`, a dataclass given as
`model.construction_options`, checked like a part's), what it changes in a built model that
no key of the library's config holds (`adapt`, given the model before its initialisation and
the options: another codebase's branch scales, say), and the paper whose experiments it
serves (`paper`: a report of a sweep built with it adds that paper's sections).

Configs written before a key moved are not read here: `modformer migrate` rewrites them once
(modformer/migrate.py; a paper registers its own migrations).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from torch import nn

from .configtools import from_dict, to_dict
from .errors import ConfigError
from .model.config import ModelConfig
from .registry import Registry


@dataclass(frozen=True)
class Construction:
    """A named filling of unset config keys (see the module's docstring)."""

    description: str
    fill: Callable[[dict[str, Any]], None]  # raw config data -> filled in place (only unset keys)
    label: Callable[[dict[str, Any]], str]  # a resolved config (plain data) -> its name in reports
    Options: type | None = None  # its options' dataclass (model.construction_options), if any
    paper: str | None = None  # the paper plugin whose report sections it brings (set by Paper.construction)
    # (built model, its options as an `Options` instance) -> changed in place, before initialisation
    adapt: Callable[[nn.Module, Any], None] | None = None


def _nothing(data: dict[str, Any]) -> None:
    pass


CONSTRUCTIONS: Registry[Construction] = Registry(
    "construction", "model.construction", "modformer.constructions",
    lambda c: c if isinstance(c, Construction) else _not_a_construction(c))


def _not_a_construction(item: object) -> Construction:
    raise ConfigError(f"model.construction: {item!r} is not a construction (modformer.constructions.Construction)")


CONSTRUCTIONS.register("corrected")(Construction(
    "the library's own defaults: every option as declared, nothing filled in", _nothing, lambda config: "corrected"))

def _name(data: dict[str, Any]) -> Any:
    model = data.get("model")
    return model.get("construction", "corrected") if isinstance(model, dict) else "corrected"


def apply_construction(data: dict[str, Any]) -> dict[str, Any]:
    """Fill in the named construction's values for every key `data` (raw config data) does
    not set. In place; returns `data`."""
    name = _name(data)
    if not isinstance(name, str):
        raise ConfigError(f"model.construction: expected the name of a construction, got {name!r}")
    CONSTRUCTIONS[name].fill(data)
    return data


def construction_options(name: str, options: dict[str, Any] | None) -> dict[str, Any]:
    """Every option of construction `name`, defaults filled in, as plain data (config.yaml);
    options given to a construction that declares none are refused."""
    cls = CONSTRUCTIONS[name].Options
    if cls is None:
        if options:
            raise ConfigError(f"model.construction_options: construction '{name}' takes no options")
        return {}
    return to_dict(from_dict(cls, options or {}, "model.construction_options"))


def construction_label(config: dict[str, Any]) -> str:
    """How reports name the construction of a resolved config (plain data, as config.yaml)."""
    return CONSTRUCTIONS[_name(config)].label(config)


def construction_paper(config: dict[str, Any]) -> str | None:
    """The paper whose experiments a resolved config's construction serves, if any."""
    name = _name(config)
    return CONSTRUCTIONS[name].paper if isinstance(name, str) else None


def adapt_model(cfg: ModelConfig, model: nn.Module) -> None:
    """Apply the construction of `cfg` to the model built from it (in place): what the
    construction changes that no key of `ModelConfig` holds, by its options."""
    construction = CONSTRUCTIONS[cfg.construction]
    if construction.adapt is not None:
        options = None if construction.Options is None else \
            from_dict(construction.Options, cfg.construction_options, "model.construction_options")
        construction.adapt(model, options)


def constructed_model(construction: str, variant: str, **model: Any) -> ModelConfig:
    """The model config of `variant` in `construction`, with `model`'s keys set explicitly
    (sizes, say): what a run of that construction would build."""
    data = apply_construction({"model": {**model, "variant": variant, "construction": construction}})
    return from_dict(ModelConfig, data["model"], "model")
