"""`modformer convert`: a trained model to the knowledge form and back, logits unchanged.

Sources: a modformer checkpoint (or a run directory, whose latest checkpoint is taken), or
a local Hugging Face Llama-family model folder (one with a config.json). The result is a
modformer checkpoint holding the converted model and its config (the rest of the run
config kept), which `modformer eval` and `load_checkpoint_model` read. The command checks
its own work: it prints the largest logit difference between the model before and after,
on random tokens, in float64.

With `hf=True` (`--hf`) the result is written instead as a Hugging Face `LlamaForCausalLM`
folder (`save_pretrained`): folding a gated (swiglu) knowledge model gives Llama's MLP with
biases, so a Llama unfolded to the knowledge form comes back as a Llama. A standard model is
in FFN form already: `--to ffn --hf` exports it as it is (a modformer model pretrained here
then serves as a Hugging Face student, `modformer llm-modules`). The folder is reloaded with
transformers and its logits are the ones compared. A run directory's tokenizer (a text
task's `tokenizer/tokenizer.json`) is copied beside the weights; a knowledge model has no
Llama form.
"""

from __future__ import annotations

import copy
import shutil
from pathlib import Path
from typing import Any

import torch

from ..config import config_from_dict
from ..configtools import to_dict
from ..errors import ModformerError
from ..evaluate import load_checkpoint_model
from ..files import atomic_write_folder
from ..model.transformer import Transformer, unplain_parts
from ..train.checkpoint import load_model_state, save_checkpoint
from ..variants import build_model
from .fold import fold_model, folded_config, unfold_model, unfold_model_approximate, unfolded_config

TARGETS = ("knowledge", "ffn")


def _load_source(source: Path) -> tuple[Transformer, dict[str, Any], int]:
    if (source / "config.json").is_file():
        from ..interop.hf_llama import from_hf_llama, load_hf_llama

        model, model_cfg = from_hf_llama(load_hf_llama(source))
        return model, {"model": to_dict(model_cfg)}, 0
    if not source.exists():
        raise ModformerError(f"{source} does not exist")
    if source.is_dir() and not (source / "checkpoints").is_dir():
        raise ModformerError(f"{source} is neither a Hugging Face model folder (no config.json) "
                             f"nor a run directory (no checkpoints/)")
    return load_checkpoint_model(source)


def max_logit_difference(a: Transformer, b: Transformer, seq_len: int, seed: int = 0) -> float:
    """Largest |logit| difference on 4 random sequences, copies of both models in float64
    on the CPU (the models themselves are left as they are).

    Args:
        a: one model; its `vocab_size` bounds the random token ids.
        b: the other model, of the same vocabulary.
        seq_len: length T of each random sequence (4 sequences of shape (4, T)).
        seed: seed of the generator drawing the tokens.

    Returns:
        The largest absolute difference between the two models' logits (4, T, vocab_size).
    """
    gen = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, a.vocab_size, (4, seq_len), generator=gen)
    a64, b64 = (copy.deepcopy(m).to("cpu", torch.float64).eval() for m in (a, b))
    with torch.no_grad():
        return (a64(tokens) - b64(tokens)).abs().max().item()


def convert(source: str | Path, to: str, out: str | Path, *, threshold: str = "linear",
            hf: bool = False, n_entries: int | None = None, d_entry: int | None = None) -> dict[str, Any]:
    """Convert `source` to the knowledge form (`to="knowledge"`) or back to FFNs (`to="ffn"`);
    write a checkpoint (or, with `hf`, a Hugging Face folder) to `out`; return what was done,
    with the measured logit difference. `n_entries` / `d_entry` below d_ff make the knowledge
    form approximate (one smaller base for all layers, `unfold_approximate`): the result then
    also holds each layer's relative errors and, for a modformer run's checkpoint, the
    validation loss and accuracy of its task before and after.

    Args:
        source: a modformer checkpoint file, a run directory (its latest checkpoint), or a
            local Hugging Face Llama-family folder (one with a config.json). Only standard and
            knowledge models without scaled projections convert.
        to: `knowledge` (unfold the FFNs into knowledge layers) or `ffn` (fold them back).
        out: the checkpoint file to write; with `hf`, a new folder (it must not exist).
        threshold: the threshold kind of the unfolded layers (`linear`, `mlp` or `none`).
        hf: write a Hugging Face `LlamaForCausalLM` folder instead of a checkpoint (only with
            `to="ffn"` and a swiglu model), with the source's tokenizer files copied beside it.
        n_entries: with `to="knowledge"`, the number of entries n_E of a smaller base
            (approximate); None: d_ff.
        d_entry: with `to="knowledge"`, the entry width d_E of a smaller base (approximate);
            None: n_E.

    Returns:
        What was done: `source`, `to`, `out`, `max_logit_difference` (before against after, or
            against the reloaded Hugging Face folder), `parameters_before` and `parameters_after`;
            with `hf` also `tokenizer` (the files copied, or None); when approximate also
            `layer_errors` (per layer, `unfold_approximate`'s errors) and, when the source config
            has a task, `task_before` and `task_after` (validation `loss` and `accuracy`).
    """
    if to not in TARGETS:
        raise ModformerError(f"--to must be one of {', '.join(TARGETS)}, got '{to}'")
    source, out = Path(source), Path(out)
    if hf and to != "ffn":
        raise ModformerError("--hf writes a Llama folder, and a knowledge model has none: use it with --to ffn")
    if hf and out.exists():
        raise ModformerError(f"--out {out} already exists; give a new folder for the Hugging Face model")
    if not hf and out.is_dir():
        raise ModformerError(f"--out {out} is a folder; give the checkpoint file to write")
    model, data, step = _load_source(source)
    cfg = config_from_dict(data).model
    if cfg.variant not in ("standard", "knowledge"):
        # Another variant's builder or freeze list would be lost in the converted config.
        raise ModformerError(f"{source} is a '{cfg.variant}' model; only standard and knowledge models convert")
    unplain = unplain_parts(model)
    if unplain:
        # Folding reads the weights as plain linear maps; the output scales would be lost.
        raise ModformerError(f"{source} has parts its construction ({cfg.construction}) scales: "
                             f"{', '.join(unplain[:3])}; only plain ones convert")
    if any(v is not None and v < 1 for v in (n_entries, d_entry)):
        raise ModformerError(f"--n-entries and --d-entry must be positive, got {n_entries} and {d_entry}")
    approximate = n_entries is not None or d_entry is not None
    if approximate and to != "knowledge":
        raise ModformerError("--n-entries and --d-entry size the knowledge base: use them with --to knowledge")
    extra: dict[str, Any] = {}
    if to == "knowledge" and approximate:
        converted, extra["layer_errors"] = unfold_model_approximate(model, n_entries, d_entry, threshold=threshold)
        new_cfg = unfolded_config(cfg, threshold=threshold, n_entries=n_entries or cfg.ffn_dim,
                                  d_entry=d_entry or n_entries or cfg.ffn_dim)
        if "task" in data:
            extra["task_before"], extra["task_after"] = _task_metrics([model, converted], data)
    elif to == "knowledge":
        converted, new_cfg = unfold_model(model, threshold=threshold), unfolded_config(cfg, threshold=threshold)
    else:
        if not hasattr(model, "knowledge"):
            if not hf:
                raise ModformerError(f"{source} has no knowledge layers to fold (--hf exports it as it is)")
            converted, new_cfg = model, cfg
        else:
            converted, new_cfg = fold_model(model), folded_config(cfg)
    new_data = {**data, "model": to_dict(new_cfg)}
    check = build_model(config_from_dict(new_data).model, seed=0)
    load_model_state(check, converted.state_dict(), "the converted model")  # it loads as its config says
    if hf:
        return _write_hf(model, converted, new_cfg, source, out)
    difference = max_logit_difference(model, converted, seq_len=min(cfg.max_seq_len or 64, 64))
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        save_checkpoint(out, step, converted, None, {"config": new_data, "converted_from": str(source)})
    except OSError as e:
        raise ModformerError(f"cannot write {out}: {e.strerror or e}") from None
    return {"source": str(source), "to": to, "out": str(out), "max_logit_difference": difference,
            "parameters_before": sum(p.numel() for p in model.parameters()),
            "parameters_after": sum(p.numel() for p in converted.parameters()), **extra}


def _task_metrics(models: list[Transformer], data: dict[str, Any]) -> list[dict[str, float]]:
    """Validation loss and accuracy of each model on the run's own task (drawn once)."""
    from ..evaluate import evaluate
    from ..registry import TASKS

    cfg = config_from_dict(data)
    task = TASKS[cfg.task.name](cfg.task)
    results = [evaluate(m, task, data=task.validation_set(), batch_size=cfg.train.eval_batch_size) for m in models]
    return [{"loss": r["loss"], "accuracy": r["accuracy"]} for r in results]


def _tokenizer_files(source: Path) -> list[Path]:
    """The tokenizer that goes with `source`: a Hugging Face folder's own files, or the
    tokenizer.json of a run directory (`source` itself, or RUN/checkpoints/step_N.safetensors)."""
    if (source / "config.json").is_file():
        names = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "tokenizer.model")
        return [source / n for n in names if (source / n).is_file()]
    run_dir = source if source.is_dir() else source.parent.parent if source.parent.name == "checkpoints" else None
    found = None if run_dir is None else run_dir / "tokenizer" / "tokenizer.json"
    return [found] if found is not None and found.is_file() else []


def _write_hf(model: Transformer, converted: Transformer, cfg, source: Path, out: Path) -> dict[str, Any]:
    """Save `converted` as a LlamaForCausalLM folder (written beside, then renamed into place),
    reload it, and compare its logits with `model`'s."""
    from ..interop.hf_llama import from_hf_llama, load_hf_llama, to_hf_llama

    if cfg.ffn != "swiglu":
        raise ModformerError(f"its FFNs fold to '{cfg.ffn}', and Llama's MLP is SwiGLU: only a knowledge model "
                             f"with model.knowledge.activation=swiglu has a Llama form")
    hf_model = to_hf_llama(converted, cfg)
    tokenizer = _tokenizer_files(source)

    def write(folder: Path) -> None:
        hf_model.save_pretrained(folder)
        for file in tokenizer:
            shutil.copyfile(file, folder / file.name)

    try:
        atomic_write_folder(out, write)
    except OSError as e:
        raise ModformerError(f"cannot write {out}: {e.strerror or e}") from None
    reloaded, _ = from_hf_llama(load_hf_llama(out))
    difference = max_logit_difference(model, reloaded, seq_len=min(cfg.max_seq_len or 64, 64))
    return {"source": str(source), "to": "ffn (Hugging Face Llama folder)", "out": str(out),
            "tokenizer": [str(f) for f in tokenizer] or None,
            "max_logit_difference": difference, "parameters_before": sum(p.numel() for p in model.parameters()),
            "parameters_after": sum(p.numel() for p in hf_model.parameters())}
