"""The run config: `model`, `task` and `train` sections, from YAML plus dotted overrides.

Defaults, then the YAML file, then `key=value` overrides, in that order. The `task` section
is typed by the task it names: `task.name` picks the config class that checks the rest.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Sequence

import yaml

from . import tasks as _tasks  # noqa: F401  (registers the tasks)
from . import variants as _variants  # noqa: F401  (registers the variants and parts)
from .configtools import apply_override, from_dict, option, read_yaml, to_dict
from .constructions import apply_construction, construction_options
from .errors import ConfigError
from .model.config import ModelConfig
from .model.part_options import resolved_options
from .registry import FFNS, MIXERS, TASKS, VARIANTS
from .tasks.base import TaskConfig
from .train.config import TrainConfig
from .variants.base import same_model
from .variants.stack import layer_plan, resolve_layers
from .version import source_version


@dataclass
class RunConfig:
    model: ModelConfig = option(default_factory=ModelConfig, help="the architecture")
    task: TaskConfig = option(default_factory=TaskConfig, help="the data and its metrics")
    train: TrainConfig = option(default_factory=TrainConfig, help="the optimisation")

    def to_dict(self) -> dict[str, Any]:
        return to_dict(self)

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.to_dict(), sort_keys=False)


# Sections of the model config since moved into their mixer's own options (2026-12-07, format 3).
MOVED_SECTIONS = {"attention": "AttentionOptions", "mixing": "MixingOptions"}


def _moved_sections(data: dict[str, Any]) -> None:
    """`model.attention` and `model.mixing`, which older configs held, named with where their
    keys are now: the mixer's own options."""
    model = data.get("model")
    moved = [key for key in MOVED_SECTIONS if isinstance(model, dict) and key in model]
    if moved:
        key = moved[0]
        raise ConfigError(f"model.{key} is gone: the {key} mixer's options ({MOVED_SECTIONS[key]}) are "
                          f"model.mixer_options now, as every part's (e.g. model.mixer_options.causal=false), or a "
                          f"layer's own in model.layers; a folder an older modformer wrote: modformer migrate DIR")


def _variant_mixer(data: dict[str, Any]) -> None:
    """The mixer a variant builds with, against the one the config asks for:
    - a variant that is about one mixer (MixiT: `mixing`; Frozen-QK: `attention`, whose Q and
      K it freezes) fills it in for `model.mixer`; another mixer there is an error naming both
      keys, not a model silently built otherwise;
    - a variant that takes any mixer, given the mixer that makes it another variant (standard
      with `mixing` is MixiT), is refused, so that no report labels MixiT "standard"."""
    model = data.get("model")
    if not isinstance(model, dict):
        return
    name = model.get("variant", "standard")
    if not isinstance(name, str):
        return  # the strict loader refuses it, naming its key
    variant = VARIANTS[name]
    given = model.get("mixer")
    if variant.mixer is not None:
        if given is None:
            model["mixer"] = variant.mixer
        elif not MIXERS.same(given, variant.mixer):
            raise ConfigError(f"model.mixer={given} conflicts with model.variant={name}, which is built with the "
                              f"'{variant.mixer}' mixer: drop model.mixer, or choose a variant that takes any mixer "
                              f"({', '.join(v for v in VARIANTS if VARIANTS[v].mixer is None)})")
    if variant.mixer is None and given is not None:
        for other in VARIANTS:
            if other != name and VARIANTS[other].mixer is not None and MIXERS.same(VARIANTS[other].mixer, given) \
                    and same_model(variant, VARIANTS[other]):
                raise ConfigError(f"model.variant={name} with model.mixer={given} is the '{other}' variant: write "
                                  f"model.variant={other}, so that reports name it")


def _unread_ffn(model: ModelConfig) -> None:
    """A variant that builds its own feed-forward modules (knowledge) refuses a `model.ffn`
    it would not build, or `model.ffn_options` it would not read, rather than ignoring them."""
    own_ffn = VARIANTS[model.variant].own_ffn
    if own_ffn is None:
        return
    built = own_ffn(model)
    if model.ffn not in (ModelConfig().ffn, built):
        key, value = "ffn", model.ffn
    elif model.ffn_options:
        key, value = "ffn_options", model.ffn_options
    else:
        return
    raise ConfigError(f"model.{key}={value} is not read by model.variant={model.variant}, which builds its own "
                      f"feed-forward modules (those of model.ffn={built}): drop model.{key}")


def config_from_dict(data: dict[str, Any] | None) -> RunConfig:
    """Strictly build a `RunConfig` from plain data: the variant's own mixer is filled in,
    the named construction fills in its values (`constructions.py`), and the model's
    vocabulary and sequence length, when null, are resolved from the task. A run's own
    config.yaml is read so too: records of today's format hold every key as built
    (`modformer migrate` brings older ones up to it).

    Args:
        data: the config as plain data (sections `model`, `task`, `train`, maybe `sweep`), as
            its YAML holds it; None for the defaults. It is not changed.

    Returns:
        The run config, every key checked (an unknown key or a wrong type raises `ConfigError`).
    """
    data = copy.deepcopy(data) if data else {}
    if not isinstance(data, dict):
        raise ConfigError(f"a config must be a mapping with sections model, task, train; got {type(data).__name__}")
    for section in ("model", "task", "train"):
        if section in data and data[section] is None:  # would silently mean every default
            raise ConfigError(f"{section}: null; give it keys, or leave the section out for its defaults")
    _moved_sections(data)
    _variant_mixer(data)
    apply_construction(data)
    task_data = data.pop("task", None) or {}
    if not isinstance(task_data, dict):
        raise ConfigError(f"task: expected a mapping, got {task_data!r}")
    name = task_data.get("name", TaskConfig().name)
    if not isinstance(name, str):
        raise ConfigError(f"task.name: expected str, got {name!r}")
    task_cfg = from_dict(TASKS[name].Config, task_data, "task")
    known = {"model", "train"}
    for key in data:
        if key not in known:
            raise ConfigError(f"unknown config key '{key}' (known sections: model, task, train)")
    model = from_dict(ModelConfig, data.get("model"), "model")
    VARIANTS[model.variant]  # unknown names fail here, naming their key; so do a part's bad options
    _unread_ffn(model)
    # Every option of a part, defaults included, so that config.yaml rebuilds the model even after
    # the part's code changes a default (a run's own record is read the same way: what it recorded wins).
    model = replace(model,
                    construction_options=construction_options(model.construction, model.construction_options),
                    mixer_options=resolved_options(MIXERS, model.mixer, model.mixer_options, "model.mixer_options"),
                    ffn_options=resolved_options(FFNS, model.ffn, model.ffn_options, "model.ffn_options"))
    model = resolve_layers(model)  # every layer of a stack written out, as config.yaml records it
    train = from_dict(TrainConfig, data.get("train"), "train")
    task = TASKS[name](task_cfg)
    if model.vocab_size is None:
        model = replace(model, vocab_size=task.vocab_size)
    elif model.vocab_size < task.vocab_size:
        raise ConfigError(f"model.vocab_size={model.vocab_size} is smaller than the task's vocabulary ({task.vocab_size})")
    if model.max_seq_len is None:
        model = replace(model, max_seq_len=task.seq_len)
    elif task.seq_len > model.max_seq_len:
        raise ConfigError(f"model.max_seq_len={model.max_seq_len} is shorter than the task's sequences ({task.seq_len})")
    if model.pad_embedding_frozen and model.pad_id is None:
        if getattr(task, "pad_id", None) is None:
            raise ConfigError(f"model.pad_embedding_frozen needs a pad token: task {name} has none, so set model.pad_id")
        model = replace(model, pad_id=task.pad_id)
    return RunConfig(model=model, task=task_cfg, train=train)


def part_versions(cfg: RunConfig) -> dict[str, dict[str, str]]:
    """Each part the config names (variant, mixer, feed-forward module, task, and each layer's
    in a stack) with its import path and the version of the code that holds it
    (`version.source_version`), for run.json."""
    model = cfg.model
    named = {"model.variant": (VARIANTS, model.variant), "model.mixer": (MIXERS, model.mixer),
             "model.ffn": (FFNS, model.ffn), "task.name": (TASKS, cfg.task.name)}
    for i, layer in enumerate(layer_plan(model) if model.layers else []):  # a stack: each layer's own parts
        named.update({f"model.layers[{i}].variant": (VARIANTS, layer.variant),
                      f"model.layers[{i}].mixer": (MIXERS, layer.mixer), f"model.layers[{i}].ffn": (FFNS, layer.ffn)})
    return {key: {"name": name, **source_version(registry[name])} for key, (registry, name) in named.items()}


def load_config(path: str | Path | None, overrides: Sequence[str] = ()) -> RunConfig:
    """Defaults <- YAML file (if any) <- `a.b=value` overrides.

    Args:
        path: a YAML run config, or None for the defaults.
        overrides: dotted `key=value` assignments, applied in order, values read as YAML.

    Returns:
        The checked run config, as `config_from_dict` builds it.
    """
    data = read_yaml(path) if path is not None else {}
    for assignment in overrides:
        apply_override(data, assignment)
    return config_from_dict(data)
