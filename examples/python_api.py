"""modformer from Python, end to end in about half a minute on a CPU: train a standard model
and MixiT on retrieval, score them again from disk, look inside, and run a small sweep.

    python examples/python_api.py [OUT]        (default OUT: runs/python_api)
"""

import sys
from pathlib import Path

import modformer as mf

TINY = ["model.d_model=64", "task.n_pairs=2", "task.test_size=200", "task.validation_size=100",
        "train.steps=200", "train.batch_size=64", "train.eval_every=60", "train.progress=false"]


def main(out: Path, seeds: tuple[int, ...] = (0, 1, 2)) -> dict:
    results = {}
    for variant in ("standard", "mixit"):
        cfg = mf.config("configs/retrieval.yaml", f"model.variant={variant}", *TINY)
        summary = mf.train_run(cfg, out / variant, echo=lambda message: None)
        again = mf.evaluate_run(out / variant)  # from the checkpoint on disk: the same score
        results[variant] = (summary["test"]["accuracy"], again["test"]["accuracy"])
        print(f"{variant}: test accuracy {summary['test']['accuracy']:.3f} (reloaded: {again['test']['accuracy']:.3f})")

    # The trained model itself, and what its first layer's heads attend to.
    model, cfg, task, step = mf.load_run(out / "standard")
    tokens = task.test_set().inputs[:4]  # (4, T) token ids
    with mf.capture(model, "blocks.0.mixer.pattern") as acts:
        model(tokens)
    print("layer 0 attention weights:", tuple(acts["blocks.0.mixer.pattern"].shape))  # (4, heads, T, T)

    # A sweep: both variants, each with every seed, 2 runs at a time, one report (Markdown and plots).
    report = mf.sweep("configs/retrieval.yaml", out / "sweep", *TINY, "sweep.variants=[standard, mixit]",
                      f"sweep.seeds={list(seeds)}", "train.steps=40", "sweep.workers=2", echo=lambda message: None)
    print("sweep report:", report)
    return results


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path("runs/python_api"))
