"""The tiny offline LLM-Modules setting of the modules tests: its corpus and a config that
trains for a few steps (the teacher it reads is conftest's `tiny_teacher` fixture)."""

from __future__ import annotations

from modformer.papers.llm_modules.config import load_llm_modules_config

CORPUS = ["the cat sat on the mat", "a dog ran in the park", "the sun is hot and bright", "we like to read books",
          "rain falls on the green hills", "the sea is deep and blue"]


def tiny_config(teacher_folder, *overrides):
    return load_llm_modules_config(None, [
        f"teacher.name={teacher_folder}", "teacher.known_only=false", "teacher.precision=fp32",
        "teacher.cache_dtype=float32", "student.n_heads=4", "bridge.n_heads=4", "bridge.adapter_bottleneck=8",
        f"data.corpus={teacher_folder / 'corpus.txt'}", "data.corpus_rows=6", "data.held_out=0.3",
        "train.steps=3", "train.batch_size=8", "train.eval_every=3", "train.log_every=1", "train.max_new_tokens=2",
        "seeds=[0]", *overrides])


def run_arms(cfg, out, echo=lambda *_: None) -> list[dict]:
    """Every arm x seed of `cfg`, each trained as one run of a sweep is (`run_one`), in
    out/ARM/seedS, here in this process; returns their summaries, arms outermost."""
    import copy

    from modformer.papers.llm_modules.experiment import LLMModulesExperiment

    results = []
    for arm in cfg.arms:
        for seed in cfg.seeds:
            one = copy.deepcopy(cfg)
            one.arms, one.seeds = [arm], [seed]
            results.append(LLMModulesExperiment(one, out / arm / f"seed{seed}", echo=echo).run_one())
    return results


def report_of(cfg, out, results) -> str:
    """The report of the runs `run_arms` trained in `out`, as a sweep's report writes one setting."""
    import json

    from modformer.configtools import to_dict
    from modformer.papers.llm_modules.report import report_lines

    by_arm: dict[str, list[dict]] = {}
    for result in results:
        by_arm.setdefault(result["arm"], []).append(result)
    split = json.loads((out / cfg.arms[0] / f"seed{cfg.seeds[0]}" / "split.json").read_text())
    lines = report_lines(to_dict(cfg), split, by_arm, lambda arm: sorted((out / arm).glob("seed*/metrics.jsonl")),
                         out / "curves.png")
    return "\n".join(lines)
