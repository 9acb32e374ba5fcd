"""`modformer knowledge-pretrained {ladder,edit,repair} CONFIG [key=value ...] --out RUN`: one
run of a sweep of the knowledge base on a pretrained Llama (the packaged SmolLM2 by default,
`model=FOLDER` for any local one), measured in its folder: its config, its records, then its
summary.json, which marks it done. The experiments are sweeps (`sweep.experiment:
knowledge_ladder`, `knowledge_edits`, `knowledge_repair`): `modformer sweep
configs/experiments/knowledge/pretrained_ladder.yaml` runs one, each run by this command."""

from __future__ import annotations

import argparse
from pathlib import Path

import yaml

from ...commands import Command, describe_parser
from ...configtools import apply_override, describe, from_dict, key_lines, read_yaml
from ...errors import ModformerError
from ...files import atomic_write_text, output_folder
from ...lock import take_lock
from .edits import EditRunConfig
from .ladder import LadderConfig
from .repair import RepairConfig

CONFIGS = {"ladder": LadderConfig, "edit": EditRunConfig, "repair": RepairConfig}


def _settings(config: str, overrides: list[str]) -> dict:
    """The YAML config with dotted overrides on top (its `sweep` section is the sweep's, not the run's)."""
    data = read_yaml(config)
    data.pop("sweep", None)
    data.pop("profiles", None)
    for assignment in overrides:
        apply_override(data, assignment)
    return data


def _check_one_run(experiment: str, cfg) -> None:
    """Refuse, before the run's folder is made, a config that is not one run of its sweep."""
    if experiment == "edit" and not len(cfg.methods) == len(cfg.sizes) == len(cfg.seeds) == 1:
        raise ModformerError(f"an edit run edits one method, one size and one seed (a knowledge_edits sweep's run), "
                             f"got methods {cfg.methods}, sizes {cfg.sizes}, seeds {cfg.seeds}")
    if experiment == "repair" and len(cfg.arms) != 1:
        raise ModformerError(f"a repair run trains one arm (a knowledge_repair sweep's run), got arms {cfg.arms}")


def _measure(experiment: str, cfg, out: Path) -> None:
    if experiment == "ladder":
        from .ladder import run_ladder
        from .sweep_kind import write_run_summary

        run_ladder(cfg, out)
        write_run_summary(out, cfg)
    elif experiment == "edit":
        from .edits import run_edits
        from .edits_kind import write_edit_summary

        run_edits(cfg, out, one_run=True)
        write_edit_summary(out, cfg)
    else:
        from .repair import run_repair
        from .repair_kind import write_repair_summary

        run_repair(cfg, out)
        write_repair_summary(out, cfg)


def _run(args: argparse.Namespace) -> int:
    import os

    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # everything here is local; no minute of hub retries
    cfg = from_dict(CONFIGS[args.experiment], _settings(args.config, list(args.overrides)))
    _check_one_run(args.experiment, cfg)
    out = Path(args.out)
    output_folder(out)
    with take_lock(out / f"{args.experiment}.lock", wait=False, busy=(
            f"{out} is being measured by {{holder}}: one {args.experiment} run per folder (lock file {{path}})")):
        atomic_write_text(out / "config.yaml", yaml.safe_dump(cfg.to_dict(), sort_keys=False))
        _measure(args.experiment, cfg, out)
    print(f"run: {out}")
    return 0


def _help() -> str:
    lines = []
    for name, cls in CONFIGS.items():
        lines += [f"{name} keys:", *key_lines(describe(cls, "")), ""]
    return "\n".join(lines)


def knowledge_pretrained_arguments(p: argparse.ArgumentParser) -> None:
    """The arguments and handler of `modformer knowledge-pretrained`."""
    describe_parser(p, "One run of a sweep of the knowledge base on a pretrained Llama, in its folder (how `modformer "
                       "sweep` runs each run of sweep.experiment knowledge_ladder, knowledge_edits or "
                       "knowledge_repair). ladder: every FFN over ONE shared base E of several sizes, against each "
                       "layer's own base and per-layer low-rank FFNs of the same budget (held-out perplexity, known "
                       "facts); edit: edit capital facts through E alone against fine-tuning one down projection or "
                       "every FFN (efficacy, generalisation, specificity, perplexity); repair: train E (or E and the "
                       "maps) after compression. A stopped run continues. The experiments: `modformer sweep "
                       "configs/experiments/knowledge/pretrained_{ladder,edits,repair}.yaml`.", _help())
    p.add_argument("experiment", choices=list(CONFIGS))
    p.add_argument("config", help="a YAML file of config keys (below); its sweep section, if any, is not read")
    p.add_argument("overrides", nargs="*", metavar="key=value", help="dotted overrides, e.g. points=[[1,0.5]]")
    p.add_argument("--out", required=True, help="the run's folder (config.yaml, records, summary.json)")
    p.set_defaults(func=_run)


COMMAND = Command("knowledge-pretrained", "one run of a knowledge-base sweep on a pretrained Llama (ladder, edit, "
                                          "repair)", knowledge_pretrained_arguments, aliases=("kb-pretrained",))
