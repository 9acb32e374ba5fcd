"""Lay out an edit folder made by `modformer knowledge-pretrained edit` (before the sweep
protocol: edits.jsonl in one folder) as the sweep `modformer sweep CONFIG` makes, without
editing (records moved as they are; see `folder_as_sweep`):

    .venv/bin/python scripts/knowledge_edits_folder_to_sweep.py results/knowledge/pretrained/edits configs/experiments/knowledge/pretrained_edits.yaml
"""

import sys
from pathlib import Path

import modformer  # noqa: F401  (registers the papers' run kinds)
from modformer.errors import ModformerError
from modformer.papers.knowledge.edits_kind import folder_as_sweep

if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(f"usage: {sys.argv[0]} EDIT_FOLDER SWEEP_CONFIG")
    folder, config = Path(sys.argv[1]), Path(sys.argv[2])
    try:
        print(f"report: {folder_as_sweep(folder, config, folder)}")
    except ModformerError as e:
        sys.exit(f"error: {e}")
