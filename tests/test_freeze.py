import pytest
import torch

from modformer import build_model
from modformer.errors import ConfigError
from modformer.freeze import freeze, trainable_names
from modformer.model.config import ModelConfig
from modformer.train.config import TrainConfig
from modformer.train.optim import build_optimizer


def small(**kw):
    return ModelConfig(**{"vocab_size": 40, "d_model": 32, "n_layers": 2, "n_heads": 4, "max_seq_len": 32, **kw})


def test_exact_trainable_set_under_a_freeze_specification():
    model = build_model(small(freeze=["blocks.*.mixer.q_proj.*", "blocks.*.mixer.k_proj.*", "embed.*"]), seed=0)
    expected = []
    for i in range(2):
        expected += [f"blocks.{i}.mixer_norm.weight", f"blocks.{i}.mixer.v_proj.weight",
                     f"blocks.{i}.mixer.o_proj.weight", f"blocks.{i}.ffn_norm.weight",
                     f"blocks.{i}.ffn.gate_proj.weight", f"blocks.{i}.ffn.up_proj.weight",
                     f"blocks.{i}.ffn.down_proj.weight"]
    expected += ["norm.weight", "lm_head.weight"]
    assert sorted(trainable_names(model)) == sorted(expected)


def test_pattern_matching_nothing_is_an_error():
    model = build_model(small(), seed=0)
    with pytest.raises(ConfigError, match="blocks.*.mixer.query.*"):
        freeze(model, ["blocks.*.mixer.query.*"])
    with pytest.raises(ConfigError, match="matches no parameter"):
        build_model(small(freeze=["embedding.weight"]), seed=0)


def test_frozen_weights_unchanged_after_an_optimizer_step_and_not_in_the_optimizer():
    model = build_model(small(freeze=["blocks.0.*", "lm_head.weight"]), seed=0)
    optimizer = build_optimizer(model, TrainConfig(weight_decay=0.5, lr=0.1))
    in_optimizer = {id(p) for g in optimizer.param_groups for p in g["params"]}
    frozen = {n: p.detach().clone() for n, p in model.named_parameters() if not p.requires_grad}
    trainable = {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}
    assert frozen and all(id(p) not in in_optimizer for n, p in model.named_parameters() if n in frozen)
    loss = model(torch.randint(0, 40, (4, 8))).logsumexp(-1).mean()
    loss.backward()
    optimizer.step()
    params = dict(model.named_parameters())
    for name, before in frozen.items():
        assert torch.equal(params[name], before), name
        assert params[name].grad is None, name
    assert all(not torch.equal(params[n], before) for n, before in trainable.items())


def test_no_weight_decay_on_norms_and_biases():
    model = build_model(small(attn_bias=True), seed=0)
    optimizer = build_optimizer(model, TrainConfig(weight_decay=0.1))
    for group in optimizer.param_groups:
        for p in group["params"]:
            assert (group["weight_decay"] > 0) == (p.ndim >= 2)


def test_train_only_leaves_exactly_the_named_parameters_to_train():
    from modformer.config import load_config
    cfg = load_config(None, ["model.d_model=32", "model.n_layers=2", "model.train_only=['blocks.1.ffn.*', 'lm_head.*']"])
    assert trainable_names(build_model(cfg.model, seed=0)) == [
        "blocks.1.ffn.gate_proj.weight", "blocks.1.ffn.up_proj.weight", "blocks.1.ffn.down_proj.weight",
        "lm_head.weight"]
    # The variant's own freeze still applies: Frozen-QK's Q and K stay fixed even if named.
    cfg = load_config(None, ["model.d_model=32", "model.variant=frozen_qk", "model.train_only=['blocks.0.mixer.*']"])
    assert trainable_names(build_model(cfg.model, seed=0)) == ["blocks.0.mixer.v_proj.weight",
                                                               "blocks.0.mixer.o_proj.weight"]
    cfg = load_config(None, ["model.d_model=32", "model.variant=frozen_qk", "model.train_only=['blocks.*.mixer.q_proj.*']"])
    with pytest.raises(ConfigError, match="leaves nothing to train"):
        build_model(cfg.model, seed=0)
    cfg = load_config(None, ["model.d_model=32", "model.train_only=['blocks.*.nonesuch']"])
    with pytest.raises(ConfigError, match="train_only pattern 'blocks.\\*.nonesuch' matches no parameter"):
        build_model(cfg.model, seed=0)
