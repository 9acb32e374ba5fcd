"""The LLM-Modules bridge: gate-zero identity, causality (and the reference's leak), and
teacher-to-student alignment by character offsets."""

import pytest
import torch

from modformer.bridge import EnhancedCrossAttention, causal_visibility, leaky_visibility, offset_visibility


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
