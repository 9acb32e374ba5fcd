"""LLM-Modules experiments end to end, with a tiny random Hugging Face teacher and a word-level
tokenizer built here (no download); one slow test with the packaged SmolLM2."""

from __future__ import annotations

import copy
import json

import pytest
import torch
import yaml

from modformer.papers.llm_modules.arm_run import ArmRun
from modformer.papers.llm_modules.arms import ARMS
from modformer.papers.llm_modules.generation import LiveTeacher
from modformer.papers.llm_modules.config import load_llm_modules_config
from modformer.interop.teacher import Teacher
from modformer.papers.llm_modules.texts import arithmetic_answer, arithmetic_items, load_corpus, split_items, worked_sum
from modformer.errors import ConfigError
from modformer.tasks.base import IGNORE
from modules_fixtures import report_of, run_arms, tiny_config

@pytest.fixture(scope="module")
def prepared(tiny_teacher, tmp_path_factory):
    """An experiment with its items, vocabulary and teacher states ready (shared: runs only read it)."""
    from modformer.papers.llm_modules.experiment import LLMModulesExperiment

    folder = tmp_path_factory.mktemp("prepared")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MODFORMER_CACHE", str(folder / "cache"))
        experiment = LLMModulesExperiment(tiny_config(tiny_teacher, "train.distill_weight=0.5"), folder / "out",
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


@pytest.mark.parametrize("arm", [a for a in ARMS if a != "scratch"])  # scratch: tests/test_modules_students.py
def test_every_arm_trains_exactly_its_parameters_and_never_the_teacher(prepared, arm):
    """The trainable set per arm is exact (the teacher's embedding in the student stays frozen,
    the bridges train only in arms that read); after training steps the teacher is unchanged
    and has no gradient, the frozen embedding is unchanged and every trainable tensor moved."""
    run = ArmRun(prepared.cfg, ARMS[arm], 0, prepared.data, prepared.teacher, prepared.pairing)
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


def untimed(records: list[dict]) -> list[dict]:
    """The records without their speed (the one field that depends on the machine's load)."""
    return [{k: v for k, v in r.items() if k != "tokens_per_s"} for r in records]


def test_a_run_does_not_depend_on_what_ran_before_it(prepared):
    """Dropout's draws come from the run's seed: the same arm and seed give the same records
    whatever the process's generator went through before (an earlier run, a resumed experiment)."""
    logs = []
    for before in (0, 1):
        torch.manual_seed(before)
        torch.rand(before + 1)
        run = ArmRun(prepared.cfg, ARMS["teacher"], 0, prepared.data, prepared.teacher, prepared.pairing)
        logs.append([])
        run.train(logs[-1].append)
    assert untimed(logs[0]) == untimed(logs[1]) and run.model.bridges["input"].dropout > 0


def test_a_stopped_run_continues_from_its_checkpoint_bit_for_bit(prepared, tmp_path):
    """Stopped after step 5 with a save at step 4, a run started again continues from step 4:
    its records and final weights equal an uninterrupted run's."""
    cfg = copy.deepcopy(prepared.cfg)
    cfg.train.steps, cfg.train.checkpoint_every, cfg.train.eval_every = 6, 2, 3

    def train(records, checkpoint, stop_at=None):
        def log(record):
            records.append(record)
            if record["step"] == stop_at:
                raise KeyboardInterrupt
        run = ArmRun(cfg, ARMS["teacher"], 0, prepared.data, prepared.teacher, prepared.pairing)
        try:
            run.train(log, checkpoint)
        except KeyboardInterrupt:
            pass
        return run.model.state_dict()

    whole: list = []
    expected = train(whole, None)
    stopped: list = []
    train(stopped, tmp_path / "ckpt.safetensors", stop_at=5)
    assert [r["step"] for r in stopped][-1] == 5 and (tmp_path / "ckpt.safetensors").is_file()
    rest: list = []
    final = train(rest, tmp_path / "ckpt.safetensors")
    assert untimed([r for r in stopped if r["step"] <= 4] + rest) == untimed(whole)
    assert all(torch.equal(expected[k], v) for k, v in final.items())


def test_a_batch_scores_each_position_on_the_next_token(prepared):
    """The student's target at position t is its token t + 1, on every position of a text, or
    from the answer's first token on (a target of the current token would train a copy)."""
    data = prepared.data
    for answer_only in (False, True):
        batch = data.batch(data.train, [0, 1, 2], answer_only=answer_only)
        for b, i in enumerate([0, 1, 2]):
            length = len(data.train.texts[i].student)
            start = data.train.answer_start[i] if answer_only else 1
            scored = (batch.targets[b] != IGNORE).nonzero().flatten().tolist()
            assert scored == list(range(start - 1, length - 1))
            assert torch.equal(batch.targets[b, scored], batch.ids[b, [t + 1 for t in scored]])


def test_distillation_and_random_states_use_the_teacher_as_specified(prepared):
    """Distillation's targets are the teacher's own next-token logits (its cached final states
    through its head); random states match the real ones' per-dimension scale, fixed per text."""
    data, teacher = prepared.data, prepared.teacher
    batch = data.batch(data.train, [0, 1], answer_only=False)
    ids = data.vocab.to_tokenizer(batch.ids[:1, :len(data.train.ids[0])])
    logits = teacher.model(input_ids=ids).logits[0].float()
    final = data.states(batch, teacher.final_layer)[0, :ids.shape[1]] @ teacher.head[data.vocab.ids].T
    assert torch.allclose(final, logits[:, data.vocab.ids], atol=1e-4)
    runs = [ArmRun(prepared.cfg, ARMS["random_teacher"], seed, data, teacher, prepared.pairing) for seed in (0, 0, 1)]
    (layer,) = teacher.layers
    a = runs[0].noise([5, 6], 10)[layer]
    assert torch.equal(a, runs[1].noise([5, 6], 10)[layer]) and not torch.equal(a, runs[2].noise([5, 6], 10)[layer])
    assert torch.equal(a[:, :4], runs[0].noise([5, 6], 4)[layer])  # a text's prefix gets its noise's prefix
    noise = runs[0].noise(list(range(200)), 10)[layer].flatten(0, 1)
    assert torch.allclose(noise.std(0) / teacher.std[0], torch.ones(teacher.width), atol=0.1)


def test_generation_reads_the_same_teacher_states_as_a_full_forward_pass(prepared):
    """The teacher's states of a growing text, one token at a time through its cache, equal
    its states of the whole text at once: generation reads exactly what training read."""
    row = prepared.data.train.teacher_ids[0]
    live = LiveTeacher(prepared.teacher)
    (layer,) = prepared.teacher.layers
    states = [live.read([row[:n]] * 2)[layer] for n in range(3, len(row) + 1)]
    assert live.past is not None  # the text grew a token at a time: read through the teacher's cache
    whole = Teacher(prepared.teacher.model, layer)(torch.tensor([row]))
    assert torch.allclose(states[-1][:1], whole, atol=1e-5) and torch.allclose(states[-1][0], states[-1][1], atol=1e-6)
    uneven = live.read([row, row[:3]])[layer]  # padded: the whole texts again
    assert torch.allclose(uneven[1, :3], whole[0, :3], atol=1e-5) and not uneven[1, 3:].any()


def test_runs_report_and_continue_without_redoing(tiny_teacher, tmp_path, monkeypatch):
    from modformer.papers.llm_modules.experiment import LLMModulesExperiment

    monkeypatch.setenv("MODFORMER_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "out"
    cfg = tiny_config(tiny_teacher, "arms=[teacher,leaky]")
    results = run_arms(cfg, out)
    assert [(r["arm"], r["seed"]) for r in results] == [("teacher", 0), ("leaky", 0)]
    split = json.loads((out / "teacher" / "seed0" / "split.json").read_text())
    assert not set(split["train"]) & set(split["held_out"])
    assert all(0 <= r["held_out_exact"] <= 1 and len(r["held_out_answers"]) == len(split["held_out"]) for r in results)
    report = report_of(cfg, out, results)
    assert "| teacher | 1 |" in report and "| leaky | 1 |" in report and "leaky - causal" in report
    from modformer.version import code_version, machine
    assert all(r["code_version"] == code_version() and r["machine"] == machine() for r in results)
    assert f"Code: {code_version()}; machine: {machine()}." in report  # what made the figures, named
    assert not list(out.glob("*/*/checkpoint.safetensors"))  # finished runs keep no checkpoint
    run = out / "teacher" / "seed0"
    done = (run / "summary.json").stat().st_mtime_ns
    one = tiny_config(tiny_teacher, "arms=[teacher]")
    assert LLMModulesExperiment(one, run, echo=lambda *_: None).run_one() == results[0]
    assert (run / "summary.json").stat().st_mtime_ns == done  # not redone
    (run / "summary.json").unlink()  # as if stopped before its end: the same config continues it
    saved = yaml.safe_load((run / "config.yaml").read_text())
    del saved["data"]["corpus_column"]  # as an older modformer wrote it: the field at its default is no change
    (run / "config.yaml").write_text(yaml.safe_dump(saved))
    with pytest.raises(Exception, match="another config"):
        LLMModulesExperiment(tiny_config(tiny_teacher, "arms=[teacher]", "train.steps=4"), run,
                             echo=lambda *_: None).run_one()
    with pytest.raises(Exception, match="another config"):  # another arm is another run
        LLMModulesExperiment(tiny_config(tiny_teacher, "arms=[leaky]"), run, echo=lambda *_: None).run_one()
    split["train"][0] = "The capital of Nowhere is Elsewhere"  # as if made by another version of the task
    (run / "split.json").write_text(json.dumps(split))
    with pytest.raises(Exception, match="other task texts"):
        LLMModulesExperiment(one, run, echo=lambda *_: None).run_one()


def test_a_second_process_on_a_busy_run_folder_is_refused_before_it_writes(tiny_teacher, tmp_path, monkeypatch):
    from modformer.papers.llm_modules.experiment import LOCK_FILE, LLMModulesExperiment
    from modformer.lock import FolderBusy, take_lock

    monkeypatch.setenv("MODFORMER_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "out"
    out.mkdir()
    cfg = tiny_config(tiny_teacher, "arms=[teacher]")
    with take_lock(out / LOCK_FILE, wait=False):  # as a running run holds it
        with pytest.raises(FolderBusy, match="one process per run folder"):
            LLMModulesExperiment(cfg, out, echo=lambda *_: None).run_one()
        assert sorted(p.name for p in out.iterdir()) == [LOCK_FILE]  # nothing written
    result = LLMModulesExperiment(cfg, out, echo=lambda *_: None).run_one()
    assert (result["arm"], result["seed"]) == ("teacher", 0)  # released: the run trains
    assert (out / LOCK_FILE).read_text() == ""  # and left it released


def test_a_corpus_of_conversations_is_read_as_turns(tiny_teacher, tmp_path, monkeypatch):
    """The paper's data layout (Bespoke-Stratos-17k: a conversation per row) as the corpus."""
    from modformer.papers.llm_modules.experiment import LLMModulesExperiment

    monkeypatch.setenv("MODFORMER_CACHE", str(tmp_path / "cache"))
    rows = [{"system": "Think.", "conversations": [{"from": "user", "value": f"the cat sat on mat {i}"},
                                                   {"from": "assistant", "value": "the sun is hot"}]} for i in range(4)]
    (tmp_path / "stratos.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    cfg = tiny_config(tiny_teacher, f"data.corpus={tmp_path / 'stratos.jsonl'}", "data.corpus_column=conversations")
    experiment = LLMModulesExperiment(cfg, tmp_path / "out", echo=lambda *_: None)
    experiment.prepare()
    assert len(experiment.data.corpus) == 4
    texts = load_corpus(str(tmp_path / "stratos.jsonl"), 10, 0, "conversations")
    assert sorted(texts) == [f"User: the cat sat on mat {i}\n\nAssistant: the sun is hot" for i in range(4)]


def test_bad_configs_are_refused_with_the_key_named(tiny_teacher):
    with pytest.raises(ConfigError, match="unknown arm 'teachr'"):
        tiny_config(tiny_teacher, "arms=[teachr]")
    with pytest.raises(ConfigError, match="data.held_ot"):
        tiny_config(tiny_teacher, "data.held_ot=0.5")
    with pytest.raises(ConfigError, match="data.loss_on"):
        tiny_config(tiny_teacher, "data.loss_on=everything")


def test_cli_reports_a_missing_corpus_in_one_line_and_runs_the_arms_as_a_sweep(tiny_teacher, tmp_path, monkeypatch,
                                                                              capsys):
    from modformer.cli import main

    monkeypatch.setenv("MODFORMER_CACHE", str(tmp_path / "cache"))
    cfg = tmp_path / "exp.yaml"
    cfg.write_text(tiny_config(tiny_teacher, f"data.corpus={tmp_path / 'nope.txt'}", "arms=[alone]").to_yaml())
    assert main(["modules", str(cfg), "--out", str(tmp_path / "run"), "--one-run"]) == 2
    assert "no such file" in capsys.readouterr().err
    cfg.write_text(tiny_config(tiny_teacher, "arms=[alone]").to_yaml())  # corrected: the same folder takes it
    assert main(["modules", str(cfg), "--out", str(tmp_path / "run"), "--one-run"]) == 0
    # without --one-run: the sweep of the config's arms and seeds, a sweep folder like any other
    assert main(["llm-modules", str(cfg), "--out", str(tmp_path / "sweep")]) == 0
    record = json.loads((tmp_path / "sweep" / "results.jsonl").read_text().splitlines()[-1])
    assert record["run_id"] == "alone/default/seed0" and record["status"] == "done"
    assert record["summary"] == json.loads((tmp_path / "run" / "summary.json").read_text()) | {
        k: record["summary"][k] for k in ("seconds",)}
    assert "| alone | 1 |" in (tmp_path / "sweep" / "report.md").read_text()


def test_worked_sums_and_a_split_that_holds_out_operand_values():
    assert worked_sum(47, 38) == "7+8=15, carry 1. 4+3+1=8. Answer: 85."
    assert worked_sum(95, 17) == "5+7=12, carry 1. 9+1+1=11, carry 1. Answer: 112."
    assert arithmetic_answer(" 7+8=15, carry 1. 4+3+1=8. Answer: 85 and") == "85" and arithmetic_answer("7+8") == ""
    items = arithmetic_items(2)
    assert len(items) == 90 * 90 and all(i.text.endswith(f"Answer: {i.expected}.") for i in items[:50])
    train, held = split_items(items, 0.2, seed=3)
    assert {i.group for i in train}.isdisjoint({i.group for i in held}) and len(held) == 18 * 90
    assert split_items(items, 0.2, seed=3) == (train, held)


@pytest.mark.slow
def test_the_packaged_teacher_runs_every_arm(tmp_path):
    """A few steps of every arm with SmolLM2-135M-Instruct (MODFORMER_TEACHER=1 bash scripts/setup.sh)."""
    pytest.importorskip("gguf")

    cfg = load_llm_modules_config("configs/experiments/llm_modules_facts.yaml",
                                  ["train.steps=4", "train.eval_every=2", "data.corpus_rows=50", "seeds=[0]"])
    results = run_arms(cfg, tmp_path / "out")
    assert [r["arm"] for r in results] == cfg.arms == [a for a in ARMS if a != "scratch"]
    assert all(len(r["held_out_answers"]) > 30 for r in results)


def _train_with(prepared, dropout: float | None = None, **options) -> tuple[list[dict], dict[str, torch.Tensor]]:
    cfg = copy.deepcopy(prepared.cfg)
    if dropout is not None:
        cfg.bridge.dropout = dropout
    for key, value in options.items():
        setattr(cfg.train, key, value)
    run = ArmRun(cfg, ARMS["teacher"], 0, prepared.data, prepared.teacher, prepared.pairing)
    records: list = []
    run.train(records.append)
    return untimed(records), run.model.state_dict()


def _assert_same_training(a, b) -> None:
    (records_a, weights_a), (records_b, weights_b) = a, b
    assert [r["step"] for r in records_a] == [r["step"] for r in records_b]
    for ra, rb in zip(records_a, records_b):
        assert ra.keys() == rb.keys()
        for key, value in ra.items():
            assert rb[key] == (pytest.approx(value, rel=1e-4, abs=1e-6) if isinstance(value, float) else value), key
    for name, value in weights_a.items():
        torch.testing.assert_close(weights_b[name], value, rtol=1e-4, atol=1e-6, msg=name)


def test_a_bridged_student_trains_the_same_under_activation_checkpointing(prepared):
    """Each block is recomputed in backward with the bridge after it reading the step's own
    teacher states, dropout included: the records and weights of a run without it."""
    assert prepared.cfg.bridge.dropout > 0
    _assert_same_training(_train_with(prepared), _train_with(prepared, activation_checkpointing=True))


@pytest.mark.slow
def test_a_bridged_student_trains_the_same_through_torch_compile(prepared):
    """Without dropout (compiled code draws its random numbers its own way)."""
    _assert_same_training(_train_with(prepared, dropout=0.0), _train_with(prepared, dropout=0.0, compile=True))


def test_the_bridges_and_the_student_step_with_their_own_learning_rates(prepared):
    """Checked on the optimizer's param_groups as each step runs: every bridge parameter steps at
    the schedule times train.bridge_lr, every student parameter at the schedule times
    train.student_lr (rates set apart here), and each group holds one kind only."""
    from torch.optim.optimizer import register_optimizer_step_pre_hook

    from modformer.train.optim import learning_rate

    cfg = copy.deepcopy(prepared.cfg)
    cfg.train.bridge_lr, cfg.train.student_lr = 3e-3, 2e-4
    run = ArmRun(cfg, ARMS["teacher"], 0, prepared.data, prepared.teacher, prepared.pairing)
    names = {id(p): n for n, p in run.model.named_parameters()}
    steps = []

    def seen(optimizer, args, kwargs):
        if optimizer is run.optimizer:
            steps.append([(g["lr"], {names[id(p)].startswith("bridges.") for p in g["params"]})
                          for g in optimizer.param_groups])

    handle = register_optimizer_step_pre_hook(seen)
    try:
        run.train(lambda record: None)
    finally:
        handle.remove()
    assert len(steps) == cfg.train.steps
    for step, groups in enumerate(steps):
        factor = learning_rate(step, cfg.train, 1.0)
        assert factor > 0 and {bridge for _, kinds in groups for bridge in kinds} == {True, False}
        for lr, kinds in groups:
            assert len(kinds) == 1, "a group mixes bridge and student parameters"
            expected = cfg.train.bridge_lr if kinds == {True} else cfg.train.student_lr
            assert lr == pytest.approx(factor * expected, rel=1e-12), (step, kinds)


def test_the_random_teachers_states_differ_between_texts_and_repeat_for_a_text(prepared):
    """The random teacher's noise is fixed per (seed, text): two texts get different states, one
    text the same states wherever it sits in a batch and whichever batch reads it."""
    run = ArmRun(prepared.cfg, ARMS["random_teacher"], 0, prepared.data, prepared.teacher, prepared.pairing)
    (layer,) = prepared.teacher.layers
    a = run.noise([5, 6, 5], 10)[layer]
    assert torch.equal(a[0], a[2]) and not torch.allclose(a[0], a[1])
    b = run.noise([6, 2, 5], 10)[layer]
    assert torch.equal(b[0], a[1]) and torch.equal(b[2], a[0]) and not torch.allclose(b[1], a[0])


def test_a_fixed_gate_is_the_value_everywhere_and_its_weights_do_not_train(prepared):
    """bridge.gate: fixed sets every bridge's gate to bridge.gate_value in training and
    evaluation; the gate's weights are left out of training; 0 is the student alone."""
    from modformer.analysis.common import evaluating
    from modformer.model.hooks import hooked

    cfg = copy.deepcopy(prepared.cfg)
    cfg.bridge.gate, cfg.bridge.gate_value = "fixed", 0.25
    run = ArmRun(cfg, ARMS["teacher"], 0, prepared.data, prepared.teacher, prepared.pairing)
    trainable = {n for n, p in run.model.named_parameters() if p.requires_grad}
    assert trainable == expected_trainable("teacher") - {"bridges.input.gate.weight", "bridges.input.gate.bias"}
    batch = prepared.data.batch(prepared.data.held, [0, 1], answer_only=True)
    with torch.no_grad(), evaluating(run.model):
        quarter = run.logits(batch)
        with hooked(run.model, {"bridges.*.gate_value": lambda _name, g: torch.full_like(g, 0.25)}):
            run.forced_gate = None  # the learned gate, set to 0.25 by hand
            assert torch.equal(run.logits(batch), quarter)
        assert not torch.allclose(run.logits(batch), quarter)  # the learned gate is another
        run.forced_gate = 0.25
    records = []
    run.train(records.append)
    assert all(r["kind"] != "train" or r["loss"] == r["loss"] for r in records)  # no NaN
    run.forced_gate = 0.0
    with torch.no_grad(), evaluating(run.model):
        assert torch.allclose(run.logits(batch), run.model.student(batch.ids), atol=1e-5)


def test_eval_gates_score_the_trained_run_again_with_each_gate_and_leave_it_as_trained(prepared):
    """bridge.eval_gates: the summary holds, per value, exact match and held-out answer loss
    with the gates forced to it (0: the student alone's loss), plus the learned gate's mean;
    the run's own figures are those of the learned gate, as without the option."""
    from modformer.papers.llm_modules.arm_run import gate_key, run_arm

    assert [gate_key(v) for v in (0, 0.25, 0.5, 1)] == ["0", "0_25", "0_5", "1"]
    cfg = copy.deepcopy(prepared.cfg)
    extract = lambda text: text.strip()  # noqa: E731
    plain = run_arm(cfg, ARMS["teacher"], 0, prepared.data, prepared.teacher, prepared.pairing, extract,
                    lambda _r: None, 5)
    cfg.bridge.eval_gates = [0, 0.5, 1]
    forced = run_arm(cfg, ARMS["teacher"], 0, prepared.data, prepared.teacher, prepared.pairing, extract,
                     lambda _r: None, 5)
    assert "forced_gate" not in plain and set(forced["forced_gate"]) == {"0", "0_5", "1"}
    for key in ("held_out_exact", "train_exact", "held_out_answer_loss", "train_answer_loss"):
        assert forced[key] == plain[key], key
    assert 0 < forced["gate_mean"]["input"] < 1
    assert all(0 <= forced["forced_gate"][k]["held_out_exact"] <= 1 for k in ("0", "0_5", "1"))
    losses = [forced["forced_gate"][k]["held_out_answer_loss"] for k in ("0", "0_5", "1")]
    assert len(set(losses)) == 3 and forced["forced_gate"]["0_5"]["gate"] == 0.5
    alone = run_arm(cfg, ARMS["alone"], 0, prepared.data, prepared.teacher, prepared.pairing, extract,
                    lambda _r: None, 5)
    assert "forced_gate" not in alone and "gate_mean" not in alone


def test_gate_options_are_checked(tiny_teacher):
    with pytest.raises(ConfigError, match="bridge.gate must be"):
        tiny_config(tiny_teacher, "bridge.gate=half")
    with pytest.raises(ConfigError, match="bridge.gate_value"):
        tiny_config(tiny_teacher, "bridge.gate=fixed", "bridge.gate_value=1.5")
    with pytest.raises(ConfigError, match="bridge.eval_gates"):
        tiny_config(tiny_teacher, "bridge.eval_gates=[0,0,1]")
    assert tiny_config(tiny_teacher, "bridge.eval_gates=[0,0.25,1]").bridge.eval_gates == [0, 0.25, 1]


def test_the_report_shows_the_forced_gates(tiny_teacher):
    from modformer.papers.llm_modules.report import report_lines

    def run(arm, seed, loss):
        forced = {k: {"gate": g, "held_out_exact": 0.0, "train_exact": 0.5, "held_out_answer_loss": loss + g,
                      "held_out_answer_exact_tf": 0.0} for k, g in (("0", 0.0), ("0_5", 0.5))}
        return {"arm": arm, "seed": seed, "held_out_exact": 0.0, "train_exact": 0.5, "held_out_answer_loss": loss,
                "train_loss": 2.0, "trainable": {"student": 1, "bridge": 1}, "gate_mean": {"input": 0.4},
                "forced_gate": forced, "code_version": "0.1.0+0123456789ab", "machine": "a CPU"}

    cfg = tiny_config(tiny_teacher, "arms=[teacher,random_teacher]", "bridge.eval_gates=[0,0.5]").to_dict()
    by_arm = {"teacher": [run("teacher", 0, 3.0), run("teacher", 1, 3.2)],
              "random_teacher": [run("random_teacher", 0, 4.0), run("random_teacher", 1, 4.4)]}
    text = "\n".join(report_lines(cfg, {"train": ["a"], "held_out": ["b"]}, by_arm, lambda _a: [], None))
    assert "The gate forced after training" in text and "| teacher | learned (0.40) |" in text
    assert "| random_teacher | 0.5 |" in text and "- gate 0.5: -1.100" in text
