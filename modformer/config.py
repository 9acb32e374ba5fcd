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
from .construction import apply_construction
from .errors import ConfigError
from .model.config import ModelConfig
from .model.part_options import part_options
from .registry import FFNS, MIXERS, TASKS, VARIANTS
from .tasks.base import TaskConfig
from .train.config import TrainConfig


@dataclass
class RunConfig:
    model: ModelConfig = option(default_factory=ModelConfig, help="the architecture")
    task: TaskConfig = option(default_factory=TaskConfig, help="the data and its metrics")
    train: TrainConfig = option(default_factory=TrainConfig, help="the optimisation")

    def to_dict(self) -> dict[str, Any]:
        return to_dict(self)

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.to_dict(), sort_keys=False)


def _variant_mixer(data: dict[str, Any], saved: bool) -> None:
    """A variant that is about one mixer (MixiT: `mixing`; Frozen-QK: `attention`, whose Q and
    K it freezes) fills it in for `model.mixer`; another mixer there is an error naming both
    keys, not a model silently built otherwise. A `saved` config (a run's own record) written
    before variants filled in their mixer recorded the default, `attention`, for MixiT: read
    as what was built."""
    model = data.get("model")
    if model is None:
        return
    name = model.get("variant", "standard") if isinstance(model, dict) else None
    if not isinstance(name, str):
        return  # the strict loader refuses it, naming its key
    required = VARIANTS[name].mixer
    if required is None:
        return
    given = model.get("mixer")
    if given is None or (saved and given == "attention"):
        model["mixer"] = required
    elif given != required:
        raise ConfigError(f"model.mixer={given} conflicts with model.variant={name}, which is built with the "
                          f"'{required}' mixer: drop model.mixer, or choose a variant that takes any mixer "
                          f"({', '.join(v for v in VARIANTS if VARIANTS[v].mixer is None)})")


def config_from_dict(data: dict[str, Any] | None, *, saved: bool = False) -> RunConfig:
    """Strictly build a `RunConfig` from plain data; the variant's own mixer is filled in
    (`_variant_mixer`), `model.construction: reference` fills in the reference's values
    (`construction.py`), and the model's vocabulary and sequence length, when null, are
    resolved from the task. `saved`: the data is a run's own record (see `_variant_mixer`)."""
    data = copy.deepcopy(data) if data else {}
    if not isinstance(data, dict):
        raise ConfigError(f"a config must be a mapping with sections model, task, train; got {type(data).__name__}")
    _variant_mixer(data, saved)
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
    part_options(MIXERS, model.mixer, model.mixer_options, "model.mixer_options")
    part_options(FFNS, model.ffn, model.ffn_options, "model.ffn_options")
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
    return RunConfig(model=model, task=task_cfg, train=train)


def load_config(path: str | Path | None, overrides: Sequence[str] = ()) -> RunConfig:
    """Defaults <- YAML file (if any) <- `a.b=value` overrides."""
    data = read_yaml(path) if path is not None else {}
    for assignment in overrides:
        apply_override(data, assignment)
    return config_from_dict(data)
