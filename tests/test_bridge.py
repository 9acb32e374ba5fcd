"""The LLM-Modules bridge: gate-zero identity, causality (and the reference's leak), and
teacher-to-student alignment by character offsets."""

import pytest
import torch

from modformer.errors import ModformerError
from modformer.model.hooks import HookPoint, capture, hooked

from modformer.data.alignment import causal_visibility, leaky_visibility, offset_visibility
from modformer.model.cross_attention import EnhancedCrossAttention


def bridge(d_s=16, d_t=24, heads=4):
    torch.manual_seed(0)
    return EnhancedCrossAttention(d_s, d_t, heads, dropout=0.0, adapter_bottleneck=8).eval()


def test_gate_held_at_zero_gives_the_student_alone():
    b = bridge()
    with torch.no_grad():
        b.gate.weight.zero_()
        b.gate.bias.fill_(float("-inf"))
    h, t = torch.randn(2, 5, 16), torch.randn(2, 7, 24)
    assert torch.equal(b(h, t, causal_visibility(5, torch.tensor([7, 3]))), h)


def test_causal_bridge_never_reads_later_teacher_states_and_the_leaky_one_does():
    b = bridge()
    h, t = torch.randn(2, 6, 16), torch.randn(2, 6, 24)
    changed = t.clone()
    changed[:, 3:] = torch.randn(2, 3, 24)  # the text after position 2 changes
    lengths = torch.tensor([6, 6])
    with torch.no_grad():
        causal = b(h, t, causal_visibility(6, lengths)), b(h, changed, causal_visibility(6, lengths))
        leaky = b(h, t, leaky_visibility(6, lengths)), b(h, changed, leaky_visibility(6, lengths))
    assert torch.equal(causal[0][:, :3], causal[1][:, :3])
    assert not torch.allclose(causal[0][:, 3:], causal[1][:, 3:])
    assert not torch.allclose(leaky[0][:, :3], leaky[1][:, :3])  # position 0 already sees the answer


def test_positions_with_nothing_visible_read_no_teacher():
    b = bridge()
    h = torch.randn(1, 4, 16)
    visible = torch.tensor([[0, 0, 1, 2]])
    with torch.no_grad():
        one, two = b(h, torch.randn(1, 2, 24), visible), b(h, torch.randn(1, 2, 24), visible)
    assert torch.isfinite(one).all() and torch.equal(one[:, :2], two[:, :2])


def test_offsets_align_the_docstring_example():
    student = [[(0, 3), (3, 7)]]  # "the", " cat"
    teacher = [[(0, 2), (2, 5), (5, 7)]]  # "th", "e c", "at"
    assert offset_visibility(student, teacher, student_len=3).tolist() == [[1, 3, 3]]
    # Special tokens report (0, 0): a trailing end-of-text must not open "e c" to "the", and a
    # leading begin-of-text is visible from the start.
    assert offset_visibility(student, [teacher[0] + [(0, 0)]], 2).tolist() == [[1, 4]]
    assert offset_visibility(student, [[(0, 0)] + teacher[0]], 2).tolist() == [[2, 4]]


def test_offsets_align_two_real_tokenizers():
    """A word-level and a character-level tokenizer from Hugging Face `tokenizers` read the
    same text; every student word sees exactly the characters up to its own end."""
    tokenizers = pytest.importorskip("tokenizers")
    text = "a cat sat"
    words = tokenizers.Tokenizer(tokenizers.models.WordLevel({"a": 0, "cat": 1, "sat": 2, "[UNK]": 3}, "[UNK]"))
    words.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    chars = tokenizers.Tokenizer(tokenizers.models.WordLevel({c: i for i, c in enumerate("acst ")}, " "))
    chars.pre_tokenizer = tokenizers.pre_tokenizers.Split("", behavior="isolated")
    s, t = words.encode(text), chars.encode(text)
    assert s.offsets == [(0, 1), (2, 5), (6, 9)] and len(t.offsets) == 9
    # Word "a" ends at 1: the teacher's "a"; "cat" ends at 5: "a", " ", "c", "a", "t"; "sat": all 9.
    assert offset_visibility([s.offsets], [t.offsets], student_len=3).tolist() == [[1, 5, 9]]
    # With one tokenizer the offsets reduce to the identity: position i sees i + 1 states.
    assert torch.equal(offset_visibility([t.offsets], [t.offsets], 9), causal_visibility(9, torch.tensor([9])))


def tiny_llama(layers=3):
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(transformers.LlamaConfig(
        vocab_size=100, hidden_size=32, intermediate_size=64, num_hidden_layers=layers, num_attention_heads=2,
        num_key_value_heads=2, max_position_embeddings=64))


def test_teacher_layers_match_hugging_face_for_our_model_too():
    from modformer.interop.teacher import Teacher
    from modformer.interop.hf_llama import from_hf_llama

    hf = tiny_llama().eval()
    ours, _ = from_hf_llama(hf)
    ids = torch.randint(0, 100, (2, 9))
    for layer in (0, 1, 3, -1):
        assert torch.allclose(Teacher(hf, layer)(ids), Teacher(ours, layer)(ids), atol=1e-5), layer


def test_teacher_is_frozen_for_good():
    from modformer.interop.teacher import Teacher

    hf = tiny_llama()
    teacher = Teacher(hf.train(), layer=2)
    owner = torch.nn.ModuleDict({"teacher": teacher, "bridge": bridge(d_t=32)})
    owner.train()
    assert not teacher.model.training and not any(p.requires_grad for p in teacher.parameters())
    before = {k: v.clone() for k, v in hf.state_dict().items()}
    out = owner["bridge"](torch.randn(1, 5, 16), teacher(torch.randint(0, 100, (1, 5))), causal_visibility(5, torch.tensor([5])))
    out.sum().backward()
    assert all(p.grad is None for p in teacher.parameters())
    assert all(torch.equal(before[k], v) for k, v in hf.state_dict().items())


@pytest.mark.parametrize("dtype", ["float32", "bf16"])
def test_cache_returns_the_states_the_teacher_computes(tmp_path, dtype):
    from modformer.interop.teacher_cache import TeacherStateCache
    from modformer.interop.teacher import Teacher

    teacher = Teacher(tiny_llama().eval(), layer=2)
    g = torch.Generator().manual_seed(0)
    rows = [torch.randint(0, 100, (n,), generator=g) for n in (5, 9, 3, 7, 8)]
    calls = []
    teacher.model.register_forward_hook(lambda *a: calls.append(1))
    cache = TeacherStateCache.build(teacher, "tiny", rows, tmp_path / "cache", dtype=dtype, batch_size=2)
    assert len(calls) == 3 and len(cache) == 5
    states, lengths = cache.get([1, 2])
    assert lengths.tolist() == [9, 3] and states.shape == (2, 9, 32) and not states[1, 3:].any()
    # Exactly what the teacher computes for the same right-padded batches the cache was built from
    # (batches [0, 1], [2, 3], [4]); bf16 to its precision.
    for i, (r, batch) in enumerate(((1, (0, 1)), (2, (2, 3)))):
        ids = torch.nn.utils.rnn.pad_sequence([rows[j] for j in batch], batch_first=True)
        mask = torch.nn.utils.rnn.pad_sequence([torch.ones_like(rows[j]) for j in batch], batch_first=True)
        want = teacher(ids, mask)[batch.index(r), :len(rows[r])]
        got = states[i, :len(rows[r])]
        assert torch.equal(got, want) if dtype == "float32" else torch.allclose(got, want, rtol=1e-2, atol=1e-3)
    calls.clear()  # (the comparisons above called the teacher too)
    again = TeacherStateCache.build(teacher, "tiny", rows, tmp_path / "cache", dtype=dtype)
    assert not calls and torch.equal(again.get([1, 2])[0], states)  # read, not recomputed
    TeacherStateCache.build(teacher, "tiny", rows[:4], tmp_path / "cache", dtype=dtype, batch_size=2)
    assert len(calls) == 2  # other data: rebuilt
    assert [p.name for p in tmp_path.iterdir() if p.name != ".build.lock"] == ["cache"]
    # A truncated states file is rebuilt, and a folder that is not a cache is never deleted.
    (tmp_path / "cache" / "states.npy").write_bytes(b"")
    calls.clear()
    TeacherStateCache.build(teacher, "tiny", rows[:4], tmp_path / "cache", dtype=dtype, batch_size=2)
    assert len(calls) == 2
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep me")
    with pytest.raises(ModformerError, match="not a teacher-state cache"):
        TeacherStateCache.build(teacher, "tiny", rows, tmp_path / "mine")
    assert (tmp_path / "mine" / "notes.txt").read_text() == "keep me"


def test_teacher_layer_must_exist():
    from modformer.interop.teacher import Teacher

    with pytest.raises(ModformerError, match="teacher layer 4 does not exist"):
        Teacher(tiny_llama(layers=3), layer=4)
    Teacher(tiny_llama(layers=3), layer=-4)  # the embedding output


def bridged(places=("input", "block_1")):
    from modformer import build_model
    from modformer.model.bridged import BridgedStudent
    from modformer.model.config import ModelConfig

    student = build_model(ModelConfig(vocab_size=100, d_model=16, n_layers=2, n_heads=2, max_seq_len=32), seed=0)
    torch.manual_seed(1)
    return student, BridgedStudent(student, 32, places, n_heads=4, dropout=0.0, adapter_bottleneck=8).eval()


def test_combined_model_with_gates_at_zero_is_the_student_alone():
    student, combined = bridged()
    with torch.no_grad():
        for b in combined.bridges.values():
            b.gate.weight.zero_()
            b.gate.bias.fill_(float("-inf"))
        tokens = torch.randint(0, 100, (2, 7))
        assert torch.equal(combined(tokens, torch.randn(2, 7, 32), causal_visibility(7, torch.tensor([7, 7]))),
                           student(tokens))


def test_a_bridged_student_generates_through_its_key_value_cache_as_over_the_whole_text():
    """With the student's cache, new positions and their visibility alone give the logits
    that the whole text gives at those positions (bridges at the input and after a block)."""
    student, combined = bridged()
    tokens, states = torch.randint(0, 100, (2, 7)), torch.randn(2, 7, 32)
    visible = torch.arange(1, 8).expand(2, -1)
    with torch.no_grad():
        whole = combined(tokens, states, visible)
        cache = student.new_cache()
        first = combined(tokens[:, :4], states[:, :4], visible[:, :4], cache)
        parts = [first] + [combined(tokens[:, i:i + 1], states[:, :i + 1], visible[:, i:i + 1], cache)
                           for i in range(4, 7)]
    assert torch.allclose(torch.cat(parts, 1), whole, atol=1e-5)


def test_combined_model_is_causal_in_the_text_and_the_leaky_bridge_is_not():
    """The whole path: text -> frozen teacher -> bridge -> student logits. Changing the text
    after position 3 leaves the logits at positions 0..3 unchanged, unless the bridge leaks."""
    from modformer.interop.teacher import Teacher

    teacher = Teacher(tiny_llama(layers=2).eval(), layer=-1)
    _, combined = bridged()
    text = torch.randint(0, 100, (2, 8))
    other = text.clone()
    other[:, 4:] = (other[:, 4:] + 1) % 100
    lengths = torch.tensor([8, 8])
    with torch.no_grad():
        run = lambda ids, see: combined(ids, teacher(ids), see(8, lengths))  # noqa: E731
        assert torch.equal(run(text, causal_visibility)[:, :4], run(other, causal_visibility)[:, :4])
        assert not torch.allclose(run(text, leaky_visibility)[:, :4], run(other, leaky_visibility)[:, :4])


def test_the_student_inside_is_unchanged_and_keeps_no_state_between_calls():
    student, combined = bridged()
    tokens = torch.randint(0, 100, (1, 6))
    with torch.no_grad():
        alone = student(tokens)
        assert not torch.equal(combined(tokens, torch.randn(1, 6, 32), causal_visibility(6, torch.tensor([6]))), alone)
        assert not any(isinstance(m, HookPoint) and m.active for m in student.modules())  # the states went in as an argument
        assert torch.equal(student(tokens), alone)


def test_activation_checkpointing_recomputes_each_bridge_with_its_block():
    """Every block and the bridge after it are recomputed in backward from the call's own
    teacher states: the same loss and gradients as without checkpointing."""
    grads = []
    for recompute in (False, True):
        student, combined = bridged()
        combined.train()  # dropout 0 here: the two passes see the same function
        student.activation_checkpointing = recompute
        tokens = torch.randint(0, 100, (2, 7), generator=torch.Generator().manual_seed(0))
        states = torch.randn(2, 7, 32, generator=torch.Generator().manual_seed(1))
        loss = combined(tokens, states, causal_visibility(7, torch.tensor([7, 5]))).square().mean()
        loss.backward()
        grads.append((loss.detach(), {n: p.grad.clone() for n, p in combined.named_parameters()}))
    (loss0, g0), (loss1, g1) = grads
    assert torch.equal(loss0, loss1)
    assert g0.keys() == g1.keys() and any(n.startswith("bridges.block_1") for n in g0)
    for name in g0:
        torch.testing.assert_close(g1[name], g0[name], rtol=1e-6, atol=1e-7, msg=name)


def test_bridge_places_are_checked():
    with pytest.raises(ValueError, match="block_i"):
        bridged(places=("block_2",))


def test_two_builders_of_one_cache_take_turns_and_the_teacher_runs_once(tmp_path):
    """A sweep's workers start together: the second waits for the first's cache and reads it
    (one teacher pass in all, both see the same states), never replacing it under a reader."""
    import threading

    from modformer.interop.teacher import Teacher
    from modformer.interop.teacher_cache import TeacherStateCache

    teacher = Teacher(tiny_llama().eval(), layer=1)
    rows = [torch.randint(0, 100, (n,), generator=torch.Generator().manual_seed(n)) for n in (4, 6, 5)]
    calls, built = [], {}
    teacher.model.register_forward_hook(lambda *a: calls.append(1))

    def build(name):
        built[name] = TeacherStateCache.build(teacher, "tiny", rows, tmp_path / "cache", batch_size=3).get([0, 1, 2])

    workers = [threading.Thread(target=build, args=(n,)) for n in ("a", "b")]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert len(calls) == 1 and torch.equal(built["a"][0], built["b"][0])


def test_the_cache_key_holds_the_teachers_precision(tmp_path, monkeypatch):
    """States of a bf16 forward differ from an fp32 forward's: a cache of one is never read
    as the other (with `auto`, which one depends on the machine)."""
    import json

    from modformer.interop import teacher_cache as cache_module
    from modformer.interop.teacher_cache import TeacherStateCache
    from modformer.interop.teacher import Teacher

    teacher = Teacher(tiny_llama().eval(), layer=2)
    g = torch.Generator().manual_seed(0)
    rows = [torch.randint(0, 100, (n,), generator=g) for n in (5, 9, 3)]
    fp32 = TeacherStateCache.build(teacher, "tiny", rows, tmp_path / "b", precision="fp32")
    bf16 = TeacherStateCache.build(teacher, "tiny", rows, tmp_path / "a", precision="bf16")
    assert json.loads((tmp_path / "a" / "index.json").read_text())["precision"] == "bf16"
    assert fp32.index["fingerprint"] != bf16.index["fingerprint"]
    assert not torch.equal(bf16.get([1])[0], fp32.get([1])[0])  # the forward really ran in bf16
    # The fp32 cache's folder asked for in bf16: rebuilt, not read.
    calls = []
    teacher.model.register_forward_hook(lambda *a: calls.append(1))
    assert TeacherStateCache.build(teacher, "tiny", rows, tmp_path / "b", precision="bf16").index["precision"] == "bf16"
    assert calls
    # auto is keyed by what it resolves to on this machine.
    monkeypatch.setattr(cache_module, "resolve_precision", lambda precision, device: "bf16")
    calls.clear()
    assert TeacherStateCache.build(teacher, "tiny", rows, tmp_path / "a", precision="auto").index == bf16.index
    assert not calls


def test_the_cache_key_holds_the_layer_and_the_kept_states(tmp_path):
    """Two caches that differ only in the teacher layer read, or only in how many states of each
    row are kept, have different keys: a folder holding one is rebuilt for the other, never read
    as it (the states of layer 1 are not layer 2's)."""
    from modformer.interop.teacher_cache import TeacherStateCache, fingerprint
    from modformer.interop.teacher import Teacher

    g = torch.Generator().manual_seed(0)
    rows = [torch.randint(0, 100, (n,), generator=g) for n in (5, 9, 3)]
    keys = {fingerprint("tiny", 1, "float32", rows), fingerprint("tiny", 2, "float32", rows),
            fingerprint("tiny", -1, "float32", rows), fingerprint("tiny", 1, "float32", rows, [None, 4, None]),
            fingerprint("tiny", 1, "float32", rows, [None, 3, None])}
    assert len(keys) == 5

    model = tiny_llama().eval()
    calls = []
    model.register_forward_hook(lambda *a: calls.append(1))
    one = TeacherStateCache.build(Teacher(model, layer=1), "tiny", rows, tmp_path / "shared")
    assert calls and one.index["layer"] == 1
    calls.clear()
    two = TeacherStateCache.build(Teacher(model, layer=2), "tiny", rows, tmp_path / "shared")
    assert calls and two.index["layer"] == 2  # rebuilt, not read
    alone = TeacherStateCache.build(Teacher(model, layer=2), "tiny", rows, tmp_path / "alone")
    assert torch.equal(two.get([1])[0], alone.get([1])[0]) and not torch.allclose(two.get([1])[0], one.get([1])[0])
    calls.clear()
    tail = TeacherStateCache.build(Teacher(model, layer=2), "tiny", rows, tmp_path / "shared", keep=[None, 4, None])
    assert calls and tail.get([1])[1].tolist() == [4]  # rebuilt with the kept tail only
    assert torch.equal(tail.get([1])[0][0], alone.get([1])[0][0, -4:])


def test_the_gate_is_a_hook_point_read_and_set_like_any_activation():
    """Reading the gate gives values in (0, 1); setting it to 0 through `hooked` makes the
    combined model the student alone, as a gate held at zero does."""
    student, combined = bridged()
    tokens, states = torch.randint(0, 100, (2, 7)), torch.randn(2, 7, 32)
    see = causal_visibility(7, torch.tensor([7, 7]))
    with torch.no_grad():
        with capture(combined, "bridges.*.gate_value") as gates:
            combined(tokens, states, see)
        assert set(gates) == {"bridges.input.gate_value", "bridges.block_1.gate_value"}
        assert all(g.shape == (2, 7, 16) and 0 < g.min() and g.max() < 1 for g in gates.values())
        with hooked(combined, {"bridges.*.gate_value": lambda _name, g: torch.zeros_like(g)}):
            shut = combined(tokens, states, see)
        assert torch.equal(shut, student(tokens))


def test_a_bridge_runs_at_the_hook_point_of_its_place():
    """The bridge at block_1 reads the stream at `blocks.1.resid_post` (what the student alone
    has there) and what it returns goes on to the final norm and head."""
    student, combined = bridged(places=("block_1",))
    tokens, states = torch.randint(0, 100, (1, 5)), torch.randn(1, 5, 32)
    bridge, seen = combined.bridges["block_1"], {}
    original = bridge.forward
    bridge.forward = lambda h, *rest: seen.setdefault("h", h) * 0 + original(h, *rest)
    with torch.no_grad():
        with capture(student, "blocks.1.resid_post") as alone:
            student(tokens)
        out = combined(tokens, states, causal_visibility(5, torch.tensor([5])))
        assert torch.equal(seen["h"], alone["blocks.1.resid_post"])
        stream = original(seen["h"], states, causal_visibility(5, torch.tensor([5])))
        assert torch.equal(out, student.lm_head(student.norm(stream)))


def test_a_hooked_gate_is_recomputed_with_its_block_after_the_with_block_ends():
    """The gate's hook point is the bridge's, not the student block's; the bridge runs inside
    the block's recomputation, so backward after the `hooked` block must still see the hook."""
    grads = []
    for recompute in (False, True):
        student, combined = bridged()
        combined.train()
        student.activation_checkpointing = recompute
        tokens = torch.randint(0, 100, (2, 7), generator=torch.Generator().manual_seed(0))
        states = torch.randn(2, 7, 32, generator=torch.Generator().manual_seed(1))
        with hooked(combined, {"bridges.block_1.gate_value": lambda _name, g: 0.5 * g}):
            loss = combined(tokens, states, causal_visibility(7, torch.tensor([7, 5]))).square().mean()
        loss.backward()
        grads.append({n: p.grad.clone() for n, p in combined.named_parameters()})
    for name in grads[0]:
        torch.testing.assert_close(grads[1][name], grads[0][name], rtol=1e-6, atol=1e-7, msg=name)
