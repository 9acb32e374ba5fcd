"""Facts a pretrained teacher may know, of several kinds, for the held-out-facts test.

Each fact is a prompt and a one-word answer: "The capital of France is" -> "Paris". The
test keeps only the facts the teacher completes correctly (`known_facts`), then splits them
into training and held-out facts; a student that never sees a held-out fact can only answer
it by reading the teacher. Answers are compared as the first generated word, without
surrounding punctuation, case-sensitively.
"""

from __future__ import annotations

from dataclasses import dataclass

TEMPLATES = {
    "capital": "The capital of {} is",
    "symbol": "The chemical symbol for {} is",
    "language": "The main language spoken in {} is",
    "currency": "The currency of {} is the",
    "opposite": "The opposite of {} is",
}

_PAIRS = {
    "capital": """France Paris; Germany Berlin; Italy Rome; Spain Madrid; Portugal Lisbon; Greece Athens;
        Austria Vienna; Hungary Budapest; Poland Warsaw; Russia Moscow; Ukraine Kyiv; Norway Oslo; Sweden Stockholm;
        Finland Helsinki; Denmark Copenhagen; Ireland Dublin; Belgium Brussels; Netherlands Amsterdam;
        Switzerland Bern; Czechia Prague; Romania Bucharest; Bulgaria Sofia; Serbia Belgrade; Croatia Zagreb;
        Slovakia Bratislava; Slovenia Ljubljana; Estonia Tallinn; Latvia Riga; Lithuania Vilnius; Iceland Reykjavik;
        Japan Tokyo; China Beijing; India Delhi; Thailand Bangkok; Vietnam Hanoi; Indonesia Jakarta;
        Philippines Manila; Malaysia Kuala; Pakistan Islamabad; Bangladesh Dhaka; Nepal Kathmandu; Iran Tehran;
        Iraq Baghdad; Syria Damascus; Lebanon Beirut; Jordan Amman; Israel Jerusalem; Turkey Ankara;
        Afghanistan Kabul; Mongolia Ulaanbaatar; Egypt Cairo; Kenya Nairobi; Ethiopia Addis; Nigeria Abuja;
        Ghana Accra; Morocco Rabat; Algeria Algiers; Tunisia Tunis; Libya Tripoli; Sudan Khartoum; Uganda Kampala;
        Senegal Dakar; Zimbabwe Harare; Zambia Lusaka; Angola Luanda; Canada Ottawa; Mexico Mexico; Cuba Havana;
        Peru Lima; Chile Santiago; Argentina Buenos; Colombia Bogota; Venezuela Caracas; Ecuador Quito;
        Uruguay Montevideo; Paraguay Asuncion; Bolivia Sucre; Brazil Brasilia; Australia Canberra;
        Fiji Suva; Qatar Doha; Oman Muscat; Yemen Sanaa; Cambodia Phnom; Laos Vientiane; Myanmar Naypyidaw""",
    "symbol": """hydrogen H; helium He; lithium Li; carbon C; nitrogen N; oxygen O; fluorine F; neon Ne; sodium Na;
        magnesium Mg; aluminium Al; silicon Si; phosphorus P; sulfur S; chlorine Cl; argon Ar; potassium K;
        calcium Ca; iron Fe; copper Cu; zinc Zn; silver Ag; gold Au; mercury Hg; lead Pb; tin Sn; uranium U;
        nickel Ni; cobalt Co; platinum Pt; iodine I; bromine Br; titanium Ti; chromium Cr; manganese Mn;
        tungsten W; radon Rn; krypton Kr; xenon Xe; boron B""",
    "language": """France French; Germany German; Italy Italian; Spain Spanish; Portugal Portuguese; Brazil Portuguese;
        Mexico Spanish; Japan Japanese; China Chinese; Russia Russian; Greece Greek; Turkey Turkish; Poland Polish;
        Sweden Swedish; Norway Norwegian; Finland Finnish; Denmark Danish; Netherlands Dutch; Hungary Hungarian;
        Egypt Arabic; Iran Persian; Israel Hebrew; Korea Korean; Vietnam Vietnamese; Thailand Thai;
        Argentina Spanish; Ukraine Ukrainian; Romania Romanian; Czechia Czech; Iceland Icelandic""",
    "currency": """Japan yen; China yuan; India rupee; Russia ruble; Mexico peso; Brazil real; Poland zloty;
        Sweden krona; Norway krone; Denmark krone; Switzerland franc; Turkey lira; Thailand baht;
        Vietnam dong; Korea won; Israel shekel; Hungary forint; Ukraine hryvnia; Indonesia rupiah;
        Philippines peso; Argentina peso; Chile peso; Egypt pound; Nigeria naira; Kenya shilling""",
    "opposite": """hot cold; big small; up down; left right; day night; black white; fast slow; open closed;
        happy sad; good bad; old young; rich poor; light dark; hard soft; wet dry; early late; full empty;
        strong weak; high low; long short; thick thin; heavy light; loud quiet; win lose; true false; love hate;
        push pull; north south; east west; inside outside; before after; buy sell; give take; first last;
        war peace; friend enemy; question answer; clean dirty; sweet sour; cheap expensive""",
}


@dataclass(frozen=True)
class Fact:
    kind: str
    subject: str
    answer: str

    @property
    def prompt(self) -> str:
        return TEMPLATES[self.kind].format(self.subject)

    @property
    def text(self) -> str:
        """Prompt and answer as one training text: "The capital of France is Paris"."""
        return f"{self.prompt} {self.answer}"


def all_facts() -> list[Fact]:
    facts = []
    for kind, block in _PAIRS.items():
        for pair in block.split(";"):
            subject, answer = pair.split()
            facts.append(Fact(kind, subject, answer))
    return facts


def first_word(text: str) -> str:
    """The first whitespace-separated word of a generated continuation, without the
    punctuation around it: " Paris.\\n" -> "Paris"."""
    words = text.split()
    return words[0].strip(".,;:!?\"'()") if words else ""


def greedy_answers(model, tokenizer, prompts: list[str], *, max_new_tokens: int = 4, batch_size: int = 16) -> list[str]:
    """The first word of each prompt's greedy continuation by a Hugging Face causal LM."""
    import torch

    padding_side, tokenizer.padding_side = tokenizer.padding_side, "left"  # generation continues on the right
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    answers = []
    try:
        for start in range(0, len(prompts), batch_size):
            batch = tokenizer(prompts[start:start + batch_size], return_tensors="pt", padding=True).to(model.device)
            with torch.no_grad():
                out = model.generate(**batch, max_new_tokens=max_new_tokens, do_sample=False,
                                     pad_token_id=tokenizer.pad_token_id)
            answers += [first_word(t) for t in tokenizer.batch_decode(out[:, batch.input_ids.shape[1]:],
                                                                         skip_special_tokens=True)]
    finally:
        tokenizer.padding_side = padding_side
    return answers


def known_facts(model, tokenizer, facts: list[Fact] | None = None) -> list[Fact]:
    """The facts whose prompt the teacher completes with the right answer, greedily."""
    facts = all_facts() if facts is None else facts
    answers = greedy_answers(model, tokenizer, [f.prompt for f in facts])
    return [f for f, a in zip(facts, answers) if a == f.answer]
