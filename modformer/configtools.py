"""Typed dataclass configs: documented fields, strict loading from dicts, dotted overrides.

A config section is a dataclass whose fields are declared with `option(default, help)`, so
each field's documentation sits where it is declared and the CLI help is generated from it.
`from_dict` builds a section from plain data (parsed YAML), rejecting unknown keys and
values of the wrong type with a `ConfigError` that names the dotted key.
"""

from __future__ import annotations

import dataclasses
import enum
import math
import types
import typing
from pathlib import Path
from typing import Any, Literal, Union

import yaml

from .errors import ConfigError

_MISSING = dataclasses.MISSING


class _StrictLoader(yaml.SafeLoader):
    """safe_load that refuses a key given twice in one mapping (plain YAML keeps the last,
    silently dropping the first section)."""

    def construct_mapping(self, node, deep=False):
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            line = key_node.start_mark.line + 1
            if key in seen:
                raise ConfigError(f"key '{key}' is given twice in one mapping (lines {seen[key]} and {line})")
            seen[key] = line
        return super().construct_mapping(node, deep=deep)


MAX_CONFIG_BYTES = 16 * 2 ** 20  # a config is kilobytes; a bigger file is not one (and would be read whole)
MAX_INT = 2 ** 63 - 1  # the largest integer torch and numpy take (a seed, a size)


def read_yaml(path: str | Path) -> dict[str, Any]:
    """A config file as plain data: a mapping, at least one key, no key twice in a mapping."""
    path = Path(path)
    try:
        if path.exists() and not path.is_file():  # a folder, a device (/dev/zero), a pipe
            raise ConfigError(f"config file {path} is not a regular file")
        if path.exists() and path.stat().st_size > MAX_CONFIG_BYTES:
            raise ConfigError(f"config file {path} is {path.stat().st_size:,} bytes, more than a config holds "
                              f"({MAX_CONFIG_BYTES:,} at most)")
        text = path.read_text()
    except FileNotFoundError:
        raise ConfigError(f"config file not found: {path}") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"cannot read config file {path}: {e.__class__.__name__}") from None
    try:
        data = yaml.load(text, Loader=_StrictLoader)
    except ConfigError as e:
        raise ConfigError(f"config file {path}: {e}") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark else ""
        raise ConfigError(f"config file {path} is not valid YAML{where}") from None
    except RecursionError:
        raise ConfigError(f"config file {path} nests deeper than a config does") from None
    except TypeError as e:  # a key YAML cannot hash (a list as a key)
        raise ConfigError(f"config file {path}: {e} (a key must be a name, not a list or mapping)") from None
    if data is None or data == {}:
        raise ConfigError(f"config file {path} is empty (no keys); give at least the sections it changes, "
                          f"e.g. 'task: {{name: retrieval}}'")
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path} must hold a mapping with sections model, task, train")
    return data


def option(default: Any = dataclasses.MISSING, help: str = "", *,
           default_factory: Any = dataclasses.MISSING) -> Any:
    """Declare a config field with its documentation (shown by `modformer ... --help`).

    Args:
        default: the field's default value (immutable; lists and dicts take `default_factory`).
        help: what the field means, shown by `--help` and on these pages.
        default_factory: a function of no arguments returning the default (e.g. `list`).

    Returns:
        A `dataclasses.field` carrying `help` in its metadata.
    """
    if default is not _MISSING and isinstance(default, (list, dict, set)):
        raise TypeError("use default_factory for mutable defaults")
    return dataclasses.field(default=default, default_factory=default_factory, metadata={"help": help})


def check_seeds(section: Any, prefix: str, *names: str) -> None:
    """Refuse a negative seed (numpy's generators take none) among `section`'s fields `names`
    (an int, a list of ints, or None), naming `prefix.name`."""
    for name in names:
        value = getattr(section, name)
        if any(v is not None and v < 0 for v in (value if isinstance(value, list) else [value])):
            raise ConfigError(f"{prefix}.{name} must be a seed >= 0, got {value}")


def field_help(cls: type, name: str) -> str:
    return next(f.metadata.get("help", "") for f in dataclasses.fields(cls) if f.name == name)


def _type_name(tp: Any) -> str:
    origin = typing.get_origin(tp)
    if origin in (Union, types.UnionType):
        return " | ".join(_type_name(a) for a in typing.get_args(tp))
    if origin is Literal:
        return "one of " + ", ".join(str(a) for a in typing.get_args(tp))
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return "one of " + ", ".join(str(m.value) for m in tp)
    if origin is not None:
        return f"{origin.__name__}[{', '.join(_type_name(a) for a in typing.get_args(tp))}]"
    return "null" if tp is type(None) else getattr(tp, "__name__", str(tp))


def coerce(value: Any, tp: Any, key: str) -> Any:
    """Check `value` against the annotation `tp`, converting only where it loses nothing
    (an int where a float is expected, a list where a tuple is expected)."""
    origin = typing.get_origin(tp)
    if origin in (Union, types.UnionType):
        for arg in typing.get_args(tp):
            try:
                return coerce(value, arg, key)
            except ConfigError:
                pass
        raise ConfigError(f"{key}: expected {_type_name(tp)}, got {value!r}")
    if tp is type(None):
        if value is None:
            return None
    elif tp is Any:
        return value
    elif origin is Literal:
        if any(value == choice and type(value) is type(choice) for choice in typing.get_args(tp)):
            return value
    elif isinstance(tp, type) and issubclass(tp, enum.Enum):
        if isinstance(value, tp):
            return value
        for member in tp:  # by value (what YAML records) first
            if member.value == value and type(member.value) is type(value):
                return member
        for member in tp:  # then by name
            if member.name == value:
                return member
    elif dataclasses.is_dataclass(tp):
        if isinstance(value, tp):
            return value
        if isinstance(value, dict):
            return from_dict(tp, value, key)
    elif origin in (list, tuple):
        args = typing.get_args(tp)
        if isinstance(value, (list, tuple)):
            if origin is list:
                return [coerce(v, args[0], f"{key}[{i}]") for i, v in enumerate(value)]
            if len(args) == 2 and args[1] is Ellipsis:
                return tuple(coerce(v, args[0], f"{key}[{i}]") for i, v in enumerate(value))
            if len(value) == len(args):
                return tuple(coerce(v, a, f"{key}[{i}]") for i, (v, a) in enumerate(zip(value, args)))
    elif origin is dict:
        kt, vt = typing.get_args(tp)
        if isinstance(value, dict):
            return {coerce(k, kt, key): coerce(v, vt, f"{key}.{k}") for k, v in value.items()}
    elif tp is float:
        number = None
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            number = float(value)
        elif isinstance(value, str):  # YAML 1.1 reads `3e-3` (no dot) as a string
            try:
                number = float(value)
            except ValueError:
                pass
        if number is not None:
            if not math.isfinite(number):  # NaN or infinity reaches no setting meaningfully
                raise ConfigError(f"{key}: expected a finite number, got {value!r}")
            return number
    elif tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            if abs(value) > MAX_INT:
                raise ConfigError(f"{key}: {value} is beyond the 64-bit integers torch and numpy take")
            return value
    elif isinstance(tp, type) and isinstance(value, tp):
        return value
    raise ConfigError(f"{key}: expected {_type_name(tp)}, got {value!r}")


def from_dict(cls: type, data: dict[str, Any] | None, prefix: str = "") -> Any:
    """Build dataclass `cls` from `data`; unknown keys and wrong types name their dotted key."""
    data = {} if data is None else data
    where = prefix or "config"
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: expected a mapping of keys to values, got {data!r}")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    unknown = [k for k in data if k not in fields]
    if unknown:
        key = f"{prefix}.{unknown[0]}" if prefix else str(unknown[0])
        raise ConfigError(f"unknown config key '{key}' (known keys in {where}: {', '.join(fields)})")
    kwargs = {k: coerce(v, hints[k], f"{prefix}.{k}" if prefix else k) for k, v in data.items()}
    try:
        return cls(**kwargs)
    except ConfigError:
        raise
    except ValueError as e:  # a section's own check (`__post_init__`), e.g. a plugin part's options
        raise ConfigError(f"{where}: {e}") from None


def to_dict(obj: Any) -> Any:
    """Plain data (dicts, lists, scalars) for YAML or JSON; an Enum member as its value."""
    if isinstance(obj, enum.Enum):
        return to_dict(obj.value)
    if dataclasses.is_dataclass(obj):
        return {f.name: to_dict(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, (list, tuple)):
        return [to_dict(v) for v in obj]
    if isinstance(obj, dict):
        return {k: to_dict(v) for k, v in obj.items()}
    return obj


def apply_override(data: dict[str, Any], assignment: str) -> None:
    """Apply one `a.b.c=value` override to nested plain data; the value is parsed as YAML."""
    if "=" not in assignment:
        raise ConfigError(f"override '{assignment}' is not of the form key=value (e.g. train.steps=200)")
    key, raw = assignment.split("=", 1)
    if not key or any(not part for part in key.split(".")):
        raise ConfigError(f"override '{assignment}': empty key")
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError as e:
        raise ConfigError(f"override '{assignment}': cannot parse value ({e.__class__.__name__})") from None
    set_dotted(data, key, value, f"override '{assignment}'")


def flatten(data: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested sections as dotted keys: {"train": {"lr": 1}} -> {"train.lr": 1}."""
    out: dict[str, Any] = {}
    for key, value in data.items():
        name = f"{prefix}.{key}" if prefix else key
        out.update(flatten(value, name) if isinstance(value, dict) else {name: value})
    return out


def set_dotted(data: dict[str, Any], key: str, value: Any, where: str) -> None:
    """data[a][b][c] = value for key 'a.b.c', creating sections; `where` prefixes errors."""
    node = data
    parts = key.split(".")
    for i, part in enumerate(parts[:-1]):
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise ConfigError(f"{where}: '{'.'.join(parts[: i + 1])}' is not a section")
        node = child
    node[parts[-1]] = value


def get_dotted(data: dict[str, Any], key: str, *, strict: bool = False) -> Any:
    """data[a][b][c] for key 'a.b.c'; None where a section or the key is missing (KeyError
    with `strict`)."""
    node: Any = data
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            if strict:
                raise KeyError(key)
            return None
        node = node[part]
    return node


def describe(cls: type, prefix: str) -> list[tuple[str, str, str, str]]:
    """(dotted key, type, default, help) for every field, recursing into nested sections."""
    hints = typing.get_type_hints(cls)
    rows = []
    for f in dataclasses.fields(cls):
        key = f"{prefix}.{f.name}" if prefix else f.name
        tp = hints[f.name]
        if dataclasses.is_dataclass(tp):
            rows += describe(tp, key)
            continue
        default = f.default if f.default is not _MISSING else (
            f.default_factory() if f.default_factory is not _MISSING else "(required)")
        shown = default if isinstance(default, str) and default == "(required)" else repr(to_dict(default))
        rows.append((key, _type_name(tp), shown, f.metadata.get("help", "")))
    return rows


SUPPORTED_TYPES = ("int, float, bool, str, Literal[...] of those, an Enum, list[T], tuple[T, ...], tuple[T1, T2], "
                   "dict[str, T], T | None and other unions of these, Any, and a nested dataclass of such fields")


def _supported(tp: Any) -> bool:
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (Union, types.UnionType):
        return all(_supported(a) for a in args)
    if origin is Literal:
        return all(isinstance(a, (int, float, bool, str)) for a in args)
    if origin is list:
        return bool(args) and _supported(args[0])
    if origin is tuple:
        return bool(args) and all(_supported(a) for a in args if a is not Ellipsis)
    if origin is dict:
        return bool(args) and args[0] is str and _supported(args[1])
    if dataclasses.is_dataclass(tp):
        return all(_supported(t) for t in typing.get_type_hints(tp).values())
    return tp in (int, float, bool, str, type(None), Any) or isinstance(tp, type) and issubclass(tp, enum.Enum)


def check_option_types(cls: type, where: str) -> None:
    """Refuse, in one line, an options dataclass with a field this module cannot read from YAML
    and write back (see SUPPORTED_TYPES), or a class that is not a dataclass at all."""
    if not (isinstance(cls, type) and dataclasses.is_dataclass(cls)):
        raise ConfigError(f"{where}: its Options must be a dataclass (@dataclass, fields declared with option(...)), "
                          f"got {cls!r}")
    try:
        hints = typing.get_type_hints(cls)
    except Exception as e:  # an annotation naming what its module cannot see
        raise ConfigError(f"{where}: cannot read the annotations of {cls.__name__}: {e}") from None
    for f in dataclasses.fields(cls):
        if not _supported(hints[f.name]):
            raise ConfigError(f"{where}: option '{f.name}' has the type {hints[f.name]!r}, which a config cannot "
                              f"give; options may be {SUPPORTED_TYPES}")


def key_lines(rows: list[tuple[str, str, str, str]], width: int | None = None) -> list[str]:
    """Help lines for `describe` rows: key (padded to `width`, default the longest), meaning,
    type and default."""
    width = max((len(r[0]) for r in rows), default=0) if width is None else width
    return [f"  {key:<{width}}  {text} [{tp}, default {default}]" for key, tp, default, text in rows]
