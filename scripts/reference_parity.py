"""Measure modformer's reference construction against the reference's own model.

For every variant in every reference trainer's form (depth.py: the algorithmic tasks,
hdmemorize_exp.py: memorization, trainer.py: language modelling, trainer_classifier.py:
sentiment), this builds our model
with `model.construction: reference`, gives every parameter a random value (biases and norm
gains too, so that every weight counts), builds princeton-pli/MixiT's `modeling_llama.py`
model with the configuration that trainer passes, copies our weights and mixing matrices
into it, and prints the largest absolute difference of their logits. It also compares the
trainable parameter sets (each trainer's own freezing), the parameters that transformers'
Trainer decays against ours, and transformers' learning-rate schedule against ours.

The reference's head 0 (its sink) is not copied: the reference builds it itself, so a
difference in the sink shows in the logits. The classifier is compared in both of its
readings (`model.construction_options.transformers` v4.50 and v4.53): under the transformers this runs
with, one of them should match.

Needs the network once, to install: a checkout of princeton-pli/MixiT and a venv with
torch, transformers 4.50.x (or 4.53+ for the classifier's other reading), pyyaml and
modformer installed into it (`pip install --no-deps -e .` from this repository, so that its papers register):

    git clone https://github.com/princeton-pli/MixiT /tmp/MixiT
    python -m venv /tmp/ref && /tmp/ref/bin/pip install torch==2.13.0 transformers==4.50.3 pyyaml numpy
    /tmp/ref/bin/pip install --no-deps -e .   # modformer's papers register through its entry points
    /tmp/ref/bin/python scripts/reference_parity.py --reference /tmp/MixiT \\
        --out results/random_attention/reference_parity/transformers_4.50.md

Nothing of the reference is copied here: it is imported from the checkout and measured.
"""

from __future__ import annotations

import argparse
import importlib
import math
import subprocess
import sys
from pathlib import Path

import torch

VARIANTS = ("standard", "frozen_qk", "frozen_mlp", "random_transformer", "mixit")
D, LAYERS, HEADS, VOCAB, T = 64, 2, 4, 512, 16
DEPTH_MODEL = ("depth.py", "hdmemorize_exp.py")  # hdmemorize_exp.py's get_model_config is depth.py's, tau0 1
TASKS = {
    "depth.py": {"name": "retrieval", "n_pairs": 4},  # length 2 * 4 + 3 = 11 < T: max_seq_len set below
    "hdmemorize_exp.py": {"name": "memorization", "n": 96},
    "trainer.py": {"name": "lm", "source": "movie_reviews", "tokenizer_vocab": VOCAB, "seq_len": T},
    "trainer_classifier.py": {"name": "sentiment", "source": "imdb", "tokenizer_vocab": VOCAB - 2, "seq_len": T},
}


def ours(variant: str, trainer: str, reading: str = "v4.50"):
    from modformer.config import config_from_dict
    from modformer.variants import build_model

    model = {"construction": "reference", "variant": variant, "d_model": D, "n_layers": LAYERS, "n_heads": HEADS,
             "vocab_size": VOCAB, "max_seq_len": T, "construction_options": {"transformers": reading}}
    cfg = config_from_dict({"model": model, "task": dict(TASKS[trainer]), "train": {"steps": 1000}})
    net = build_model(cfg.model, seed=0)
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():  # every weight counts: biases, gains and positions away from their init
        for name, p in net.named_parameters():
            p.copy_(torch.randn(p.shape, generator=g) * (0.5 if p.ndim < 2 else 0.1) + (1.0 if "norm" in name else 0.0))
        if net.embed.padding_idx is not None:
            net.embed.weight[net.embed.padding_idx].zero_()
    return cfg, net.eval()


def reference_config(ml, variant: str, trainer: str, cfg):
    """The MixingLlamaConfig each reference trainer's get_model_config passes."""
    mixing = variant == "mixit"
    kwargs = dict(hidden_size=D, num_hidden_layers=LAYERS, intermediate_size=4 * D, num_attention_heads=HEADS,
                  shaped_attention="mixing" if mixing else "vanilla", max_position_embeddings=T, max_seq_len=T,
                  vocab_size=VOCAB, attn_implementation="eager" if mixing else "sdpa", activation_cminus=-1.0,
                  do_rope=True, base_attn_mix=1.0, initializer_range=0.02)
    if trainer in DEPTH_MODEL:
        kwargs.update(skip_scaling=math.sqrt(0.5), base_hidden_size=512, base_num_attention_heads=8, tau0=1.0,
                      depth_alpha=0.0)
    elif trainer == "trainer.py":
        kwargs.update(skip_scaling=0.5, base_hidden_size=512, base_num_hidden_layers=4, base_num_attention_heads=8,
                      tau0=1.0, depth_alpha=0.0)
    else:  # no base_hidden_size: the config's default 1.0
        kwargs.update(num_labels=2, use_cache=False, is_causal=False, skip_scaling=math.sqrt(0.5),
                      pad_token_id=cfg.model.pad_id)
    config = ml.MixingLlamaConfig(**kwargs)
    config.attention_bias = True
    config.mlp_bias = True
    return config


def linear_of(module):
    return module.linear if hasattr(module, "linear") else module


def copy_into(ref, net, trainer: str, first_class: int | None) -> None:
    """Our weights into the reference model, name for name; mixing matrices but head 0."""
    body = ref.model
    with torch.no_grad():
        body.embed_tokens.weight.copy_(net.embed.weight)
        if net.positions is not None:
            body.wpe.weight.copy_(net.positions.weight)
        for block, layer in zip(net.blocks, body.layers):
            layer.input_layernorm.weight.copy_(block.mixer_norm.weight)
            layer.post_attention_layernorm.weight.copy_(block.ffn_norm.weight)
            for name in ("q_proj", "k_proj", "v_proj", "o_proj"):
                if hasattr(block.mixer, name):
                    linear_of(getattr(layer.self_attn, name)).load_state_dict(getattr(block.mixer, name).state_dict())
            for name in ("gate_proj", "up_proj", "down_proj"):
                linear_of(getattr(layer.mlp, name)).load_state_dict(getattr(block.ffn, name).state_dict())
            if hasattr(block.mixer, "mixing"):
                layer.self_attn.attn_weights[1:] = block.mixer.mixing[1:]
        body.norm.weight.copy_(net.norm.weight)
        if trainer == "trainer_classifier.py":
            linear_of(ref.score).weight.copy_(net.lm_head.weight[first_class:first_class + 2])
        else:
            linear_of(ref.lm_head).weight.copy_(net.lm_head.weight)


def logits_diff(ref, net, trainer: str, first_class: int | None, tokens: torch.Tensor,
                mask: torch.Tensor | None = None) -> float:
    """Max |logit diff| over the positions `mask` keeps (all without one), the reference given
    `mask` as its attention mask."""
    with torch.no_grad():
        mine = net(tokens)
        if trainer == "trainer_classifier.py":  # the class logits at every position, not only the pooled one
            hidden = ref.model(tokens, attention_mask=mask).last_hidden_state
            theirs, mine = ref.score(hidden), mine[..., first_class:first_class + 2]
        else:
            theirs = ref(tokens, attention_mask=mask).logits
    keep = torch.ones(tokens.shape, dtype=torch.bool) if mask is None else mask.bool()
    return (mine - theirs)[keep].abs().max().item()


def reference_frozen(ref, variant: str) -> set[str]:
    """The parameters each reference trainer freezes for `variant` (trainer.py's and depth.py's
    freeze_attention and freeze_mlp; depth.py's weight_frozen=1 for the random transformer)."""
    names = set()
    for n, _ in ref.named_parameters():
        if variant == "frozen_qk" and ("q_proj" in n or "k_proj" in n):
            names.add(n)
        elif variant == "frozen_mlp" and "mlp" in n:
            names.add(n)
        elif variant == "random_transformer" and not any(k in n for k in ("embed_tokens", "lm_head", "wpe")):
            names.add(n)
    return names


def our_names_in_reference(net, ref, trainer: str) -> dict[str, str]:
    """Our parameter name -> the reference's (its ScaledLinear keeps an nn.Linear as `.linear`)."""
    head = "score" if trainer == "trainer_classifier.py" else "lm_head"
    renames = (("blocks.", "model.layers."), (".mixer_norm.", ".input_layernorm."),
               (".ffn_norm.", ".post_attention_layernorm."), (".mixer.", ".self_attn."), (".ffn.", ".mlp."))
    theirs = dict(ref.named_parameters())
    out = {}
    for name, _ in net.named_parameters():
        fixed = {"embed.weight": "model.embed_tokens.weight", "positions.weight": "model.wpe.weight",
                 "norm.weight": "model.norm.weight", "lm_head.weight": f"{head}.weight"}.get(name)
        if fixed is None:
            fixed = name
            for a, b in renames:
                fixed = fixed.replace(a, b)
        if fixed not in theirs:
            stem, _, kind = fixed.rpartition(".")
            fixed = f"{stem}.linear.{kind}"
        if fixed not in theirs:
            raise SystemExit(f"error: our parameter {name} has no counterpart in the reference model")
        out[name] = fixed
    return out


def schedule_diff(trainer: str, cfg) -> tuple[float, float]:
    """(max |lr diff| over the warm-up, after it) between transformers' scheduler and ours."""
    from transformers import get_scheduler

    from modformer.train.optim import learning_rate

    train = cfg.train
    opt = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))], lr=train.lr)
    sched = get_scheduler("cosine" if trainer in DEPTH_MODEL else "linear", opt,
                          num_warmup_steps=train.warmup_steps, num_training_steps=train.steps)
    warm, after = 0.0, 0.0
    for step in range(train.steps):
        diff = abs(opt.param_groups[0]["lr"] - learning_rate(step, train))
        if step < train.warmup_steps:
            warm = max(warm, diff)
        else:
            after = max(after, diff)
        opt.step()
        sched.step()
    return warm, after


def decay_diff(ref, net, names: dict[str, str]) -> str:
    """Parameters transformers' Trainer decays that we do not, and the other way round."""
    from transformers import Trainer

    from modformer.train.optim import parameter_groups

    trainable = {names[n] for n, p in net.named_parameters() if p.requires_grad}
    hf = set(Trainer.get_decay_parameter_names(None, ref)) & trainable
    ours_decayed = {names[n] for g in parameter_groups(net, 1.0) if g["weight_decay"]
                    for n, p in net.named_parameters() if any(p is q for q in g["params"])}
    only_hf, only_ours = sorted(hf - ours_decayed), sorted(ours_decayed - hf)
    return "same" if not only_hf and not only_ours else f"HF only: {', '.join(only_hf) or '-'}; ours only: " \
                                                        f"{', '.join(only_ours) or '-'}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reference", required=True, type=Path, help="a checkout of princeton-pli/MixiT")
    parser.add_argument("--out", type=Path, help="also write the table to this Markdown file")
    args = parser.parse_args()
    if not (args.reference / "modeling_llama.py").exists():
        sys.exit(f"error: {args.reference} holds no modeling_llama.py (a checkout of princeton-pli/MixiT)")
    sys.path.insert(0, str(args.reference))
    import transformers

    from modformer.version import code_version, machine

    ml = importlib.import_module("modeling_llama")
    commit = subprocess.run(["git", "rev-parse", "--short=7", "HEAD"], cwd=args.reference, capture_output=True,
                            text=True).stdout.strip() or "unknown"
    tokens = torch.randint(2, VOCAB - 2, (3, T), generator=torch.Generator().manual_seed(2))  # no pad token
    lines = [f"# Parity with the reference's own model (transformers {transformers.__version__})", "",
             f"princeton-pli/MixiT at {commit}, transformers {transformers.__version__}, torch {torch.__version__}, "
             f"modformer {code_version()}, {machine()}; float32, width {D}, {LAYERS} layers, {HEADS} heads, "
             f"sequences of {T}, every parameter random. Command: `python scripts/reference_parity.py "
             f"--reference MIXIT_CHECKOUT --out FILE` (its docstring says how to install).", "",
             "| trainer | variant | reading | max abs logit diff | padded batch, its attention mask: at the tokens "
             "| sink head 0 | trainable sets | decayed parameters | lr schedule: max diff in warm-up / after |",
             "|---|---|---|---|---|---|---|---|---|"]
    for trainer in TASKS:
        readings = ("v4.50", "v4.53") if trainer == "trainer_classifier.py" else ("-",)
        for variant in VARIANTS:
            if variant == "random_transformer" and trainer != "depth.py" or \
                    variant == "frozen_mlp" and trainer in ("trainer.py", "trainer_classifier.py"):
                # The paper runs these on the algorithmic tasks (Frozen-MLP on memorization too) only;
                # hdmemorize_exp.py's weight_frozen=1 names GPT-2's wte, not Llama's embed_tokens, so
                # there it would freeze the token embedding too: not our random transformer.
                continue
            for reading in readings:
                cfg, net = ours(variant, trainer, reading if reading != "-" else "v4.50")
                torch.manual_seed(0)
                ref_cls = ml.LlamaForSequenceClassification if trainer == "trainer_classifier.py" \
                    else ml.LlamaForCausalLM
                ref = ref_cls(reference_config(ml, variant, trainer, cfg)).eval()
                first_class = VOCAB - 2 if trainer == "trainer_classifier.py" else None
                copy_into(ref, net, trainer, first_class)
                diff = logits_diff(ref, net, trainer, first_class, tokens)
                padded = "-"
                if trainer == "trainer_classifier.py":  # right padding, as the classifier's batches have it
                    pad_tokens = tokens.clone()
                    pad_tokens[:, -4:] = cfg.model.pad_id
                    mask = pad_tokens != cfg.model.pad_id
                    padded = f"{logits_diff(ref, net, trainer, first_class, pad_tokens, mask):.3g}"
                sink = "-"
                if variant == "mixit":
                    sink = "equal" if all(torch.equal(layer.self_attn.attn_weights[0], block.mixer.mixing[0])
                                          for layer, block in zip(ref.model.layers, net.blocks)) else "differs"
                names = our_names_in_reference(net, ref, trainer)
                frozen = {names[n] for n, p in net.named_parameters() if not p.requires_grad}
                trainable = "equal" if frozen == reference_frozen(ref, variant) else \
                    f"differ: {sorted(frozen ^ reference_frozen(ref, variant))}"
                warm, after = schedule_diff(trainer, cfg)
                lines.append(f"| {trainer} | {variant} | {reading} | {diff:.3g} | {padded} | {sink} | {trainable} | "
                             f"{decay_diff(ref, net, names)} | {warm:.3g} / {after:.3g} |")
                print(lines[-1], flush=True)
    if args.out:
        args.out.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
