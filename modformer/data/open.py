"""Opening a data source by the name `task.source` gives: a packaged corpus, a Hugging Face
dataset by name, or a path (sources.py reads packaged corpora and files, hub.py datasets)."""

from __future__ import annotations

from pathlib import Path

from ..errors import ModformerError
from .hub import HUB, HubDataset, HubSource
from .sources import PACKAGED, Columns, FileSource, Limited, Source, local_files


def named_sources() -> dict[str, str]:
    """Every named source -> one line about it (for `modformer list`)."""
    return {**{k: v[1] for k, v in PACKAGED.items()}, **{k: v.description for k, v in HUB.items()},
            "hf:NAME[:CONFIG]": "any Hugging Face dataset (network)"}


def open_source(spec: str, columns: Columns, *, max_documents: int | None = None) -> Source:
    """The source `task.source` names: a packaged or hub name, `hf:NAME[:CONFIG]`, or a path."""
    if spec in PACKAGED:
        source = PACKAGED[spec][0](spec, columns)
    elif spec in HUB:
        source = HubSource(spec, HUB[spec], columns)
    elif spec.startswith("hf:"):
        name, _, config = spec[3:].partition(":")
        if not name:
            raise ModformerError(f"task.source={spec!r}: give a dataset name, as in hf:NAME or hf:NAME:CONFIG")
        source = HubSource(spec, HubDataset(name, config or None, "a Hugging Face dataset"), columns)
    else:
        path = Path(spec).expanduser()
        if not path.exists() and "/" not in spec and not path.suffix:
            raise ModformerError(f"task.source: unknown data source '{spec}' and no such file or folder (named "
                                 f"sources: {', '.join(named_sources())}; or a path)")
        source = FileSource(spec, local_files(path), columns)
    return source if max_documents is None else Limited(source, max_documents)
