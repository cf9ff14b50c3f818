"""What a model trained on a task predicted not to generalize learned: its agreement, string by
string, with each bounded program of the discrimination check's family that is exact on the
training lengths (crasp.approximations), and with the task itself.

A verdict "fails" says the model is wrong on a test bin; the theory's reason says more: the model
learned one of the bounded programs that agree with the task up to length L and part from it
beyond. Two strings agree when the model's answer under teacher forcing and the program's (fed
the same right answer so far) are the same token at every answer step, the final <eos> included;
agreement with the task is the model's accuracy. A model that agrees with no member at least as
often as the verdict threshold behaves "like none of them": its failure is real, and formal.
"""

from __future__ import annotations

import numpy as np

from crasp.intervals import wilson_interval
from crasp.tasks import TASK_CODES

SHOWN_MEMBERS = 3  # the members a seed's row names, most agreeing first
NONE_OF_THEM = "like none of them"


def agreement(model_answers_NxA: np.ndarray, program_answers_NxA: np.ndarray, answered_NxA: np.ndarray) -> np.ndarray:
    """agree_N: the two answer the same token at every answer step (`answered_NxA` marks the
    steps each string has)."""
    return ((model_answers_NxA == program_answers_NxA) | ~answered_NxA).all(axis=1)


def agreement_cell(agree_N: np.ndarray) -> dict:
    agreeing, total = int(np.sum(agree_N)), len(agree_N)
    low, high = wilson_interval(agreeing, total)
    return dict(agreeing=agreeing, total=total, low=round(low, 4), high=round(high, 4))


def _share(cell: dict) -> float:
    return cell["agreeing"] / cell["total"] if cell["total"] else 0.0


def behaviour(members: dict[str, dict], threshold: float) -> str:
    """The member the seed behaves like on a bin: the most agreeing one whose agreement reaches
    the threshold, else NONE_OF_THEM."""
    if not members:
        return NONE_OF_THEM + " (no member exact on training)"
    name, cell = max(members.items(), key=lambda item: _share(item[1]))
    share = _share(cell)
    if share >= threshold:
        return f"like {name} ({share:.3f})"
    return f"{NONE_OF_THEM} (closest: {name}, {share:.3f})"


def learned_markdown(summary: dict) -> str:
    """The tables of what_learned.json: per task and fitted seed, each test bin's accuracy, the
    members it agrees with most, and what it behaves like."""
    threshold = summary["threshold"]
    lines = [
        "# What each model learned\n",
        "For every fitted seed of a task predicted not to generalize: on each test bin, the share of "
        "strings on which the model's answer (teacher forced) is the task's (its accuracy) and the "
        "answer of each bounded program exact on the training lengths (the discrimination check's "
        f"family), the {SHOWN_MEMBERS} most agreeing shown. A seed behaves like a program where they "
        f"agree on at least {threshold:g} of the strings; otherwise like none of them. Each share: "
        "value [95% Wilson interval].\n",
    ]
    for task, entry in sorted(summary["tasks"].items(), key=lambda item: TASK_CODES.index(item[0])):
        lines.append(f"## {task} (predicted: {entry['predicted']})\n")
        lines += ["| seed | bin | accuracy | most agreeing members | behaves |", "|---|---|---|---|---|"]
        for seed in entry["seeds"]:
            for b in seed["bins"]:
                ranked = sorted(b["members"].items(), key=lambda item: -_share(item[1]))[:SHOWN_MEMBERS]
                shown = "; ".join(f"{name}: {_cell_text(cell)}" for name, cell in ranked) or "-"
                lines.append(
                    f"| {seed['seed']} | {b['bin']} | {_cell_text(b['task'])} | {shown} | "
                    f"{behaviour(b['members'], threshold)} |"
                )
            if seed.get("shape_at_training") is not None:
                lines.append(
                    f"| {seed['seed']} | training lengths, test shape | {_cell_text(seed['shape_at_training'])} | | |"
                )
        if not entry["seeds"]:
            lines.append("| (no fitted seed) | | | | |")
        lines.append("")
    return "\n".join(lines) + "\n"


def _cell_text(cell: dict) -> str:
    return f"{_share(cell):.3f} [{cell['low']:.3f}, {cell['high']:.3f}]"
