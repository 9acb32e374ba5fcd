"""A sweep's plan, fixed at its first launch: what it compares, over which grid and seeds, and
by which metric, with the code version that fixed it; each later change an amendment.

`plan.yaml` in the sweep folder holds the plan as the first launch wrote it and every
amendment after it, each with its date, its reason and what it changed in words:

    fixed: '2026-12-07T00:10:00+0000'
    code_version: 0.1.0+4c1d2e3f
    plan: {variants: [standard, frozen_qk], grid: {train.steps: [800]}, seeds: [0, 1, 2], ...}
    amendments:
    - date: '2026-12-08T09:00:00+0000'
      reason: stage 2 of the plan, after stage 1 left Frozen-QK undecided
      changed: ['grid train.steps: [800] -> [800, 3200]']
      plan: {...}                      # the plan as it stands after this amendment

A sweep started again with the same plan runs on; one that grows it (more arms, seeds or grid
values, which `modformer sweep` otherwise allows in place) or changes its metric or its
verdicts' parameters (`sweep.verdict`) is refused unless the command says why (`--amend REASON`), which records the amendment. Reports show
the plan and each amendment beside the figures. A folder whose first runs were made before
plans were recorded has no plan.yaml until its first amendment, and its report says so.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import yaml

from ..errors import ModformerError
from ..files import atomic_write_text
from ..version import code_version

PLAN_KEYS = ("variants", "grid", "seeds", "metric", "mode", "verdict")  # what a plan fixes of the sweep section
NAME = "plan.yaml"


def plan_of(sweep: dict[str, Any]) -> dict[str, Any]:
    """The plan's part of a sweep section (plain data); the verdict's parameters as those it
    declares (a sweep saved before they existed declares none)."""
    return {key: _declared(sweep.get(key)) if key == "verdict" else sweep.get(key) for key in PLAN_KEYS}


def _declared(verdict: Any) -> dict[str, Any]:
    return {k: v for k, v in verdict.items() if v is not None} if isinstance(verdict, dict) else {}


def read_plan(folder: Path) -> dict[str, Any] | None:
    """A sweep folder's plan.yaml as plain data; None where it has none."""
    path = Path(folder) / NAME
    if not path.exists():
        return None
    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as e:
        raise ModformerError(f"cannot read {path} ({e.__class__.__name__})") from None
    if not isinstance(data, dict) or not isinstance(data.get("plan"), dict):
        raise ModformerError(f"{path} holds no plan (empty or damaged)")
    return data


def current(record: dict[str, Any]) -> dict[str, Any]:
    """The plan as it stands: the first, or the last amendment's."""
    amendments = record.get("amendments") or []
    return amendments[-1]["plan"] if amendments else record["plan"]


def _words(value: Any) -> str:
    return json.dumps(value, default=repr)


def changes(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """What `new` changes of plan `old`, in words ('seeds: [0, 1, 2] -> [0, 1, 2, 3]')."""
    said = []
    for key in PLAN_KEYS:
        a, b = old.get(key), new.get(key)
        if key == "verdict":  # a plan recorded before verdicts were planned declares none
            a, b = _declared(a), _declared(b)
        if key == "grid" and isinstance(a, dict) and isinstance(b, dict):
            said += [f"grid {axis}: {_words(a.get(axis))} -> {_words(b.get(axis))}" for axis in dict.fromkeys([*a, *b])
                     if a.get(axis) != b.get(axis)]
        elif _words(a) != _words(b):
            said.append(f"{key}: {_words(a)} -> {_words(b)}")
    return said


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")


def fix_plan(folder: Path, sweep: dict[str, Any]) -> None:
    """Write the plan of a sweep launched for the first time in `folder`."""
    record = {"fixed": _now(), "code_version": code_version(), "plan": plan_of(sweep), "amendments": []}
    atomic_write_text(Path(folder) / NAME, yaml.safe_dump(record, sort_keys=False))


def check_plan(folder: Path, saved: dict[str, Any], sweep: dict[str, Any], amend: str | None) -> list[str]:
    """What starting `sweep` again in `folder` (whose saved sweep section is `saved`) changes
    of its plan; refused in one line where it changes something and `amend` gives no reason."""
    record = read_plan(folder)
    said = changes(current(record) if record else plan_of(saved), plan_of(sweep))
    if said and not amend:
        raise ModformerError(f"{folder}: this changes the sweep's plan ({'; '.join(said)}); a plan changed after its "
                             f"runs began is an amendment: say why with --amend REASON (recorded in {NAME} and "
                             f"shown in the report)")
    return said


def amend_plan(folder: Path, saved: dict[str, Any], sweep: dict[str, Any], reason: str, said: list[str]) -> None:
    """Record an amendment of `folder`'s plan (made from `saved`'s where it has no plan.yaml:
    its first runs predate recorded plans)."""
    record = read_plan(folder) or {"fixed": None, "code_version": None, "plan": plan_of(saved), "amendments": [],
                                   "note": "the folder's first runs were made before plans were recorded"}
    record["amendments"] = [*(record.get("amendments") or []),
                            {"date": _now(), "reason": reason, "code_version": code_version(), "changed": said,
                             "plan": plan_of(sweep)}]
    atomic_write_text(Path(folder) / NAME, yaml.safe_dump(record, sort_keys=False))


def plan_lines(folder: Path) -> list[str]:
    """The report's lines on the plan: when and by which code it was fixed, and each amendment."""
    record = read_plan(folder)
    if record is None:
        return ["Plan: none recorded (these runs were made before sweeps recorded their plans).", ""]
    fixed = (f"fixed {record['fixed']} by {record['code_version']}" if record.get("fixed")
             else "not recorded at the first runs (they predate recorded plans)")
    lines = [f"Plan ({NAME}): {fixed}." + (f" Note: {record['note']}." if record.get("note") else "")]
    for i, a in enumerate(record.get("amendments") or [], 1):
        lines.append(f"Amendment {i} ({a['date']}, {a['code_version']}): {'; '.join(a['changed'])}. Why: {a['reason']}")
    return [*lines, ""]
