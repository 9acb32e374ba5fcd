"""Records format 3 (2026-12-07): the built-in mixers' options moved from model-wide sections
into each mixer's own `Options`, as every part's are.

Format 2 held `model.attention` (causal, qk_init_scale) and `model.mixing` (MixiT's scale,
sigma_range, sink_head, causal, bidirectional_drift, extra_positions) as sections of the
model config, read by every layer built with that mixer. Today they are `model.mixer_options`
(`AttentionOptions`, `MixingOptions`), or a layer's own in `model.layers`. What `modformer
migrate` rewrites, with the same model built before and after:

- a run config: the section of the model's mixer becomes its `mixer_options`; a layer built
  with the other built-in mixer (a MixiT layer in a standard model) gets that section as its
  own `mixer_options`; a section no layer reads is dropped;
- a sweep file: the same for its base config, per arm. Where the arms' mixers read the same
  options (`causal: false` for attention and mixing alike) they stay in the base; where they
  differ the variants become arms, each with its own `model.mixer_options`;
- a grid axis `model.attention.KEY` or `model.mixing.KEY` is `model.mixer_options.KEY`
  (`RENAMED_PREFIXES`); the run folders it names are renamed by `modformer.migrate`;
- a recorded command's overrides of those keys likewise; beside a `sweep.variants=[...]`
  whose variants' mixers would read them differently, that list becomes the arms it meant.
"""

from __future__ import annotations

from typing import Any

import yaml

from .variants.base import fixed_mixer, model_mixer

SECTIONS = ("attention", "mixing")  # former model sections, each named as the mixer that read it
# Former dotted prefixes -> today's (grid axes, arm keys and recorded overrides).
RENAMED_PREFIXES = {f"model.{name}.": "model.mixer_options." for name in SECTIONS}


def _layer_mixer(model: dict[str, Any], entry: dict[str, Any]) -> str:
    """A `model.layers` entry's mixer, by the rules of modformer/variants/stack.py."""
    fixed = fixed_mixer(entry.get("variant") or model.get("variant", "standard"))
    if fixed:
        return fixed
    if entry.get("mixer"):
        return entry["mixer"]
    return model_mixer(model) if fixed_mixer(model.get("variant", "standard")) is None else "attention"


def _merge(options: Any, section: dict[str, Any]) -> dict[str, Any]:
    """A section's options under what `options` already sets (which wins)."""
    return {**section, **(options if isinstance(options, dict) else {})}


def _layers(model: dict[str, Any], sections: dict[str, dict[str, Any]], mixer: str) -> dict[str, str]:
    """Each layer built with a built-in mixer other than the model's gets that mixer's section
    as its own options (the section was model-wide; a layer's own options start from
    defaults). Returns each section so given, with what became of it in words."""
    layers = model.get("layers")
    if not isinstance(layers, (list, dict)):
        return {}
    keys = list(layers) if isinstance(layers, dict) else list(range(len(layers)))
    given: dict[str, list[str]] = {}
    for key in keys:
        entry = layers[key]
        plain = {"variant": entry} if isinstance(entry, str) else entry
        if not isinstance(plain, dict):
            continue
        own = _layer_mixer(model, plain)
        if own == mixer or own not in sections:
            continue
        layers[key] = {**plain, "mixer_options": _merge(plain.get("mixer_options"), sections[own])}
        given.setdefault(own, []).append(str(key))
    return {name: f"model.{name} -> model.layers[{', '.join(at)}].mixer_options (the {name} mixer's layers)"
            for name, at in given.items()}


def _pop_sections(model: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {name: model.pop(name) or {} for name in SECTIONS if name in model}


def config_sections(data: dict[str, Any], saved: bool) -> list[str]:
    """A run config's (or a sweep's base config's) mixer sections as mixer options."""
    model = data.get("model")
    if not isinstance(model, dict) or not any(name in model for name in SECTIONS):
        return []
    sections = _pop_sections(model)
    mixer = model_mixer(model)
    done = _layers(model, sections, mixer)
    if mixer in sections:
        model["mixer_options"] = _merge(model.get("mixer_options"), sections[mixer])
        done[mixer] = f"model.{mixer} -> model.mixer_options (the model's mixer's options)"
    return [done.get(name, f"model.{name} dropped (no layer is built with the {name} mixer)") for name in sections]


def _arm_mixer(base: dict[str, Any], variant: str, settings: dict[str, Any]) -> str:
    return fixed_mixer(variant) or settings.get("model.mixer") or base.get("mixer") or "attention"


def renamed_point(name: str) -> str:
    """A grid point's folder name (`model.attention.qk_init_scale=8.0,train.steps=200`) with
    each former key as today's; a hashed name (`...~1a2b3c`), which hashes its keys, as it is."""
    if "~" in name:
        return name
    return ",".join(renamed_key(part) if "=" in part else part for part in name.split(","))


def renamed_key(key: str) -> str:
    for old, new in RENAMED_PREFIXES.items():
        if key.startswith(old):
            return new + key[len(old):]
    return key


def sweep_sections(data: dict[str, Any]) -> list[str]:
    """A sweep file's mixer sections and former keys: grid axes and arm keys renamed, the base
    config's sections given to the arms whose mixer read them (the base where every arm's
    mixer reads the same)."""
    sweep = data.get("sweep")
    if not isinstance(sweep, dict):
        return []
    changed = []
    grid = sweep.get("grid")
    if isinstance(grid, dict) and any(renamed_key(k) != k for k in grid):
        sweep["grid"] = {renamed_key(k): v for k, v in grid.items()}
        changed += [f"sweep.grid.{k} -> sweep.grid.{renamed_key(k)}" for k in grid if renamed_key(k) != k]
    variants = sweep.get("variants")
    if isinstance(variants, dict):
        for name, arm in variants.items():
            if isinstance(arm, dict) and any(renamed_key(k) != k for k in arm):
                variants[name] = {renamed_key(k): v for k, v in arm.items()}
                changed.append(f"sweep.variants.{name}: {', '.join(k for k in arm if renamed_key(k) != k)} -> "
                               f"model.mixer_options.*")
    model = data.get("model")
    if not isinstance(model, dict) or not any(name in model for name in SECTIONS) or variants is None \
            or model.get("layers"):  # a stack's sections: config_sections, layer by layer, on the base's variant
        return changed
    arms = {v: {"variant": v} for v in variants} if isinstance(variants, list) else \
        {name: dict(arm or {}) for name, arm in variants.items()}
    sections = _pop_sections(model)
    per_arm = {name: sections.get(_arm_mixer(model, arm.get("variant", name), arm), {}) for name, arm in arms.items()}
    first = next(iter(per_arm.values()), {})
    if all(options == first for options in per_arm.values()):
        if first:
            model["mixer_options"] = _merge(model.get("mixer_options"), first)
        changed.append(f"model.{' and model.'.join(sections)} -> model.mixer_options (what every arm's mixer read)")
        return changed
    sweep["variants"] = {}
    for name, arm in arms.items():
        own = {k: v for k, v in arm.items() if not (k == "variant" and v == name and isinstance(variants, list))}
        own.update({f"model.mixer_options.{k}": v for k, v in per_arm[name].items()})
        sweep["variants"][name] = own
    changed.append(f"model.{' and model.'.join(sections)} -> each arm's model.mixer_options (its mixer's): "
                   f"sweep.variants as arms")
    return changed


def command_sections(words: list[str]) -> list[str]:
    """A recorded command's overrides of former keys, as today's. Beside a
    `sweep.variants=[...]` whose variants' mixers would read an override differently (MixiT's
    option in a sweep of standard and mixit), that list becomes arms carrying it."""
    changed = []
    for i, word in enumerate(words):
        if word.startswith(("sweep.grid=", "sweep.variants=")) and any(old in word for old in RENAMED_PREFIXES):
            for old, new in RENAMED_PREFIXES.items():
                word = word.replace(old, new)
            changed.append(f"{words[i]} -> {word}")
            words[i] = word
    moved = [(i, w) for i, w in enumerate(words) if any(w.startswith(old) and "=" in w for old in RENAMED_PREFIXES)]
    if not moved:
        return changed
    listed = next((i for i, w in enumerate(words) if w.startswith("sweep.variants=")), None)
    variants = yaml.safe_load(words[listed].partition("=")[2]) if listed is not None else _file_variants(words)
    if not (isinstance(variants, list) and variants and all(isinstance(v, str) for v in variants)):
        for i, word in moved:  # the sweep file's variants, not in the command: each override as today's key
            key, _, value = word.partition("=")
            words[i] = f"{renamed_key(key)}={value}"
            changed.append(f"{key}= -> {renamed_key(key)}=")
        return changed
    # What each listed variant's mixer read of the overrides: option -> value as written.
    by_variant = {v: {w.partition("=")[0].rsplit(".", 1)[1]: w.partition("=")[2] for _, w in moved
                      if w.startswith(f"model.{fixed_mixer(v) or 'attention'}.")} for v in variants}
    first = by_variant[variants[0]]
    for i, _ in reversed(moved):
        del words[i]
    was = ", ".join(w for _, w in moved)
    if all(options == first for options in by_variant.values()):  # one setting for every variant (or none read)
        today = [f"model.mixer_options.{k}={value}" for k, value in first.items()]
        at = moved[0][0]
        words[at:at] = today
        changed.append(f"{was} -> {' '.join(today) or 'nothing (no listed variant read it)'}")
        return changed
    arms = {v: {f"model.mixer_options.{k}": yaml.safe_load(value) for k, value in options.items()}
            for v, options in by_variant.items()}
    text = yaml.safe_dump(arms, default_flow_style=True, width=10**6, sort_keys=False).strip()
    at = next((i for i, w in enumerate(words) if w.startswith("sweep.variants=")), None)
    given = words[at] if at is not None else f"the variants of {words[2]}"
    changed.append(f"{given} and {was} -> sweep.variants={text}")
    if at is None:
        words.insert(moved[0][0], f"sweep.variants={text}")
    else:
        words[at] = f"sweep.variants={text}"
    return changed


def _file_variants(words: list[str]) -> Any:
    """The variants of the sweep file a recorded `modformer sweep FILE [--profile P]...` names,
    read from here (the repository's root, as the commands are recorded); None where there is
    no such file to read."""
    from .configtools import get_dotted, read_yaml
    from .errors import ConfigError

    if words[:2] != ["modformer", "sweep"] or len(words) < 3:
        return None
    try:
        data = read_yaml(words[2])
    except (ConfigError, OSError):
        return None
    variants = get_dotted(data, "sweep.variants")
    profiles = data.get("profiles") if isinstance(data.get("profiles"), dict) else {}
    for name in (words[i + 1] for i, w in enumerate(words[:-1]) if w == "--profile"):  # later profiles win
        profile = profiles.get(name) if isinstance(profiles.get(name), dict) else {}
        variants = profile.get("sweep.variants", (profile.get("sweep") or {}).get("variants", variants))
    return variants
