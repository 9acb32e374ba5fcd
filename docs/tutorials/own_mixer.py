# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
# ---

# %% [markdown]
# # Your own mixer, from nothing to a sweep report
#
# A sequence mixer is the part of a block that moves information between positions
# (attention, in a standard transformer). This tutorial reads a new one, an exponential
# moving average with a learned decay per channel, written outside modformer; checks that
# it is causal, trains it, and compares two variants built with it in a sweep with a
# report. Nothing in modformer is edited: the mixer is named by its import path.
#
# It takes under a minute on a CPU. Run it from the repository root (it reads `configs/`).

# %%
import os
import sys
import tempfile
from pathlib import Path

import torch

import modformer as mf
from modformer.errors import ConfigError

try:  # in a notebook (the site runs this one): Markdown rendered, code highlighted, figures drawn
    from IPython import get_ipython
    from IPython.display import Image, Markdown, display

    NOTEBOOK = get_ipython() is not None
except ImportError:  # run as a script: printed
    NOTEBOOK = False


def show(text: str, language: str | None = None) -> None:
    """In a notebook, `text` rendered as Markdown (tables as tables), or as code in `language`,
    highlighted; elsewhere printed as it is."""
    if not NOTEBOOK:
        print(text)
    else:
        display(Markdown(f"```{language}\n{text}\n```" if language else text))


work = Path(tempfile.mkdtemp(prefix="modformer-own-mixer-"))  # every file it writes
# A tiny retrieval run: seconds on a CPU, far below any published budget.
TINY = ["model.d_model=32", "model.n_layers=2", "task.n_pairs=2", "task.test_size=200",
        "task.validation_size=100", "train.steps=80", "train.batch_size=64", "train.lr=1e-2",
        "train.warmup_steps=8", "train.eval_every=40", "train.progress=false"]

# %% [markdown]
# ## The mixer
#
# A mixer is an `nn.Module` (or a function returning one) called with the model config
# (`cfg.d_model`, `cfg.n_heads`, ...), mapping (B, T, d_model) to (B, T, d_model). Its own
# options are a dataclass named `Options` beside it, with `option(default, help)` fields:
# the run config gives them as `model.mixer_options`, checked like every other key.
#
# Ours is the file `examples/parts/ema.py` of this repository:

# %%
show(Path("examples/parts/ema.py").read_text(), "python")

# %% [markdown]
# A sweep trains each run in its own process, and a reloaded run builds its model again,
# so the mixer lives in a module those processes can import: here `examples.parts.ema`,
# found from the repository's root put on `PYTHONPATH` (in your own work, a folder of yours
# on `PYTHONPATH`, or a module of your package).

# %%
MIXER = "examples.parts.ema:EMAMixer"
root = str(Path.cwd())  # the repository's root
sys.path.insert(0, root)  # for this process
# and for the sweep's processes:
os.environ["PYTHONPATH"] = os.pathsep.join([root, *filter(None, [os.environ.get("PYTHONPATH")])])

# %% [markdown]
# ## Built into a model
#
# `model.mixer` names it as `package.module:Class` (a package may instead declare a short
# name as an entry point in the group `modformer.mixers`; see [Your own parts](../../own-parts/)).
# The block around it (pre-norm, residuals, the feed-forward module) is the library's.

# %%
cfg = mf.config("configs/retrieval.yaml", f"model.mixer={MIXER}", "model.mixer_options.decay=0.8",
                *TINY)
model = mf.build_model(cfg.model, seed=0)
print(type(model.blocks[0].mixer).__name__, "with decay", cfg.model.mixer_options["decay"])
print(model.parameter_counts())

# %% [markdown]
# A typo in its options is caught before anything is built, like any config key:

# %%
try:
    mf.config("configs/retrieval.yaml", f"model.mixer={MIXER}", "model.mixer_options.decy=0.8")
except ConfigError as error:
    print("ConfigError:", error)

# %% [markdown]
# ## Causal, as a language model's mixer must be
#
# Changing the last token must leave every earlier position's output unchanged:

# %%
tokens = torch.randint(0, cfg.model.vocab_size, (2, 12))
changed = tokens.clone()
changed[:, -1] = (changed[:, -1] + 1) % cfg.model.vocab_size
with torch.no_grad():
    before, after = model(tokens), model(changed)
print("earlier positions unchanged:", torch.equal(before[:, :-1], after[:, :-1]))
print("last position changed:", not torch.equal(before[:, -1], after[:, -1]))
assert torch.equal(before[:, :-1], after[:, :-1])

# %% [markdown]
# ## Trained, against attention
#
# `mf.train_run` is `modformer train`: a run folder with its config, metrics, checkpoints
# and summary, resumable. On retrieval (find the value stored under a queried key) a mixer
# that only averages has no way to look a key up by its content; attention does. The
# per-slice accuracy (by number of stored pairs) shows it. (`train.threads=1`: one core
# each, which is fastest for models this small.)

# %%
for mixer, options in ((MIXER, "{decay: 0.8}"), ("attention", "{}")):
    run = mf.config(cfg, f"model.mixer={mixer}", f"model.mixer_options={options}",
                    "train.threads=1")
    summary = mf.train_run(run, work / mixer.split(":")[-1], echo=lambda message: None)
    test = summary["test"]
    slices = {n: round(s["accuracy"], 3) for n, s in test["slices"]["n_pairs"].items()}
    print(f"{mixer:<27} test accuracy {test['accuracy']:.3f}, by number of pairs {slices}")
print(sorted(p.name for p in (work / "EMAMixer").iterdir()))

# %% [markdown]
# ## A sweep, and its report
#
# A sweep file is a run config plus a `sweep` section. Here the variants `standard`
# (everything trains) and `frozen_mlp` (the feed-forward modules stay at their
# initialisation), both with our mixer, 2 seeds each. Two seeds keep the tutorial short:
# the report warns that its intervals need at least 3. Each run trains in its own process,
# 2 at a time, and a stopped sweep continues with the same call. The report is Markdown;
# its last section, Reproduce, is the `modformer sweep` command that runs this sweep again.

# %%
report = mf.sweep("configs/retrieval.yaml", work / "sweep", f"model.mixer={MIXER}", *TINY,
                  "sweep.variants=[standard, frozen_mlp]", "sweep.seeds=[0, 1]",
                  "sweep.workers=2", echo=lambda message: None)
# Its Figures section links to image files beside it, shown below instead.
sections = report.read_text().split("\n## ")
show("\n## ".join(s for s in sections if not s.startswith("Figures")))

# %% [markdown]
# The report's figures sit beside it: `slices.png` (accuracy per slice, with error bars over
# seeds) and `curves.png` (validation curves).

# %%
figure = report.parent / "slices.png"
if NOTEBOOK:
    display(Image(filename=figure))
else:
    print("figure:", figure)

# %% [markdown]
# From here: `modformer report DIR` redraws the report from the run folders,
# `modformer eval RUN` scores a run again, and the same mixer goes into every variant that
# takes a mixer. The contract a part keeps (causal, freezable, seeded, reloaded identically)
# is on [Your own parts](../../own-parts/).
