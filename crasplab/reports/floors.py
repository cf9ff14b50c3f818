"""The accuracy of trivial strategies on the in-context prompts, computed exactly from each
prompt's test line (the last line of `prompt` in results.jsonl) and its expected answer.

Retrieval (` a b c d | c:`), per prompt, the expected accuracy of:
- `random token`: a token drawn uniformly from the input;
- `after an occurrence`: the token after a uniformly drawn occurrence of the query;
- `before an occurrence`: the token before it.
The strategy that defines a unique task (the token after the query, for UR; before it, for UL)
is its answer, not a floor, and is left out of that task's floor. For the non-unique tasks both
directions are trivial: neither knows which occurrence the task asks for.

Copying (`a b c : `): `random tokens`, each output token drawn uniformly from the input, right
with probability the product over positions of (copies of the expected token) / length.

A task's floor is its best trivial strategy's accuracy pooled over its prompts. A task is "at the
floor" when its accuracy's 95% Wilson interval reaches down to the floor; a gap between two tasks
both at the floor says nothing about the model's copying or retrieval, and reports mark it.
"""

from __future__ import annotations

import math

from crasp.tasks import RETRIEVAL_CODES

UNIQUE_DIRECTION = {"UR": "after an occurrence", "UL": "before an occurrence"}


def _retrieval_strategies(prompt: str, expected: str) -> dict[str, float]:
    tokens_part, query_part = prompt.rsplit("\n", 1)[-1].rsplit(" | ", 1)
    tokens, query = tokens_part.split(), query_part.rstrip(":").strip()
    occurrences = [i for i, token in enumerate(tokens) if token == query]
    if not occurrences:
        raise ValueError(f"floors: the query {query!r} does not occur in the test line {tokens_part!r}")

    def neighbour_right(step: int) -> float:
        return sum(0 <= i + step < len(tokens) and tokens[i + step] == expected for i in occurrences) / len(occurrences)

    return {
        "random token": tokens.count(expected) / len(tokens),
        "after an occurrence": neighbour_right(1),
        "before an occurrence": neighbour_right(-1),
    }


def _copying_strategies(prompt: str, expected: str) -> dict[str, float]:
    tokens = prompt.rsplit("\n", 1)[-1].rstrip(":").split()
    return {"random tokens": math.prod(tokens.count(token) / len(tokens) for token in expected.split())}


def strategy_accuracies(task: str, prompt: str, expected: str) -> dict[str, float]:
    """Each trivial strategy's probability of answering this prompt right."""
    if task in RETRIEVAL_CODES:
        strategies = _retrieval_strategies(prompt, expected)
        strategies.pop(UNIQUE_DIRECTION.get(task, ""), None)
        return strategies
    return _copying_strategies(prompt, expected)


def task_floor(task: str, records: list) -> dict:
    """The best trivial strategy over a task's prompts (`records`: each with its prompt and expected
    answer, as a PromptAnswer or a prompt item): {strategy, accuracy, strategies}."""
    totals: dict[str, float] = {}
    for record in records:
        for name, accuracy in strategy_accuracies(task, record.prompt, record.expected).items():
            totals[name] = totals.get(name, 0.0) + accuracy
    strategies = {name: total / len(records) for name, total in totals.items()}
    best = max(strategies, key=strategies.get)
    return dict(strategy=best, accuracy=strategies[best], strategies=strategies)


def at_floor(low: float, floor: float) -> bool:
    """An accuracy whose interval reaches down to the floor cannot be told from the trivial strategy."""
    return low <= floor
