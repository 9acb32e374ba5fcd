"""Real text: sources (packaged corpora, Hugging Face datasets, local files), tokenizers
(byte-level BPE trained here, or loaded), and tokenized splits as memory-mapped shards,
prepared once and cached by fingerprint. The `lm` and `sentiment` tasks read them."""

from .corpus import Corpus, CorpusSpec, split_documents
from .open import named_sources, open_source
from .sources import Columns, Document
from .store import TokenSplit, TokenStore
from .tokenizer import TextTokenizer, load_tokenizer, train_bpe

__all__ = ["Columns", "Corpus", "CorpusSpec", "Document", "TextTokenizer", "TokenSplit", "TokenStore", "load_tokenizer",
           "named_sources", "open_source", "split_documents", "train_bpe"]
