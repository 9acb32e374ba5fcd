"""Lay out an LLM-Modules experiment folder made by `modformer llm-modules` (before the sweep
protocol) as the sweep `modformer sweep CONFIG` makes, without training (records moved as
they are; see `folder_as_sweep`):

    .venv/bin/python scripts/llm_modules_folder_to_sweep.py results/llm_modules/facts configs/experiments/llm_modules_facts.yaml
"""

import sys
from pathlib import Path

import modformer  # noqa: F401  (registers the papers' run kinds)
from modformer.papers.llm_modules.sweep_kind import folder_as_sweep

if __name__ == "__main__":
    folder, config = Path(sys.argv[1]), Path(sys.argv[2])
    print(f"report: {folder_as_sweep(folder, config, folder)}")
