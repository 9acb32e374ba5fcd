"""A Hugging Face causal LM as the student of an LLM-Modules experiment.

`HFStudent` makes it look like a modformer student: token ids in, logits out, and named
places where a call's `rewrite` (the bridges) changes the stream (`input`: the output of its
token embedding, where the reference feeds its bridge; `block_i`: the output of decoder
layer i). Its layers are Hugging Face's own, so the rewrite reaches them through forward
hooks that live for that one call (the model's own gradient checkpointing would recompute a
layer without them: leave it off). It starts from its
trained weights (`pretrained`: the arms then fine-tune it, the paper's setting with
GPT-Neo-125M) or from its config with fresh weights drawn from the run's seed.
"""

from __future__ import annotations

from contextlib import ExitStack
from typing import Callable

import torch
from torch import nn

from ..errors import ModformerError


class HFStudent(nn.Module):
    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, ids: torch.Tensor, *,
                rewrite: Callable[[str, torch.Tensor], torch.Tensor] | None = None) -> torch.Tensor:
        """ids (B, S), right-padded (the model is causal: real positions never read padding)
        -> logits (B, S, vocab). With `rewrite`, the stream h (B, S, d) at each place becomes
        rewrite(place, h)."""
        with ExitStack() as hooks:
            if rewrite is not None:
                for place, module in self.bridge_points().items():
                    hooks.callback(module.register_forward_hook(_hook(rewrite, place)).remove)
            return self.model(input_ids=ids, use_cache=False).logits

    def places(self) -> list[str]:
        return list(self.bridge_points())

    @property
    def width(self) -> int:
        return self.model.get_input_embeddings().weight.shape[1]

    @property
    def vocab_size(self) -> int:
        return self.model.get_output_embeddings().weight.shape[0]

    @property
    def max_length(self) -> int | None:
        return getattr(self.model.config, "max_position_embeddings", None)

    def bridge_points(self) -> dict[str, nn.Module]:
        """place -> the module whose output the bridge there rewrites."""
        n = self.model.config.num_hidden_layers
        layers = next((m for m in self.model.modules() if isinstance(m, nn.ModuleList) and len(m) == n), None)
        if layers is None:
            raise ModformerError(f"cannot find the {n} decoder layers of {type(self.model).__name__}")
        return {"input": self.model.get_input_embeddings(), **{f"block_{i}": layer for i, layer in enumerate(layers)}}


def _hook(rewrite: Callable[[str, torch.Tensor], torch.Tensor], place: str):
    def hook(_module, _inputs, output):
        if isinstance(output, tuple):  # some Hugging Face layers return (hidden states, extras...)
            return (rewrite(place, output[0]), *output[1:])
        return rewrite(place, output)
    return hook


def load_hf_student(name: str, pretrained: bool, seed: int) -> HFStudent:
    """The causal LM at `name` (a local folder, or a hub name when the network allows), with
    its trained weights or, with `pretrained=False`, fresh ones drawn from `seed`."""
    from transformers import AutoConfig, AutoModelForCausalLM

    try:
        if pretrained:
            model = AutoModelForCausalLM.from_pretrained(name, dtype=torch.float32)
        else:
            config = AutoConfig.from_pretrained(name)
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(seed)
                model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    except (OSError, ValueError) as e:
        raise ModformerError(f"student.model={name}: cannot load a Hugging Face causal LM "
                             f"({str(e).splitlines()[0]})") from None
    return HFStudent(model)


def load_student_tokenizer(name: str):
    """The `tokenizers.Tokenizer` of the model at `name`: its folder's tokenizer.json (a
    modformer model exported with `modformer convert --to ffn --hf` holds only that), or
    the one behind its Hugging Face tokenizer."""
    from pathlib import Path

    from transformers import AutoTokenizer

    if (Path(name) / "tokenizer.json").is_file() and not (Path(name) / "tokenizer_config.json").is_file():
        from tokenizers import Tokenizer

        return Tokenizer.from_file(str(Path(name) / "tokenizer.json"))

    try:
        tokenizer = AutoTokenizer.from_pretrained(name)
    except (OSError, ValueError) as e:
        raise ModformerError(f"cannot load the tokenizer of {name} ({str(e).splitlines()[0]})") from None
    if not getattr(tokenizer, "is_fast", False):
        raise ModformerError(f"the tokenizer of {name} is not a fast tokenizer: character offsets need one")
    return tokenizer.backend_tokenizer
