"""Reading a benchmark's JSON record back: one row's figure, for a page that quotes it.

`modformer bench ... --out DIR` writes `NAME.json` beside its table:

    {"code_version": "0.1.0+94744d14d6cd", "machine": "Intel(R) Xeon(R) Processor, 2 CPUs, AVX512",
     "rows": [{"contender": "modformer mixit", "precision": "fp32", "tokens_per_s": 9346.2, ...}, ...]}

A row is picked by the values of its text fields (`contender=modformer mixit`,
`precision=fp32`); a figure is one of its numbers (a dotted path into a row's fields:
`measures.perplexity`). A record that names no clean code version (an older list of rows,
a package version without a commit, or a `-dirty` tree) is refused: its figures could not
be traced to the code that made them.

An experiment's JSON-lines records (`NAME.jsonl`, one measurement a line, each naming its
code version: the pretrained knowledge base's ladder.jsonl and repair.jsonl, say) are read
the same way, each line a row, and each refused unless it names a clean commit.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..errors import ModformerError


def read_bench(path: Path) -> list[dict[str, Any]]:
    """The rows of a benchmark record, refused unless it names a clean commit and a machine."""
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise ModformerError(f"{path} does not exist") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ModformerError(f"{path} is not a benchmark record: {e}") from None
    if not isinstance(data, dict) or not isinstance(data.get("rows"), list):
        raise ModformerError(f"{path} names no code version or machine (a bare list of rows, written before "
                             f"records named them); run its benchmark command again")
    version, machine = data.get("code_version"), data.get("machine")
    _refuse_unclean(version, str(path))
    if not isinstance(machine, str) or not machine:
        raise ModformerError(f"{path} names no machine; run its benchmark command again")
    return data["rows"]


def _refuse_unclean(version: Any, what: str) -> None:
    if not isinstance(version, str) or "+" not in version or version.endswith("-dirty"):
        raise ModformerError(f"{what} was made by modformer {version!r}, not by a clean commit of a checkout; "
                             f"run its command again from a clean checkout")


def read_record_lines(path: Path) -> list[dict[str, Any]]:
    """The records of a JSON-lines file, one a line, refused unless each names a clean commit."""
    try:
        rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    except FileNotFoundError:
        raise ModformerError(f"{path} does not exist") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ModformerError(f"{path} is not a file of JSON records, one a line: {e}") from None
    for i, row in enumerate(rows, 1):
        _refuse_unclean(row.get("code_version") if isinstance(row, dict) else None, f"line {i} of {path}")
    return rows


def bench_row(rows: list[dict[str, Any]], where: dict[str, str], source: str) -> dict[str, Any]:
    """The one row whose fields have the `where` values (compared as text)."""
    picked = [r for r in rows if all(k in r and str(r[k]) == v for k, v in where.items())]
    if len(picked) != 1:
        named = ", ".join(f"{k}={v}" for k, v in where.items()) or "no filter"
        found = "no row" if not picked else f"{len(picked)} rows"
        raise ModformerError(f"{source}: {found} with {named}; name the fields that pick one row "
                             f"(its rows' fields: {', '.join(sorted({k for r in rows for k in r}))})")
    return picked[0]


def bench_value(rows: list[dict[str, Any]], where: dict[str, str], field: str, source: str) -> float:
    """A number of the one row that `where` picks."""
    row = bench_row(rows, where, source)
    value: Any = row
    for key in field.split("."):
        value = value.get(key) if isinstance(value, dict) else None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ModformerError(f"{source}: the row with {where} has no number '{field}' "
                             f"(its numbers: {', '.join(k for k, v in row.items() if isinstance(v, (int, float)))})")
    return float(value)
