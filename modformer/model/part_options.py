"""A part's own options, and the contract a part of yours keeps.

A part (a mixer or feed-forward module, ours or yours) that has options declares them as a
dataclass `Options` beside it, with fields declared by `option(default, help)` (from
`modformer.configtools`, the same helper every config section of this library uses, so
each option's documentation sits where it is declared). The config gives them under
`model.mixer_options` / `model.ffn_options`, checked like every other key (unknown key,
wrong type, the dataclass's own `__post_init__` raising ValueError: one line naming the key),
and the part is called as `part(cfg, options)`; a part without `Options` is called as
`part(cfg)` and takes no options. The run's config.yaml records every option resolved,
defaults included (`resolved_options`), and run.json the part's import path and the
version of the code that held it, so a run rebuilds the model it trained even after the
part's defaults change. `modformer train --help CONFIG` and `modformer list --options`
show every option with its type, default and help.

The contract (what `build_model` and the probe before every training expect):

- `cfg` is the resolved `ModelConfig`: read `cfg.d_model`, `cfg.n_heads`, `cfg.head_dim`,
  `cfg.ffn_dim` (d_ff, or 4 d_model), `cfg.max_seq_len` (the task's length unless set),
  `cfg.vocab_size`, `cfg.init_std`. Ours keep theirs as yours do: `AttentionOptions`
  (modformer/model/attention.py), `MixingOptions` (modformer/model/mixing.py).
- forward maps x (B, T, d_model) to a tensor of the same shape and dtype. A mixer may also
  take `forward(x, cache)` (a `LayerCache`) for cached generation; without it generation
  recomputes the sequence. A mixer is causal (position t reads positions <= t) unless it
  sets the attribute `causal = False`, which makes the whole model bidirectional.
- internals worth reading go through `HookPoint`s (modformer/model/hooks.py): a mixer's
  (B, heads, T, T) weights through a submodule named `pattern` are what `capture`,
  `modformer attention` and `train.induction_scores` read.
- initialisation (modformer/model/init.py), from the run's seed: an nn.Linear's weight is
  redrawn Normal(0, model.init_std) and its bias zeroed; any other parameter of 2+
  dimensions (a convolution's filter, a matrix of yours) is redrawn Normal(0, init_std) too,
  which overwrites what the constructor set; vectors and scalars keep their constructor's
  values (drawn from the run's seed). A part with its own scheme defines
  `init_parameters(self, std, generator)`, and its whole subtree is left to it.
- a part that raises while it is built, whose signature does not take what it is called
  with, or that is not an nn.Module (a factory returning None) is one ConfigError naming it
  (`make_part`); one whose forward returns the wrong thing is refused by the probe before
  anything is written (modformer/model/probe.py).
- a part built for one block may take a keyword `layer` (its index, 0 at the bottom; the
  number of layers is `cfg.n_layers`), e.g. to initialise deeper layers differently.
- options may be annotated int, float, bool, str, `Literal[...]`, an `Enum` (given by its
  value or name, recorded by its value), `list[T]`, `tuple[...]`, `dict[str, T]`, `T | None`
  and other unions of these, or a nested dataclass of such fields; any other annotation is
  refused in one line when the part is first named (`configtools.check_option_types`).

    @dataclass
    class ConvOptions:
        kernel: int = option(4, "how many positions the convolution reads")

    class CausalConv(nn.Module):
        Options = ConvOptions

        def __init__(self, cfg: ModelConfig, options: ConvOptions): ...
"""

from __future__ import annotations

import inspect
from typing import Any

from torch import nn

from ..configtools import check_option_types, from_dict, to_dict
from ..errors import ConfigError
from ..registry import Registry
from .probe import where


def part_options(registry: Registry, name: str, options: dict[str, Any] | None, key: str) -> Any | None:
    """The checked `Options` of part `name` from the config's plain `options` (None for a part
    without options; giving it some is an error that says where its options are, if anywhere).

    Args:
        registry: the registry the part is registered in (`MIXERS`, `FFNS`).
        name: the part's name in that registry (or an import path or entry point it resolves).
        options: the options as given in the config, plain data; None or {}: none given.
        key: the config key they were given under (e.g. `model.mixer_options`), named in errors.

    Returns:
        An instance of the part's `Options` dataclass, defaults filled in and checked; None for
            a part without `Options`.

    Raises:
        ConfigError: an unknown key or a wrong value, or options given to a part without them.
    """
    part = registry[name]
    cls = getattr(part, "Options", None)
    if cls is None:
        if options:
            raise ConfigError(f"{key}: {registry.kind} '{name}' takes no options (it declares no `Options`)")
        return None
    check_option_types(cls, f"{registry.key}={name}")
    return from_dict(cls, options or {}, key)


def resolved_options(registry: Registry, name: str, options: dict[str, Any] | None, key: str) -> dict[str, Any]:
    """Every option of part `name`, defaults filled in, as plain data (what config.yaml records);
    {} for a part without options.

    Args:
        registry: the registry the part is registered in (`MIXERS`, `FFNS`).
        name: the part's name in that registry.
        options: the options as given in the config, plain data; None or {}: none given.
        key: the config key they were given under (e.g. `model.mixer_options`), named in errors.

    Returns:
        Every option by name, plain data, defaults included; {} for a part without options.
    """
    checked = part_options(registry, name, options, key)
    return {} if checked is None else to_dict(checked)


def make_part(registry: Registry, name: str, options: dict[str, Any] | None, key: str, cfg,
              layer: int | None = None) -> nn.Module:
    """One instance of part `name`, called with the model config and, if it has them, its
    options. A part that declares `Options` but takes none, or that raises while it is built,
    is one ConfigError naming it (and where it raised), not a traceback from inside the build.

    Args:
        registry: the registry the part is registered in (`MIXERS`, `FFNS`).
        name: the part's name in that registry.
        options: the options as given in the config, plain data; None or {}: none given.
        key: the config key they were given under (e.g. `model.mixer_options`), named in errors.
        cfg (ModelConfig): the resolved model config, the part's first argument.
        layer: the index of the block it is built for (0 at the bottom), passed as `layer=` to
            a part whose signature has a parameter of that name; None: not passed.

    Returns:
        The part built as `part(cfg, options)`, or `part(cfg)` for a part without `Options`
            (with `layer=i` where it takes one).
    """
    checked = part_options(registry, name, options, key)
    part = registry[name]
    what = f"{registry.key}={name}"
    args = (cfg,) if checked is None else (cfg, checked)
    kwargs: dict[str, Any] = {}
    try:
        signature = inspect.signature(part)
        if layer is not None and "layer" in signature.parameters:
            kwargs["layer"] = layer
        signature.bind(*args, **kwargs)
    except TypeError:
        call = "part(cfg, options), as it declares Options" if checked is not None else \
            "part(cfg), as it declares no Options"
        raise ConfigError(f"{what} is called as {call}, but its signature {signature} does not take that: "
                          f"define __init__(self, cfg{', options' if checked is not None else ''})") from None
    except ValueError:  # no signature to read (a builtin): let the call say
        pass
    try:
        built = part(*args, **kwargs)
    except ConfigError:
        raise
    except Exception as e:
        raise ConfigError(f"{what} raised {e.__class__.__name__} while building{where(e)}: {e}") from None
    if not isinstance(built, nn.Module):
        raise ConfigError(f"{what} built {type(built).__name__ if built is not None else 'None'}, not a module: a "
                          f"part must be an nn.Module subclass, or a function returning one")
    return built
