"""The run directory's metrics file: one JSON object per line, appended as training goes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable, Iterator

from ..errors import ModformerError
from ..files import atomic_write_text, fsync_file, naming
from .tracking import Tracker, scalars


class MetricsLog:
    """Append-only JSON lines. On resume, `keep` drops records a killed run wrote after its
    last checkpoint, so that a resumed run's file equals an uninterrupted run's. Every record
    appended also goes to the run's trackers (train.log_to), from `track` until `close`.
    Appends are flushed, not synced; `sync` makes them durable, and a run calls it before
    each checkpoint, which carries a copy of the records it covers (a disk that fails between
    the two loses nothing a resume cannot restore)."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.trackers: list[Tracker] = []

    def append(self, record: dict[str, Any]) -> None:
        with naming(self.path), open(self.path, "a") as f:
            f.write(json.dumps(record) + "\n")
            f.flush()
        if self.trackers:
            step, values = scalars(record)
            for tracker in self.trackers:
                tracker.log(step, values)

    def sync(self) -> None:
        """fsync the file: every record appended so far survives a crash or a failing disk."""
        if self.path.exists():
            fsync_file(self.path)

    def track(self, trackers: list[Tracker]) -> None:
        self.trackers = list(trackers)

    def close(self, images: list[Path]) -> None:
        """End every tracker's run, sending it the plots `images` (PNG files)."""
        trackers, self.trackers = self.trackers, []
        for tracker in trackers:
            tracker.finish(images)

    def records(self) -> list[dict[str, Any]]:
        return list(read_records(self.path)) if self.path.exists() else []

    def keep(self, predicate: Callable[[dict[str, Any]], bool]) -> None:
        """Rewrite the file (atomically) with only the records that satisfy `predicate`."""
        if self.path.exists():
            self.replace([r for r in read_records(self.path) if predicate(r)])

    def replace(self, records: list[dict[str, Any]]) -> None:
        """Rewrite the file (atomically) with exactly `records`."""
        atomic_write_text(self.path, "".join(json.dumps(r) + "\n" for r in records))


class NullMetricsLog(MetricsLog):
    """What data-parallel ranks other than 0 log: nothing (rank 0 writes the file)."""

    def append(self, record: dict[str, Any]) -> None:
        pass

    def records(self) -> list[dict[str, Any]]:
        return []

    def keep(self, predicate: Callable[[dict[str, Any]], bool]) -> None:
        pass

    def replace(self, records: list[dict[str, Any]]) -> None:
        pass

    def sync(self) -> None:
        pass


def read_records(path: Path) -> Iterator[dict[str, Any]]:
    """Records of a JSON-lines file, in order. A line that is no JSON object (torn by a kill
    mid-write; bytes a failing disk damaged or zero-filled) is skipped, and the whole lines
    around it kept. A path that is not a readable file is one ModformerError naming it."""
    try:
        f = open(path, encoding="utf-8", errors="replace")
    except (IsADirectoryError, PermissionError) as e:
        raise ModformerError(f"cannot read {path}: {e.strerror or e.__class__.__name__}") from None
    with f:
        for line in f:
            line = line.strip()
            if line:
                try:
                    record = json.loads(line)
                except json.JSONDecodeError:
                    continue
                if isinstance(record, dict):
                    yield record
