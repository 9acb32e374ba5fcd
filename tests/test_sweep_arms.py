"""A sweep whose arms have settings of their own: a hybrid placement is its own named arm, an
option applies only to the arm that has it, no model is trained twice, and the report, the
plots' legends and the run folders name each arm."""

import json
import re

import pytest
import yaml

from modformer.errors import ConfigError, ModformerError
from modformer.sweep.report import write_report
from modformer.sweep.runner import SweepRunner, read_results
from modformer.sweep.spec import load_sweep

CONV = "examples.parts.causal_conv:CausalConv"
BASE = {
    "model": {"d_model": 32, "n_layers": 2, "n_heads": 2},
    "task": {"name": "retrieval", "n_pairs": 3, "test_size": 100, "validation_size": 50},
    "train": {"steps": 4, "batch_size": 8, "eval_every": 4, "checkpoint_every": 4, "eval_batch_size": 100},
}
ARMS = {
    "standard": None,
    "frozen_qk": {},
    "frozen_qk_top_standard": {"variant": "frozen_qk", "model.layers": {-1: "standard"}},
    "conv2": {"model.mixer": CONV, "model.mixer_options": {"kernel": 2}},
}


def write(tmp_path, arms, **sweep):
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump({**BASE, "sweep": {"variants": arms, "seeds": [0], **sweep}}, sort_keys=False))
    return path


def test_each_arm_runs_its_variant_with_its_own_settings(tmp_path):
    arms = {**ARMS, "conv2": {"variant": "standard", **ARMS["conv2"]}}
    runs = {r.variant: r for r in load_sweep(write(tmp_path, arms)).runs()}
    assert list(runs) == list(ARMS)  # one run each (one seed, no grid), in the order given
    assert runs["standard"].config.model.layers == runs["frozen_qk"].config.model.layers == []
    hybrid = runs["frozen_qk_top_standard"].config.model
    assert hybrid.variant == "frozen_qk" and [layer.variant for layer in hybrid.layers] == [None, "standard"]
    conv = runs["conv2"].config.model
    assert conv.variant == "standard" and conv.mixer == CONV and conv.mixer_options == {"kernel": 2}
    # the option is the conv arm's alone
    defaults = {"causal": True, "qk_init_scale": 1.0}  # attention's own, as every other arm builds it
    assert all(r.config.model.mixer_options == defaults for name, r in runs.items() if name != "conv2")
    assert runs["frozen_qk_top_standard"].run_id == "frozen_qk_top_standard/default/seed0"


@pytest.mark.parametrize("arms, grid, says", [
    ({"standard": {}, "standard_top_standard": {"variant": "standard", "model.layers": {-1: "standard"}}}, {},
     r"arms 'standard' and 'standard_top_standard' train the same model \(standard, model.layers=\{-1: 'standard'\} "
     r"resolves to standard's config\): keep one of them$"),
    ({"standard": {}, "standard_top_standard": {"variant": "standard", "model.layers": {-1: "standard"}}},
     {"train.lr": [0.1]}, r"resolves to standard's config at train.lr=0.1\): keep one of them$"),  # the grid point
    ({"standard_hybrid": {"model.layers": {-1: "mixit"}}}, {},
     r"unknown variant 'standard_hybrid'.*sweep.variants.standard_hybrid gives no `variant`"),
    ({"a": {"variant": "frozen_qk", "train.lr": 0.1}}, {"train.lr": [0.1, 0.01]},
     r"sweep.variants.a.train.lr is also a grid axis"),
    ({"a": {"model.variant": "mixit"}}, {}, r"sweep.variants.a.model.variant: an arm gives its variant as `variant`"),
    ({"a": {"variant": 3}}, {}, "must be a variant's name"),
    ({"a": {"variant": "standard", "model.nonesuch": 1}}, {}, "model.nonesuch"),
    ({"mixit_conv": {"variant": "mixit", "model.mixer": CONV}}, {}, "conflicts with model.variant=mixit"),
])
def test_an_arm_that_cannot_run_is_refused_before_any_run(tmp_path, arms, grid, says):
    with pytest.raises(ConfigError, match=says):
        load_sweep(write(tmp_path, arms, grid=grid))


@pytest.mark.slow  # 4 tiny runs, each its own process: ~30 s
def test_the_report_and_the_legends_name_each_arm_and_its_setting(tmp_path, monkeypatch):
    from modformer.sweep import report

    arms = {"standard": {}, "frozen_qk_top_standard": ARMS["frozen_qk_top_standard"]}
    out = tmp_path / "out"
    SweepRunner(load_sweep(write(tmp_path, arms, grid={"train.lr": [0.01, 0.001]})), out, echo=lambda m: None).run()
    assert {r["variant"] for r in read_results(out).values()} == set(arms)
    assert (out / "runs" / "frozen_qk_top_standard" / "train.lr=0.01" / "seed0" / "summary.json").is_file()
    legends = []
    monkeypatch.setattr(report, "_legend", lambda v, chosen, real=report._legend: legends.append(real(v, chosen))
                        or legends[-1])
    text = write_report(out).read_text()
    assert 'Arms: `standard` = standard; `frozen_qk_top_standard` = frozen_qk, `model.layers={"-1": "standard"}`.' \
        in text
    row = next(line for line in text.splitlines() if line.startswith("| frozen_qk_top_standard | `train.lr="))
    assert row  # the arm's own name, not the label of its stack
    # every curve and slice line: the arm, and the setting chosen for it on validation
    assert {x.split(" (")[0] for x in legends} == set(arms)
    assert all(re.fullmatch(r"\S+ \(train\.lr=0\.0?01\)", x) for x in legends)


@pytest.mark.slow  # 2 tiny runs, each its own process
def test_an_arm_added_trains_alone_and_an_arm_changed_is_another_sweep(tmp_path):
    out = tmp_path / "out"
    first = {"standard": {}}
    SweepRunner(load_sweep(write(tmp_path, first)), out, echo=lambda m: None).run()
    log = []
    grown = {"standard": {}, "frozen_qk_top_standard": ARMS["frozen_qk_top_standard"]}
    SweepRunner(load_sweep(write(tmp_path, grown)), out, echo=log.append, amend="a hybrid arm added").run()
    assert any("1 already finished, 1 to run" in m for m in log)
    changed = {**grown, "frozen_qk_top_standard": {"variant": "frozen_qk", "model.layers": {0: "standard"}}}
    with pytest.raises(ModformerError, match="different sweep"):
        SweepRunner(load_sweep(write(tmp_path, changed)), out, echo=lambda m: None).run()
    assert json.loads((out / "runs/frozen_qk_top_standard/default/seed0/summary.json").read_text())["test"]


def test_grid_values_that_train_the_same_model_are_refused(tmp_path):
    with pytest.raises(ConfigError, match=r"sweep.grid: points .* train the same model for 'standard'"):
        load_sweep(write(tmp_path, ["standard", "frozen_qk"], grid={"model.layers": [[], {-1: "standard"}]}))


@pytest.mark.slow  # 2 tiny runs, each its own process
def test_curve_where_selects_a_stack_as_the_grid_gave_it(tmp_path):
    from modformer.sweep.curve import curve_points

    out = tmp_path / "out"
    sweep = load_sweep(write(tmp_path, ["frozen_qk"], grid={"model.layers": [[], {-1: "standard"}]}))
    SweepRunner(sweep, out, echo=lambda m: None).run()
    for where in (["model.layers={-1: standard}"], ["model.layers=[]"]):
        points = curve_points([out], where=where)
        (runs,) = points["frozen_qk"].values()
        assert len(runs) == 1, where
    with pytest.raises(ModformerError, match="differ in model.layers"):  # both stacks would be one point
        curve_points([out])
