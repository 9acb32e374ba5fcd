"""modformer: build transformers from swappable parts, freeze or randomise any part, train
the variants under one grid and several seeds, and report what each part contributes."""

from . import model, tasks, variants  # noqa: F401  (importing registers every part)
from .api import config, evaluate_run, load_run, sweep, train_run
from .config import RunConfig, load_config
from .model.hooks import capture, hooked
from .variants import build_model
from .version import __version__
from .plugins import load_papers  # noqa: E402

load_papers()  # last: every paper (the group modformer.papers) registers on top of the library

__all__ = ["RunConfig", "load_config", "build_model", "capture", "hooked", "config", "train_run", "evaluate_run", "load_run",
           "sweep", "__version__"]
