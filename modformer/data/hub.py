"""Hugging Face datasets as sources, with one quick answer when they cannot be reached.

Without the network, `datasets.load_dataset` retries for about half a minute before it
fails. So the hub is probed first (a TCP connection with a 3 s limit); when it cannot be
reached, or `HF_DATASETS_OFFLINE` / `HF_HUB_OFFLINE` is set, the dataset is looked up only
in the local Hugging Face cache, which answers at once. Either way a failure is one
`ModformerError` naming the source and the offline sources to use instead.

Every split of a hub dataset is read and pooled: modformer draws its own validation and
test documents (`modformer.data.corpus`), the same way for every source.
"""

from __future__ import annotations

import os
import re
import socket
import threading
from dataclasses import dataclass
from typing import Any, Callable

from ..errors import ModformerError
from .sources import OFFLINE_CHOICES, Columns, Document, Source, as_text, digest, parse_label

HUB_HOST = ("huggingface.co", 443)
PROBE_SECONDS = 3.0
SPLIT_ORDER = ("train", "validation", "test")


@dataclass(frozen=True)
class HubDataset:
    path: str  # hub name, e.g. "Salesforce/wikitext"
    config: str | None  # configuration name, e.g. "wikitext-103-raw-v1"
    description: str
    streaming: bool = False  # read lazily (a sample of a very large dataset)
    default_limit: int | None = None  # documents read when task.max_documents is null (streaming)
    group: Callable[[list[str]], list[str]] | None = None  # rows -> documents (wikitext's lines -> articles)
    text_column: str | None = None  # its text column, read unless task.text_column names another than "text"


_HEADING = re.compile(r"^ = [^=].* = $")


def wikitext_articles(lines: list[str]) -> list[str]:
    """Wikitext rows are lines; an article starts at each top-level heading ` = Title = `.
    Splitting by article keeps every line of an article in the same split."""
    articles: list[list[str]] = []
    for line in lines:
        if _HEADING.match(line.rstrip("\n")) or not articles:
            articles.append([])
        articles[-1].append(line)
    return ["".join(a) for a in articles]


HUB: dict[str, HubDataset] = {
    "wikitext103": HubDataset("Salesforce/wikitext", "wikitext-103-raw-v1",
                              "Wikitext-103 (raw), one document per article (Hugging Face; network)",
                              group=wikitext_articles),
    "fineweb_edu": HubDataset("HuggingFaceFW/fineweb-edu", "sample-10BT",
                              "Fineweb-edu's 10 B-token sample, its first 100,000 documents (task.max_documents), "
                              "streamed (Hugging Face; network)",
                              streaming=True, default_limit=100_000),
    "yelp_polarity": HubDataset("fancyzhx/yelp_polarity", None,
                                "560,000 + 38,000 Yelp reviews labelled 0 negative / 1 positive (Hugging Face; network)"),
    # The LLM Modules paper's training data. Its one system prompt (the same in every row) is
    # left out: each conversation (question, then reasoning and answer) is one document.
    "bespoke_stratos": HubDataset("bespokelabs/Bespoke-Stratos-17k", None,
                                  "Bespoke-Stratos-17k, the LLM Modules paper's data: 16,710 questions with reasoning "
                                  "and answer, one 'User: ... Assistant: ...' document each (Hugging Face; network)",
                                  text_column="conversations"),
}


def _env_offline() -> bool:
    return any(os.environ.get(k, "").strip().lower() in ("1", "true", "yes", "on")
               for k in ("HF_DATASETS_OFFLINE", "HF_HUB_OFFLINE"))


def hub_reachable(timeout: float = PROBE_SECONDS) -> bool:
    """Whether a connection to the hub opens within `timeout` seconds. Run in a thread,
    because a name lookup may hang past any socket timeout."""
    answer: list[bool] = []

    def probe() -> None:
        try:
            socket.create_connection(HUB_HOST, timeout=timeout).close()
            answer.append(True)
        except OSError:
            answer.append(False)

    worker = threading.Thread(target=probe, daemon=True)
    worker.start()
    worker.join(timeout)
    return bool(answer and answer[0])


def _set_offline() -> None:
    """Make datasets and huggingface_hub read only their local cache, even if already imported."""
    os.environ["HF_DATASETS_OFFLINE"] = os.environ["HF_HUB_OFFLINE"] = "1"
    import datasets.config
    import huggingface_hub.constants

    datasets.config.HF_DATASETS_OFFLINE = datasets.config.HF_HUB_OFFLINE = True
    huggingface_hub.constants.HF_HUB_OFFLINE = True


class HubSource(Source):
    """Every split of a Hugging Face dataset, pooled (first `limit` documents if set)."""

    def __init__(self, name: str, dataset: HubDataset, columns: Columns):
        self.name, self.dataset, self.columns = name, dataset, columns
        self.limit: int | None = dataset.default_limit

    def fingerprint(self) -> str:
        # Named, not read: a prepared corpus is found again offline. A new revision on the hub
        # is not noticed; delete the cache folder (see modformer.data.corpus) to rebuild.
        d = self.dataset
        return digest("hub", d.path, d.config, self.limit, self.columns.__dict__)

    def _failed(self, how: str) -> ModformerError:
        d = self.dataset
        what = d.path + (f" ({d.config})" if d.config else "")
        return ModformerError(f"data source '{self.name}' (Hugging Face dataset {what}) {how}. "
                              f"Use one of the {OFFLINE_CHOICES}")

    def _load(self) -> Any:
        try:
            import datasets
        except ImportError:
            raise ModformerError(f"data source '{self.name}' needs the `datasets` package: "
                                 f"pip install 'modformer[data]'; or use one of the {OFFLINE_CHOICES}") from None
        offline = _env_offline() or not hub_reachable()
        if offline:
            _set_offline()
        d = self.dataset
        try:
            return datasets.load_dataset(d.path, d.config, streaming=d.streaming)
        except (OSError, ValueError) as e:  # ConnectionError and FileNotFoundError among them
            if offline:
                raise self._failed("cannot be reached: offline, and not in the Hugging Face cache") from None
            raise self._failed(f"cannot be loaded: {str(e).splitlines()[0] if str(e) else type(e).__name__}") from None

    def documents(self) -> list[Document]:
        data = self._load()
        names = sorted(data, key=lambda s: (SPLIT_ORDER.index(s) if s in SPLIT_ORDER else len(SPLIT_ORDER), s))
        text_col, label_col = self.columns.text, self.columns.label
        if self.dataset.text_column is not None and text_col == "text":
            text_col = self.dataset.text_column
        docs: list[Document] = []
        for split in names:
            texts, labels = [], []
            for i, row in enumerate(data[split]):
                if self.limit is not None and len(docs) + len(texts) >= self.limit and self.dataset.group is None:
                    break
                if text_col not in row or (label_col is not None and label_col not in row):
                    missing = text_col if text_col not in row else label_col
                    raise ModformerError(f"data source '{self.name}' has no column '{missing}' (columns: "
                                         f"{', '.join(row)}); set task.text_column / task.label_column")
                texts.append(as_text(row[text_col], f"data source '{self.name}' {split} row {i}"))
                if label_col is not None:
                    labels.append(parse_label(row[label_col], f"data source '{self.name}' {split} row {i}"))
            if self.dataset.group is not None:
                docs += [Document(t) for t in self.dataset.group(texts) if t.strip()]
            else:
                docs += [Document(t, labels[j] if labels else None) for j, t in enumerate(texts) if t.strip()]
            if self.limit is not None and len(docs) >= self.limit:
                break
        return docs[:self.limit] if self.limit is not None else docs
