"""What `modformer migrate` knows of the LLM-Modules experiment's former records (registered by
the paper's `register` through `Paper.migration`; modformer/migrate.py): the one-folder layout
of `modformer llm-modules` before its arms were a sweep's runs.

    OUT/config.yaml                       every arm and seed
    OUT/split.json
    OUT/runs/ARM/seed_S/summary.json, metrics.jsonl
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import yaml

from ...configtools import from_dict
from ...errors import ModformerError
from ...version import RECORDS_FORMAT
from ...files import atomic_write_text
from .config import LLMModulesConfig
from .sweep_kind import write_sweep_report


def as_sweep(folder: Path, config: Path, out: Path) -> Path:
    """An experiment folder of `modformer llm-modules` (runs/ARM/seed_S/) laid out as the sweep
    `modformer sweep CONFIG --out OUT` makes, without training: each run's summary and metrics
    moved as they are, its config as the sweep builds it (which must equal the folder's, arm
    and seed aside), results.jsonl, sweep.yaml, commands.txt and the report. For records made
    before the protocol; returns the report.

    Args:
        folder: the experiment folder (config.yaml, split.json, runs/).
        config: the experiment's config file with its `sweep` section (what rebuilds it).
        out: the sweep folder to write (must not exist; may be `folder` itself).

    Returns:
        The report (out/report.md).
    """
    import shutil
    import tempfile

    from ...configtools import flatten, to_dict
    from ...sweep.spec import load_sweep

    sweep = load_sweep(config)
    saved = from_dict(LLMModulesConfig, yaml.safe_load((folder / "config.yaml").read_text()))
    runs = sweep.runs()
    built = LLMModulesConfig.to_dict(runs[0].config)
    mine = {k: v for k, v in flatten(to_dict(saved)).items() if k not in ("arms", "seeds")}
    theirs = {k: v for k, v in flatten(built).items() if k not in ("arms", "seeds")}
    if mine != theirs:
        differ = sorted(k for k in mine.keys() | theirs.keys() if mine.get(k) != theirs.get(k))
        raise ModformerError(f"{config} builds another experiment than {folder} holds ({', '.join(differ[:4])})")
    work = Path(tempfile.mkdtemp(prefix=".as-sweep-", dir=out.parent))
    rows = []
    for run in runs:
        source = folder / "runs" / run.variant / f"seed_{run.seed}"
        if not (source / "summary.json").is_file():
            raise ModformerError(f"{folder} has no finished run {run.variant} seed {run.seed}")
        target = work / "runs" / run.run_id
        target.mkdir(parents=True)
        for name in ("summary.json", "metrics.jsonl"):
            shutil.copy2(source / name, target / name)
        shutil.copy2(folder / "split.json", target / "split.json")
        atomic_write_text(target / "config.yaml", run.config.to_yaml())
        rows.append({"run_id": run.run_id, "variant": run.variant, "point": {}, "seed": run.seed,
                     "run_dir": f"runs/{run.run_id}", "status": "done",
                     "summary": json.loads((source / "summary.json").read_text())})
    atomic_write_text(work / "results.jsonl", "".join(json.dumps(r) + "\n" for r in rows))
    atomic_write_text(work / "sweep.yaml", yaml.safe_dump({"format": RECORDS_FORMAT, **sweep.to_dict()}, sort_keys=False))
    atomic_write_text(work / "commands.txt", f"modformer sweep {config} --out {out}\n")
    if out.exists():
        shutil.rmtree(out)
    work.rename(out)
    return write_sweep_report(out)


def one_folder_layout(folder: Path, config: Path | None = None) -> bool:
    """A folder of the one-folder layout rewritten in place as the sweep of its arms and seeds
    (`as_sweep`, its sweep file the folder's own config with the arms as variants); False for
    any other folder."""
    if not ((folder / "config.yaml").is_file() and (folder / "split.json").is_file()
            and any((folder / "runs").glob("*/seed_*/summary.json"))):
        return False
    data = yaml.safe_load((folder / "config.yaml").read_text())
    if config is None:
        data["sweep"] = {"experiment": "llm_modules", "variants": data["arms"], "seeds": data["seeds"]}
        with tempfile.NamedTemporaryFile("w", suffix=".yaml", dir=folder.parent, delete=False) as f:
            yaml.safe_dump(data, f, sort_keys=False)
        try:
            as_sweep(folder, Path(f.name), folder)
        finally:
            os.unlink(f.name)
        atomic_write_text(folder / "commands.txt", f"modformer sweep {folder / 'sweep.yaml'} --out {folder}\n")
    else:
        as_sweep(folder, config, folder)
    return True
