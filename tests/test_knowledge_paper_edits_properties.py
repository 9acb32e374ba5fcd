"""The knowledge-base paper's fact editing and repair, measured in this process on a tiny local
Llama (conftest's `tiny_teacher`) or from synthetic records: what an edit run and a repair run
record and print, a sweep run's summary, its status words, and what their configs refuse.
Written for survivors of the papers' mutation sample (modformer/papers/knowledge/)."""

import json

import pytest
import torch
import torch.nn.functional as F

from modformer.data.facts import all_facts
from modformer.errors import Interrupted, ModformerError
from modformer.papers.knowledge import edits as edits_module
from modformer.papers.knowledge.edits import EditRunConfig, fact_entries, run_edits
from modformer.papers.knowledge.edits_kind import KIND, edit_summary
from modformer.papers.knowledge.repair import RepairConfig, RepairLoop, run_repair


def _facts():
    """Five known facts of two kinds: three capitals, two chemical symbols."""
    facts = all_facts()
    return [f for f in facts if f.kind == "capital"][:3] + [f for f in facts if f.kind == "symbol"][:2]


def _known(folder, teacher, facts):
    """The folder's known_facts.json as `known_fact_list` caches it (no generation here)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "known_facts.json").write_text(json.dumps({"model": str(teacher), "facts": [f.__dict__ for f in facts]}))


class BufferedStdout:
    """A block-buffered stdout (a worker's log file): text reaches the file only when flushed."""

    def __init__(self):
        self.pending, self.written = "", ""

    def write(self, text):
        self.pending += text
        return len(text)

    def flush(self):
        self.written, self.pending = self.written + self.pending, ""


# -- the edit run's config ----------------------------------------------------------------------


def test_an_edit_runs_threads_must_be_positive_or_null_in_one_line():
    assert EditRunConfig().threads is None and EditRunConfig(threads=2).threads == 2
    with pytest.raises(ModformerError, match=r"^threads must be positive or null, got 0$"):
        EditRunConfig(threads=0)


# -- which entries carry the facts ----------------------------------------------------------------


def test_fact_entries_gives_each_facts_top_entries_their_share_and_the_overlaps(monkeypatch):
    """With known score masses per entry: each fact's top-k entries, the mean share of its mass
    they hold (against k / n_E for a uniform mass), and the mean overlap of two facts' top-k
    sets within a kind and across kinds."""
    facts = _facts()[1:4]  # capital, capital, symbol
    mass = torch.tensor([[4.0, 3.0, 2.0, 1.0], [1.0, 2.0, 3.0, 4.0], [0.0, 6.0, 5.0, 1.0]])
    monkeypatch.setattr(edits_module, "entry_mass", lambda model, requests: mass)
    got = fact_entries(None, facts, ["r"] * 3, 2)
    assert got.pop("top") == {facts[0].prompt: [0, 1], facts[1].prompt: [2, 3], facts[2].prompt: [1, 2]}
    assert got == pytest.approx({"k": 2, "n_entries": 4, "top_share_mean": (0.7 + 0.7 + 11 / 12) / 3,
                                 "uniform_share": 0.5, "overlap_within_kind": 0.0, "overlap_across_kinds": 0.5})
    assert fact_entries(None, [], [], 2) == {"k": 2, "facts": 0}


# -- an edit run in this process ------------------------------------------------------------------


def test_an_edit_run_records_the_model_before_then_its_edit_and_flushes_its_line(tiny_teacher, tmp_path,
                                                                                  monkeypatch):
    """One edit of one fact through E: the `before` record (the pool's facts, the known facts'
    entries), then the edit's record with its specificity per kind of known fact; its line is
    flushed as it is printed, so that a worker's log file shows it at once."""
    out = tmp_path / "run"
    known = _facts()
    _known(out, tiny_teacher, known)
    stdout = BufferedStdout()
    monkeypatch.setattr("sys.stdout", stdout)
    run_edits(EditRunConfig(model=str(tiny_teacher), corpus=str(tiny_teacher / "corpus.txt"), eval_blocks=1,
                            block_len=8, sizes=[1], seeds=[0], methods=["entries"], require_known=False,
                            max_steps=3, top_entries=4), out)
    records = [json.loads(line) for line in (out / "edits.jsonl").read_text().splitlines()]
    assert [r["key"] for r in records] == ["before", "entries/1/0"]
    before, edit = records
    assert before["facts"] == ["France"] and before["known_facts"] == 5  # the pool: the first capital fact
    entries = before["fact_entries"]
    assert entries["n_entries"] == 64 and entries["uniform_share"] == 4 / 64  # E written at d_ff = 64 entries
    assert set(entries["top"]) == {f.prompt for f in known}
    assert entries["uniform_share"] < entries["top_share_mean"] <= 1
    assert edit["facts"] == ["France"] and edit["parameters"] == ["knowledge.entries"] and edit["steps"] <= 3
    by_kind = edit["specificity_by_kind"]  # the other known facts: two capitals, two symbols
    assert set(by_kind) == {"capital", "symbol"} and all(0 <= v <= 1 for v in by_kind.values())
    assert (2 * by_kind["capital"] + 2 * by_kind["symbol"]) / 4 == pytest.approx(edit["measures"]["specificity"])
    m = edit["measures"]
    line = (f"entries/1/0: {edit['steps']} steps, efficacy {m['efficacy']:.2f}, generalisation "
            f"{m['generalisation']:.2f}, specificity {m['specificity']:.3f}, unrelated {m['unrelated']:.2f}, "
            f"perplexity {m['perplexity']:.3f}, {edit['seconds']:.0f} s\n")
    assert stdout.written == line and stdout.pending == ""


# -- a sweep run's summary and status words -------------------------------------------------------


def _records():
    measures = {"efficacy": 0.0, "generalisation": 0.0, "specificity": 1.0, "unrelated": 1.0, "perplexity": 50.0}
    top = {"The capital of A is": [1, 4], "The capital of B is": [2, 4], "The capital of C is": [3, 5]}
    before = {"key": "before", "facts": ["A", "B", "C"], "known_facts": 3, "measures": measures,
              "fact_entries": {"k": 2, "n_entries": 8, "top": top, "top_share_mean": 0.4, "uniform_share": 0.25},
              "seconds": 9.0}
    edit = {"key": "entries/1/0", "method": "entries", "size": 1, "seed": 0, "facts": ["A"], "steps": 4,
            "measures": {**measures, "efficacy": 1.0, "generalisation": 0.5, "specificity": 0.75, "perplexity": 50.5},
            "top_changed_entries": [4, 5], "overlap_changed_vs_mass": [0.5, 0.0]}
    return before, edit


def test_an_edit_runs_summary_keeps_before_without_its_per_fact_entries_and_the_overlaps():
    before, edit = _records()
    cfg = EditRunConfig(sizes=[1], seeds=[0], methods=["entries"], pool=3)
    summary = edit_summary([before, edit], cfg)
    assert summary["before"]["fact_entries"] == {"k": 2, "n_entries": 8, "top_share_mean": 0.4, "uniform_share": 0.25}
    assert summary["before"]["measures"] == before["measures"] and summary["before"]["known_facts"] == 3
    assert summary["perplexity_change"] == 0.5 and summary["overlap_per_fact"] == 0.25
    assert summary["overlap_with_others"] == 0.5  # entry 4 among B's top 2, entry 5 among C's
    assert summary["steps"] == 4 and summary["pool"] == 3 and "note" not in summary


def test_an_edit_run_is_described_by_its_edit_its_note_or_nothing():
    before, edit = _records()
    cfg = EditRunConfig(sizes=[3], seeds=[1], methods=["entries"], pool=3)
    assert KIND.describe(edit_summary([before, edit], cfg)) == (
        "4 steps, efficacy 1.00, generalisation 0.50, specificity 0.750, perplexity 50.500 (+0.500)")
    assert KIND.describe(edit_summary([], cfg)) == ("nothing to edit at seed 1: an edit of all 3 facts of the pool "
                                                     "has no randomness, and the run at seed 0 makes it")
    several = edit_summary([before, edit, {**edit, "key": "entries/1/1"}], cfg)  # no one edit, no note
    assert KIND.describe(several) == "" and KIND.describe({}) == ""


def test_a_stopped_edit_run_says_which_records_it_made(tmp_path):
    run = tmp_path / "run"
    assert KIND.started(run) == ""  # nothing yet
    run.mkdir()
    before, edit = _records()
    (run / "edits.jsonl").write_text(json.dumps(before) + "\n")
    assert KIND.started(run) == "recorded before"
    (run / "edits.jsonl").write_text(json.dumps(before) + "\n" + json.dumps(edit) + "\n")
    assert KIND.started(run) == "recorded before, entries/1/0"


# -- the repair -------------------------------------------------------------------------------------


@pytest.fixture
def shared_model(tiny_teacher):
    """The tiny Llama written over one shared base of 64 entries of width 32, and its tokenizer."""
    from modformer.knowledge.fold import unfold_model_approximate
    from modformer.papers.knowledge.loading import load_pretrained

    pre = load_pretrained(str(tiny_teacher))
    model, _ = unfold_model_approximate(pre.model, 64, 32)
    return model, pre.tokenizer


def _repair_loop(model, arm="entries_and_maps", steps=2, batch_size=2, lr=1e-3, maps_lr=1e-5):
    from modformer.freeze import matching_parameters
    from modformer.papers.knowledge.repair import ARMS

    names = sorted({n for pattern in ARMS[arm] for n in matching_parameters(model, pattern)})
    for n, p in model.named_parameters():
        p.requires_grad_(n in names)
    train = torch.randint(0, 40, (steps * batch_size, 7), generator=torch.Generator().manual_seed(0))
    cfg = RepairConfig(steps=steps, batch_size=batch_size, lr=lr, maps_lr=maps_lr, arms=[arm])
    return RepairLoop(model, train, cfg, names), names, train


def test_a_repair_trains_e_at_its_rate_and_the_maps_at_theirs(shared_model):
    model, _ = shared_model
    loop, names, train = _repair_loop(model, lr=1e-3, maps_lr=1e-5)
    params = dict(model.named_parameters())
    entries, maps = loop.optimizer.param_groups
    assert [p is params["knowledge.entries"] for p in entries["params"]] == [True]
    assert entries["lr"] == entries["lr_scale"] == 1e-3 and maps["lr"] == maps["lr_scale"] == 1e-5
    assert {id(p) for p in maps["params"]} == {id(params[n]) for n in names if n != "knowledge.entries"} != set()
    assert torch.equal(loop.train_batch(1), train[2:4])  # step 1: the second pair of blocks
    frozen = {n: p.detach().clone() for n, p in params.items() if n not in names}
    start = params["knowledge.entries"].detach().clone()
    loop.loop(0, desc="repair", show_progress=False)
    assert len(loop.losses) == 2 and all(torch.equal(params[n], p) for n, p in frozen.items())
    moved = float((params["knowledge.entries"].detach() - start).abs().max())
    assert moved == pytest.approx(2 * 1e-3, rel=0.01)  # Adam moves an entry by at most lr a step


def test_a_repair_steps_loss_is_the_next_token_cross_entropy(shared_model):
    model, _ = shared_model
    loop, _, train = _repair_loop(model, arm="entries")
    batch = train[:2]
    loss, value, tokens = loop.batch_loss(batch)
    with torch.no_grad():
        logits = model(batch[:, :-1])  # (2, 6, vocab)
        wanted = F.cross_entropy(logits.reshape(12, -1), batch[:, 1:].reshape(12))
    assert loss.requires_grad and value == float(loss.detach()) == pytest.approx(float(wanted))
    assert tokens == 2 * 6  # the tokens read: two blocks of six inputs


def test_a_stopped_repair_says_how_to_redo_its_arm(shared_model):
    loop, _, _ = _repair_loop(shared_model[0])
    with pytest.raises(Interrupted, match=r"^repair interrupted at step 3; run the same command again to redo this "
                                          r"arm$"):
        loop.stop(3)


def test_a_repair_run_records_its_arm_and_trains_on_the_text_past_the_evaluation(tiny_teacher, tmp_path, capsys):
    """The record's parameter counts and losses, and its line; its first loss is the unrepaired
    model's on the first training block, which begins past the evaluation's 2 x 8 tokens (at
    whole blocks of 4 + 1 tokens: the fifth)."""
    from modformer.knowledge.fold import unfold_model_approximate
    from modformer.papers.knowledge.ladder import coefficient_parameters
    from modformer.papers.knowledge.loading import load_pretrained, text_blocks

    out = tmp_path / "repair"
    _known(out, tiny_teacher, _facts()[:2])
    corpus = str(tiny_teacher / "corpus.txt")
    run_repair(RepairConfig(model=str(tiny_teacher), corpus=corpus, point=[1, 0.5], steps=2, batch_size=1,
                            train_len=4, eval_blocks=2, block_len=8, arms=["entries"]), out)
    [rec] = [json.loads(line) for line in (out / "repair.jsonl").read_text().splitlines()]
    assert rec["key"] == "entries/64/32/2" and rec["n_entries"] == 64 and rec["d_entry"] == 32
    assert rec["parameters"] == coefficient_parameters(2, 32, 64, 32, shared=True) == 64 * 32 + 2 * 3 * 32 * 32
    assert rec["trained_parameters"] == 64 * 32 and rec["tokens_trained"] == 8 and rec["facts_total"] == 2
    assert capsys.readouterr().out == (f"entries/64/32/2: perplexity {rec['perplexity']:.3f}, facts "
                                       f"{rec['facts_answered']}/2, {rec['seconds']:.0f} s\n")
    pre = load_pretrained(str(tiny_teacher))
    model, _ = unfold_model_approximate(pre.model, 64, 32)
    first = text_blocks(pre.tokenizer, source=corpus, n_blocks=1, length=5, skip_blocks=4)
    with torch.no_grad():
        logits = model.train()(first[:, :-1])
        wanted = F.cross_entropy(logits.flatten(0, 1), first[:, 1:].flatten())
    assert len(rec["losses"]) == 2 and rec["losses"][0] == pytest.approx(float(wanted), rel=1e-5)
