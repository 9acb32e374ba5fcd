"""The arms of an LLM-Modules experiment: what the student reads, and what it learns from.

Every arm trains the same student on the same batches from the same seed; they differ only
in the fields below. The random-teacher arm is the reviewer's decisive control: the bridge
is there, with the same shape and scale of input, but the input carries no knowledge (each
text's states are Gaussian with the real states' per-dimension mean and std, fixed per text
and seed), so what it gains over the student alone is what a bridge gives without a teacher.
Adding an arm is one line here.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Arm:
    reads: str | None  # the bridge's input: "teacher", "random" (matched noise) or None (no bridge)
    visibility: str = "causal"  # "causal", or "leaky": every position sees the whole text (the reference's bug)
    distill: bool = False  # add KL to the teacher's next-token distribution to the loss
    scratch: bool = False  # a pretrained student starts from fresh weights instead of its trained ones
    description: str = ""

    @property
    def bridged(self) -> bool:
        return self.reads is not None


ARMS: dict[str, Arm] = {
    "alone": Arm(None, description="the student alone (fine-tuned, when the student is pretrained)"),
    "scratch": Arm(None, scratch=True, description="the student alone from fresh weights (for a pretrained student)"),
    "teacher": Arm("teacher", description="the student reading the real teacher through causal bridges"),
    "random_teacher": Arm("random", description="the same bridges reading noise of the teacher states' shape and "
                                                "per-dimension scale"),
    "distill": Arm(None, distill=True, description="the student alone, distilled from the teacher's logits"),
    "leaky": Arm("teacher", visibility="leaky", description="the reference's bridge: each position sees the "
                                                            "teacher's states of the whole text, answer included"),
}
