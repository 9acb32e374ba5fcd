"""Parts of the sweep a mutation sample found unchecked (results/mutation/sweep_survivors.txt):
the words its refusals and its plan's report lines use."""

import pytest
import yaml

from modformer.errors import ConfigError, ModformerError
from modformer.sweep.plan import plan_lines
from modformer.sweep.spec import SweepConfig


@pytest.mark.parametrize("seeds, message", [
    ([0, 0], r"^sweep\.seeds must be distinct and non-empty, got \[0, 0\]$"),
    ([], r"^sweep\.seeds must be distinct and non-empty, got \[\]$"),
    ([1, -2], r"^sweep\.seeds must be a seed >= 0, got \[1, -2\]$"),
])
def test_seeds_are_refused_by_name(seeds, message):
    with pytest.raises(ConfigError, match=message):
        SweepConfig(variants=["standard"], seeds=seeds)


def test_the_reports_plan_lines_say_when_it_was_fixed_and_every_amendment(tmp_path):
    assert plan_lines(tmp_path) == ["Plan: none recorded (these runs were made before sweeps recorded their plans).",
                                    ""]
    record = {"fixed": "2026-12-07T10:00:00+0000", "code_version": "0.1.0+abc", "plan": {"seeds": [0]},
              "amendments": [{"date": "2026-12-08", "code_version": "0.1.0+def", "changed": ["a: 1 -> 2", "b"],
                              "reason": "why", "plan": {"seeds": [0, 1]}}]}
    (tmp_path / "plan.yaml").write_text(yaml.safe_dump(record))
    assert plan_lines(tmp_path) == ["Plan (plan.yaml): fixed 2026-12-07T10:00:00+0000 by 0.1.0+abc.",
                                    "Amendment 1 (2026-12-08, 0.1.0+def): a: 1 -> 2; b. Why: why", ""]
    (tmp_path / "plan.yaml").write_text(yaml.safe_dump({"fixed": None, "code_version": None, "note": "transcribed",
                                                        "plan": {"seeds": [0]}}))
    assert plan_lines(tmp_path) == ["Plan (plan.yaml): not recorded at the first runs (they predate recorded plans). "
                                    "Note: transcribed.", ""]
    (tmp_path / "plan.yaml").write_text("[1, 2]\n")
    with pytest.raises(ModformerError, match=r"plan\.yaml holds no plan \(empty or damaged\)$"):
        plan_lines(tmp_path)
