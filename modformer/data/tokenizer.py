"""Tokenizers: byte-level BPE trained here with Hugging Face `tokenizers`, or one loaded
from a local file or folder.

The trained BPE is GPT-2's scheme: text is split into words on the byte level, so every
string encodes (no unknown token) and decodes back to exactly itself. Its first ids are
the special tokens `<|endoftext|>` (0: end of a document, the separator of packed blocks)
and `<|pad|>` (1: padding, never scored).

A loaded tokenizer keeps its own end-of-text and padding tokens when it names them
(`tokenizer_config.json`, or the usual names); any it lacks gets a new id after its
vocabulary. `TextTokenizer.save` writes `tokenizer.json` and `special.json` into a folder,
which `TextTokenizer.load` reads back: a run directory keeps its tokenizer that way.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterable

from ..errors import ModformerError

EOS, PAD = "<|endoftext|>", "<|pad|>"
BPE_PAD_ID = 1  # a trained BPE's ids: its special tokens first, EOS then PAD
EOS_NAMES = (EOS, "</s>", "<eos>", "<|end_of_text|>", "<|im_end|>", "[SEP]")
PAD_NAMES = (PAD, "<pad>", "[PAD]", "<|padding|>")


def _tokenizers():
    try:
        import tokenizers
    except ImportError:
        raise ModformerError("text tasks need the `tokenizers` package: pip install 'modformer[hf]'") from None
    return tokenizers


class TextTokenizer:
    """A `tokenizers.Tokenizer` plus the ids of end-of-text and padding.

    `vocab_size` counts every id it may produce or use, extra ones included."""

    def __init__(self, tokenizer, eos_id: int, pad_id: int):
        self.tokenizer = tokenizer
        self.base_size = tokenizer.get_vocab_size(with_added_tokens=True)
        self.eos_id, self.pad_id = eos_id, pad_id
        self.vocab_size = max(self.base_size, eos_id + 1, pad_id + 1)

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False).ids

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        return [e.ids for e in self.tokenizer.encode_batch(texts, add_special_tokens=False)]

    def decode(self, ids: Iterable[int]) -> str:
        """Text of `ids`; ids past the wrapped tokenizer's vocabulary (added here) decode to nothing."""
        return self.tokenizer.decode([int(i) for i in ids if int(i) < self.base_size], skip_special_tokens=False)

    def fingerprint(self) -> str:
        from .sources import digest

        return digest(self.tokenizer.to_str(), self.eos_id, self.pad_id)

    def save(self, folder: Path) -> None:
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        self.tokenizer.save(str(folder / "tokenizer.json"))
        (folder / "special.json").write_text(json.dumps({"eos_id": self.eos_id, "pad_id": self.pad_id}) + "\n")

    @classmethod
    def load(cls, folder: Path) -> "TextTokenizer":
        """A tokenizer saved by `save`."""
        special = json.loads((Path(folder) / "special.json").read_text())
        tok = _tokenizers().Tokenizer.from_file(str(Path(folder) / "tokenizer.json"))
        return cls(tok, special["eos_id"], special["pad_id"])


def train_bpe(texts: Iterable[str], vocab_size: int) -> TextTokenizer:
    """A byte-level BPE of at most `vocab_size` ids (fewer if the text has too few pairs),
    the special tokens first."""
    t = _tokenizers()
    tok = t.Tokenizer(t.models.BPE())
    tok.pre_tokenizer = t.pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = t.decoders.ByteLevel()
    trainer = t.trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[EOS, PAD], show_progress=False,
                                    initial_alphabet=t.pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(texts, trainer)
    assert tok.token_to_id(PAD) == BPE_PAD_ID
    return TextTokenizer(tok, tok.token_to_id(EOS), tok.token_to_id(PAD))


def _special_from_config(folder: Path) -> dict[str, str]:
    """eos and pad token strings named by a Hugging Face `tokenizer_config.json`, if any."""
    path = folder / "tokenizer_config.json"
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError):
        return {}
    out = {}
    for key in ("eos_token", "pad_token"):
        value = data.get(key)
        value = value.get("content") if isinstance(value, dict) else value
        if isinstance(value, str):
            out[key] = value
    return out


def load_tokenizer(spec: str, key: str = "task.tokenizer") -> TextTokenizer:
    """A tokenizer from a `tokenizer.json` file, or a folder holding one (a Hugging Face model
    folder) or a tokenizer that transformers can load and convert (`AutoTokenizer`). Errors
    name the config key `key`."""
    t = _tokenizers()
    path = Path(spec).expanduser()
    if not path.exists():
        raise ModformerError(f"{key}: no such file or folder: {path} (or 'bpe' to train one here)")
    named: dict[str, str] = {}
    try:
        if path.is_file():
            tok = t.Tokenizer.from_file(str(path))
            named = _special_from_config(path.parent)
        elif (path / "tokenizer.json").is_file():
            tok = t.Tokenizer.from_file(str(path / "tokenizer.json"))
            named = _special_from_config(path)
        else:
            from transformers import AutoTokenizer

            auto = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
            if not getattr(auto, "is_fast", False):
                raise ModformerError(f"{key}: {path} holds a slow tokenizer that cannot be converted; "
                                     f"give a folder with tokenizer.json")
            tok = auto.backend_tokenizer
            named = {k: v for k, v in (("eos_token", auto.eos_token), ("pad_token", auto.pad_token)) if v}
    except ModformerError:
        raise
    except Exception as e:  # tokenizers and transformers raise many kinds for a file that is not a tokenizer
        raise ModformerError(f"{key}: cannot load a tokenizer from {path} ({type(e).__name__}: "
                             f"{str(e).splitlines()[0] if str(e) else ''}); give a tokenizer.json file, a Hugging "
                             f"Face tokenizer folder, or 'bpe'") from None
    size = tok.get_vocab_size(with_added_tokens=True)

    def find(key: str, names: tuple[str, ...], extra: int) -> int:
        for name in ([named[key]] if key in named else []) + list(names):
            token_id = tok.token_to_id(name)
            if token_id is not None:
                return token_id
        return size + extra  # a new id after the vocabulary

    eos = find("eos_token", EOS_NAMES, 0)
    pad = find("pad_token", PAD_NAMES, 1 if eos == size else 0)
    return TextTokenizer(tok, eos, pad)
