"""The folder name of a sweep's grid point: `train.lr=0.001,train.batch_size=128`.

A run lives in `runs/<arm>/<point>/seed<N>`; the point's name is made of its settings, so
that a folder says what ran there. A value that is a list or a mapping is written plainly
too: `model.layers=mixit+mixit+mixit+standard` (a list's items joined by `+`),
`model.layers=-1=standard` (a mapping's `key=value` pairs, joined the same way), not the
Python text of the value with its brackets and quotes made `_`.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import re
from collections import Counter
from typing import Any, Callable, Mapping, Sequence

Point = Sequence[tuple[str, Any]]


def file_safe(name: str) -> str:
    """`name` with the characters unsafe in a file name (`:` of an import path, `/`) made `_`."""
    return re.sub(r"[^A-Za-z0-9_.,=+-]", "_", name)


def grid_points(grid: Mapping[str, Sequence[Any]]) -> list[tuple[tuple[str, Any], ...]]:
    """Every point of a grid ({axis: values}), the first axis outermost."""
    keys = list(grid)
    return [tuple(zip(keys, values)) for values in itertools.product(*(grid[k] for k in keys))]


def value_name(value: Any) -> str:
    """A grid value as a folder name writes it: a list's items joined by `+` ('empty' where
    it has none), a mapping's `key=value` pairs likewise, anything else as `str` does."""
    if isinstance(value, Mapping):
        return "+".join(f"{value_name(k)}={value_name(v)}" for k, v in value.items()) or "empty"
    if isinstance(value, (list, tuple)):
        return "+".join(value_name(v) for v in value) or "empty"
    return str(value)


def readable_name(point: Point) -> str:
    """A point's plain folder name (before `point_names` makes names unique)."""
    return file_safe(",".join(f"{k}={value_name(v)}" for k, v in point) or "default")


def point_names(points: Sequence[Point], name: Callable[[Point], str] = readable_name) -> list[str]:
    """Each grid point's folder name, `name(point)`, unique in its sweep. Where that name is
    shared by several points ("a/b" and "a_b", None and "None", [1, 2] and "1+2") or too long
    for a file name, it ends with `~` and a hash of the point's values instead (no plain name
    contains `~`)."""
    def hashed(point: Point, plain: str) -> str:
        exact = json.dumps([[k, v] for k, v in point], default=repr)  # tells None from "None", 1 from "1"
        return f"{plain[:200]}~{hashlib.sha256(exact.encode()).hexdigest()[:10]}"

    names = [name(p) for p in points]
    counts = Counter(names)  # the grid's points are distinct
    return [n if counts[n] == 1 and len(n) <= 255 else hashed(p, n) for p, n in zip(points, names)]
