"""State kept between generation steps, so that each new token costs one position's work.

`KVCache` holds, for every layer, what that layer's mixer needs of the tokens already
processed (attention: their keys and values; MixiT's mixing: their values), and `length`,
the number of those tokens. `Transformer.forward(tokens, cache=cache)` reads and extends
it; the outputs equal those of the whole sequence processed at once (tested).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch


@dataclass
class LayerCache:
    offset: int  # tokens processed before this call: the position of the call's first token
    state: dict[str, torch.Tensor]  # filled and read by the layer's mixer

    def extend(self, name: str, new: torch.Tensor, dim: int = -2) -> torch.Tensor:
        """Append `new` to the cached tensor `name` along `dim`; return the whole."""
        whole = new if name not in self.state else torch.cat([self.state[name], new], dim=dim)
        self.state[name] = whole
        return whole


@dataclass
class KVCache:
    n_layers: int
    length: int = 0
    states: list[dict[str, torch.Tensor]] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.states:
            self.states = [{} for _ in range(self.n_layers)]

    def layer(self, i: int) -> LayerCache:
        return LayerCache(self.length, self.states[i])
