# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
# ---

# %% [markdown]
# # Fold and unfold a knowledge layer
#
# The knowledge-base paper (arXiv 2501.00823) reads every layer's feed-forward knowledge
# from ONE shared base E of entries: a layer scores its queries against keys computed from
# E, S = act((H W_Q)(E W_K)^T / sqrt(d_k) + b1(E)), and returns S (E W_V) + b2. Written
# out, that is an ordinary FFN whose weights happen to be E times per-layer matrices, so the
# two forms convert into each other exactly. This tutorial trains a tiny knowledge model,
# folds it into ordinary FFNs (same logits), unfolds a standard model into the knowledge
# form (same logits again), and compresses it into a smaller shared base, with the error of
# every layer.
#
# It runs in a few seconds on a CPU. Run it from the repository root (it reads
# `configs/`); open it as a notebook with `jupytext --to ipynb` or run it as a script.

# %%
import tempfile
from pathlib import Path

import torch

import modformer as mf
from modformer.knowledge import fold_model, folded_config, unfold_model, unfold_model_approximate

work = Path(tempfile.mkdtemp(prefix="modformer-fold-"))  # every file this tutorial writes
TINY = ["model.d_model=32", "model.n_layers=2", "task.n_pairs=2", "task.test_size=200",
        "task.validation_size=100", "train.steps=40", "train.batch_size=64", "train.warmup_steps=6",
        "train.eval_every=20", "train.threads=1", "train.progress=false"]

# %% [markdown]
# ## A knowledge model, trained
#
# `model.variant=knowledge` replaces every block's FFN by a read of the one base
# `knowledge.entries`; `model.knowledge.*` sets its size and activation (`swiglu`: gated
# reads, the form that folds into Llama's MLP). A short run on retrieval:

# %%
cfg = mf.config("configs/retrieval.yaml", "model.variant=knowledge", "model.knowledge.activation=swiglu",
                "model.knowledge.n_entries=64", *TINY)
summary = mf.train_run(cfg, work / "knowledge", echo=lambda message: None)
model, cfg, task, step = mf.load_run(work / "knowledge")
print(f"test accuracy {summary['test']['accuracy']:.3f} after {step} steps")
print("the shared base:", tuple(model.knowledge.entries.shape), "(n_E, d_E)")
print("layer 0's FFN:", type(model.blocks[0].ffn).__name__)

# %% [markdown]
# ## Fold: the same model with ordinary FFNs
#
# `fold_model` writes each knowledge layer as the FFN it computes over the current E and
# drops the base. In float64 the logits agree to rounding; `folded_config` is the config
# of the folded model (a standard variant with the matching FFN).

# %%
tokens = task.test_set().inputs[:8]  # (8, T) token ids
model = model.double()
folded = fold_model(model)
with torch.no_grad():
    difference = (model(tokens) - folded(tokens)).abs().max().item()
print("layer 0's FFN after folding:", type(folded.blocks[0].ffn).__name__)
print(f"largest logit difference: {difference:.1e}")
assert difference < 1e-10
print("folded config:", folded_config(cfg.model).variant, folded_config(cfg.model).ffn)

# %% [markdown]
# ## Unfold: any FFNs as reads of one base
#
# The other way, exactly: E = I (n_E = d_E = d_ff), every layer's keys and values taken from
# its FFN's matrices. Here a freshly built standard model with SwiGLU FFNs:

# %%
standard_cfg = mf.config("configs/retrieval.yaml", "model.ffn=swiglu", *TINY)
standard = mf.build_model(standard_cfg.model, seed=0).double()
unfolded = unfold_model(standard)
with torch.no_grad():
    difference = (standard(tokens) - unfolded(tokens)).abs().max().item()
print("the base E:", tuple(unfolded.knowledge.entries.shape), "(the identity: d_ff x d_ff)")
print(f"largest logit difference: {difference:.1e}")
assert difference < 1e-10

# %% [markdown]
# ## A smaller shared base, and what it costs
#
# `unfold_model_approximate` keeps n_E entries of width d_E: a joint truncated SVD across
# the layers gives the best shared rank-d_E column space. It returns every layer's relative
# error (of its input and output matrices, its bias and its output on random inputs), so
# the cost of sharing is measured, not guessed. `modformer convert` does this to a saved
# run or a Hugging Face Llama folder.

# %%
d_ff = standard.blocks[0].ffn.up_proj.out_features
for d_entry in (d_ff, d_ff // 2, d_ff // 8):
    small, errors = unfold_model_approximate(standard, n_entries=d_ff, d_entry=d_entry)
    outputs = ", ".join(f"{e['output']:.3f}" for e in errors)
    print(f"d_E = {d_entry:>3}: base {tuple(small.knowledge.entries.shape)}, relative output error per layer: {outputs}")

# %% [markdown]
# At d_E = d_ff the shared base is exact; halving it already costs each layer a visible
# share of its output here, at random initialisation. What that costs a trained model, in
# perplexity and in the facts it knows, is measured on SmolLM2 in
# [the knowledge-base results](../../results/knowledge/pretrained/).
