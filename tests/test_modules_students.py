"""LLM-Modules students other than a modformer model reading with the teacher's tokenizer: a
student with its own tokenizer (teacher states aligned by character offsets, in training
and while generating) and a Hugging Face causal-LM student (pretrained, fine-tuned, or
re-initialised by the scratch arm). Tiny models and tokenizers built here, no download."""

from __future__ import annotations

import pytest
import torch

from modformer.papers.llm_modules.arm_run import ArmRun
from modformer.papers.llm_modules.arms import ARMS
from modformer.papers.llm_modules.generation import LiveTeacher
from modformer.data.pairing import TwoTokenizers, as_tensor, key_mask
from modformer.interop.teacher import Teacher
from modformer.data.tokenizer import train_bpe
from modformer.errors import ConfigError
from modformer.model.hooks import capture, hook_names
from modules_fixtures import CORPUS, report_of, run_arms, tiny_config

transformers = pytest.importorskip("transformers")

OWN = ["student.tokenizer=bpe:300", "student.embeddings=random", "student.d_model=32"]


@pytest.fixture(scope="module")
def hf_student(tmp_path_factory):
    """A folder holding a 2-layer Llama with its own byte-level BPE: the "pretrained" student."""
    from modformer.data.facts import all_facts

    folder = tmp_path_factory.mktemp("student")
    bpe = train_bpe([f.text for f in all_facts()] + CORPUS, 300)
    tok = transformers.PreTrainedTokenizerFast(tokenizer_object=bpe.tokenizer, eos_token="<|endoftext|>",
                                               pad_token="<|pad|>")
    torch.manual_seed(1)
    transformers.LlamaForCausalLM(transformers.LlamaConfig(
        vocab_size=bpe.vocab_size, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=4, max_position_embeddings=128)).save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def prepared(cfg, tmp_path, monkeypatch):
    from modformer.papers.llm_modules.experiment import LLMModulesExperiment

    monkeypatch.setenv("MODFORMER_CACHE", str(tmp_path / "cache"))
    experiment = LLMModulesExperiment(cfg, tmp_path / "out", echo=lambda *_: None)
    experiment.prepare()
    return experiment


def test_own_tokenizer_positions_read_exactly_the_teachers_states_of_their_text(tiny_teacher, tmp_path, monkeypatch):
    """Every held-out row: student position i reads the teacher's tokens of text[:end_i] as the
    teacher tokenizes that text alone (the whole text's shared prefix, then a tail), never a
    token ending after end_i; the cached keys are the teacher's own states of that text; a
    generated continuation re-aligned by `extend` gets the same alignment as the finished text."""
    exp = prepared(tiny_config(tiny_teacher, *OWN), tmp_path, monkeypatch)
    pairing = exp.pairing
    assert isinstance(pairing, TwoTokenizers) and (tmp_path / "out" / "student_tokenizer" / "tokenizer.json").is_file()
    (layer,) = exp.teacher.layers
    teacher = Teacher(exp.teacher.model, layer)
    rows = list(range(len(exp.data.held)))
    batch = exp.data.batch(exp.data.held, rows, answer_only=True)
    keys, mask = exp.data.states(batch, layer), batch.visibility(leaky=False)
    tails = 0
    for b, (item, enc) in enumerate(zip(exp.data.held.items, exp.data.held.texts)):
        ends = [end for _, end in pairing.student.encode(item.text).offsets]
        assert enc.student != enc.teacher  # two tokenizers for real
        for i, end in enumerate(ends):
            own = pairing.teacher.encode(item.text[:end]).ids
            assert enc.teacher[:enc.visible[i]] + enc.tails[i] == own
            tails += bool(enc.tails[i])
            if own:  # the keys position i reads are the teacher's states of its own text
                expected = teacher(torch.tensor([own]))[0]
                assert torch.allclose(keys[b][mask[b, i]], expected, atol=1e-5)
        prompt_ids = pairing.student_ids(item.prompt)
        grown = pairing.extend(item.prompt, prompt_ids, enc.student[len(prompt_ids):])
        assert grown == enc
    assert tails > 0  # the student splits words the teacher keeps whole: tails are exercised


@pytest.mark.parametrize("pairing", [OWN, []], ids=["own tokenizer", "shared tokenizer"])
def test_the_bridge_is_causal_and_the_leaky_one_is_not(tiny_teacher, tmp_path, monkeypatch, pairing):
    """Two texts that differ only after the prompt: with the causal bridge the student's logits
    over the prompt are equal; the leaky bridge reads the answer's teacher states there. With
    either pairing of tokenizers: the text -> key mask path is each pairing's own."""
    exp = prepared(tiny_config(tiny_teacher, *pairing), tmp_path, monkeypatch)
    items = exp.data.held.items
    prompt = items[0].prompt
    endings = [items[0].completion, next(i.completion for i in items if i.completion != items[0].completion)]
    # completions the data holds: with the shared tokenizer the student's vocabulary is the data's tokens
    texts = [exp.pairing.encode(prompt + ending) for ending in endings]
    n = len(exp.pairing.student_ids(prompt))
    assert texts[0].student[:n] == texts[1].student[:n] and texts[0].teacher != texts[1].teacher
    for arm, same in (("teacher", True), ("leaky", False)):
        run = ArmRun(exp.cfg, ARMS[arm], 0, exp.data, exp.teacher, exp.pairing)
        run.model.eval()
        states = LiveTeacher(exp.teacher).keys(texts)
        ids = exp.data.vocab.to_model(as_tensor([t.student for t in texts]))
        logits = run.forward(ids, states, key_mask(texts, leaky=not same))
        assert torch.allclose(logits[0, :n], logits[1, :n], atol=1e-5) == same, arm


def test_own_tokenizer_experiment_runs_the_arms_it_allows(tiny_teacher, tmp_path, monkeypatch):
    monkeypatch.setenv("MODFORMER_CACHE", str(tmp_path / "cache"))
    cfg = tiny_config(tiny_teacher, *OWN)
    assert cfg.arms == ["alone", "teacher", "random_teacher", "leaky"]  # no distill across vocabularies
    results = run_arms(cfg, tmp_path / "out")
    assert [r["arm"] for r in results] == cfg.arms
    assert all(0 <= r["held_out_exact"] <= 1 and r["held_out_answers"] for r in results)


def test_hugging_face_student_fine_tunes_its_weights_and_scratch_starts_fresh(tiny_teacher, hf_student, tmp_path,
                                                                             monkeypatch):
    """alone starts from the folder's weights, scratch from fresh ones; the bridged arm trains
    every student parameter and its bridges (at the input and after decoder layer 0), never
    the teacher; with its gates shut the bridged student is the student alone."""
    cfg = tiny_config(tiny_teacher, f"student.model={hf_student}", "bridge.places=[input,block_0]")
    assert cfg.arms == ["alone", "scratch", "teacher", "random_teacher", "leaky"]
    exp = prepared(cfg, tmp_path, monkeypatch)
    saved = transformers.AutoModelForCausalLM.from_pretrained(hf_student).state_dict()
    runs = {arm: ArmRun(cfg, ARMS[arm], 0, exp.data, exp.teacher, exp.pairing) for arm in ("alone", "scratch", "teacher")}
    alone, scratch = runs["alone"].model.model.state_dict(), runs["scratch"].model.model.state_dict()
    assert all(torch.equal(saved[k], alone[k]) for k in saved)
    assert not torch.equal(saved["model.layers.0.mlp.up_proj.weight"], scratch["model.layers.0.mlp.up_proj.weight"])
    bridged = runs["teacher"].model
    trainable = {n for n, p in bridged.named_parameters() if p.requires_grad}
    assert trainable == {f"student.{n}" for n, _ in bridged.student.named_parameters()} | \
        {f"bridges.{place}.{n}" for place in ("input", "block_0") for n, _ in bridged.bridges[place].named_parameters()}

    assert {"student.embed_out", "student.blocks.0.resid_post", "bridges.input.gate_value"} <= set(hook_names(bridged))
    batch = exp.data.batch(exp.data.train, [0, 1, 2], answer_only=False)
    with torch.no_grad(), capture(bridged, "student.blocks.*.resid_post", "student.embed_out") as acts:
        bridged.student(batch.ids)
    assert acts["student.embed_out"].shape[-1] == bridged.student.width and len(acts) == 1 + len(bridged.student.blocks)
    with torch.no_grad():
        for bridge in bridged.bridges.values():
            bridge.gate.weight.zero_()
            bridge.gate.bias.fill_(-float("inf"))
    bridged.eval()
    assert torch.equal(runs["teacher"].logits(batch), bridged.student(batch.ids))

    teacher_before = {k: v.clone() for k, v in exp.teacher.model.state_dict().items()}
    records = []
    runs["alone"].train(records.append)
    assert all(torch.equal(teacher_before[k], v) for k, v in exp.teacher.model.state_dict().items())
    assert not torch.equal(saved["model.layers.0.mlp.up_proj.weight"],
                           runs["alone"].model.model.state_dict()["model.layers.0.mlp.up_proj.weight"])


def test_hugging_face_student_experiment_runs_end_to_end(tiny_teacher, hf_student, tmp_path, monkeypatch):
    monkeypatch.setenv("MODFORMER_CACHE", str(tmp_path / "cache"))
    cfg = tiny_config(tiny_teacher, f"student.model={hf_student}", "arms=[scratch,teacher]")
    results = run_arms(cfg, tmp_path / "out")
    assert [r["arm"] for r in results] == ["scratch", "teacher"]
    assert all(len(r["held_out_answers"]) == len(results[0]["held_out_answers"]) > 0 for r in results)


def test_students_that_cannot_work_are_refused_with_the_reason(tiny_teacher, hf_student):
    with pytest.raises(ConfigError, match="scratch arm"):
        tiny_config(tiny_teacher, "arms=[alone,scratch]")
    with pytest.raises(ConfigError, match="distill arm needs"):
        tiny_config(tiny_teacher, *OWN, "arms=[distill]")
    with pytest.raises(ConfigError, match="student.embeddings=teacher needs"):
        tiny_config(tiny_teacher, "student.tokenizer=bpe:300")
    with pytest.raises(ConfigError, match="its own tokenizer"):
        tiny_config(tiny_teacher, f"student.model={hf_student}", "student.tokenizer=teacher")
    with pytest.raises(ConfigError, match="bpe:N needs"):
        tiny_config(tiny_teacher, "student.tokenizer=bpe:12", "student.embeddings=random")


def test_a_modformer_model_pretrained_here_is_exported_and_fine_tuned_as_a_student(tiny_teacher, tmp_path,
                                                                                  monkeypatch):
    """The offline fine-tuned baseline's path: a language model trained with `modformer train`,
    exported with `modformer convert --to ffn --hf` (its tokenizer copied), read by
    `modformer modules` as a pretrained Hugging Face student with its own tokenizer."""
    from modformer.papers.llm_modules.experiment import LLMModulesExperiment
    from modformer.cli import main
    from modformer.config import load_config
    from modformer.train.trainer import Trainer
    from text_corpus import write_text_corpus

    monkeypatch.setenv("MODFORMER_CACHE", str(tmp_path / "cache"))
    corpus = write_text_corpus(tmp_path / "text", documents=20, sentences=40)
    lm = load_config("configs/tasks/lm_tiny.yaml", [f"task.source={corpus}", "task.seq_len=128", "train.steps=4",
                                                    "train.progress=false", "task.test_size=4", "task.validation_size=4"])
    Trainer(lm, tmp_path / "lm", command=["test"], echo=lambda m: None).run()
    assert main(["convert", str(tmp_path / "lm"), "--to", "ffn", "--hf", "--out", str(tmp_path / "student")]) == 0
    assert (tmp_path / "student" / "tokenizer.json").is_file()

    cfg = tiny_config(tiny_teacher, f"student.model={tmp_path / 'student'}", "arms=[alone,scratch]")
    experiment = LLMModulesExperiment(cfg, tmp_path / "out", echo=lambda *_: None)
    experiment.prepare()
    lm_text = (tmp_path / "lm" / "tokenizer" / "tokenizer.json").read_text()
    assert experiment.pairing.student.to_str() == __import__("tokenizers").Tokenizer.from_str(lm_text).to_str()
    exported = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "student").state_dict()
    alone = ArmRun(cfg, ARMS["alone"], 0, experiment.data, experiment.teacher, experiment.pairing)
    assert all(torch.equal(exported[k], v) for k, v in alone.model.model.state_dict().items())
    results = run_arms(cfg, tmp_path / "runs")
    assert [r["arm"] for r in results] == ["alone", "scratch"]
    report = report_of(cfg, tmp_path / "runs", results)
    assert "(pretrained, fine-tuned), reading with its own tokenizer" in report and "fine-tuned - scratch" in report


def test_tied_hugging_face_student_checkpoints_and_restores(tmp_path):
    """A student whose head is its embedding (one tensor under two names) saves and loads."""
    from modformer.interop.hf_student import HFStudent
    from modformer.train.checkpoint import load_model_state, read_checkpoint, save_checkpoint

    def student(seed):
        torch.manual_seed(seed)
        return HFStudent(transformers.LlamaForCausalLM(transformers.LlamaConfig(
            vocab_size=40, hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
            num_key_value_heads=2, tie_word_embeddings=True)))

    saved, fresh = student(0), student(1)
    save_checkpoint(tmp_path / "c.safetensors", 1, saved, None, {})
    load_model_state(fresh, read_checkpoint(tmp_path / "c.safetensors").model, "c")
    ids = torch.randint(0, 40, (2, 5))
    assert torch.equal(fresh(ids), saved(ids))
    assert fresh.model.lm_head.weight.data_ptr() == fresh.model.get_input_embeddings().weight.data_ptr()


def test_a_deep_copy_of_a_hugging_face_student_runs_through_its_own_hook_points():
    """Its layers' forward hooks are bound methods: a copy (an arm's fresh student, an EMA)
    is read and changed at its own hook points, and the original's stay silent."""
    import copy

    from modformer.interop.hf_student import HFStudent
    from modformer.model.hooks import hooked

    torch.manual_seed(0)
    original = HFStudent(transformers.LlamaForCausalLM(transformers.LlamaConfig(
        vocab_size=40, hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=2,
        num_key_value_heads=2)))
    twin = copy.deepcopy(original)
    ids = torch.randint(0, 40, (2, 5))
    with capture(original, "blocks.*.resid_post") as seen_by_original, capture(twin, "*") as seen_by_twin:
        twin(ids)
    assert not seen_by_original and {"embed_out", "blocks.0.resid_post", "blocks.1.resid_post"} <= set(seen_by_twin)
    with hooked(twin, {"blocks.1.resid_post": lambda _name, x: torch.zeros_like(x)}):
        changed = twin(ids)
    assert not torch.equal(changed, twin(ids)) and torch.equal(original(ids), twin(ids))


def test_generated_text_keeps_its_spaces_with_a_sentencepiece_style_student(tiny_teacher):
    """A Metaspace decoder drops the leading space of a sequence decoded alone; the grown text
    is decoded after the prompt, so it aligns exactly as the finished text does."""
    import tokenizers

    from modformer.data.facts import all_facts

    tok = tokenizers.Tokenizer(tokenizers.models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.Metaspace()
    tok.decoder = tokenizers.decoders.Metaspace()
    tok.train_from_iterator([f.text for f in all_facts()],
                            tokenizers.trainers.BpeTrainer(vocab_size=400, special_tokens=["<unk>"], show_progress=False))
    teacher = transformers.AutoTokenizer.from_pretrained(tiny_teacher).backend_tokenizer
    pairing = TwoTokenizers(tok, teacher)
    prompt, text = "The capital of France is", "The capital of France is Paris"
    prompt_ids, full = pairing.student_ids(prompt), pairing.encode(text)
    assert full.student[:len(prompt_ids)] == prompt_ids and pairing.decode(full.student[len(prompt_ids):]) == "Paris"
    grown = pairing.extend(prompt, prompt_ids, full.student[len(prompt_ids):])
    assert (grown.teacher, grown.visible) == (full.teacher, full.visible)


def test_a_bridge_the_student_cannot_take_fails_before_any_arm_trains(tiny_teacher, tmp_path, monkeypatch, capsys):
    from modformer.cli import main

    monkeypatch.setenv("MODFORMER_CACHE", str(tmp_path / "cache"))
    cfg = tmp_path / "exp.yaml"
    cfg.write_text(tiny_config(tiny_teacher, "bridge.places=[block_9]", "arms=[alone,teacher]").to_yaml())
    assert main(["llm-modules", str(cfg), "--out", str(tmp_path / "out")]) == 2
    assert "bridge.places: 'block_9' is no place of a 2-block student" in capsys.readouterr().err
    assert not (tmp_path / "out" / "runs").exists()


def test_where_the_teacher_splits_a_word_after_a_position_does_not_reach_it():
    """The leak that character offsets over the whole text's tokenization would open: the
    teacher keeps "Paris" whole but splits "Pablo" as "Pa" + ..., so after the student's "Pa"
    the offset rule shows a teacher token for "Pablo" and none for "Paris". The exact rule
    shows both the teacher's tokens of "Pa" itself."""
    from modformer.data.alignment import offset_visibility

    teacher = train_bpe(["Paris"] * 50 + ["Pablo"] * 2, 262).tokenizer  # merges up to "Paris" only
    student = train_bpe(["x"], 258).tokenizer  # bytes: one token per character
    assert teacher.encode("Paris").tokens == ["Paris"] and teacher.encode("Pablo").tokens[0] == "Pa"
    pairing = TwoTokenizers(student, teacher)
    a, b = pairing.encode("Paris"), pairing.encode("Pablo")
    reads = lambda e, i: e.teacher[:e.visible[i]] + e.tails[i]  # noqa: E731
    assert reads(a, 1) == reads(b, 1) == teacher.encode("Pa").ids  # after "Pa": the same, whatever follows
    offsets = [offset_visibility([student.encode(t).offsets], [teacher.encode(t).offsets], 5)[0] for t in ("Paris", "Pablo")]
    assert offsets[0][1] != offsets[1][1]  # the offset rule would have told them apart
