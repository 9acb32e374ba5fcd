"""Bridges reading several teacher layers (`bridge.teacher_layers`, one per bridge place): the
teacher's layers from one pass, caches built together, each bridge fed its own layer's
states (cached, live while generating, or the random arm's noise of that layer's scale).
Tiny models built here, no download."""

from __future__ import annotations

import pytest
import torch

from modformer.papers.llm_modules.arm_run import ArmRun
from modformer.papers.llm_modules.arms import ARMS
from modformer.interop.teacher_cache import TeacherStateCache
from modformer.papers.llm_modules.generation import LiveTeacher
from modformer.data.alignment import causal_visibility
from modformer.interop.teacher import Teacher
from modformer.errors import ConfigError, ModformerError
from modules_fixtures import report_of, run_arms, tiny_config

transformers = pytest.importorskip("transformers")

LAYERS = ["bridge.places=[input,block_1]", "bridge.teacher_layers=[1,-1]"]


def tiny_llama(layers: int = 3):
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(transformers.LlamaConfig(
        vocab_size=100, hidden_size=32, intermediate_size=64, num_hidden_layers=layers, num_attention_heads=2,
        num_key_value_heads=2, max_position_embeddings=64)).eval()


def prepared(cfg, tmp_path, monkeypatch):
    from modformer.papers.llm_modules.experiment import LLMModulesExperiment

    monkeypatch.setenv("MODFORMER_CACHE", str(tmp_path / "cache"))
    experiment = LLMModulesExperiment(cfg, tmp_path / "out", echo=lambda *_: None)
    experiment.prepare()
    return experiment


def test_one_teacher_pass_gives_every_layer_as_reading_each_alone_does():
    from modformer.interop.hf_llama import from_hf_llama

    hf = tiny_llama()
    ours, _ = from_hf_llama(hf)
    ids = torch.randint(0, 100, (2, 9))
    for model in (hf, ours):
        teacher = Teacher(model)
        layers = [2, 0, -1, 3, 1]
        for layer, states in zip(layers, teacher.hidden(ids, None, layers)):
            assert torch.equal(states, Teacher(model, layer)(ids)), (type(model).__name__, layer)
        with pytest.raises(ModformerError, match="teacher layer 4 does not exist"):
            teacher.hidden(ids, None, [1, 4])


def test_layers_not_cached_yet_are_computed_together_from_one_pass(tmp_path):
    teacher = Teacher(tiny_llama(), layer=2)
    g = torch.Generator().manual_seed(0)
    rows = [torch.randint(0, 100, (n,), generator=g) for n in (5, 9, 3, 7, 8)]
    calls = []
    teacher.model.register_forward_hook(lambda *a: calls.append(1))
    alone = {layer: TeacherStateCache.build(Teacher(teacher.model, layer), "tiny", rows, tmp_path / f"alone{layer}",
                                            batch_size=2) for layer in (0, 2, -1)}
    calls.clear()
    folders = {layer: tmp_path / f"together{layer}" for layer in (0, 2, -1)}
    TeacherStateCache.build(teacher, "tiny", rows, folders[2], batch_size=2)
    written = (folders[2] / "states.npy").stat().st_mtime_ns
    calls.clear()
    together = TeacherStateCache.build_layers(teacher, "tiny", rows, folders, batch_size=2)
    assert len(calls) == 3  # one pass of 3 batches for layers 0 and -1; layer 2 was read from disk
    assert (folders[2] / "states.npy").stat().st_mtime_ns == written
    for layer in (0, 2, -1):
        assert torch.equal(together[layer].get(range(5))[0], alone[layer].get(range(5))[0]), layer
    calls.clear()
    TeacherStateCache.build_layers(teacher, "tiny", rows, folders, batch_size=2)
    assert not calls  # every layer cached


def test_a_layer_another_process_cached_first_is_used_and_the_others_still_land(tmp_path, monkeypatch):
    """Two processes filling the same caches: where the other one's folder lands between our
    write and our rename, its cache is used; the layers it did not write are still ours."""
    import pathlib
    import shutil

    teacher = Teacher(tiny_llama(), layer=2)
    rows = [torch.randint(0, 100, (n,), generator=torch.Generator().manual_seed(0)) for n in (5, 9, 3)]
    theirs = TeacherStateCache.build(Teacher(teacher.model, 2), "tiny", rows, tmp_path / "theirs")
    folders = {0: tmp_path / "layer0", 2: tmp_path / "layer2"}
    rename = pathlib.Path.rename

    def racing(self, target):
        if pathlib.Path(target) == folders[2]:
            shutil.copytree(tmp_path / "theirs", target)  # the other process got there first
            raise OSError("exists")
        return rename(self, target)

    monkeypatch.setattr(pathlib.Path, "rename", racing)
    caches = TeacherStateCache.build_layers(teacher, "tiny", rows, folders)
    monkeypatch.undo()
    assert torch.equal(caches[2].get([0, 1, 2])[0], theirs.get([0, 1, 2])[0])
    assert torch.equal(caches[0].get([0, 1, 2])[0],
                       TeacherStateCache.build(Teacher(teacher.model, 0), "tiny", rows, tmp_path / "alone0").get(
                           [0, 1, 2])[0])
    assert sorted(p.name for p in tmp_path.iterdir() if p.name != ".build.lock") == [
        "alone0", "layer0", "layer2", "theirs"]  # no partials left (the builders' lock file aside)


def test_each_bridge_reads_the_states_given_for_its_place():
    from modformer import build_model
    from modformer.model.bridged import BridgedStudent
    from modformer.model.config import ModelConfig

    student = build_model(ModelConfig(vocab_size=100, d_model=16, n_layers=2, n_heads=2, max_seq_len=32), seed=0)
    torch.manual_seed(1)
    combined = BridgedStudent(student, 32, ("input", "block_1"), n_heads=4, dropout=0.0, adapter_bottleneck=8).eval()
    tokens = torch.randint(0, 100, (2, 7))
    a, b = torch.randn(2, 7, 32), torch.randn(2, 7, 32)
    visible = causal_visibility(7, torch.tensor([7, 7]))
    with torch.no_grad():
        assert torch.equal(combined(tokens, {"input": a, "block_1": a}, visible), combined(tokens, a, visible))
        mixed = combined(tokens, {"input": a, "block_1": b}, visible)
        assert not torch.allclose(mixed, combined(tokens, a, visible))
        combined.bridges["block_1"].gate.weight.zero_()
        combined.bridges["block_1"].gate.bias.fill_(float("-inf"))  # block_1's bridge now passes its input on
        assert torch.equal(combined(tokens, {"input": a, "block_1": b}, visible), combined(tokens, a, visible))
        assert not torch.allclose(combined(tokens, {"input": b, "block_1": a}, visible), combined(tokens, a, visible))
    with pytest.raises(ValueError, match="no teacher states for the bridge at block_1"):
        combined(tokens, {"input": a}, visible)


def test_bridges_read_their_own_layers_in_training_generation_and_noise(tiny_teacher, tmp_path, monkeypatch):
    """With places [input, block_1] reading layers [1, -1]: each bridge receives exactly its
    layer's teacher states of its texts (cached for training, live while generating), the
    random arm's noise has each layer's own per-dimension scale, and the distill arm finds the
    final states among the layers read."""
    exp = prepared(tiny_config(tiny_teacher, *LAYERS), tmp_path, monkeypatch)
    assert set(exp.data.caches) == {1, -1} and exp.teacher.layers == (1, -1) and exp.teacher.final_layer == -1
    model = exp.teacher.model
    run = ArmRun(exp.cfg, ARMS["teacher"], 0, exp.data, exp.teacher, exp.pairing)
    run.model.eval()
    seen = {}
    for place, bridge in run.model.bridges.items():
        bridge.register_forward_pre_hook(lambda _m, args, place=place: seen.__setitem__(place, args[1]))
    rows = [0, 1, 2]
    batch = exp.data.batch(exp.data.held, rows, answer_only=True)
    with torch.no_grad():
        run.logits(batch)
    for place, layer in (("input", 1), ("block_1", -1)):
        for b, ids in enumerate(exp.data.held.teacher_ids[:3]):
            assert torch.allclose(seen[place][b, :len(ids)], Teacher(model, layer)(torch.tensor([ids]))[0],
                                  atol=1e-5), (place, b)
    live = LiveTeacher(exp.teacher).keys(batch.texts)
    assert set(live) == {1, -1}
    for layer in (1, -1):
        assert torch.allclose(live[layer], exp.data.states(batch, layer), atol=1e-5), layer
    noise = ArmRun(exp.cfg, ARMS["random_teacher"], 0, exp.data, exp.teacher, exp.pairing).noise(list(range(300)), 8)
    for j, layer in enumerate((1, -1)):
        flat = noise[layer].flatten(0, 1)
        assert torch.allclose(flat.std(0) / exp.teacher.std[j], torch.ones(exp.teacher.width), atol=0.1), layer
        assert torch.allclose(flat.mean(0), exp.teacher.mean[j], atol=0.15 * float(exp.teacher.std[j].max()))
    assert not torch.allclose(exp.teacher.std[0], exp.teacher.std[1])  # the two layers' scales differ for real
    z = [(noise[layer] - exp.teacher.mean[j]) / exp.teacher.std[j] for j, layer in enumerate((1, -1))]
    assert abs(torch.corrcoef(torch.stack([z[0].flatten(), z[1].flatten()]))[0, 1]) < 0.02  # independent draws


def test_layers_read_with_two_tokenizers_tails_included(tiny_teacher, tmp_path, monkeypatch):
    """A student with its own BPE: each layer's cached keys (whole-text states and tails) equal
    the live teacher's, the layers not read (distill is off) are not cached."""
    own = ["student.tokenizer=bpe:300", "student.embeddings=random", "student.d_model=32"]
    exp = prepared(tiny_config(tiny_teacher, *own, "bridge.places=[input,block_0]", "bridge.teacher_layers=[0,2]"),
                   tmp_path, monkeypatch)
    assert set(exp.data.caches) == {0, 2} and exp.teacher.final_layer is None
    batch = exp.data.batch(exp.data.held, list(range(len(exp.data.held))), answer_only=True)
    assert any(e.tails and any(e.tails) for e in batch.texts)
    live = LiveTeacher(exp.teacher).keys(batch.texts)
    for layer in (0, 2):
        assert torch.allclose(live[layer], exp.data.states(batch, layer), atol=1e-5), layer


def test_distill_caches_the_final_layer_when_no_bridge_reads_it(tiny_teacher, tmp_path, monkeypatch):
    exp = prepared(tiny_config(tiny_teacher, "bridge.places=[input,block_1]", "bridge.teacher_layers=[0,1]"),
                   tmp_path, monkeypatch)
    assert set(exp.data.caches) == {0, 1, -1} and exp.teacher.layers == (0, 1) and exp.teacher.final_layer == -1
    assert exp.teacher.mean.shape == (2, exp.teacher.width)


def test_experiment_with_two_layers_runs_every_arm_and_says_so(tiny_teacher, tmp_path, monkeypatch):
    from modformer.papers.llm_modules.experiment import LLMModulesExperiment

    monkeypatch.setenv("MODFORMER_CACHE", str(tmp_path / "cache"))
    lines = []
    cfg = tiny_config(tiny_teacher, *LAYERS)
    results = run_arms(cfg, tmp_path / "out", echo=lines.append)
    assert [r["arm"] for r in results] == ["alone", "teacher", "random_teacher", "distill", "leaky"]
    assert {n.split(".")[1] for n in results[1]["trainable"]["names"] if n.startswith("bridges.")} == {"input",
                                                                                                       "block_1"}
    assert any("(layers 1 at input, -1 at block_1)" in line for line in lines)
    assert "(layers 1 at input, -1 at block_1)" in report_of(cfg, tmp_path / "out", results)
    # Other layers make another run; the same layers written another way do not.
    one_layer = ["bridge.places=[input,block_1]", "teacher.layer=1", "arms=[alone]"]
    run = tmp_path / "out" / "alone" / "seed0"
    (run / "summary.json").unlink()  # as if stopped: what may continue it is the same config alone
    with pytest.raises(ModformerError, match="another config"):  # block_1 read -1 there
        LLMModulesExperiment(tiny_config(tiny_teacher, *one_layer), run, echo=lambda *_: None).run_one()
    LLMModulesExperiment(tiny_config(tiny_teacher, *one_layer), tmp_path / "other", echo=lambda *_: None).run_one()
    (tmp_path / "other" / "summary.json").unlink()
    again = LLMModulesExperiment(tiny_config(tiny_teacher, *one_layer[::2], "bridge.teacher_layers=[1,1]"),
                                 tmp_path / "other", echo=lambda *_: None).run_one()
    assert again["arm"] == "alone"


def test_bad_layer_choices_are_refused_before_any_work(tiny_teacher, tmp_path, monkeypatch):
    from modformer.papers.llm_modules.experiment import LLMModulesExperiment

    with pytest.raises(ConfigError, match="one teacher layer per bridge place"):
        tiny_config(tiny_teacher, "bridge.places=[input,block_1]", "bridge.teacher_layers=[1]")
    with pytest.raises(ConfigError, match="teacher.layer and bridge.teacher_layers both choose layers"):
        tiny_config(tiny_teacher, "teacher.layer=1", "bridge.places=[input,block_1]", "bridge.teacher_layers=[1,2]")
    with pytest.raises(ConfigError, match="bridge.places must be a non-empty list without repeats"):
        tiny_config(tiny_teacher, "bridge.places=[input,input]", "bridge.teacher_layers=[1,2]")
    monkeypatch.setenv("MODFORMER_CACHE", str(tmp_path / "cache"))
    for layers, message in (("[1,3]", "bridge.teacher_layers: teacher layer 3 does not exist"),
                            ("[-1,2]", "names one teacher layer twice, as -1 and 2"),
                            ):
        cfg = tiny_config(tiny_teacher, "bridge.places=[input,block_1]", f"bridge.teacher_layers={layers}")
        with pytest.raises(ModformerError, match=message):
            LLMModulesExperiment(cfg, tmp_path / "out", echo=lambda *_: None).prepare()
        assert not (tmp_path / "cache" / "teacher-states").exists()  # refused before the teacher read anything
    with pytest.raises(ModformerError, match="teacher.layer: teacher layer -4 does not exist"):
        LLMModulesExperiment(tiny_config(tiny_teacher, "teacher.layer=-4"), tmp_path / "out", echo=lambda *_: None).prepare()
