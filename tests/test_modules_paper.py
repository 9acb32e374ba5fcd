"""The LLM Modules paper's setting (configs/experiments/llm_modules_paper.yaml) run offline:
the config itself, its paths pointed at a tiny random Qwen2 teacher and a tiny random
GPT-Neo student, each with its own byte-level BPE, and a tiny JSONL in the shape of
Bespoke-Stratos-17k rows. Built here from transformers config classes, no download."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
import yaml

from modformer.papers.llm_modules.arm_run import ArmRun
from modformer.papers.llm_modules.arms import ARMS
from modformer.papers.llm_modules.generation import LiveTeacher
from modformer.papers.llm_modules.config import load_llm_modules_config
from modformer.data.pairing import TwoTokenizers, as_tensor, key_mask
from modformer.papers.llm_modules.stratos import boxed_answer, stratos_items
from modformer.configtools import to_dict
from modformer.data.tokenizer import train_bpe
from modformer.errors import ConfigError, ModformerError

transformers = pytest.importorskip("transformers")

CONFIG = "configs/experiments/llm_modules_paper.yaml"
SYSTEM = "Your role as an assistant involves thoroughly exploring questions."  # as every real row has one


def _row(problem: str, reply: str) -> dict:
    return {"system": SYSTEM, "conversations": [{"from": "user", "value": problem},
                                                {"from": "assistant", "value": reply}]}


def stratos_rows() -> list[dict]:
    """Twelve sums with a boxed answer, one asked twice, a coding problem without one, and one
    problem too long for the tiny student (left out by data.max_item_tokens)."""
    rows = [_row(f"What is {a} plus {b}?", f"<|begin_of_thought|> We add {a} and {b}. <|end_of_thought|> "
                                           f"The sum is $\\boxed{{{a + b}}}$.")
            for a, b in [(1, 2), (3, 4), (5, 6), (7, 8), (2, 9), (4, 4), (6, 1), (8, 3), (9, 9), (3, 7), (5, 2), (1, 8)]]
    rows.append(_row("What is 1 plus 2?", "One and two make $\\boxed{3}$."))  # the same problem again
    rows.append(_row("Write a function that adds two numbers.", "def add(a, b):\n    return a + b"))
    rows.append(_row("What is " + " plus ".join(["7"] * 60) + "?", "It is $\\boxed{420}$."))
    return rows


@pytest.fixture(scope="module")
def paper_setting(tmp_path_factory):
    """(teacher folder, student folder, data file): a 2-layer Qwen2 and a 2-layer GPT-Neo of
    width 32 with different tokenizers, and the Bespoke-Stratos stand-in."""
    folder = tmp_path_factory.mktemp("paper")
    rows = stratos_rows()
    data = folder / "stratos.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    texts = [m["value"] for r in rows for m in r["conversations"]] + ["User: Assistant:"]
    teacher_bpe, student_bpe = train_bpe(texts, 420), train_bpe(texts, 330)  # two ways to split the same text
    torch.manual_seed(0)
    qwen = transformers.Qwen2ForCausalLM(transformers.Qwen2Config(
        vocab_size=teacher_bpe.vocab_size, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512, tie_word_embeddings=True))
    neo = transformers.GPTNeoForCausalLM(transformers.GPTNeoConfig(
        vocab_size=student_bpe.vocab_size, max_position_embeddings=128, hidden_size=32, num_layers=2, num_heads=4,
        intermediate_size=64, attention_types=[[["global", "local"], 1]], window_size=16,
        bos_token_id=student_bpe.eos_id, eos_token_id=student_bpe.eos_id))
    saved = {}
    for name, model, bpe in (("qwen2", qwen, teacher_bpe), ("gpt_neo", neo, student_bpe)):
        saved[name] = folder / name
        model.save_pretrained(saved[name])
        transformers.PreTrainedTokenizerFast(tokenizer_object=bpe.tokenizer, eos_token="<|endoftext|>",
                                             pad_token="<|pad|>").save_pretrained(saved[name])
    return saved["qwen2"], saved["gpt_neo"], data


def paper_overrides(setting, *more: str) -> list[str]:
    """The paper's config pointed at the tiny local models and data, at a tiny scale."""
    teacher, student, data = setting
    return [f"teacher.name={teacher}", f"student.model={student}", f"data.task_source={data}",
            "teacher.precision=fp32", "teacher.cache_dtype=float32", "train.precision=fp32",
            "data.max_item_tokens=100", "data.held_out=0.25", "train.epochs=1", "train.batch_size=2",
            "train.warmup_steps=1", "train.max_new_tokens=3", "train.threads=1", "seeds=[0]", *more]


def test_the_paper_config_loads_with_every_key_and_states_the_papers_setting():
    raw = yaml.safe_load(Path(CONFIG).read_text())
    cfg = load_llm_modules_config(CONFIG)
    resolved = to_dict(cfg)

    def leaves(tree, path=()):
        for key, value in tree.items():
            yield from leaves(value, (*path, key)) if isinstance(value, dict) else [((*path, key), value)]

    for path, value in leaves(raw):
        got = resolved
        for key in path:
            got = got[key]
        assert got == value or (value is None and path == ("arms",)), path
    assert (cfg.teacher.name, cfg.student.model, cfg.student.pretrained) == (
        "Qwen/Qwen2-1.5B", "EleutherAI/gpt-neo-125m", True)
    assert (cfg.data.task, cfg.data.task_source, cfg.train.epochs) == ("stratos", "bespoke_stratos", 15)
    assert (cfg.train.bridge_lr, cfg.train.student_lr) == (1e-4, 5e-5)
    assert (cfg.bridge.places, cfg.bridge.n_heads, cfg.bridge.dropout, cfg.bridge.adapter_bottleneck) == (
        ["input"], 8, 0.1, 256)
    assert cfg.arms == ["alone", "scratch", "teacher", "random_teacher", "leaky"]  # causal bridge and controls
    assert cfg.seeds == [0, 1, 2]
    with pytest.raises(ConfigError, match="data.task: expected one of facts, arithmetic, stratos"):
        load_llm_modules_config(CONFIG, ["data.task=stratoz"])
    with pytest.raises(ConfigError, match="train.epochs must be positive"):
        load_llm_modules_config(CONFIG, ["train.epochs=0"])


def test_stratos_rows_become_problems_held_out_whole_with_their_boxed_answers(tmp_path):
    assert boxed_answer("so $\\boxed{\\frac{1}{2}}$ and then $\\boxed{ 7 }$.") == "7"
    assert boxed_answer("$\\boxed{\\frac{1}{2}}$") == "\\frac{1}{2}"
    assert boxed_answer("no answer here") == boxed_answer("cut off: \\boxed{\\frac{1}{") == ""
    data = tmp_path / "rows.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in [*stratos_rows(), {"conversations": "plain text"}]))
    items = stratos_items(str(data))
    assert len(items) == len(stratos_rows())  # the plain-text row is not a problem and its answer
    sums = {i.expected for i in items if i.prompt == "User: What is 3 plus 4?\n\nAssistant:"}
    assert sums == {"7"}
    first = next(i for i in items if i.prompt == "User: What is 3 plus 4?\n\nAssistant:")
    assert first.text == "User: What is 3 plus 4?\n\nAssistant: " + stratos_rows()[1]["conversations"][1]["value"]
    assert next(i.expected for i in items if i.group.startswith("Write a function")) == ""  # not scored
    assert len([i for i in items if i.group == "What is 1 plus 2?"]) == 2  # one problem, one group
    with pytest.raises(ModformerError, match="data.task_source"):
        stratos_items(str(tmp_path / "missing.jsonl"))


def test_the_paper_setting_runs_offline_on_a_tiny_qwen2_and_gpt_neo(paper_setting, tmp_path, monkeypatch):
    """`modformer modules` on the paper's config (a sweep of its arms): every arm trains and is
    reported; problems are held out whole; the bridge is causal across the two tokenizers; the
    teacher stays frozen."""
    from modformer.papers.llm_modules.experiment import LLMModulesExperiment
    from modformer.cli import main

    monkeypatch.setenv("MODFORMER_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "out"
    overrides = paper_overrides(paper_setting)
    assert main(["modules", CONFIG, *overrides, "--out", str(out)]) == 0

    cfg = load_llm_modules_config(CONFIG, overrides)
    runs = {arm: out / "runs" / arm / "default" / "seed0" for arm in cfg.arms}
    split = json.loads((runs[cfg.arms[0]] / "split.json").read_text())
    def problems(texts):
        return {t.split("\n\nAssistant:")[0] for t in texts}

    assert split["items"] == len(stratos_rows()) - 1  # the long problem does not fit in 100 student tokens
    assert not problems(split["train"]) & problems(split["held_out"])
    saved = yaml.safe_load((runs[cfg.arms[0]] / "config.yaml").read_text())
    assert saved["train"]["steps"] == math.ceil(len(split["train"]) / 2) and saved["train"]["epochs"] == 1
    report = (out / "report.md").read_text()
    assert "(1 epochs)" in report and "its own tokenizer" in report
    for arm in cfg.arms:
        assert json.loads((runs[arm] / "split.json").read_text()) == split  # every arm, the same items
        summary = json.loads((runs[arm] / "summary.json").read_text())
        records = [json.loads(line) for line in (runs[arm] / "metrics.jsonl").read_text().splitlines()]
        assert [r["step"] for r in records if r["kind"] == "train"][-1] == saved["train"]["steps"], arm
        assert math.isfinite(summary["held_out_answer_loss"]) and 0 <= summary["held_out_exact"] <= 1
        assert f"| {arm} | 1 |" in report

    # Prepared again in this process (the same split, the states cached).
    exp = LLMModulesExperiment(cfg, tmp_path / "again", echo=lambda *_: None)
    exp.prepare()
    assert isinstance(exp.pairing, TwoTokenizers) and exp.cfg.train.steps == saved["train"]["steps"]
    assert type(exp.teacher.model).__name__ == "Qwen2ForCausalLM"
    teacher_before = {k: v.clone() for k, v in exp.teacher.model.state_dict().items()}
    run = ArmRun(exp.cfg, ARMS["teacher"], 0, exp.data, exp.teacher, exp.pairing)
    assert type(run.model.student.model).__name__ == "GPTNeoForCausalLM"
    bridge_before = {k: v.clone() for k, v in run.model.bridges.state_dict().items()}
    run.train(lambda record: None)
    assert all(torch.equal(teacher_before[k], v) for k, v in exp.teacher.model.state_dict().items())
    assert not any(p.requires_grad for p in exp.teacher.model.parameters())
    assert not all(torch.equal(bridge_before[k], v) for k, v in run.model.bridges.state_dict().items())

    # Causal: the student's logits over a prompt do not move when the reply after it changes.
    prompt = exp.data.held.items[0].prompt
    texts = [exp.pairing.encode(prompt + reply) for reply in (" The sum is $\\boxed{3}$.", " def add(a, b): pass")]
    n = len(exp.pairing.student_ids(prompt))
    assert texts[0].student[:n] == texts[1].student[:n] and texts[0].teacher != texts[1].teacher
    for arm, same in (("teacher", True), ("leaky", False)):
        bridged = ArmRun(exp.cfg, ARMS[arm], 0, exp.data, exp.teacher, exp.pairing)
        bridged.model.eval()
        with torch.no_grad():
            logits = bridged.forward(as_tensor([t.student for t in texts]), LiveTeacher(exp.teacher).keys(texts),
                                     key_mask(texts, leaky=not same))
        assert torch.allclose(logits[0, :n], logits[1, :n], atol=1e-5) == same, arm


def test_a_problem_limit_that_leaves_nothing_is_one_clear_error(paper_setting, tmp_path, monkeypatch):
    from modformer.papers.llm_modules.experiment import LLMModulesExperiment

    monkeypatch.setenv("MODFORMER_CACHE", str(tmp_path / "cache"))
    cfg = load_llm_modules_config(CONFIG, paper_overrides(paper_setting, "data.max_item_tokens=3"))
    with pytest.raises(ModformerError, match="data.max_item_tokens=3 leaves 0"):
        LLMModulesExperiment(cfg, tmp_path / "out", echo=lambda *_: None).prepare()
    with pytest.raises(ConfigError, match="bpe:N student tokenizer"):
        load_llm_modules_config(CONFIG, paper_overrides(paper_setting, "student.model=modformer",
                                                        "student.tokenizer=bpe:300", "student.embeddings=random"))
