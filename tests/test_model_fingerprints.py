"""Every committed config and every committed run rebuilds the model it built when the
fingerprints were taken (tests/model_fingerprints.py): the same logits, to float tolerance
across CPUs, so that a change in how models are configured changes no model."""

import json

import pytest
import torch

from model_fingerprints import ROOT, STORED, fingerprint, model_configs


def compare(name: str, cfg, want: list[float]) -> None:
    total, absolute, *first = fingerprint(cfg)
    want_total, want_absolute, *want_first = want
    assert abs(total - want_total) <= 1e-6 * max(want_absolute, 1.0), name
    assert absolute == pytest.approx(want_absolute, rel=1e-6), name
    # Float32 rounding grows with depth and differs between CPUs: a 16-layer reference MixiT's
    # logits moved by 1.2e-6 (on logits up to 0.45) between the project's AMD EPYC and Intel
    # Xeon. A tolerance on the row's scale; a change in how a model is built moves them by far more.
    scale = max(abs(w) for w in want_first)
    assert first == pytest.approx(want_first, rel=1e-5, abs=max(1e-6, 1e-5 * scale)), name


def stored(records: bool) -> dict[str, list[float]]:
    """The fingerprints taken, of the committed runs' configs or of the configs under configs/."""
    return {name: want for name, want in json.loads(STORED.read_text()).items() if name.startswith("results/") == records}


@pytest.mark.slow  # 191 models built and run
def test_every_committed_config_builds_the_model_it_built():
    torch.set_num_threads(1)
    now, taken = model_configs(), stored(records=False)
    assert len(taken) > 150  # every experiment's models, under every profile
    gone = sorted(set(taken) - set(now))
    assert not gone, f"configs no longer built: {gone[:3]}"
    for name, want in taken.items():
        compare(name, now[name], want)


@pytest.mark.slow  # 171 models built and run
def test_every_committed_run_rebuilds_the_model_it_trained():
    """Each fingerprinted run's own config.yaml, read by today's code (runs committed since
    build models of their own, not fingerprinted)."""
    from modformer.config import load_config

    torch.set_num_threads(1)
    taken = stored(records=True)
    assert len(taken) > 150
    for name, want in taken.items():
        compare(name, load_config(ROOT / name), want)
