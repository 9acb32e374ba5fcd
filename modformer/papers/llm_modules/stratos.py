"""The LLM Modules paper's data as a task: Bespoke-Stratos problems, held out by problem.

Bespoke-Stratos-17k rows hold a conversation: the user's problem, then the assistant's
reasoning and solution (math, science and puzzles end in a `\\boxed{...}` final answer;
coding problems end in code). The data layer reads a conversation as one document,
"User: ...\\n\\nAssistant: ..." (`modformer.data.sources.as_text`); each becomes an `Item`
whose prompt is the problem up to "Assistant:" and whose completion is the reply. Worked
example:

    row       {"conversations": [{"from": "user", "value": "What is $2+3$?"},
                                 {"from": "assistant", "value": "... so the sum is $\\boxed{5}$."}]}
    prompt    "User: What is $2+3$?\\n\\nAssistant:"
    completion " ... so the sum is $\\boxed{5}$."
    expected  "5"  (the last boxed answer; "" for a reply without one, which exact match skips)

The group of an item is its problem's text, so a problem asked twice is held out whole.
"""

from __future__ import annotations

from ...errors import ModformerError
from .texts import Item

USER, ASSISTANT = "User: ", "\n\nAssistant: "


def boxed_answer(text: str) -> str:
    """The content of the last `\\boxed{...}` in `text`, its inner braces kept, without
    surrounding spaces ("" if there is none or it is not closed):
    boxed_answer("so $\\boxed{\\frac{1}{2}}$.") == "\\frac{1}{2}"."""
    start = text.rfind("\\boxed{")
    if start < 0:
        return ""
    depth, begin = 0, start + len("\\boxed{")
    for i in range(begin, len(text)):
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        if depth < 0:
            return text[begin:i].strip()
    return ""  # cut off before its closing brace (a generation that stopped early)


def stratos_items(source: str, column: str = "conversations") -> list[Item]:
    """Every conversation of a data source (`bespoke_stratos`, or a local JSONL/Parquet file
    of rows like it) whose first turn is the user's and second the assistant's, as items,
    sorted by text (a reproducible order whatever the source's)."""
    from ...data.open import open_source
    from ...data.sources import Columns

    try:
        documents = open_source(source, Columns(text=column)).documents()
    except ModformerError as e:
        raise ModformerError(f"data.task_source={source}: {e}") from None
    items = []
    for text in sorted({d.text for d in documents}):
        if not text.startswith(USER) or ASSISTANT not in text:
            continue  # not a problem followed by its answer: nothing to hold out and score
        problem, reply = text[len(USER):].split(ASSISTANT, 1)
        if problem.strip() and reply.strip():
            items.append(Item(f"{USER}{problem}{ASSISTANT.rstrip()}", " " + reply.strip(), boxed_answer(reply),
                              group=problem))
    if len(items) < 2:
        raise ModformerError(f"data.task_source={source} holds {len(items)} conversations of a user's problem and the "
                             f"assistant's reply (column '{column}'); the stratos task needs at least 2")
    return items
