"""LLM-Modules experiments end to end, with a tiny random Hugging Face teacher and a word-level
tokenizer built here (no download); one slow test with the packaged SmolLM2."""

from __future__ import annotations

import json

import pytest
import torch

from modformer.bridge.arm_run import ArmRun, TeacherStream, random_states
from modformer.bridge.arms import ARMS
from modformer.bridge.modules_config import load_modules_config
from modformer.bridge.teacher import Teacher
from modformer.bridge.texts import arithmetic_answer, arithmetic_items, split_items, worked_sum
from modformer.errors import ConfigError

transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")

CORPUS = ["the cat sat on the mat", "a dog ran in the park", "the sun is hot and bright", "we like to read books",
          "rain falls on the green hills", "the sea is deep and blue"]


@pytest.fixture(scope="module")
def tiny_teacher(tmp_path_factory):
    """A local folder holding a 2-layer random Llama and a word-level tokenizer of the facts and corpus."""
    from modformer.bridge.facts import all_facts

    folder = tmp_path_factory.mktemp("teacher")
    words = sorted({w for f in all_facts() for w in f.text.split()} | {w for t in CORPUS for w in t.split()})
    model = tokenizers.models.WordLevel({w: i for i, w in enumerate(["[UNK]", *words])}, "[UNK]")
    raw = tokenizers.Tokenizer(model)
    raw.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    raw.decoder = tokenizers.decoders.WordPiece()  # joins words with spaces
    tok = transformers.PreTrainedTokenizerFast(tokenizer_object=raw, unk_token="[UNK]", pad_token="[UNK]")
    torch.manual_seed(0)
    llama = transformers.LlamaForCausalLM(transformers.LlamaConfig(
        vocab_size=len(words) + 1, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
        num_key_value_heads=2, max_position_embeddings=64, tie_word_embeddings=True))
    llama.save_pretrained(folder)
    tok.save_pretrained(folder)
    corpus = folder / "corpus.txt"
    corpus.write_text("\n".join(CORPUS) + "\n")
    return folder


def tiny_config(teacher_folder, *overrides):
    return load_modules_config(None, [
        f"teacher.name={teacher_folder}", "teacher.known_only=false", "teacher.precision=fp32",
        "teacher.cache_dtype=float32", "student.n_heads=4", "bridge.n_heads=4", "bridge.adapter_bottleneck=8",
        f"data.corpus={teacher_folder / 'corpus.txt'}", "data.corpus_rows=6", "data.held_out=0.3",
        "train.steps=3", "train.batch_size=8", "train.eval_every=3", "train.log_every=1", "train.max_new_tokens=2",
        "seeds=[0]", *overrides])


@pytest.fixture(scope="module")
def prepared(tiny_teacher, tmp_path_factory):
    """An experiment with its items, vocabulary and teacher states ready (shared: runs only read it)."""
    from modformer.bridge.experiment import ModulesExperiment

    folder = tmp_path_factory.mktemp("prepared")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MODFORMER_CACHE", str(folder / "cache"))
        experiment = ModulesExperiment(tiny_config(tiny_teacher, "train.distill_weight=0.5"), folder / "out",
                                       echo=lambda *_: None)
        experiment.prepare()
    return experiment


STUDENT = {"blocks.0.mixer.q_proj.weight", "blocks.0.mixer.k_proj.weight", "blocks.0.mixer.v_proj.weight",
           "blocks.0.mixer.o_proj.weight", "blocks.0.ffn.gate_proj.weight", "blocks.0.ffn.up_proj.weight",
           "blocks.0.ffn.down_proj.weight", "blocks.0.mixer_norm.weight", "blocks.0.ffn_norm.weight"}


def expected_trainable(arm: str, n_layers: int = 2) -> set[str]:
    student = {n.replace("blocks.0", f"blocks.{i}") for n in STUDENT for i in range(n_layers)} | {"norm.weight"}
    if not ARMS[arm].bridged:
        return student
    bridge = {f"bridges.input.{m}.{p}" for m in ("student_norm", "teacher_norm", "q_proj", "k_proj", "v_proj", "o_proj",
                                                 "adapter_in", "adapter_out", "adapter_norm", "gate")
              for p in ("weight", "bias")}
    return {f"student.{n}" for n in student} | bridge


@pytest.mark.parametrize("arm", list(ARMS))
def test_every_arm_trains_exactly_its_parameters_and_never_the_teacher(prepared, arm):
    """The trainable set per arm is exact (the teacher's embedding in the student stays frozen,
    the bridges train only in arms that read); after training steps the teacher is unchanged
    and has no gradient, the frozen embedding is unchanged and every trainable tensor moved."""
    run = ArmRun(prepared.cfg, ARMS[arm], 0, prepared.data, prepared.teacher)
    assert {n for n, p in run.model.named_parameters() if p.requires_grad} == expected_trainable(arm)
    teacher_before = {k: v.clone() for k, v in prepared.teacher.model.state_dict().items()}
    before = {n: p.detach().clone() for n, p in run.model.named_parameters()}
    records = []
    run.train(records.append)
    assert [r["step"] for r in records if r["kind"] == "train"] == [1, 2, 3]
    assert all(torch.equal(teacher_before[k], v) for k, v in prepared.teacher.model.state_dict().items())
    assert all(p.grad is None and not p.requires_grad for p in prepared.teacher.model.parameters())
    for name, p in run.model.named_parameters():
        assert torch.equal(before[name], p) != p.requires_grad, name


def test_distillation_and_random_states_use_the_teacher_as_specified(prepared):
    """Distillation's targets are the teacher's own next-token logits (its cached final states
    through its head); random states match the real ones' per-dimension scale, fixed per text."""
    data, teacher = prepared.data, prepared.teacher
    batch = data.batch(data.train, [0, 1], answer_only=False)
    ids = data.teacher_ids(batch.ids[:1, :int(batch.lengths[0])])
    logits = teacher.model(input_ids=ids).logits[0].float()
    final = data.states(batch, final=True)[0, :ids.shape[1]] @ teacher.head[data.vocab].T
    assert torch.allclose(final, logits[:, data.vocab], atol=1e-4)
    a = random_states(teacher, 0, [5, 6], 30)
    assert torch.equal(a, random_states(teacher, 0, [5, 6], 30)) and not torch.equal(a, random_states(teacher, 1, [5, 6], 30))
    noise = random_states(teacher, 0, list(range(200)), 30).flatten(0, 1)
    assert torch.allclose(noise.std(0) / teacher.std, torch.ones(teacher.width), atol=0.1)


def test_generation_reads_the_same_teacher_states_as_a_full_forward_pass(prepared):
    """The teacher's states of a growing text, one token at a time through its cache, equal
    its states of the whole text at once: generation reads exactly what training read."""
    ids = prepared.data.train.ids[0][None]
    stream = TeacherStream(prepared.teacher)
    pieces = [stream.extend(ids[:, :3])] + [stream.extend(ids[:, i:i + 1]) for i in range(3, ids.shape[1])]
    whole = Teacher(prepared.teacher.model, prepared.teacher.layer)(ids)
    assert torch.allclose(torch.cat(pieces, dim=1), whole, atol=1e-5)


def test_experiment_runs_reports_and_continues_without_redoing_runs(tiny_teacher, tmp_path, monkeypatch):
    from modformer.bridge.experiment import ModulesExperiment
    from modformer.bridge.modules_report import write_modules_report

    monkeypatch.setenv("MODFORMER_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "out"
    results = ModulesExperiment(tiny_config(tiny_teacher, "arms=[teacher,leaky]"), out, echo=lambda *_: None).run()
    assert [(r["arm"], r["seed"]) for r in results] == [("teacher", 0), ("leaky", 0)]
    split = json.loads((out / "split.json").read_text())
    assert not set(split["train"]) & set(split["held_out"])
    assert all(0 <= r["held_out_exact"] <= 1 and len(r["held_out_answers"]) == len(split["held_out"]) for r in results)
    report = write_modules_report(out).read_text()
    assert "| teacher | 1 |" in report and "| leaky | 1 |" in report and "leaky - causal" in report
    done = (out / "runs" / "teacher" / "seed_0" / "summary.json").stat().st_mtime_ns
    more = ModulesExperiment(tiny_config(tiny_teacher, "arms=[teacher]", "seeds=[0,1]"), out, echo=lambda *_: None).run()
    assert [(r["arm"], r["seed"]) for r in more] == [("teacher", 0), ("teacher", 1)]
    assert (out / "runs" / "teacher" / "seed_0" / "summary.json").stat().st_mtime_ns == done  # not redone
    with pytest.raises(Exception, match="another config"):
        ModulesExperiment(tiny_config(tiny_teacher, "train.steps=4"), out, echo=lambda *_: None).run()


def test_bad_configs_are_refused_with_the_key_named(tiny_teacher):
    with pytest.raises(ConfigError, match="unknown arm 'teachr'"):
        tiny_config(tiny_teacher, "arms=[teachr]")
    with pytest.raises(ConfigError, match="data.held_ot"):
        tiny_config(tiny_teacher, "data.held_ot=0.5")
    with pytest.raises(ConfigError, match="data.loss_on"):
        tiny_config(tiny_teacher, "data.loss_on=everything")


def test_cli_reports_a_missing_corpus_in_one_line(tiny_teacher, tmp_path, monkeypatch, capsys):
    from modformer.cli import main

    monkeypatch.setenv("MODFORMER_CACHE", str(tmp_path / "cache"))
    cfg = tmp_path / "exp.yaml"
    cfg.write_text(tiny_config(tiny_teacher, f"data.corpus={tmp_path / 'nope.txt'}").to_yaml())
    assert main(["modules", str(cfg), "--out", str(tmp_path / "out")]) == 2
    assert "no such file" in capsys.readouterr().err


def test_worked_sums_and_a_split_that_holds_out_operand_values():
    assert worked_sum(47, 38) == "7+8=15, carry 1. 4+3+1=8. Answer: 85"
    assert worked_sum(95, 17) == "5+7=12, carry 1. 9+1+1=11, carry 1. Answer: 112"
    assert arithmetic_answer(" 7+8=15, carry 1. 4+3+1=8. Answer: 85 and") == "85" and arithmetic_answer("7+8") == ""
    items = arithmetic_items(2)
    assert len(items) == 90 * 90 and all(i.text.endswith(f"Answer: {i.expected}") for i in items[:50])
    train, held = split_items(items, 0.2, seed=3)
    assert {i.group for i in train}.isdisjoint({i.group for i in held}) and len(held) == 18 * 90
    assert split_items(items, 0.2, seed=3) == (train, held)


@pytest.mark.slow
def test_the_packaged_teacher_runs_every_arm(tmp_path):
    """A few steps of every arm with SmolLM2-135M-Instruct (MODFORMER_TEACHER=1 bash scripts/setup.sh)."""
    pytest.importorskip("gguf")
    from modformer.bridge.experiment import ModulesExperiment

    cfg = load_modules_config("configs/experiments/llm_modules_facts.yaml",
                              ["train.steps=4", "train.eval_every=2", "data.corpus_rows=50", "seeds=[0]"])
    results = ModulesExperiment(cfg, tmp_path / "out", echo=lambda *_: None).run()
    assert [r["arm"] for r in results] == list(ARMS)
    assert all(len(r["held_out_answers"]) > 30 for r in results)
