"""Name -> implementation registries for mixers, feed-forward modules, variants and tasks.

A part is found by any of three names, so that a part of yours needs no edit of this
repository and a run config stays self-contained (a sweep's worker processes, a reloaded
run, another machine find the part from the config alone):

- a name registered in this library (`attention`, `mixit`, ...): a new file with one
  decorated function or class, nothing else;
- an import path, `package.module:attribute` (e.g. `model.mixer: mypkg.conv:CausalConv`),
  imported when first named; the current directory is searched too, as `python -m` does;
- a name a package declares as an entry point in the group `modformer.<registry>`
  (`modformer.mixers`, `modformer.ffns`, `modformer.variants`, `modformer.tasks`), e.g. in
  its pyproject.toml: `[project.entry-points."modformer.mixers"] conv = "mypkg.conv:CausalConv"`.
"""

from __future__ import annotations

import importlib
import os
import sys
from importlib.metadata import entry_points
from typing import Any, Callable, Generic, Iterator, TypeVar

from .errors import ConfigError

T = TypeVar("T")


def import_path(path: str, key: str) -> Any:
    """The object at `package.module:attribute`; one clear ConfigError naming `key` otherwise.

    Args:
        path: an import path, `package.module:attribute` (the attribute may be dotted).
        key: the config key that named it (e.g. `model.mixer`), for the error message.

    Returns:
        The module's attribute (a class, function or other object).
    """
    module_name, _, attribute = path.partition(":")
    if not module_name or not attribute or module_name.startswith("."):
        raise ConfigError(f"{key}: '{path}' is not an import path of the form package.module:attribute"
                          + (" (absolute: a relative one has no package to start from)"
                             if module_name.startswith(".") else ""))
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.append(os.getcwd())  # as `python -m` would; after installed packages
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise ConfigError(f"{key}: cannot import module '{module_name}' for '{path}' ({e}); install it, put it on "
                          f"PYTHONPATH or run from the folder that holds it") from None
    except (Exception, SystemExit) as e:  # the module itself fails as it is imported: say where
        raise ConfigError(f"{key}: importing module '{module_name}' for '{path}' raised "
                          f"{e.__class__.__name__}{_where_in(e)}: {e}") from None
    obj = module
    for part in attribute.split("."):
        if not hasattr(obj, part):
            raise ConfigError(f"{key}: module '{module_name}' has no '{attribute}' (for '{path}')")
        obj = getattr(obj, part)
    return obj


def _where_in(error: BaseException) -> str:
    """' (file.py, line N)': where an import failed, the innermost frame or a syntax error's line."""
    if isinstance(error, SyntaxError) and error.filename:
        return f" ({error.filename}, line {error.lineno})"
    tb = error.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return f" ({tb.tb_frame.f_code.co_filename}, line {tb.tb_lineno})" if tb is not None else ""


class Registry(Generic[T]):
    """Names -> parts of one kind (variants, mixers, feed-forward modules, tasks), also found by
    import path (`package.module:Name`) or by other packages' entry points.

    Args:
        kind: what is registered, for messages ("variant").
        key: the config key that selects one, for messages ("model.variant").
        group: the entry-point group other packages register theirs under ("modformer.variants").
        adapt: checks (and may wrap) a part found by import path or entry point; None: taken as is.
    """

    def __init__(self, kind: str, key: str, group: str, adapt: Callable[[object], T] | None = None):
        self.kind = kind  # what is registered, for messages ("variant")
        self.key = key  # the config key that selects one, for messages ("model.variant")
        self.group = group  # the entry-point group of other packages' parts ("modformer.variants")
        self._adapt = adapt or (lambda item: item)  # checks (and may wrap) a part found by path or entry point
        self._items: dict[str, T] = {}
        self._aliases: dict[str, str] = {}  # an old name -> the name it is registered under now

    def register(self, name: str) -> Callable[[T], T]:
        def add(item: T) -> T:
            if name in self._items or name in self._aliases:
                raise ValueError(f"{self.kind} '{name}' is registered twice")
            self._items[name] = item
            return item

        return add

    def alias(self, old: str, new: str) -> None:
        """Let `old`, a former name, find what is registered as `new` (configs and records
        written before a rename keep working; `canonical` gives the name to record)."""
        if old in self._items or old in self._aliases:
            raise ValueError(f"{self.kind} '{old}' is registered twice")
        self._aliases[old] = new

    def canonical(self, name: object) -> object:
        """The name a part is registered under now: `name` itself unless it is a former name."""
        return self._aliases.get(name, name) if isinstance(name, str) else name

    def aliases(self) -> dict[str, str]:
        """Former names -> the names they find now."""
        return dict(self._aliases)

    def _entry_point(self, name: str):
        found = [ep for ep in entry_points(group=self.group) if ep.name == name]
        if not found:
            return None
        try:
            return found[0].load()
        except Exception as e:  # a broken plugin package: say which
            raise ConfigError(f"{self.key}: the entry point '{name}' of group {self.group} ({found[0].value}) "
                              f"does not load: {e.__class__.__name__}: {e}") from None

    def __getitem__(self, name: str) -> T:
        name = self.canonical(name)
        if name in self._items:
            return self._items[name]
        if not isinstance(name, str):
            raise ConfigError(f"{self.key}: expected the name of a {self.kind}, got {name!r}")
        item = import_path(name, self.key) if ":" in name else self._entry_point(name)
        if item is None:
            raise ConfigError(
                f"{self.key}: unknown {self.kind} '{name}' (known: {', '.join(sorted(self._items))}; or an import "
                f"path package.module:attribute, or an entry point of group {self.group})")
        self._items[name] = self._adapt(item)
        return self._items[name]

    def same(self, a: object, b: object) -> bool:
        """Whether two names find the same part: one name, or an entry-point alias and the import
        path of one class (`conv` and `mypkg.conv:CausalConv`)."""
        if a == b:
            return True
        if not (isinstance(a, str) and isinstance(b, str)):
            return False
        try:
            return self[a] is self[b]
        except ConfigError:  # a name that finds nothing is no other name's part (its own use says why)
            return False

    def __contains__(self, name: str) -> bool:
        return self.canonical(name) in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._items))

    def names(self) -> list[str]:
        return sorted(self._items)

    def installed(self) -> list[str]:
        """Names other packages declare in this registry's entry-point group (not loaded)."""
        return sorted(ep.name for ep in entry_points(group=self.group))


def _expect(key: str, what: str, test: Callable[[object], bool]) -> Callable[[object], object]:
    def check(item):
        if not test(item):
            raise ConfigError(f"{key}: {item!r} is not {what}")
        return item

    return check


MIXERS: Registry[Callable] = Registry(
    "mixer", "model.mixer", "modformer.mixers",
    _expect("model.mixer", "a mixer: a class or function called with the model config (and its options)", callable))
FFNS: Registry[Callable] = Registry(
    "feed-forward module", "model.ffn", "modformer.ffns",
    _expect("model.ffn", "a feed-forward module: a class or function called with the model config", callable))
VARIANTS: Registry = Registry(
    "variant", "model.variant", "modformer.variants",
    _expect("model.variant", "a variant (modformer.variants.Variant: a builder plus a freeze specification)",
            lambda v: hasattr(v, "build") and hasattr(v, "freeze")))
TASKS: Registry = Registry(
    "task", "task.name", "modformer.tasks",
    _expect("task.name", "a task (a modformer.tasks.base.Task subclass with its Config)",
            lambda t: isinstance(t, type) and hasattr(t, "Config")))
