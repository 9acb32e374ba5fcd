"""The known facts of a model, found once (greedy generation of all 221 facts, about a
minute here) and kept in the experiment folder (`known_facts.json`) for every later command,
with the code version and machine that found them, as every record of the folder has."""

from __future__ import annotations

import json
from pathlib import Path

from ...data.facts import Fact
from ...files import atomic_write_text
from ...version import code_version, machine
from .loading import Pretrained, the_known_facts


def known_fact_list(pre: Pretrained, out: Path, model_name: str | None = None) -> list[Fact]:
    path = out / "known_facts.json"
    name = model_name or str(getattr(pre.hf, "name_or_path", ""))
    if path.is_file():
        data = json.loads(path.read_text())
        if data.get("model") == name:
            return [Fact(**f) for f in data["facts"]]
    facts = the_known_facts(pre)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps({"model": name, "facts": [f.__dict__ for f in facts],
                                         "code_version": code_version(), "machine": machine()}, indent=1) + "\n")
    return facts
