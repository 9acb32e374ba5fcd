"""Fingerprints of the models the committed configs build, to check that a change of how a
model is configured rebuilds every one of them the same (logits equal to before).

For every config under configs/ (a run config, or every run of a sweep file of the `train`
kind, under each of its profiles) and every committed run of such a sweep under results/,
the model of each distinct (model, task) section is built
from seed 0 and run on fixed tokens; its fingerprint is the float64 sum and absolute sum of
the logits and their first values, on 2 sequences of the model's whole length. `python tests/model_fingerprints.py` writes them to
tests/data/model_fingerprints.json (run it before a change that must not alter any model);
tests/test_model_fingerprints.py compares.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
STORED = ROOT / "tests" / "data" / "model_fingerprints.json"


def _profiles(path: Path) -> list[str | None]:
    import yaml

    data = yaml.safe_load(path.read_text())
    return [None, *sorted((data or {}).get("profiles") or {})]


def model_configs() -> dict[str, object]:
    """name -> RunConfig, one per distinct (model, task) section of the committed configs."""
    from modformer.config import load_config
    from modformer.configtools import to_dict
    from modformer.sweep.spec import load_sweep

    found: dict[str, object] = {}
    seen: set[str] = set()

    def add(name: str, cfg) -> None:
        key = json.dumps([to_dict(cfg.model), to_dict(cfg.task)], sort_keys=True, default=repr)
        if key not in seen:
            seen.add(key)
            found[name] = cfg

    for path in sorted((ROOT / "configs").rglob("*.yaml")):
        rel = path.relative_to(ROOT).as_posix()
        text = path.read_text()
        if "sweep:" not in text:
            if "model:" in text and "task:" in text and "student:" not in text:
                add(rel, load_config(path))
            continue
        for profile in _profiles(path):
            sweep = load_sweep(path, profiles=[profile] if profile else [])
            if sweep.spec.experiment != "train":
                break
            for run in sweep.runs():
                add(f"{rel}[{profile or ''}] {run.variant}/{run.point_name}", run.config)
    return found


def record_configs() -> dict[str, object]:
    """name -> RunConfig, one per distinct (model, task) section of the committed runs of
    `train` sweeps (results/**/runs/**/config.yaml), but those of a paper plugin that is not
    installed here (an example's, whose parts its own test installs)."""
    import yaml

    from modformer.config import load_config
    from modformer.configtools import to_dict
    from modformer.installed_papers import PAPERS

    found: dict[str, object] = {}
    seen: set[str] = set()
    for sweep_file in sorted((ROOT / "results").rglob("sweep.yaml")):
        sweep = (yaml.safe_load(sweep_file.read_text()) or {}).get("sweep") or {}
        if sweep.get("experiment", "train") != "train" or sweep.get("paper") not in (None, *PAPERS):
            continue
        for path in sorted((sweep_file.parent / "runs").rglob("config.yaml")):
            cfg = load_config(path)
            key = json.dumps([to_dict(cfg.model), to_dict(cfg.task)], sort_keys=True, default=repr)
            if key not in seen:
                seen.add(key)
                found[path.relative_to(ROOT).as_posix()] = cfg
    return found


def fingerprint(cfg) -> list[float]:
    from modformer.variants import build_model

    model = build_model(cfg.model, seed=0).eval()
    T = cfg.model.max_seq_len  # bidirectional mixing takes whole sequences only
    tokens = torch.randint(0, cfg.model.vocab_size, (2, T), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        logits = model(tokens).double()
    return [logits.sum().item(), logits.abs().sum().item(), *logits[0, -1, :4].tolist()]


def fingerprints() -> dict[str, list[float]]:
    torch.set_num_threads(1)
    return {name: fingerprint(cfg) for name, cfg in {**model_configs(), **record_configs()}.items()}


if __name__ == "__main__":
    prints = fingerprints()
    STORED.write_text(json.dumps(prints, indent=1, sort_keys=True) + "\n")
    print(f"{len(prints)} models fingerprinted in {STORED}", file=sys.stderr)
