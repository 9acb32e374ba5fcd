"""A Hugging Face causal LM as the student of an LLM-Modules experiment.

`HFStudent` makes it look like a modformer student: token ids in, logits out, and the hook
points a modformer `Transformer` has where the bridges change the stream (`embed_out`: the
output of its token embedding, where the reference feeds its bridge; `blocks.{i}.resid_post`:
the output of decoder layer i), read and changed with `hooks.capture` and `hooks.hooked`. Its
layers are Hugging Face's own, so each passes its output through its hook point by a forward
hook set once here (the model's own gradient checkpointing would recompute a layer without
it: leave it off). It starts from its
trained weights (`pretrained`: the arms then fine-tune it, the paper's setting with
GPT-Neo-125M) or from its config with fresh weights drawn from the run's seed.
"""

from __future__ import annotations

import torch
from torch import nn

from ..errors import ModformerError
from ..model.hooks import HookPoint


class _LayerPoints(nn.Module):
    """The hook point after one Hugging Face decoder layer (no parameters)."""

    def __init__(self) -> None:
        super().__init__()
        self.resid_post = HookPoint()

    def after_layer(self, _module: nn.Module, _inputs, output):
        """The layer's forward hook: its output through `resid_post`. A bound method, not a
        closure, so that a deep copy of the student calls the copy's hook point."""
        return _through(self.resid_post, output)


class HFStudent(nn.Module):
    """A Hugging Face causal LM as a student: ids in, logits out, with the hook points
    `embed_out` and `blocks.{i}.resid_post` (the module's docstring).

    Args:
        model: the causal LM (its decoder layers found as the ModuleList of
            `config.num_hidden_layers` modules).
    """

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model
        layers = _decoder_layers(model)
        self.embed_out = HookPoint()
        self.blocks = nn.ModuleList(_LayerPoints() for _ in layers)
        model.get_input_embeddings().register_forward_hook(self.after_embedding)
        for layer, points in zip(layers, self.blocks):
            layer.register_forward_hook(points.after_layer)

    def after_embedding(self, _module: nn.Module, _inputs, output):
        """The token embedding's forward hook: its output through `embed_out` (a bound method,
        as `_LayerPoints.after_layer` is)."""
        return _through(self.embed_out, output)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """ids (B, S), right-padded (the model is causal: real positions never read padding)
        -> logits (B, S, vocab)."""
        return self.model(input_ids=ids, use_cache=False).logits

    @property
    def width(self) -> int:
        return self.model.get_input_embeddings().weight.shape[1]

    @property
    def vocab_size(self) -> int:
        return self.model.get_output_embeddings().weight.shape[0]

    @property
    def max_length(self) -> int | None:
        return getattr(self.model.config, "max_position_embeddings", None)


def _decoder_layers(model: nn.Module) -> nn.ModuleList:
    n = model.config.num_hidden_layers
    layers = next((m for m in model.modules() if isinstance(m, nn.ModuleList) and len(m) == n), None)
    if layers is None:
        raise ModformerError(f"cannot find the {n} decoder layers of {type(model).__name__}")
    return layers


def _through(point: HookPoint, output):
    """A Hugging Face module's output passed through `point`."""
    if isinstance(output, tuple):  # some Hugging Face layers return (hidden states, extras...)
        return (point(output[0]), *output[1:])
    return point(output)


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
