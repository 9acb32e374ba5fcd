"""What a run trains on, from its config alone: its budget, in the unit its task counts."""

from __future__ import annotations

from typing import Any

from ..registry import TASKS
from ..tasks.base import TaskConfig


def trained(config: dict[str, Any]) -> dict[str, Any]:
    """A resolved config's (plain data, as config.yaml) budget: {"sequences": steps x batch,
    "amount": the same in the task's unit, "unit": "sequences" or "tokens" (sequences x
    seq_len, for language modelling), "width": d_model}."""
    train, model, task = (config.get(k) or {} for k in ("train", "model", "task"))
    sequences = int(train.get("steps", 0)) * int(train.get("batch_size", 0))
    name = task.get("name", TaskConfig().name)
    unit = getattr(TASKS[name], "budget_unit", "sequences") if isinstance(name, str) else "sequences"
    amount = sequences * int(task.get("seq_len", 0)) if unit == "tokens" else sequences
    return {"sequences": sequences, "amount": amount, "unit": unit, "width": int(model.get("d_model", 0))}
