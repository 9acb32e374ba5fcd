"""What `modformer migrate` knows of the knowledge base's former records (registered by the
paper's `register` through `Paper.migration`; modformer/migrate.py): the edit folder of
`modformer knowledge-pretrained edit` before the edits were a sweep's runs (edits.jsonl:
`before`, then one record per method, size and seed, in one folder).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import yaml

from ...errors import ModformerError
from ...version import RECORDS_FORMAT
from ...files import atomic_write_folder, atomic_write_text
from .edits import draw
from .edits_kind import NAME, _check, write_edit_summary, write_edits_sweep_report


def edits_as_sweep(folder: Path, config: Path, out: Path) -> Path:
    """An edit folder of `modformer knowledge-pretrained edit` (edits.jsonl: `before`, then one
    record per method, size and seed) laid out as the sweep `modformer sweep CONFIG --out OUT`
    makes, without editing: each run's edits.jsonl holds the folder's `before` line and its
    edit's line as they are (a run of the whole pool at a seed other than 0 holds none), the
    folder's known_facts.json, its config as the sweep builds it and its summary from those
    records; then results.jsonl, sweep.yaml, commands.txt and the report. Every edit must
    have drawn the facts the config draws, and every record must find its run.

    Args:
        folder: the edit folder (edits.jsonl, known_facts.json).
        config: the experiment's config file with its `sweep` section (what rebuilds it).
        out: the sweep folder to write (may be `folder` itself, which it replaces).

    Returns:
        The report (out/report.md).
    """
    from ...sweep.spec import load_sweep

    sweep = load_sweep(config)
    if sweep.spec.experiment != NAME:
        raise ModformerError(f"{config} is no {NAME} sweep (sweep.experiment: {sweep.spec.experiment})")
    runs = sweep.runs()
    _check(runs, lambda run: out / "runs" / run.run_id)
    if not (folder / "edits.jsonl").is_file():
        raise ModformerError(f"{folder} holds no edits.jsonl (records of `knowledge-pretrained edit`)")
    lines: dict[str, str] = {}
    for line in filter(str.strip, (folder / "edits.jsonl").read_text().splitlines()):
        key = json.loads(line)["key"]
        if key in lines:
            raise ModformerError(f"{folder}/edits.jsonl holds {key} twice")
        lines[key] = line
    if "before" not in lines:
        raise ModformerError(f"{folder}/edits.jsonl has no `before` record")
    before_line = lines.pop("before")
    before, pool = json.loads(before_line), runs[0].config.pool_size
    if len(before["facts"]) != pool:
        raise ModformerError(f"{folder} drew its edits from {len(before['facts'])} facts, {config} from {pool} (pool)")
    note = (f"records of `knowledge-pretrained edit` in one process and one folder ({folder}), laid out as this run "
            f"by `modformer migrate`, which wrote this summary from them; the `before` "
            f"record was measured once there and is in every run that edits")

    def write(work: Path) -> None:
        rows = []
        for run in runs:
            cfg, target = run.config, work / "runs" / run.run_id
            target.mkdir(parents=True)
            atomic_write_text(target / "config.yaml", yaml.safe_dump(cfg.to_dict(), sort_keys=False))
            size, seed = cfg.sizes[0], cfg.seeds[0]
            if cfg.draws(size, one_run=True):
                key = f"{cfg.methods[0]}/{size}/{seed}"
                if key not in lines:
                    raise ModformerError(f"{folder} has no record {key}, a run of {config}")
                edit = json.loads(lines[key])
                drawn = [before["facts"][i] for i in draw(seed, size, pool)]
                if edit["facts"] != drawn:
                    raise ModformerError(f"{key} of {folder} edited {edit['facts']}, {config} draws {drawn}")
                atomic_write_text(target / "edits.jsonl", before_line + "\n" + lines.pop(key) + "\n")
                if (folder / "known_facts.json").is_file():
                    shutil.copy2(folder / "known_facts.json", target / "known_facts.json")
            summary = write_edit_summary(target, cfg, converted=note)
            rows.append({"run_id": run.run_id, "variant": run.variant, "point": dict(run.point), "seed": run.seed,
                         "run_dir": f"runs/{run.run_id}", "status": "done", "summary": summary})
        if lines:
            raise ModformerError(f"{folder} holds records that {config} names no run of: {', '.join(sorted(lines))}")
        atomic_write_text(work / "results.jsonl", "".join(json.dumps(r) + "\n" for r in rows))
        atomic_write_text(work / "sweep.yaml", yaml.safe_dump({"format": RECORDS_FORMAT, **sweep.to_dict()}, sort_keys=False))
        atomic_write_text(work / "commands.txt", f"modformer sweep {config} --out {out}\n")
        write_edits_sweep_report(work)

    atomic_write_folder(out, write)
    return out / "report.md"


def edits_folder_layout(folder: Path, config: Path | None = None) -> bool:
    """An edit folder of the one-folder layout rewritten in place as the sweep `config` makes
    (`edits_as_sweep`); False for any other folder. The folder does not say which sweep it was
    (its methods, sizes and seeds), so `config` is needed: `modformer migrate DIR --config FILE`."""
    if not (folder / "edits.jsonl").is_file() or (folder / "ladder.jsonl").is_file():
        return False
    if config is None:
        raise ModformerError(f"{folder} is an edit folder of the one-folder form: give the sweep file that rebuilds "
                             f"it, `modformer migrate {folder} --config configs/experiments/knowledge/"
                             f"pretrained_edits.yaml` (its methods, sizes and seeds)")
    edits_as_sweep(folder, config, folder)
    return True
