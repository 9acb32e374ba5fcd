"""A part from outside the library is initialised from the run's seed like ours."""

import torch
from torch import nn

from modformer.config import load_config
from modformer.registry import MIXERS
from modformer.variants import build_model

NAME = "test_causal_depthwise_conv"


class CausalDepthwiseConv(nn.Module):
    """A mixer none of our initialisation rules names: a causal depthwise convolution."""

    def __init__(self, cfg, kernel: int = 4):
        super().__init__()
        self.kernel = kernel
        self.conv = nn.Conv1d(cfg.d_model, cfg.d_model, kernel, groups=cfg.d_model, padding=kernel - 1)

    def forward(self, x):  # (B, T, d) -> (B, T, d)
        return self.conv(x.transpose(1, 2))[..., : x.shape[1]].transpose(1, 2)


if NAME not in MIXERS:
    MIXERS.register(NAME)(CausalDepthwiseConv)


def build(seed, global_seed):
    cfg = load_config(None, [f"model.mixer={NAME}", "model.d_model=256", "model.n_heads=4", "model.init_std=0.02"])
    torch.manual_seed(global_seed)
    before = torch.get_rng_state()
    model = build_model(cfg.model, seed)
    assert torch.equal(torch.get_rng_state(), before)  # the caller's global RNG is untouched
    return model.state_dict()


def test_a_foreign_modules_parameters_follow_the_seed_and_init_std():
    a, again, other = build(0, global_seed=1), build(0, global_seed=2), build(1, global_seed=1)
    assert a.keys() == again.keys() == other.keys()
    for name in a:
        assert torch.equal(a[name], again[name]), f"{name} depends on the global RNG, not the run's seed"
    for name in ("blocks.0.mixer.conv.weight", "blocks.0.mixer.conv.bias", "blocks.1.mixer.conv.weight"):
        assert not torch.equal(a[name], other[name]), f"{name} is the same for seeds 0 and 1"
    weights = torch.cat([a[f"blocks.{i}.mixer.conv.weight"].flatten() for i in (0, 1)])  # 2,048 draws
    assert abs(weights.std().item() - 0.02) < 0.002, weights.std()  # model.init_std, not Conv1d's own 0.5
    assert abs(weights.mean().item()) < 0.002
    # The bias keeps its constructor's distribution (uniform within 1/sqrt(kernel)), drawn from the seed.
    assert a["blocks.0.mixer.conv.bias"].abs().max() <= 0.5 and a["blocks.0.mixer.conv.bias"].std() > 0.1


def test_every_part_file_is_registered_by_importing_modformer():
    """A new part is one file: every module of the part packages is imported (and so its
    registrations run) by `import modformer`, in a fresh interpreter."""
    import subprocess
    import sys
    from pathlib import Path

    import modformer

    root = Path(modformer.__file__).parent
    files = sorted(f"modformer.{d}.{p.stem}" for d in ("model", "variants", "tasks") for p in (root / d).glob("*.py")
                   if p.stem != "__init__")
    code = "import sys, modformer; print('\\n'.join(sorted(m for m in sys.modules if m.startswith('modformer.'))))"
    loaded = set(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split())
    assert [f for f in files if f not in loaded] == []
    # and each registry lists what those files register
    from modformer.registry import FFNS, MIXERS, TASKS, VARIANTS
    assert {"attention", "mixing"} <= set(MIXERS) and {"swiglu", "shaped_leaky_glu"} <= set(FFNS)
    assert {"standard", "frozen_qk", "mixit"} <= set(VARIANTS) and {"retrieval", "repeat"} <= set(TASKS)
