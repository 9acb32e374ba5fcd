"""A part's own options: a part (a mixer or feed-forward module, ours or yours) that has
options declares them as a dataclass `Options` beside it, with `option(default, help)` fields;
the config gives them under `model.mixer_options` / `model.ffn_options`, checked like every
other key (unknown key, wrong type: one line), and the part is called as `part(cfg, options)`.
A part without `Options` is called as `part(cfg)` and takes no options.

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

from ..configtools import from_dict, to_dict
from ..errors import ConfigError
from ..registry import Registry
from .probe import where

# Where our own parts keep their options (sections of the model config, older than `Options`).
BUILT_IN_SECTIONS = {"attention": "model.attention", "mixing": "model.mixing"}


def part_options(registry: Registry, name: str, options: dict[str, Any] | None, key: str) -> Any | None:
    """The checked `Options` of part `name` from the config's plain `options` (None for a part
    without options; giving it some is an error that says where its options are, if anywhere)."""
    part = registry[name]
    cls = getattr(part, "Options", None)
    if cls is None:
        if options:
            where = BUILT_IN_SECTIONS.get(name)
            raise ConfigError(f"{key}: {registry.kind} '{name}' takes no options here"
                              + (f" (its options are the keys of {where})" if where else ""))
        return None
    return from_dict(cls, options or {}, key)


def resolved_options(registry: Registry, name: str, options: dict[str, Any] | None, key: str) -> dict[str, Any]:
    """Every option of part `name`, defaults filled in, as plain data (what config.yaml records);
    {} for a part without options."""
    checked = part_options(registry, name, options, key)
    return {} if checked is None else to_dict(checked)


def make_part(registry: Registry, name: str, options: dict[str, Any] | None, key: str, cfg) -> nn.Module:
    """One instance of part `name`, called with the model config and, if it has them, its
    options. A part that declares `Options` but takes none, or that raises while it is built,
    is one ConfigError naming it (and where it raised), not a traceback from inside the build."""
    checked = part_options(registry, name, options, key)
    part = registry[name]
    what = f"{registry.key}={name}"
    args = (cfg,) if checked is None else (cfg, checked)
    try:
        signature = inspect.signature(part)
        signature.bind(*args)
    except TypeError:
        call = "part(cfg, options), as it declares Options" if checked is not None else \
            "part(cfg), as it declares no Options"
        raise ConfigError(f"{what} is called as {call}, but its signature {signature} does not take that: "
                          f"define __init__(self, cfg{', options' if checked is not None else ''})") from None
    except ValueError:  # no signature to read (a builtin): let the call say
        pass
    try:
        return part(*args)
    except ConfigError:
        raise
    except Exception as e:
        raise ConfigError(f"{what} raised {e.__class__.__name__} while building{where(e)}: {e}") from None
