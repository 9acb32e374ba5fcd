"""Facts for the held-out-facts test, and (slow) what the packaged teacher knows."""

import pytest

from modformer.data.facts import TEMPLATES, Fact, all_facts, first_word


def test_every_fact_is_well_formed_and_unique():
    facts = all_facts()
    assert len(facts) > 200 and {f.kind for f in facts} == set(TEMPLATES)
    assert len({(f.kind, f.subject) for f in facts}) == len(facts)
    assert Fact("capital", "France", "Paris").text == "The capital of France is Paris"


@pytest.mark.parametrize("text, word", [(" Paris.\n", "Paris"), (' "Au" (gold)', "Au"), ("", ""), ("\n Berlin, the", "Berlin")])
def test_first_word(text, word):
    assert first_word(text) == word


@pytest.mark.slow
def test_packaged_teacher_knows_some_facts():
    """SmolLM2-135M-Instruct (MODFORMER_TEACHER=1 bash scripts/setup.sh): measured here, it
    completes 125 of the 221 facts; Germany's capital is among them."""
    from modformer.data.facts import known_facts
    from modformer.interop.packaged import load_teacher

    pytest.importorskip("gguf")
    model, tokenizer = load_teacher()
    known = known_facts(model, tokenizer)
    assert Fact("capital", "Germany", "Berlin") in known and len(known) >= 100
