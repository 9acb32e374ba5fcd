"""Every committed config and every committed run rebuilds the model it built when the
fingerprints were taken (tests/model_fingerprints.py): the same logits, to float tolerance
across CPUs, so that a change in how models are configured changes no model."""

import json

import pytest
import torch

from model_fingerprints import STORED, fingerprint, model_configs, record_configs


def check(configs) -> None:
    stored = json.loads(STORED.read_text())
    torch.set_num_threads(1)
    missing = sorted(set(configs) - set(stored))
    assert not missing, f"no fingerprint for {missing[:3]}: run python tests/model_fingerprints.py before a change"
    for name, cfg in configs.items():
        total, absolute, *first = fingerprint(cfg)
        want_total, want_absolute, *want_first = stored[name]
        scale = max(want_absolute, 1.0)
        assert abs(total - want_total) <= 1e-6 * scale, name
        assert absolute == pytest.approx(want_absolute, rel=1e-6), name
        assert first == pytest.approx(want_first, rel=1e-5, abs=1e-6), name


@pytest.mark.slow  # 191 models built and run
def test_every_committed_config_builds_the_model_it_built():
    configs = model_configs()
    assert len(configs) > 150  # every experiment's models, under every profile
    check(configs)


@pytest.mark.slow  # 171 models built and run
def test_every_committed_run_rebuilds_the_model_it_trained():
    configs = record_configs()
    assert len(configs) > 150
    check(configs)
