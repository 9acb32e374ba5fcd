"""Append-only JSON-lines records: one line per finished measurement, each with the code
version, the command and the time it took, so that a stopped experiment continues where it
stopped (finished keys are skipped) and every figure of a report comes from a record."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

from ...files import durable_append
from ...version import code_version


def read_records(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def done_keys(path: Path) -> set[str]:
    return {r["key"] for r in read_records(path)}


def append_record(path: Path, key: str, record: dict[str, Any], started: float) -> dict[str, Any]:
    """Append `record` under `key` with the code version, the command and the seconds since `started`."""
    program = Path(sys.argv[0]).name
    command = ["modformer", *sys.argv[1:]] if program in ("modformer", "cli.py") else sys.argv
    full = {"key": key, **record, "seconds": round(time.time() - started, 1), "code_version": code_version(),
            "command": " ".join(command)}
    path.parent.mkdir(parents=True, exist_ok=True)
    durable_append(path, json.dumps(full) + "\n")  # one line, synced: a killed run leaves whole lines
    return full
