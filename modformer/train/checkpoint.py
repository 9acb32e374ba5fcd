"""Checkpoints as safetensors: model, optimizer state, RNG states and step, written atomically.

Tensors are stored under `model.<param>`, `optim.<param>.<state key>` and `rng.<device>`;
everything else (step, config, optimizer hyperparameters, schedule) is JSON in the
safetensors metadata. Nothing is unpickled on load, so a checkpoint from anywhere is safe
to open; one that is not ours is refused with a message saying so.

safetensors carries no checksum, and bytes a failing disk changed inside the tensor data
(the header and size intact) load as other numbers: the metadata holds `sha256`, a digest of
every tensor's name, dtype, shape and bytes, which `read_checkpoint` checks (a checkpoint
written before it was added has none, and is read unchecked).
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file
from torch import nn

from ..errors import CheckpointError, StorageFault, storage_fault
from ..files import atomic_write

FORMAT = "modformer.checkpoint"
FORMAT_VERSION = "1"
_NAME = re.compile(r"step_(\d+)\.safetensors$")


@dataclass
class Checkpoint:
    step: int
    model: dict[str, torch.Tensor]
    optimizer: dict[str, torch.Tensor]  # "<param name>.<state key>" -> tensor
    rng: dict[str, torch.Tensor]
    meta: dict[str, Any]  # config, optimizer groups, schedule, code version


def optimizer_tensors(optimizer: torch.optim.Optimizer, names: dict[nn.Parameter, str]) -> dict[str, torch.Tensor]:
    out = {}
    for param, state in optimizer.state.items():
        for key, value in state.items():
            if not isinstance(value, torch.Tensor):
                value = torch.tensor(value)
            out[f"{names[param]}.{key}"] = value.detach().cpu().contiguous()
    return out


def load_optimizer_tensors(optimizer: torch.optim.Optimizer, names: dict[nn.Parameter, str],
                           tensors: dict[str, torch.Tensor]) -> None:
    """Restore per-parameter state saved by `optimizer_tensors` (hyperparameters come from the config)."""
    by_name = {n: p for p, n in names.items()}
    # Fused and capturable AdamW keep the step count on the parameter's device; the
    # others on the CPU (as torch's own load_state_dict does).
    step_on_device = bool(optimizer.defaults.get("fused") or optimizer.defaults.get("capturable"))
    state: dict[nn.Parameter, dict[str, torch.Tensor]] = {}
    for key, value in tensors.items():
        name, _, slot = key.rpartition(".")
        if name not in by_name:
            raise CheckpointError(f"checkpoint has optimizer state for '{name}', which is not a trainable parameter here")
        param = by_name[name]
        on_device = slot != "step" or step_on_device
        state.setdefault(param, {})[slot] = value.to(param.device) if on_device else value
    missing = [n for p, n in names.items() if p not in state]
    if state and missing:
        raise CheckpointError(f"checkpoint lacks optimizer state for {missing[:3]}; was it saved with another freeze set?")
    optimizer.state.clear()
    for param, slots in state.items():
        optimizer.state[param] = slots


def rng_tensors() -> dict[str, torch.Tensor]:
    out = {"rng.torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        for i, s in enumerate(torch.cuda.get_rng_state_all()):
            out[f"rng.cuda{i}"] = s
    return out


def restore_rng(rng: dict[str, torch.Tensor]) -> None:
    if "rng.torch" in rng:
        torch.set_rng_state(rng["rng.torch"])
    if torch.cuda.is_available():
        # By device index (a name sort would put rng.cuda10 before rng.cuda2), and only where
        # the checkpoint has a state for every device here and no more.
        count = torch.cuda.device_count()
        saved = [k for k in rng if k.startswith("rng.cuda")]
        if len(saved) == count and all(f"rng.cuda{i}" in rng for i in range(count)):
            torch.cuda.set_rng_state_all([rng[f"rng.cuda{i}"] for i in range(count)])


def digest(tensors: dict[str, torch.Tensor]) -> str:
    """sha256 of every tensor's name, dtype, shape and bytes, in name order."""
    h = hashlib.sha256()
    for key in sorted(tensors):
        t = tensors[key].detach().cpu().contiguous()
        h.update(f"{key}|{t.dtype}|{tuple(t.shape)}|".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy())
    return h.hexdigest()


def save_checkpoint(path: Path, step: int, model: nn.Module, optimizer: torch.optim.Optimizer | None,
                    meta: dict[str, Any]) -> None:
    names = {p: n for n, p in model.named_parameters()}
    tensors, stored = {}, set()
    for k, v in model.state_dict().items():
        v = v.detach().cpu().contiguous()
        # Tied weights are one tensor under two names (a Hugging Face model's embedding and
        # head); safetensors refuses shared memory, so the second name gets its own copy.
        tensors[f"model.{k}"] = v.clone() if v.untyped_storage().data_ptr() in stored else v
        stored.add(v.untyped_storage().data_ptr())
    if optimizer is not None:
        tensors.update({f"optim.{k}": v for k, v in optimizer_tensors(optimizer, names).items()})
    tensors.update(rng_tensors())
    _write(path, tensors, step, meta)


def _write(path: Path, tensors: dict[str, torch.Tensor], step: int, meta: dict[str, Any]) -> None:
    metadata = {"format": FORMAT, "format_version": FORMAT_VERSION, "step": str(step), "sha256": digest(tensors),
                **{k: json.dumps(v) for k, v in meta.items()}}
    try:
        atomic_write(path, lambda tmp: save_file(tensors, str(tmp), metadata=metadata))
    except SafetensorError as e:  # its writer's OS errors are not OSErrors: name the file and cause
        message = storage_fault(e)
        raise (StorageFault(message.replace("cannot write", f"cannot write to {path.parent}", 1)) if message
               else e) from None


def read_checkpoint(path: Path) -> Checkpoint:
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"checkpoint not found: {path}")
    try:
        from safetensors import safe_open

        with safe_open(str(path), framework="pt") as f:
            metadata = f.metadata() or {}
        tensors = load_file(str(path))
    except (SafetensorError, OSError, ValueError) as e:
        raise CheckpointError(f"checkpoint {path} is corrupt or not a safetensors file ({e.__class__.__name__})") from None
    if metadata.get("format") != FORMAT:
        raise CheckpointError(f"{path} is not a modformer checkpoint (a safetensors file without our format tag)")
    if metadata.get("format_version") != FORMAT_VERSION:
        raise CheckpointError(f"{path} has checkpoint format version {metadata.get('format_version')}, "
                              f"this modformer reads version {FORMAT_VERSION}")
    if "sha256" in metadata and digest(tensors) != metadata["sha256"]:
        raise CheckpointError(f"checkpoint {path} is damaged: its tensors do not match the checksum written with "
                              f"them")
    try:
        meta = {k: json.loads(v) for k, v in metadata.items()
                if k not in ("format", "format_version", "step", "sha256")}
        step = int(metadata["step"])
    except (KeyError, ValueError) as e:
        raise CheckpointError(f"checkpoint {path} has damaged metadata ({e.__class__.__name__})") from None
    groups: dict[str, dict[str, torch.Tensor]] = {"model": {}, "optim": {}, "rng": {}}
    for key, value in tensors.items():
        prefix, _, rest = key.partition(".")
        if prefix not in groups:
            raise CheckpointError(f"checkpoint {path} holds an unexpected tensor '{key}'")
        groups[prefix][key if prefix == "rng" else rest] = value
    return Checkpoint(step, groups["model"], groups["optim"], groups["rng"], meta)


def rewrite_checkpoint_meta(path: Path, change: Callable[[dict[str, Any]], list[str]]) -> list[str]:
    """Apply `change` to a checkpoint's metadata as plain data (its config, schedule, records;
    not its step) and, where it says it changed something, write the checkpoint again in one
    atomic replace with the same tensors. Returns what changed, in words (`modformer migrate`
    brings the config a checkpoint embeds up to date this way)."""
    ckpt = read_checkpoint(path)  # refuses a damaged or foreign file before anything is written
    meta = json.loads(json.dumps(ckpt.meta))
    changed = change(meta)
    if changed:
        _write(path, load_file(str(path)), ckpt.step, meta)
    return changed


def load_model_state(model: nn.Module, state: dict[str, torch.Tensor], source: Path | str) -> None:
    """Load weights strictly, turning a mismatch into one clear message."""
    own = model.state_dict()
    missing = [k for k in own if k not in state]
    unexpected = [k for k in state if k not in own]
    wrong = [k for k in own if k in state and own[k].shape != state[k].shape]
    if missing or unexpected or wrong:
        parts = []
        if missing:
            parts.append(f"missing {missing[:3]}")
        if unexpected:
            parts.append(f"unexpected {unexpected[:3]}")
        if wrong:
            k = wrong[0]
            parts.append(f"shape of '{k}' is {tuple(state[k].shape)}, the model has {tuple(own[k].shape)}")
        raise CheckpointError(f"checkpoint {source} does not fit this model: {'; '.join(parts)}")
    model.load_state_dict(state)


def list_checkpoints(folder: Path) -> list[tuple[int, Path]]:
    """(step, path) of every `step_N.safetensors` in `folder`, oldest first."""
    if not folder.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in folder.iterdir() if (m := _NAME.search(p.name))]
    return sorted(found)


def checkpoint_path(folder: Path, step: int) -> Path:
    return folder / f"step_{step:07d}.safetensors"
