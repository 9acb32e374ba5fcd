"""Signal propagation at initialisation (the random-attention paper's Table 7).

For each variant and depth, build the model at init, feed random tokens and measure how
alike the hidden states of different positions are after the last block (rank collapse:
with depth, mixing can drive all tokens towards one vector). For one sequence with hidden
states x_1..x_T in R^d (the block's `resid_post`, before the final norm):

    covariance = mean over i != j of  c_i . c_j / d,   c_i = x_i - mean_k(x_i[k])
                 (each token vector centred over its channels, then an inner product)
    cosine     = mean over i != j of  x_i . x_j / (|x_i| |x_j|)   (raw, uncentred vectors)
    variance   = mean over i      of  c_i . c_i / d                (the diagonal, for scale)

each averaged over the batch, then over seeds (mean and population std across seeds).
The covariance carries the scale of the residual stream, which grows with depth in a
pre-norm model whatever the mixer does; the variance shows that scale, and the cosine is
free of it. Tokens are distinct within a sequence when seq_len <= vocab_size, so the input
cosine is about 0 and any similarity is made by the network.

Note that `standard` and `random_transformer` differ only in what trains: at init, with
one seed, they are the same network and measure the same.
"""

from __future__ import annotations

import argparse
import copy
import json
import time
from pathlib import Path
from typing import Any, Callable, Sequence

import torch

from ..commands import describe_parser
from ..configtools import apply_override, from_dict
from ..constructions import apply_construction
from ..errors import ConfigError
from ..files import atomic_write_text, output_folder
from ..model.config import ModelConfig
from ..model.hooks import capture
from ..registry import VARIANTS
from ..variants import build_model
from ..version import code_version, machine
from .common import by_layer, evaluating, plt, random_tokens, save_figure

DEFAULT_VARIANTS = ("standard", "mixit", "random_transformer")
DEFAULT_DEPTHS = (2, 4, 8, 16, 32)
MEASURES = ("covariance", "cosine", "variance")
DESCRIPTIONS = {"covariance": "mean off-diagonal token covariance", "cosine": "mean off-diagonal token cosine",
                "variance": "mean token variance (diagonal covariance, the scale)"}


def token_similarity(hidden: torch.Tensor, mask: torch.Tensor | None = None) -> dict[str, float]:
    """hidden (B, T, d) -> {"covariance", "cosine", "variance"}: batch means of the mean
    off-diagonal covariance and cosine and the mean diagonal covariance, as defined in the
    module docstring; computed in float64. Needs T >= 2.

    With `mask` (B, T) bool, each sequence counts only its marked positions (pairs i != j of
    marked positions, and marked positions for the variance), and the batch mean is over the
    sequences with at least two marked positions, each weighted equally.

    Args:
        hidden: hidden states (B, T, d), T >= 2.
        mask: optional (B, T) bool, True at the positions to count; None: every position.

    Returns:
        `{"covariance": ..., "cosine": ..., "variance": ...}`, each a float averaged over the
            batch.
    """
    B, T, d = hidden.shape
    if T < 2:
        raise ValueError("token similarity needs at least two positions")
    x = hidden.double()
    centred = x - x.mean(dim=-1, keepdim=True)
    unit = x / x.norm(dim=-1, keepdim=True).clamp_min(1e-30)
    if mask is None:
        keep = torch.ones(B, T, dtype=torch.float64, device=x.device)
    else:
        if mask.shape != (B, T):
            raise ValueError(f"mask must be (B, T) = {(B, T)}, got {tuple(mask.shape)}")
        keep = mask.to(device=x.device, dtype=torch.float64)
    n = keep.sum(-1)  # (B,) positions counted per sequence
    rows = n >= 2
    if not rows.any():
        raise ValueError("token similarity needs a sequence with at least two counted positions")
    pairs = keep[:, :, None] * keep[:, None, :]  # (B, T, T): 1 where both positions count

    def off_diagonal_mean(gram: torch.Tensor) -> float:  # gram (B, T, T)
        g = gram * pairs
        total = g.sum(dim=(-2, -1)) - g.diagonal(dim1=-2, dim2=-1).sum(-1)
        return (total[rows] / (n[rows] * (n[rows] - 1))).mean().item()

    covariance = centred @ centred.transpose(-2, -1) / d  # (B, T, T)
    diagonal = (covariance.diagonal(dim1=-2, dim2=-1) * keep).sum(-1)  # (B,)
    return {"covariance": off_diagonal_mean(covariance),
            "cosine": off_diagonal_mean(unit @ unit.transpose(-2, -1)),
            "variance": (diagonal[rows] / n[rows]).mean().item()}


def _model_config(variant: str, depth: int, width: int, heads: int, vocab_size: int, seq_len: int,
                  options: dict[str, Any] | None) -> ModelConfig:
    data = copy.deepcopy(options or {})
    for key in ("variant", "n_layers"):
        if key in data:
            raise ConfigError(f"model option '{key}' is set by the signal sweep itself; use its own argument")
    data.update(variant=variant, n_layers=depth, d_model=width, n_heads=heads, vocab_size=vocab_size,
                max_seq_len=seq_len)
    return from_dict(ModelConfig, apply_construction({"model": data})["model"], "model")


def _check(variants: Sequence[str], depths: Sequence[int], seq_len: int, batch: int, seeds: int,
           vocab_size: int) -> None:
    if not variants or not depths:
        raise ConfigError("signal: give at least one variant and one depth")
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown:
        raise ConfigError(f"signal: unknown variant '{unknown[0]}' (known: {', '.join(VARIANTS)})")
    bad = [d for d in depths if not isinstance(d, int) or d < 1]
    if bad:
        raise ConfigError(f"signal: depths must be positive integers, got {bad[0]!r}")
    if seq_len < 2:
        raise ConfigError(f"signal: seq_len must be at least 2 (pairs of positions), got {seq_len}")
    for name, value in (("batch", batch), ("seeds", seeds), ("vocab_size", vocab_size)):
        if value < 1:
            raise ConfigError(f"signal: {name} must be positive, got {value}")


def signal_propagation(variants: Sequence[str] = DEFAULT_VARIANTS, depths: Sequence[int] = DEFAULT_DEPTHS, *,
                       width: int = 128, heads: int = 4, vocab_size: int = 512, seq_len: int = 64,
                       batch: int = 16, seeds: int = 3, all_layers: bool = False,
                       model_options: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """Token covariance and cosine after the last block, at init, per variant and depth.

    Seed s (0..seeds-1) fixes both the model (`build_model(cfg, s)`) and its input tokens
    (batch, seq_len), so every variant sees the same tokens.

    Args:
        variants: registered variant names, one model per variant and depth.
        depths: numbers of blocks (positive integers).
        width: the models' d_model.
        heads: the models' number of heads.
        vocab_size: the models' vocabulary; tokens are drawn from [0, vocab_size).
        seq_len: tokens per sequence T (at least 2), also the models' max_seq_len.
        batch: sequences B per model.
        seeds: how many seeds (0..seeds-1) to average over.
        all_layers: also measure after every block, not only the last.
        model_options: further ModelConfig keys as nested plain data (e.g.
            {"construction": "reference"}); `variant` and `n_layers` are set here and refused there.

    Returns:
        One dict per (variant, depth), variants outer: `variant`, `depth`, `seeds` and, for
            each measure (covariance, cosine, variance), its seed mean under the measure's name and
            its population std across seeds as `{measure}_std`; with `all_layers` also
            `{measure}_by_layer` (seed means for blocks 0..depth-1).
    """
    variants, depths = list(variants), list(depths)
    _check(variants, depths, seq_len, batch, seeds, vocab_size)
    for variant in variants:  # fail on bad sizes or options before any work
        _model_config(variant, depths[0], width, heads, vocab_size, seq_len, model_options)
    results = []
    for variant in variants:
        for depth in depths:
            cfg = _model_config(variant, depth, width, heads, vocab_size, seq_len, model_options)
            per_seed = []  # per seed: (blocks captured, len(MEASURES)), blocks in order
            for seed in range(seeds):
                model = build_model(cfg, seed)
                tokens = random_tokens(batch, seq_len, vocab_size, torch.Generator().manual_seed(seed))
                pattern = "blocks.*.resid_post" if all_layers else f"blocks.{depth - 1}.resid_post"
                with evaluating(model), capture(model, pattern) as acts:
                    model.hidden_states(tokens)
                blocks = [token_similarity(h) for h in by_layer(acts)]
                per_seed.append(torch.tensor([[b[m] for m in MEASURES] for b in blocks], dtype=torch.float64))
            stats = torch.stack(per_seed)  # (seeds, blocks captured, len(MEASURES))
            mean, std = stats.mean(0), stats.std(0, correction=0)
            record: dict[str, Any] = {"variant": variant, "depth": depth}
            for k, measure in enumerate(MEASURES):
                record[measure] = mean[-1, k].item()
                record[f"{measure}_std"] = std[-1, k].item()
            record["seeds"] = seeds
            if all_layers:
                for k, measure in enumerate(MEASURES):
                    record[f"{measure}_by_layer"] = mean[:, k].tolist()
            results.append(record)
    return results


def markdown_tables(results: list[dict[str, Any]]) -> str:
    """One Markdown table per measure: variants as rows, depths as columns, 'mean ± std'.

    Args:
        results: the records `signal_propagation` returns.

    Returns:
        The tables as Markdown text, separated by blank lines, with a closing line naming the
            variants whose rows are identical at init, if any.
    """
    variants = list(dict.fromkeys(r["variant"] for r in results))
    depths = sorted({r["depth"] for r in results})
    cell = {(r["variant"], r["depth"]): r for r in results}
    seeds = results[0]["seeds"] if results else 0
    parts = []
    for measure in MEASURES:
        lines = [f"**{measure}**: {DESCRIPTIONS[measure]} after the last block, at init "
                 f"(mean ± std over {seeds} seed{'s' if seeds != 1 else ''})", "",
                 "| variant | " + " | ".join(f"depth {d}" for d in depths) + " |",
                 "|---|" + "---:|" * len(depths)]
        for v in variants:
            row = [f"{cell[v, d][measure]:.3g} ± {cell[v, d][measure + '_std']:.2g}" if (v, d) in cell else ""
                   for d in depths]
            lines.append(f"| {v} | " + " | ".join(row) + " |")
        parts.append("\n".join(lines))
    # Variants that differ only in what trains (standard, random_transformer) are one network
    # at init; say so, or identical rows read like a bug.
    groups: dict[tuple, list[str]] = {}
    for v in variants:
        groups.setdefault(tuple(cell.get((v, d), {}).get(m) for d in depths for m in MEASURES), []).append(v)
    same = [g for g in groups.values() if len(g) > 1]
    if same:
        parts.append("Identical at init (same network; they differ only in what trains): "
                     + "; ".join(", ".join(g) for g in same) + ".")
    return "\n\n".join(parts) + "\n"


def plot_signal(results: list[dict[str, Any]], path: str | Path, title: str = "") -> Path:
    """Each measure against depth (log2 x), one line per variant with ±std bars; one panel
    per measure. Written atomically; returns the path.

    Args:
        results: the records `signal_propagation` returns.
        path: the PNG file to write (its folder is created).
        title: the figure's title; empty: a default one.

    Returns:
        `path`, as a `Path`.
    """
    fig, axes = plt.subplots(1, len(MEASURES), figsize=(4.6 * len(MEASURES), 3.8))
    for ax, measure in zip(axes, MEASURES):
        for k, variant in enumerate(dict.fromkeys(r["variant"] for r in results)):
            rows = sorted((r for r in results if r["variant"] == variant), key=lambda r: r["depth"])
            ax.errorbar([r["depth"] for r in rows], [r[measure] for r in rows],
                        yerr=[r[f"{measure}_std"] for r in rows], marker="o", capsize=3, label=variant,
                        linestyle=("-", "--", ":", "-.")[k % 4])  # identical variants stay visible
        ax.set_xscale("log", base=2)
        if measure != "cosine" and all(r[measure] > 0 for r in results):
            ax.set_yscale("log")  # these carry the residual stream's scale, which spans decades
        where = "diagonal" if measure == "variance" else "off-diagonal"
        ax.set(xlabel="depth (blocks)", ylabel=f"mean {where} {measure}", title=measure)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(title or "token similarity after the last block, at init")
    fig.tight_layout()
    return save_figure(fig, path)


def write_reports(results: list[dict[str, Any]], out: str | Path, settings: dict[str, Any]) -> dict[str, Path]:
    """signal.json (settings, and the results as a record's `rows`, which `modformer quote` reads
    as it reads a benchmark's), signal.md (tables) and signal.png under `out`, each written
    atomically.

    Args:
        results: the records `signal_propagation` returns.
        out: the folder to write to (made if missing).
        settings: what the run was asked for, written into signal.json; its `code_version`
            and `machine` are also named in signal.md.

    Returns:
        The paths written, under the keys `json`, `markdown` and `plot`.
    """
    out = output_folder(out)
    paths = {"json": out / "signal.json", "markdown": out / "signal.md", "plot": out / "signal.png"}
    record = {"code_version": settings.get("code_version"), "machine": settings.get("machine"), "settings": settings,
              "rows": results}
    atomic_write_text(paths["json"], json.dumps(record, indent=2) + "\n")
    made = f"Made by modformer {settings.get('code_version', 'unknown')} on {settings.get('machine', 'unknown')}.\n\n"
    atomic_write_text(paths["markdown"], "# Signal propagation at initialisation\n\n" + made + markdown_tables(results))
    plot_signal(results, paths["plot"])
    return paths


def _use_threads(args: argparse.Namespace) -> None:
    if args.threads < 1:
        raise ConfigError(f"signal: --threads must be positive, got {args.threads}")
    # One thread by default: these models are too small to gain from intra-op threads, and on
    # a busy machine the threads wait on each other (defaults on a loaded 2-core box: about
    # 15 s with 1 thread, 100-240 s with torch's 2).
    torch.set_num_threads(args.threads)


def _run_command(args: argparse.Namespace) -> int:
    _use_threads(args)
    options: dict[str, Any] = {}
    for assignment in args.set:
        apply_override(options, assignment)
    settings = {"variants": args.variants, "depths": args.depths, "width": args.width, "heads": args.heads,
                "vocab_size": args.vocab, "seq_len": args.seq_len, "batch": args.batch, "seeds": args.seeds,
                "all_layers": args.all_layers, "model_options": options, "threads": torch.get_num_threads(),
                "code_version": code_version(), "machine": machine()}
    start = time.perf_counter()
    results = signal_propagation(args.variants, args.depths, width=args.width, heads=args.heads,
                                 vocab_size=args.vocab, seq_len=args.seq_len, batch=args.batch,
                                 seeds=args.seeds, all_layers=args.all_layers, model_options=options)
    settings["seconds"] = round(time.perf_counter() - start, 2)
    paths = write_reports(results, args.out, settings)
    print(markdown_tables(results))
    print(f"{len(results)} models x {args.seeds} seeds in {settings['seconds']:.1f} s; "
          f"wrote {', '.join(str(p) for p in paths.values())}")
    return 0


AT_INIT_OPTIONS = ("variants", "depths", "width", "heads", "vocab", "seq_len", "batch", "seeds", "all_layers", "set")


def _dispatch(parser: argparse.ArgumentParser, trained: Callable[[argparse.Namespace], int]):
    """The handler with `--runs`: `trained(args)` for trained runs, else the models at init."""

    def handle(args: argparse.Namespace) -> int:
        if args.runs is None:
            if args.out is None:
                raise ConfigError("signal: give --out (the folder to write to), or --runs to measure trained runs")
            if args.examples != parser.get_default("examples"):
                raise ConfigError("signal: --examples applies only with --runs")
            return _run_command(args)
        given = [name for name in AT_INIT_OPTIONS if getattr(args, name) != parser.get_default(name)]
        if given:
            raise ConfigError(f"signal --runs measures each run's own model on its task's test inputs: "
                              f"--{given[0].replace('_', '-')} does not apply")
        _use_threads(args)
        return trained(args)

    return handle


def signal_arguments(p: argparse.ArgumentParser, trained: Callable[[argparse.Namespace], int] | None = None) -> None:
    """The arguments and handler of `modformer signal`; with `trained` (the handler of trained
    runs, which a higher layer provides: it loads checkpoints) also `--runs` and `--examples`."""
    describe_parser(p, "Build each variant at init for each depth, feed random tokens and report the mean "
                    "off-diagonal token covariance and cosine (and the token variance, for scale) after the "
                    "last block (the random-attention paper's Table 7). Writes signal.json, signal.md and signal.png to --out."
                    + ("" if trained is None else
                       " With --runs, measure trained runs instead, after every block, beside the same models at "
                       "init on the same test inputs: token_similarity.json in each run, trained_signal.json, "
                       "trained_signal.md and trained_signal.png in --out (default: the folder given)."))
    p.add_argument("--out", required=trained is None,
                   help="output directory" + ("" if trained is None else " (with --runs: default the folder given)"))
    p.add_argument("--variants", nargs="+", default=list(DEFAULT_VARIANTS), metavar="VARIANT",
                   help=f"registered variants (default: {' '.join(DEFAULT_VARIANTS)})")
    p.add_argument("--depths", nargs="+", type=int, default=list(DEFAULT_DEPTHS), metavar="N",
                   help=f"numbers of blocks (default: {' '.join(map(str, DEFAULT_DEPTHS))})")
    p.add_argument("--width", type=int, default=128, help="d_model (default: 128)")
    p.add_argument("--heads", type=int, default=4, help="heads (default: 4)")
    p.add_argument("--vocab", type=int, default=512, help="vocabulary size (default: 512)")
    p.add_argument("--seq-len", type=int, default=64, help="tokens per sequence (default: 64)")
    p.add_argument("--batch", type=int, default=16, help="sequences per model (default: 16)")
    p.add_argument("--seeds", type=int, default=3, help="seeds to average over (default: 3)")
    p.add_argument("--threads", type=int, default=1,
                   help="CPU threads for torch (default: 1, fastest for these small models on a busy machine)")
    p.add_argument("--all-layers", action="store_true", help="also record every block's measures in the JSON")
    p.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE",
                   help="further model config keys, e.g. construction=reference mixer_options.sink_head=true")
    if trained is not None:
        p.add_argument("--runs", metavar="DIR",
                       help="measure trained runs: a sweep folder (its finished runs) or one run folder, each with "
                            "its checkpoints; the at-init options above do not apply")
        p.add_argument("--examples", type=int, default=256,
                       help="with --runs: the first N examples of each run's test set, read by the trained model and "
                            "its initialisation (default: 256)")
    p.set_defaults(func=_run_command if trained is None else _dispatch(p, trained))
