import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

import pytest  # noqa: E402
import torch  # noqa: E402

from modformer.config import load_config  # noqa: E402


@pytest.fixture(autouse=True)
def restore_global_torch_state():
    """Tests may change torch's global RNG, dtype or threads; put them back."""
    rng, dtype, threads = torch.get_rng_state(), torch.get_default_dtype(), torch.get_num_threads()
    yield
    torch.set_rng_state(rng)
    torch.set_default_dtype(dtype)
    torch.set_num_threads(threads)


TINY = [
    "model.d_model=64", "model.n_layers=2", "model.n_heads=4",
    "task.n_pairs=4", "task.test_size=500",
    "train.steps=12", "train.batch_size=32", "train.lr=3e-3", "train.warmup_steps=2",
    "train.eval_every=6", "train.log_every=3", "train.checkpoint_every=4", "train.progress=false",
    "train.eval_batch_size=250",
]


@pytest.fixture
def tiny_config():
    def make(*overrides):
        return load_config(None, [*TINY, *overrides])

    return make
