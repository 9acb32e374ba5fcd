"""Quoted figures (`modformer quote`): recomputed from sweep records, never typed or stale."""

import json
from pathlib import Path

import pytest

from modformer.cli import main
from modformer.errors import ModformerError
from modformer.sweep.quote import quote_file

ROOT = Path(__file__).parent.parent


def sweep_folder(root: Path, runs) -> Path:
    """A sweep folder of finished runs (variant, lr, seed, accuracy, induction scores), as a sweep leaves them."""
    out = root / "sweep"
    lines = []
    for variant, lr, seed, accuracy, scores in runs:
        run_id = f"{variant}/train.lr={lr}/seed{seed}"
        (out / "runs" / run_id).mkdir(parents=True)
        records = [{"kind": "induction", "step": 1, "scores": [[0.1, 0.2]]},
                   {"kind": "induction", "step": 2, "scores": scores}]
        (out / "runs" / run_id / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
        lines.append({"run_id": run_id, "variant": variant, "point": {"train.lr": lr}, "seed": seed, "status": "done",
                      "run_dir": f"runs/{run_id}",
                      "summary": {"test": {"accuracy": accuracy, "loss": 1 - accuracy, "examples": 12345,
                                           "slices": {"n_pairs": {"1": {"accuracy": 1.0}}}}}})
    (out / "results.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    return out


RUNS = [("standard", 0.003, s, a, [[0.5, 0.9 - s / 10]]) for s, a in enumerate([0.90, 0.92, 0.97])] + \
       [("standard", 0.01, s, 0.5, [[0.1, 0.1]]) for s in range(3)] + \
       [("mixit", 0.003, 0, 0.011, [[0.0, 0.0]])]


def quoted(spec: str, value: str = "?") -> str:
    return f"<!--q {spec}-->{value}<!--/q-->"


def rendered(root: Path, *specs: str) -> str:
    """A page quoting each of `specs` over the RUNS sweep, once `modformer quote` has written it."""
    sweep_folder(root, RUNS)
    page = root / "README.md"
    page.write_text(" ".join(quoted(s) for s in specs) + "\n")
    quote_file(page)
    return page.read_text()


def assert_refused(root: Path, spec: str, message: str) -> None:
    """A page quoting `spec` is refused with `message`, and left as it was."""
    page = root / "README.md"
    page.write_text(quoted(spec))
    with pytest.raises(ModformerError, match=message):
        quote_file(page)
    assert page.read_text() == quoted(spec)


def test_quoted_figures_are_rewritten_from_the_records_and_checked(tmp_path, capsys):
    sweep_folder(tmp_path, RUNS)
    page = tmp_path / "README.md"
    page.write_text(f"| {quoted('sweep standard train.lr=0.003 test.accuracy %1 ci')} |\n"
                    f"seeds {quoted('sweep standard train.lr=0.003 test.accuracy %0 seeds')}; "
                    f"{quoted('sweep standard train.lr=0.003 test.loss .3 mean')}; "
                    f"{quoted('sweep standard train.lr=0.003 test.accuracy %1 n')} runs; "
                    f"one pair {quoted('sweep standard train.lr=0.01 test.slices.n_pairs.1.accuracy %0 mean')}; "
                    f"head {quoted('sweep standard train.lr=0.003 induction.max .2 seeds')}; "
                    f"one run {quoted('sweep mixit test.accuracy %2')}; "
                    f"seed 1 alone {quoted('sweep standard train.lr=0.003 seed=1 test.accuracy %1 mean')}; "
                    f"count {quoted('sweep standard train.lr=0.003 test.examples ,0 mean')}; "
                    f"from {quoted('sweep standard train.lr=0.003 test.accuracy %0 range')} "
                    f"(top {quoted('sweep standard train.lr=0.003 test.loss .2 max')})\n")
    assert len(quote_file(page)) == 11
    text = page.read_text()
    # mean 93.0, sample std 3.61, t(2) interval 93.0 +- 8.96, clipped to accuracy's 100%
    assert quoted("sweep standard train.lr=0.003 test.accuracy %1 ci", "93.0% ± 3.6 [84.0, 100.0]") in text
    assert ">90%, 92%, 97%<" in text and ">0.070<" in text and ">3<" in text and ">100%<" in text
    assert ">0.90, 0.80, 0.70<" in text  # the strongest head at each run's last evaluation, seed order
    assert ">1.10% (one run)<" in text
    assert ">92.0%<" in text  # seed=1 picks that seed's run alone
    assert ">12,345<" in text  # ,N: thousands separated
    assert ">90-97%<" in text and ">0.10<" in text  # the seeds' range; the largest loss (1 - 0.90)
    assert quote_file(page, check=True) == []
    assert main(["quote", str(page), "--check"]) == 0

    page.write_text(text.replace("93.0% ± 3.6", "93.1% ± 3.6"))  # a typed (or stale) figure
    assert main(["quote", str(page), "--check"]) == 2
    out, err = capsys.readouterr()
    assert "line 1: '93.1% ± 3.6 [84.0, 100.0]' -> '93.0% ± 3.6 [84.0, 100.0]'" in out
    assert "1 figure(s)" in err and "93.1%" in page.read_text()  # --check changed nothing


@pytest.mark.parametrize("spec, message", [
    ("sweep standard test.accuracy %1", "holds 2 grid points"),  # two settings pooled as seeds: refused
    ("sweep frozen_qk test.accuracy %1", "no finished run of frozen_qk"),
    ("sweep standard train.lr=0.003 seed=5 test.accuracy %1", "no finished run of standard"),
    ("sweep standard seed=1 test.accuracy %1", "holds 2 grid points"),  # a seed of two settings
    ("other standard test.accuracy %1", "holds no sweep records"),
    ("sweep standard train.lr=0.003 test.bits %1", "records no 'test.bits'"),
    ("sweep standard train.lr=0.003 test.accuracy %1 best", "unknown flag 'best'"),
    ("sweep standard train.lr=0.003 test.accuracy 1", "expected METRIC then %N, .N or ,N"),
    # a difference: paired by seed, so both settings must hold the same seeds
    ("sweep standard train.lr=0.003 test.accuracy %1 minus mixit train.lr=0.003",
     r"a difference is paired by seed, but standard has seeds \[0, 1, 2\] and mixit \[0\]"),
    ("sweep standard train.lr=0.003 test.accuracy %1 minus", "'minus' takes a variant"),
    ("sweep standard train.lr=0.003 test.accuracy %1 minus train.lr=0.01", "'minus' takes a variant"),
    ("sweep standard train.lr=0.003 test.accuracy %1 minus mixit ci", "only KEY=VALUE"),
    ("sweep standard train.lr=0.003 test.accuracy %1 minus frozen_qk", "no finished run of frozen_qk"),
    # a ratio: paired the same way, and nothing else besides
    ("sweep standard train.lr=0.003 test.accuracy %1 of mixit", r"a ratio is paired by seed"),
    ("sweep standard train.lr=0.003 test.accuracy %1 of standard train.lr=0.01 minus mixit", r"'of' \(a ratio\) takes"),
    ("sweep standard train.lr=0.003 test.accuracy %1 above=0.9 of standard train.lr=0.01", r"'of' \(a ratio\) takes"),
])
def test_a_quote_that_names_no_one_setting_is_refused(tmp_path, spec, message):
    sweep_folder(tmp_path, RUNS)
    assert_refused(tmp_path, spec, message)


def test_a_difference_is_paired_by_seed_and_keeps_the_first_settings_values(tmp_path):
    text = rendered(tmp_path, "sweep standard train.lr=0.003 test.accuracy %1 ci minus standard train.lr=0.01",
                    "sweep standard train.lr=0.01 test.accuracy %0 seeds minus standard train.lr=0.003",
                    "sweep mixit test.loss .3 mean minus standard train.lr=0.003 seed=0",
                    "sweep standard train.lr=0.003 seed=2 test.accuracy %0 mean minus standard train.lr=0.01")
    # 0.90 - 0.5, 0.92 - 0.5, 0.97 - 0.5: mean 43.0, std 3.61, t(2) interval +- 8.96
    assert ">43.0% ± 3.6 [34.0, 52.0]<" in text
    assert ">-40%, -42%, -47%<" in text  # seed by seed, the first minus the second
    assert ">0.889<" in text  # (1 - 0.011) - (1 - 0.90)
    assert ">47%<" in text  # 0.97 - 0.5: the second keeps the first's seed=2, which it does not name


def test_two_metrics_of_the_same_runs_are_paired_within_each_run(tmp_path):
    text = rendered(tmp_path, "sweep standard train.lr=0.003 test.accuracy %0 seeds minus standard metric=test.loss",
                    "sweep standard train.lr=0.003 test.loss .2 mean minus standard train.lr=0.01 metric=test.accuracy")
    assert ">80%, 84%, 94%<" in text  # 0.90 - 0.10, 0.92 - 0.08, 0.97 - 0.03: accuracy minus loss, run by run
    assert ">-0.43<" in text  # the loss at 3e-3 (0.10, 0.08, 0.03; mean 0.07) minus the accuracy at 1e-2 (0.5)
    assert_refused(tmp_path, "sweep standard train.lr=0.003 test.accuracy %0 minus standard metric=[1]",
                   "metric= names a metric")


def test_a_ratio_refuses_to_divide_by_zero(tmp_path):
    sweep_folder(tmp_path, [("standard", 0.003, 0, 1.0, [[0.0]])])  # accuracy 1, so its loss is 0
    assert_refused(tmp_path, "sweep standard test.accuracy %0 of standard metric=test.loss",
                   r"^quote '.*': standard's test\.loss is 0; a ratio cannot divide by it$")  # the divisor's metric


def test_a_variant_of_another_sweep_folder_is_paired_by_seed(tmp_path):
    (tmp_path / "other").mkdir()
    sweep_folder(tmp_path / "other", [("frozen_mlp", 0.003, s, a, [[0.0]]) for s, a in enumerate([0.5, 0.6, 0.7])])
    text = rendered(tmp_path, "sweep standard train.lr=0.003 test.accuracy %0 seeds minus frozen_mlp folder=other/sweep",
                    "sweep standard train.lr=0.003 test.accuracy %1 seeds of frozen_mlp folder=other/sweep")
    assert ">40%, 32%, 27%<" in text  # 0.90 - 0.5, 0.92 - 0.6, 0.97 - 0.7
    assert ">180.0%, 153.3%, 138.6%<" in text  # and as ratios
    assert_refused(tmp_path, "sweep standard train.lr=0.003 test.accuracy %0 minus frozen_mlp",
                   "no finished run of frozen_mlp")  # without folder=: this sweep's, which has none


def test_a_ratio_is_paired_by_seed_and_written_as_a_percentage(tmp_path):
    text = rendered(tmp_path, "sweep standard train.lr=0.003 test.accuracy %0 seeds of standard train.lr=0.01",
                    "sweep mixit test.loss .4 mean of standard train.lr=0.003 seed=0")
    assert ">180%, 184%, 194%<" in text  # 0.90 / 0.5, 0.92 / 0.5, 0.97 / 0.5, seed by seed
    assert ">9.8900<" in text  # (1 - 0.011) / (1 - 0.90)


def test_a_bimodal_outcome_is_quoted_as_a_success_rate_with_its_wilson_interval(tmp_path):
    """Seeds that either solve the task or do not: the rate above a threshold, its 95% Wilson
    interval (4 of 8: [21.5%, 78.5%], the textbook value) and the mean of each mode."""
    from modformer.stats import rate_interval

    low, high = rate_interval(4, 8)
    assert (round(low, 4), round(high, 4)) == (0.2152, 0.7848)
    assert rate_interval(0, 3)[0] == 0.0 and round(rate_interval(0, 3)[1], 4) == 0.5615
    runs = [("mixit", 0.003, s, a, [[0.0, 0.0]]) for s, a in enumerate([1.0, 0.25, 0.998, 0.26, 1.0, 0.24, 0.64, 1.0])]
    sweep_folder(tmp_path, runs)
    page = tmp_path / "README.md"
    page.write_text(quoted("sweep mixit test.accuracy %1 above=0.9") + " " + quoted("sweep mixit test.accuracy %0 above=0.1"))
    quote_file(page)
    text = page.read_text()
    assert ">4 of 8 seeds above 90% (50% [22, 78]); means 100.0% and 34.8%<" in text
    assert ">8 of 8 seeds above 10% (100% [68, 100]); mean 67%<" in text
    assert_refused(tmp_path, "sweep mixit test.accuracy %1 above=most", "above= takes a number")


def test_an_llm_modules_sweep_is_quoted_by_arm(tmp_path):
    """An LLM-Modules sweep's arms are its variants, its summaries fields of their own."""
    out = tmp_path / "facts"
    out.mkdir()
    rows = [{"run_id": f"{arm}/default/seed{seed}", "variant": arm, "point": {}, "seed": seed, "status": "done",
             "run_dir": f"runs/{arm}/default/seed{seed}",
             "summary": {"arm": arm, "seed": seed, "held_out_exact": exact, "held_out_answer_loss": 9.0 - exact * 10}}
            for arm, exacts in (("teacher", [0.02, 0.0, 0.05]), ("random_teacher", [0.0, 0.0, 0.02]))
            for seed, exact in enumerate(exacts)]
    (out / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    page = tmp_path / "README.md"
    page.write_text(f"{quoted('facts teacher held_out_exact %1 seeds')} "
                    f"{quoted('facts teacher held_out_answer_loss .2 mean minus random_teacher')} "
                    f"{quoted('facts random_teacher seed=2 held_out_exact %0 mean')} "
                    f"{quoted('facts teacher held_out_exact %1 ci')} "
                    f"{quoted('facts teacher held_out_exact %1 seeds minus random_teacher')} "
                    f"{quoted('facts teacher held_out_exact %1 ci minus random_teacher')}\n")
    quote_file(page)
    text = page.read_text()
    assert ">2.0%, 0.0%, 5.0%<" in text and ">-0.17<" in text and ">2%<" in text
    assert ">2.3% ± 2.5 [0.0, 8.6]<" in text  # an exact-match rate's interval is clipped to [0, 100%] too
    # Differences seed by seed (0.02 - 0, 0 - 0, 0.05 - 0.02), not value by value; their interval
    # may go below 0, where the rate's own may not.
    assert ">2.0%, 0.0%, 3.0%<" in text and ">1.7% ± 1.5 [-2.1, 5.5]<" in text
    assert_refused(tmp_path, "facts alone held_out_exact %1", "no finished run of alone")


BENCH_ROWS = [{"contender": "modformer standard", "precision": "fp32", "tokens_per_s": 7200.0, "mfu": 0.551},
              {"contender": "modformer mixit", "precision": "fp32", "tokens_per_s": 9360.0, "mfu": 0.6},
              {"contender": "modformer standard", "precision": "bf16", "tokens_per_s": 14000.0, "mfu": 0.196},
              {"contender": "modformer mixit", "precision": "bf16", "tokens_per_s": 23100.0, "mfu": 0.27}]


def bench_record(root: Path, version="0.1.0+94744d14d6cd", rows=BENCH_ROWS) -> None:
    record = {"code_version": version, "machine": "Some CPU, 2 CPUs, AVX512", "rows": rows}
    (root / "bench.json").write_text(json.dumps(record if version is not None else rows))


def test_a_benchmark_figure_is_one_row_of_its_record_or_a_ratio_of_two(tmp_path):
    bench_record(tmp_path)
    page = tmp_path / "README.md"
    specs = ['bench.json contender="modformer mixit" precision=fp32 tokens_per_s ,0',
             'bench.json "contender=modformer mixit" precision=bf16 mfu %1',
             'bench.json "contender=modformer mixit" precision=bf16 tokens_per_s .2 over "contender=modformer standard"']
    page.write_text(" ".join(quoted(spec) for spec in specs) + "\n")
    assert len(quote_file(page)) == 3
    text = page.read_text()
    assert ">9,360<" in text and ">27.0%<" in text
    assert ">1.65<" in text  # 23,100 / 14,000: the row 'over' names keeps the first's precision
    assert quote_file(page, check=True) == []


@pytest.mark.parametrize("ending, word", [
    ("verdict=above threshold=1", "agrees"),  # 9,360 / 7,200 = 1.3
    ("verdict=above threshold=1.32", "does not"),
    ("verdict=below threshold=1.1", "does not"),
    ("verdict=below threshold=1.31", "agrees"),
    ("verdict=above threshold=0", "agrees"),
])
def test_a_benchmark_verdict_is_its_one_measurement_against_the_threshold_the_quote_declares(tmp_path, ending, word):
    from modformer.sweep.quote import Records, render

    bench_record(tmp_path)
    spec = f'bench.json "contender=modformer mixit" precision=fp32 tokens_per_s over "contender=modformer standard" {ending}'
    assert render(spec, Records(tmp_path)) == word
    difference = spec.replace(" over ", " minus ")  # 9,360 - 7,200 = 2,160
    assert render(difference, Records(tmp_path)) == ("agrees" if ending.startswith("verdict=above") else "does not")
    assert render(difference.split(" verdict=")[0].replace(" minus", " ,0 minus"), Records(tmp_path)) == "2,160"


@pytest.mark.parametrize("spec, says", [
    ('bench.json "contender=modformer mixit" precision=fp32 tokens_per_s verdict=equal threshold=1', "above or below"),
    ('bench.json "contender=modformer mixit" precision=fp32 tokens_per_s .2 verdict=above threshold=1', "for a verdict"),
    ('bench.json "contender=modformer mixit" precision=fp32 tokens_per_s verdict=above threshold=x', "expected a number"),
    ('bench.json "contender=modformer mixit" precision=fp32 tokens_per_s verdict=above', "expected FILE.json"),
])
def test_a_malformed_benchmark_verdict_is_refused_in_words(tmp_path, spec, says):
    bench_record(tmp_path)
    assert_refused(tmp_path, spec, says)


@pytest.mark.parametrize("version, spec, message", [
    (None, "bench.json contender=x mfu %1", "names no code version or machine"),  # an older list of rows
    ("0.1.0", "bench.json precision=fp32 mfu %1", "not by a clean commit"),  # made outside a checkout
    ("0.1.0+94744d14d6cd-dirty", "bench.json precision=fp32 mfu %1", "not by a clean commit"),
    ("0.1.0+94744d14d6cd", "bench.json precision=fp32 mfu %1", "2 rows with precision=fp32"),
    ("0.1.0+94744d14d6cd", '"bench.json" "contender=modformer llama" mfu %1', "bench.json: no row with contender=modformer llama"),
    ("0.1.0+94744d14d6cd", '"bench.json" "contender=modformer mixit" precision=fp32 contender %1', "no number 'contender'"),
    ("0.1.0+94744d14d6cd", '"bench.json" "contender=modformer mixit" precision=fp32 mfu %1 over', "'over' takes only"),
    ("0.1.0+94744d14d6cd", '"bench.json" "contender=modformer mixit" precision=fp32 mfu 1', "expected FILE.json"),
    ("0.1.0+94744d14d6cd", "other.json precision=fp32 mfu %1", "does not exist"),
])
def test_a_benchmark_figure_from_an_unversioned_record_or_no_one_row_is_refused(tmp_path, version, spec, message):
    bench_record(tmp_path, version)
    assert_refused(tmp_path, spec, message)


def test_a_file_without_quotes_or_missing_is_refused(tmp_path):
    (tmp_path / "plain.md").write_text("no figures\n")
    with pytest.raises(ModformerError, match="quotes no figure"):
        quote_file(tmp_path / "plain.md")
    assert main(["quote", str(tmp_path / "missing.md")]) == 2


def test_a_figure_of_json_lines_records_is_one_line_or_a_ratio_of_two_each_line_from_a_clean_commit(tmp_path):
    version = "0.1.0+94744d14d6cd"
    lines = [{"key": "original", "arm": "original", "parameters": 800, "measures": {"perplexity": 45.65}},
             {"key": "shared/8/4", "arm": "shared", "parameters": 720, "measures": {"perplexity": 270.4}},
             {"key": "shared/8/2", "arm": "shared", "parameters": 400, "measures": {"perplexity": 7822.2}}]
    (tmp_path / "ladder.jsonl").write_text("".join(json.dumps({**r, "code_version": version}) + "\n" for r in lines))
    page = tmp_path / "README.md"
    page.write_text(" ".join(quoted(spec) for spec in [
        "ladder.jsonl key=shared/8/4 measures.perplexity .1", "ladder.jsonl arm=original parameters ,0",
        "ladder.jsonl key=shared/8/2 parameters %0 over key=original"]) + "\n")
    assert len(quote_file(page)) == 3
    text = page.read_text()
    assert ">270.4<" in text and ">800<" in text and ">50%<" in text  # 400 / 800
    assert_refused(tmp_path, "ladder.jsonl arm=shared parameters ,0", "2 rows with arm=shared")
    assert_refused(tmp_path, "ladder.jsonl arm=original measures.loss .1", "no number 'measures.loss'")
    (tmp_path / "ladder.jsonl").write_text(json.dumps({**lines[0], "code_version": version}) + "\n"
                                           + json.dumps({**lines[1], "code_version": version + "-dirty"}) + "\n")
    assert_refused(tmp_path, "ladder.jsonl arm=original parameters ,0", "line 2 of .* not by a clean commit")


@pytest.mark.parametrize("page", ["README.md", "results/random_attention/README.md", "docs/getting-started.md",
                                  "results/random_attention/LOG.md", "results/knowledge/LOG.md",
                                  "results/knowledge/README.md", "results/bench/README.md", "results/bench/LOG.md",
                                  "results/llm_modules/README.md", "results/decon_attention/README.md",
                                  "results/mutation/README.md"]
                         + sorted(p.relative_to(ROOT).as_posix() for p in ROOT.glob("results/*/*/README.md")
                                  if "<!--q " in p.read_text()))
def test_the_committed_results_quote_their_records_exactly(page):
    """Every figure quoted in these pages is what its records give now."""
    assert quote_file(ROOT / page, check=True) == []


def test_a_quotes_seeds_are_in_seed_order_whatever_order_the_records_are_in(tmp_path):
    """results.jsonl lists runs as they finished (here seeds 1, 0, 2): a quote's `seeds` lists
    the values of seeds 0, 1, 2 in that order, and a difference pairs them seed by seed."""
    shuffled = [RUNS[i] for i in (1, 0, 2)] + [RUNS[i] for i in (5, 3, 4)]
    assert [r[2] for r in shuffled] == [1, 0, 2, 2, 0, 1]
    sweep_folder(tmp_path, shuffled)
    page = tmp_path / "README.md"
    page.write_text(f"{quoted('sweep standard train.lr=0.003 test.accuracy %0 seeds')} "
                    f"{quoted('sweep standard train.lr=0.003 test.accuracy %0 seeds minus standard train.lr=0.01')}\n")
    quote_file(page)
    text = page.read_text()
    assert ">90%, 92%, 97%<" in text and ">40%, 42%, 47%<" in text
