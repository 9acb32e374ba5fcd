"""A top-k mixture-of-experts feed-forward module with a load-balancing auxiliary loss.

Each token's router picks `top_k` of `n_experts` small MLPs and mixes their outputs by its
renormalised router probabilities. Left alone, routers tend to send most tokens to a few
experts; the balancing loss of Switch Transformer (Fedus et al. 2021, eq. 4),
n_experts * sum_i f_i P_i (f_i: the share of routed slots that went to expert i, P_i: the
mean router probability of expert i), is 1 when the load is even and grows as it
concentrates. The module hands it to training through an `AuxLoss` (modformer/model/aux.py),
which adds `balance_weight` x it to the loss and logs it as `aux.blocks.<i>.ffn.balance`.

For clarity every expert runs on every token (a dense mixture, the unchosen experts' outputs
weighted 0): right for the small models of a CPU, not a fast MoE.
"""

from dataclasses import dataclass

import torch
from torch import nn

from modformer.configtools import option
from modformer.model.aux import AuxLoss


@dataclass
class MoEOptions:
    n_experts: int = option(4, "experts per layer")
    top_k: int = option(2, "experts each token is routed to")
    expert_hidden: int | None = option(None, "each expert's hidden width; null: d_ff / top_k (the top_k experts a "
                                              "token reads have d_ff hidden units together)")
    balance_weight: float = option(0.01, "weight of the load-balancing loss in the training loss")

    def __post_init__(self) -> None:
        if not 1 <= self.top_k <= self.n_experts:
            raise ValueError(f"top_k must be in 1..n_experts={self.n_experts}, got {self.top_k}")


class MoE(nn.Module):
    Options = MoEOptions

    def __init__(self, cfg, options: MoEOptions):
        super().__init__()
        self.options = options
        d, e = cfg.d_model, options.n_experts
        hidden = options.expert_hidden or max(1, cfg.ffn_dim // options.top_k)
        self.router = nn.Linear(d, e, bias=False)
        self.up = nn.Parameter(torch.empty(e, d, hidden))  # 3-D: drawn N(0, init_std) by modformer's init
        self.down = nn.Parameter(torch.empty(e, hidden, d))
        self.balance = AuxLoss(weight=options.balance_weight)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (B, T, d_model) -> (B, T, d_model)."""
        probs = self.router(x).softmax(-1)  # (B, T, E)
        top, chosen = probs.topk(self.options.top_k, dim=-1)  # (B, T, k)
        gates = torch.zeros_like(probs).scatter(-1, chosen, top / top.sum(-1, keepdim=True))  # (B, T, E)
        hidden = torch.nn.functional.gelu(torch.einsum("btd,edh->bteh", x, self.up))
        out = torch.einsum("bteh,ehd,bte->btd", hidden, self.down, gates)
        load = torch.zeros_like(probs).scatter(-1, chosen, 1.0).mean((0, 1)) / self.options.top_k  # f_i, sums to 1
        self.balance(self.options.n_experts * (load.detach() * probs.mean((0, 1))).sum())
        return out

    def expert_load(self, x: torch.Tensor) -> torch.Tensor:
        """(E,): the share of routed slots each expert gets for input x (B, T, d_model)."""
        chosen = self.router(x).topk(self.options.top_k, dim=-1).indices
        return torch.bincount(chosen.flatten(), minlength=self.options.n_experts).float() / chosen.numel()
