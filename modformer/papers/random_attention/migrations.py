"""What `modformer migrate` rewrites in the records of the random-attention paper's runs
(registered by the paper's `register` through `Paper.migration`; modformer/migrate.py)."""

from __future__ import annotations

import copy
from typing import Any

from ...migrate import rename_override
from ...variants.base import model_mixer
from .construction import is_reference


def _rewrite_older_keys(data: dict[str, Any], saved: bool) -> None:
    """Configs written before the readings were `model.construction_options` named them
    `model.reference_transformers` and `model.reference_init` (every config, of any
    construction, recorded the first): they move there for the reference construction and
    are dropped for another one, where nothing read them. A MixiT run's own record written
    before the mixing's `extra_positions` existed (2026-12-02) was drawn for its model's own
    length, whatever the construction fills in today: 0 is written out (in the mixer's options,
    where the library's migration has already moved the former `model.mixing` section)."""
    model = data.get("model")
    if not isinstance(model, dict):
        return
    reference = is_reference(model)
    for old, new in (("reference_transformers", "transformers"), ("reference_init", "init")):
        if old in model:
            value = model.pop(old)
            if reference:
                options = model.setdefault("construction_options", {})
                if isinstance(options, dict):
                    options.setdefault(new, value)
    if saved and reference and model_mixer(model) == "mixing":
        options = model.get("mixer_options")
        if not isinstance(options, dict):
            options = model["mixer_options"] = {}
        options.setdefault("extra_positions", 0)


def migrate_older_configs(data: dict[str, Any], saved: bool) -> list[str]:
    """The paper's config migration (`modformer migrate`): the rewrite of `_rewrite_older_keys`,
    saying what it changed."""
    model = data.get("model")
    if not isinstance(model, dict):
        return []
    before = copy.deepcopy(model)
    _rewrite_older_keys(data, saved)
    changed = [f"model.{old} -> model.construction_options.{new}" if is_reference(before) else f"model.{old} dropped "
               f"(read by the reference construction only)"
               for old, new in (("reference_transformers", "transformers"), ("reference_init", "init")) if old in before]
    if (model.get("mixer_options") or {}).get("extra_positions") != \
            (before.get("mixer_options") or {}).get("extra_positions"):
        changed.append("model.mixer_options.extra_positions: 0 written out (drawn for the model's own length before "
                       "the option existed)")
    return changed


def migrate_older_overrides(words: list[str]) -> list[str]:
    """A recorded command's overrides of the former keys, as of `model.construction_options`."""
    return (rename_override(words, "model.reference_transformers", "model.construction_options.transformers")
            + rename_override(words, "model.reference_init", "model.construction_options.init"))
