"""The mechanism report (experiments/mechanism.py), computed from a run folder's files only.

Inputs: `config.json` (the model, the cells, the k grid, the ablated scores, the matched control
sets), `scores.json` (per score: mean, std and per-period means of every (layer, head)) and
`ablations.jsonl` (one record per ablation, k, draw and task: the heads removed and, per cell,
correct of total and, in runs since matched controls, each string's verdict).
Outputs, written atomically into the same folder: `summary.json`, `report.md`, `scores.png`
(a layer x head map per score) and `ablations.png` (accuracy against k per cell).

Intervals are 95%: Wilson for an accuracy, Newcombe's hybrid score interval for a change of
accuracy against the unablated model (it treats the two as independent samples; the prompts are
the same, so it is conservative). Random controls are pooled over their draws. The paper's claims
are judged on each task's counts pooled over its cells, at each k:
  a drop claim holds when the change's interval lies below 0 and below the random control's
  accuracy (its difference interval too); a task the unablated model never answers cannot drop.
After correction (reports.statistics): each testable judgement gets the larger of the two
p-values (against no ablation, against random heads; both must hold, an intersection-union
test), and Holm corrects them over the report's family, every testable claim judgement at every
k. Runs before matched controls kept counts, not each string's verdict, so those tests are
unpaired (Newcombe's, inverted).

Runs with matched controls (crasplab.incontext.controls) keep every string's verdict and get one
more section: every ablated score (induction, anti-induction, previous-token, first-occurrence)
on every task at every k, against no ablation and against each control set, paired on the same
strings. A change's interval is a paired bootstrap of the per-string differences (a control's
draws averaged per string), its p-value McNemar's exact test (against a control set, the largest
over its draws: the drop must beat each). A judgement takes the smallest drop and the largest
p-value over its comparisons (intersection-union), and Holm corrects them over every testable
judgement of the section; the paper's claims are read from the same judgements.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import numpy as np

from crasp.prediction import predict, verified_witnesses
from crasp.tasks import LEFT_OR_BACKWARD
from crasplab.models.analysis import SCORE_MEANINGS, SCORES, top_heads
from crasplab.reports.figures import pyplot, save_figure, set_title
from crasplab.records.files import ResultFileError, read_jsonl, write_summary_and_report
from crasp.intervals import wilson_interval
from crasplab.reports.intervals import difference_interval
from crasplab.reports.statistics import (
    ALPHA,
    BOOTSTRAP_DRAWS,
    BOOTSTRAP_SEED,
    correct_family,
    difference_p_value,
    mcnemar_exact,
    p_value_text,
)
from crasplab.incontext.settings import MechanismSettings
from crasplab.records.run_folder import read_run_settings

EXPERIMENT = "experiments/mechanism.py"
SCORES_FILE = "scores.json"
ABLATIONS_FILE = "ablations.jsonl"
SCORES_FIGURE, ABLATIONS_FIGURE = "scores.png", "ablations.png"
# What config.json records about the model beside the settings.
REPORTED_FACTS = ("kind", "position", "n_layers", "n_heads", "cells")
TOP = 5  # heads listed per score

# The paper's section 4.4: (score whose top heads are removed, task, what removing them does).
DROP_CLAIMS = (("induction", "UF"), ("induction", "UR"), ("anti_induction", "UB"), ("anti_induction", "UL"))
SPARE_CLAIMS = (("anti_induction", "UF"),)
FORWARD, BACKWARD = "UF", "UB"
# How the C-RASP[local] witnesses (crasp/witnesses.py) find the next token s from the current one t.
FORWARD_READ = "#[j <= i] (Q(s) and prev[t]) >= 1"
BACKWARD_READ = "#[j <= i] (Q(t) and prev[s]) >= 1"
INTERPRETER_TEXT = (
    "The C-RASP[local] witnesses read the previous token through `prev[t] := #[j <= i, j = i - 1] Q(t) >= 1`, which a "
    "previous-token head computes at every position. Forward tasks (UF, UR) then look for the position whose "
    f"previous token is the current one, `{FORWARD_READ}`: one attention to e + 1, an induction head. Backward tasks "
    f"(UB, UL) read the previous token at the current token's earlier occurrence, `{BACKWARD_READ}`: one attention "
    "to e itself (a first-occurrence head) composed with a previous-token head, or one attention to e - 1 (an "
    "anti-induction head). The interpreter's prediction is beside each task; a C-RASP[] witness (nested counts) "
    "needs no previous-token relation at all.\n"
)


def read_scores(run_dir: Path) -> dict:
    """scores.json: {score: {mean, std, period_means}} for every score."""
    path = Path(run_dir) / SCORES_FILE
    if not path.is_file():
        raise ResultFileError(
            f"{path.parent} has no {SCORES_FILE}: its run stopped before the scores were measured; "
            f"run the same {EXPERIMENT} command again to continue it"
        )
    try:
        scores = json.loads(path.read_text())
    except (OSError, ValueError) as error:
        raise ResultFileError(
            f"{path}: unreadable ({error}); delete it and run the same command again to measure the scores anew"
        ) from None
    if not isinstance(scores, dict) or not all(
        isinstance(scores.get(name), dict) and "mean" in scores[name] for name in SCORES
    ):
        raise ResultFileError(
            f"{path} does not hold the scores {', '.join(SCORES)} as {EXPERIMENT} writes them; "
            "delete it and run the same command again"
        )
    return scores


def _counts(records: list[dict]) -> dict[str, tuple[int, int]]:
    """{cell label: (correct, total)} summed over `records`."""
    correct, total = defaultdict(int), defaultdict(int)
    for record in records:
        for cell in record["cells"]:
            correct[cell["cell"]] += cell["correct"]
            total[cell["cell"]] += cell["total"]
    return {label: (correct[label], total[label]) for label in total}


def _pooled(counts: dict[str, tuple[int, int]]) -> tuple[int, int] | None:
    return (sum(c for c, _ in counts.values()), sum(t for _, t in counts.values())) if counts else None


def _accuracy(correct: int, total: int) -> dict:
    low, high = wilson_interval(correct, total)
    return dict(correct=correct, total=total, accuracy=correct / total, low=low, high=high)


def _change(counts: tuple[int, int], base: tuple[int, int]) -> dict:
    difference, low, high = difference_interval(*counts, *base)
    return dict(change=difference, change_low=low, change_high=high)


def _drawn(name: str, k: int, draws: int, matches: str | None = None) -> list[tuple]:
    """The conditions of a control: each draw, and the draws pooled where there are several."""
    return [(name, k, draw, matches) for draw in range(draws)] + [(name, k, "pooled", matches)] * (draws > 1)


def _rows(config: dict, records: list[dict]) -> list[dict]:
    """One row per condition and task: no ablation, each score's top k, each random draw and the
    draws pooled, then each matched control's; per cell the accuracy and its change against no
    ablation."""
    conditions = [("none", 0, None, None)]
    for k in config["k"]:
        conditions += [(name, k, None, None) for name in config["ablate"]]
        conditions += _drawn("random", k, config["draws"])
        for score in config["ablate"]:
            for control in config["controls"]:
                conditions += _drawn(control, k, config["draws"], score)
    rows = []
    for task in dict.fromkeys(task for task, _ in config["cells"]):
        task_records = [r for r in records if r["task"] == task]
        base = _counts([r for r in task_records if r["ablation"] == "none"])
        for name, k, draw, matches in conditions:
            chosen = [
                r
                for r in task_records
                if (r["ablation"], r["k"], r.get("matches")) == (name, k, matches)
                and draw in (None, "pooled", r["draw"])
            ]
            if not chosen:
                continue
            counts = _counts(chosen)
            row = dict(
                task=task,
                ablation=name,
                k=k,
                draw=draw,
                heads=[r["heads"] for r in chosen],
                eligible=chosen[0].get("eligible"),
                skipped=any(r["heads"] is None for r in chosen),
                cells={},
            )
            if matches is not None:
                row["matches"] = matches
            for label, cell_counts in counts.items():
                row["cells"][label] = _accuracy(*cell_counts)
                if label in base and name != "none":
                    row["cells"][label].update(_change(cell_counts, base[label]))
            pooled, pooled_base = _pooled(counts), _pooled(base)
            if pooled:
                row["pooled"] = _accuracy(*pooled)
                if pooled_base and name != "none":
                    row["pooled"].update(_change(pooled, pooled_base))
            rows.append(row)
    return rows


def _find(rows: list[dict], task: str, ablation: str, k: int) -> dict | None:
    """The row of one condition with counts; for random heads, the draws pooled when there are several."""
    found = [
        r
        for r in rows
        if r["task"] == task and r["ablation"] == ablation and r["k"] == k and "pooled" in r and "matches" not in r
    ]
    pooled = [r for r in found if r["draw"] == "pooled"]
    return (pooled or found or [None])[0]


def _judge_drop(rows: list[dict], score: str, task: str, k: int) -> dict | None:
    base, targeted, control = (
        _find(rows, task, name, k if name != "none" else 0) for name in ("none", score, "random")
    )
    if base is None or targeted is None:
        return None
    judgement = dict(
        score=score,
        task=task,
        k=k,
        heads=targeted["heads"][0],
        base=base["pooled"],
        ablated=targeted["pooled"],
        random=control["pooled"] if control else None,
    )
    ablated = targeted["pooled"]
    if base["pooled"]["correct"] > 0:
        # Intersection-union: the drop must hold against no ablation and against random heads, so
        # the judgement's estimate is the smaller drop and its p-value the larger.
        against = [(base["pooled"], ablated["change"])]
        if control is not None:
            against.append((control["pooled"], ablated["accuracy"] - control["pooled"]["accuracy"]))
        judgement["gap"] = max(gap for _, gap in against)
        judgement["p"] = max(
            difference_p_value(ablated["correct"], ablated["total"], other["correct"], other["total"])
            for other, _ in against
        )
    if base["pooled"]["correct"] == 0:
        judgement["verdict"] = "untestable"
    elif ablated["change_high"] < 0:
        versus = (
            None
            if control is None
            else difference_interval(
                ablated["correct"], ablated["total"], control["pooled"]["correct"], control["pooled"]["total"]
            )
        )
        judgement["versus_random"] = versus
        judgement["verdict"] = (
            "drop, no control" if versus is None else "drop" if versus[2] < 0 else "drop, no more than random"
        )
    elif ablated["change_low"] > 0:
        judgement["verdict"] = "rise"
    else:
        judgement["verdict"] = "no change resolved"
    return judgement


def _direction(rows: list[dict], k: int) -> dict | None:
    forward, backward = _find(rows, FORWARD, "induction", k), _find(rows, BACKWARD, "induction", k)
    backward_base = _find(rows, BACKWARD, "none", 0)
    if forward is None or backward is None or backward_base is None:
        return None
    if backward_base["pooled"]["correct"] == 0:
        verdict = "untestable"
    elif forward["pooled"]["change_high"] < backward["pooled"]["change_low"]:
        verdict = "forward more"
    elif backward["pooled"]["change_high"] < forward["pooled"]["change_low"]:
        verdict = "backward more"
    else:
        verdict = "not resolved"
    return dict(k=k, forward=forward["pooled"], backward=backward["pooled"], verdict=verdict)


def _verdicts(records: list[dict]) -> dict[tuple, list[np.ndarray]]:
    """(ablation, k, task, matched score) -> each draw's string verdicts (its cells in order), for
    the records that kept them (runs since matched controls; a skipped control has none)."""
    verdicts = defaultdict(list)
    for record in sorted(records, key=lambda r: r["draw"]):
        if record["cells"] and all("exact" in cell for cell in record["cells"]):
            key = (record["ablation"], record["k"], record["task"], record.get("matches"))
            verdicts[key].append(np.array([v == "1" for cell in record["cells"] for v in cell["exact"]]))
    return verdicts


def _paired(ablated_N: np.ndarray, others: list[np.ndarray]) -> dict:
    """The ablated strings' accuracy minus another condition's on the same strings (its draws
    averaged string by string): the change, the 95% percentile interval of a bootstrap that
    resamples strings, and McNemar's exact p-value, the largest over the draws."""
    differences_N = ablated_N.astype(float) - np.mean(others, axis=0)
    n = len(differences_N)
    rows_DxN = np.random.default_rng(BOOTSTRAP_SEED).integers(0, n, (BOOTSTRAP_DRAWS, n))
    low, high = np.quantile(differences_N[rows_DxN].mean(axis=1), [ALPHA / 2, 1 - ALPHA / 2])
    p = max(mcnemar_exact(int(np.sum(ablated_N & ~o)), int(np.sum(~ablated_N & o))) for o in others)
    return dict(change=float(differences_N.mean()), change_low=float(low), change_high=float(high), p=p)


def _matched_judgements(config: dict, records: list[dict], scores: dict) -> list[dict]:
    """Every ablated score on every task at every k, against no ablation and each control set
    ("random", then the matched ones), paired on the same strings; Holm over the testable ones."""
    verdicts = _verdicts(records)
    judgements = []
    for task in dict.fromkeys(task for task, _ in config["cells"]):
        base = verdicts.get(("none", 0, task, None))
        for score in config["ablate"]:
            for k in config["k"]:
                ablated = verdicts.get((score, k, task, None))
                if not base or not ablated:
                    continue
                comparisons = {"none": _paired(ablated[0], base)}
                for name in ("random", *config["controls"]):
                    draws = verdicts.get((name, k, task, None if name == "random" else score))
                    if draws:  # none where too few heads were left to draw from
                        comparisons[name] = _paired(ablated[0], draws)
                heads = next(r["heads"] for r in records if (r["ablation"], r["k"], r["task"]) == (score, k, task))
                judgement = dict(
                    task=task,
                    score=score,
                    k=k,
                    heads=heads,
                    heads_score=float(np.mean([scores[score]["mean"][layer][head] for layer, head in heads])),
                    base=_accuracy(int(base[0].sum()), len(base[0])),
                    ablated=_accuracy(int(ablated[0].sum()), len(ablated[0])),
                    comparisons=comparisons,
                )
                if base[0].any():  # a model that answers nothing has nothing to lose
                    judgement["gap"] = max(c["change"] for c in comparisons.values())
                    judgement["p"] = max(c["p"] for c in comparisons.values())
                judgements.append(judgement)
    correct_family([j for j in judgements if "p" in j])
    return judgements


def summarize(run_dir: Path) -> dict:
    run_dir = Path(run_dir)
    config = read_run_settings(run_dir, MechanismSettings, EXPERIMENT, facts=REPORTED_FACTS).written
    scores = read_scores(run_dir)
    records = read_jsonl(run_dir / ABLATIONS_FILE)
    rows = _rows(config, records)
    tasks = list(dict.fromkeys(task for task, _ in config["cells"]))
    top = {
        name: [
            dict(layer=layer, head=head, mean=scores[name]["mean"][layer][head], std=scores[name]["std"][layer][head])
            for layer, head in top_heads(np.array(scores[name]["mean"]), TOP)
        ]
        for name in SCORES
    }
    # Runs with matched controls read the claims from the paired judgements of every ablation.
    matched = _matched_judgements(config, records, scores) if config["controls"] else None
    claims = [
        j
        for score, task in DROP_CLAIMS + SPARE_CLAIMS
        if score in config["ablate"] and task in tasks and matched is None
        for k in config["k"]
        for j in [_judge_drop(rows, score, task, k)]
        if j is not None
    ]
    correct_family([j for j in claims if "p" in j])
    for judgement in claims:
        judgement["claim"] = "spares" if (judgement["score"], judgement["task"]) in SPARE_CLAIMS else "drops"
        # A score's top heads may score near nothing: the model then has no such head to remove.
        judgement["heads_score"] = float(
            np.mean([scores[judgement["score"]]["mean"][layer][head] for layer, head in judgement["heads"]])
        )
    none_records = [r for r in records if r["ablation"] == "none"]
    per_k = len(config["ablate"]) * (1 + len(config["controls"]) * config["draws"]) + config["draws"]
    planned = len(tasks) * (1 + len(config["k"]) * per_k)
    summary = dict(
        config=config,
        top_heads=top,
        rows=rows,
        claims=claims,
        direction=[d for k in config["k"] for d in [_direction(rows, k)] if d is not None]
        if "induction" in config["ablate"]
        else [],
        greedy=dict(
            checked=sum(c.get("greedy_checked", 0) for r in none_records for c in r["cells"]),
            disagreements=sum(c.get("greedy_disagreements", 0) for r in none_records for c in r["cells"]),
        ),
        interpreter=_interpreter(tasks, config["position"]),
        planned=planned,
        evaluated=len(records),
        seconds=sum(r["seconds"] for r in records),
    )
    if matched is not None:  # runs before matched controls have no such section
        summary["matched"] = matched
    return summary


def _interpreter(tasks: list[str], position: str) -> dict:
    """Per task: the interpreter's prediction, its direction, and whether a verified witness uses
    the previous-token relation (C-RASP[local]) and whether one does without positions."""
    out = {}
    for task in tasks:
        fragments = [w.fragment for w in verified_witnesses(task)]
        out[task] = dict(
            prediction=predict(task, position).label,
            backward=task in LEFT_OR_BACKWARD,
            local_witness=any(f.local for f in fragments),
            witness_without_positions=any(not f.positional_operations for f in fragments),
        )
    return out


VERDICTS = {
    "untestable": "untestable: the unablated model answers none",
    "drop": "drops, beyond random heads",
    "drop, no control": "drops, but there is no random control to compare with",
    "drop, no more than random": "drops, but no more than random heads",
    "rise": "rises",
    "no change resolved": "no change resolved",
}


def _interval(entry: dict) -> str:
    return f"{entry['accuracy']:.2f} [{entry['low']:.2f}, {entry['high']:.2f}]"


def _signed(change: float, low: float, high: float) -> str:
    return f"{change:+.2f} [{low:+.2f}, {high:+.2f}]"


def _change_text(entry: dict) -> str:
    return _signed(entry["change"], entry["change_low"], entry["change_high"]) if "change" in entry else ""


def _condition(row: dict) -> str:
    if row["ablation"] == "none":
        return "none"
    draw = "" if row["draw"] is None else (" (draws pooled)" if row["draw"] == "pooled" else f" draw {row['draw']}")
    matched = f" of {row['matches']}" if "matches" in row else ""
    return f"{row['ablation']}{matched} k={row['k']}{draw}"


def _heads_text(heads: list[list[int]] | None) -> str:
    return "not enough heads left" if heads is None else " ".join(f"{layer}.{head}" for layer, head in heads) or "-"


def _judgement_text(j: dict) -> str:
    ablated, base = j["ablated"], j["base"]
    text = (
        f"k={j['k']} (heads {_heads_text(j['heads'])}, mean {j['score']} score {j['heads_score']:.2f}): "
        f"{base['accuracy']:.2f} -> {ablated['accuracy']:.2f}, change {_change_text(ablated)}"
    )
    if j["random"] is not None:
        text += f" (random heads: {_change_text(j['random'])})"
    verdict = VERDICTS[j["verdict"]]
    if "p_holm" not in j:
        return f"{text}: **{verdict}**"
    return f"{text}: **{verdict}**; Holm p {p_value_text(j['p_holm'])}: {_corrected(j)}"


def _corrected(j: dict) -> str:
    return "drops beyond random heads after correction" if _drops_after_correction(j) else "no drop after correction"


def _drops_after_correction(j: dict) -> bool:
    return j.get("corrected") == "below 0 after correction"


def claim_statements(summary: dict) -> list[str]:
    """One line per claim of the paper: its judgement at each k, and whether it holds."""
    lines = []
    for score, task in DROP_CLAIMS + SPARE_CLAIMS:
        judgements = [j for j in summary["claims"] if j["score"] == score and j["task"] == task]
        if not judgements:
            continue
        spares = judgements[0]["claim"] == "spares"
        name = score.replace("_", "-")
        claim = f"removing {name} heads leaves {task} alone" if spares else f"removing {name} heads drops {task}"
        holding = [
            j["k"] for j in judgements if j["verdict"] != "untestable" and (not _drops_after_correction(j)) == spares
        ]
        if all(j["verdict"] == "untestable" for j in judgements):
            verdict = "cannot be tested on this model"
        elif holding and spares:
            # No drop resolved is the absence of evidence against sparing, not evidence for it.
            verdict = f"no drop survives correction at k = {', '.join(map(str, holding))}"
        elif holding:
            verdict = f"holds after correction at k = {', '.join(map(str, holding))}"
        else:
            verdict = "does not hold after correction at any k of the grid"
        lines.append(f"- **{task}**, {claim}: {verdict}. " + "; ".join(_judgement_text(j) for j in judgements) + ".")
    return lines


MATCHED_READINGS = {
    "below 0 after correction": "drops beyond no ablation and every control, after correction",
    "above 0 after correction": "rises above no ablation and every control, after correction",
    "not resolved after correction": "not resolved after correction",
}


def _matched_reading(j: dict) -> str:
    return MATCHED_READINGS[j["corrected"]] if "corrected" in j else "untestable: the unablated model answers none"


def _paired_text(entry: dict) -> str:
    return f"{_signed(entry['change'], entry['change_low'], entry['change_high'])} (p {p_value_text(entry['p'])})"


def matched_lines(summary: dict) -> list[str]:
    """The section on every ablation against its controls, paired (runs with matched controls)."""
    config = summary["config"]
    compared = ("none", "random", *config["controls"])
    testable = sum("p_holm" in j for j in summary["matched"])
    lines = [
        "## Every ablation against its controls (paired)\n",
        "Each score's top k heads removed, on every task, against no ablation and each control on the same strings: "
        "random heads (from those no ablated score puts in its top k), "
        + ", ".join(f"{name} (matched to the score's heads)" for name in config["controls"])
        + ". A change is the ablated accuracy minus the other condition's (a control's draws averaged string by "
        "string), with a 95% paired bootstrap interval and McNemar's exact p (against a control, the largest over "
        "its draws). A judgement takes the smallest drop and the largest p over its comparisons (all must hold), "
        f"and Holm corrects them over the {testable} testable judgements of this table; a control that could not "
        "be drawn (too few heads) is left out.\n",
        "| task | heads removed | k | accuracy | "
        + " | ".join(f"vs {name}" for name in compared)
        + " | Holm p | reading |",
        "|---|---|---|---|" + "---|" * len(compared) + "---|---|",
    ]
    for j in summary["matched"]:
        versus = [_paired_text(j["comparisons"][name]) if name in j["comparisons"] else "-" for name in compared]
        holm = p_value_text(j["p_holm"]) if "p_holm" in j else "-"
        lines.append(
            f"| {j['task']} | {j['score']} ({_heads_text(j['heads'])}; mean score {j['heads_score']:.2f}) | {j['k']} | "
            f"{j['base']['accuracy']:.2f} -> {j['ablated']['accuracy']:.2f} | "
            + " | ".join(versus)
            + f" | {holm} | {_matched_reading(j)} |"
        )
    return [*lines, ""]


def matched_claim_statements(summary: dict) -> list[str]:
    """One line per claim of the paper, read from the paired judgements."""
    lines = []
    tasks = {j["task"] for j in summary["matched"]}
    for score, task in DROP_CLAIMS + SPARE_CLAIMS:
        judgements = [j for j in summary["matched"] if j["score"] == score and j["task"] == task]
        if not judgements or task not in tasks:
            continue
        spares = (score, task) in SPARE_CLAIMS
        name = score.replace("_", "-")
        claim = f"removing {name} heads leaves {task} alone" if spares else f"removing {name} heads drops {task}"
        dropping = [j["k"] for j in judgements if j.get("corrected") == "below 0 after correction"]
        testable = [j["k"] for j in judgements if "corrected" in j]
        if not testable:
            verdict = "cannot be tested on this model"
        elif spares:
            kept = [k for k in testable if k not in dropping]
            # No drop resolved is the absence of evidence against sparing, not evidence for it.
            verdict = (
                f"no drop survives correction at k = {', '.join(map(str, kept))}"
                if kept
                else "fails: it drops beyond every control at every k"
            )
        else:
            verdict = (
                f"holds after correction at k = {', '.join(map(str, dropping))}"
                if dropping
                else "does not hold after correction at any k of the grid"
            )
        lines.append(f"- **{task}**, {claim}: {verdict}.")
    return lines


def claims_markdown(summaries: dict[str, dict]) -> str:
    """Each kept run's reading of the paper's claims, as its report states them: from the paired
    judgements where the run has matched controls, else against its random control."""
    parts = []
    for name, summary in summaries.items():
        paired = "matched" in summary
        statements = matched_claim_statements(summary) if paired else claim_statements(summary)
        against = "paired, against no ablation and every control" if paired else "against the random control"
        parts.append(f"**{name}** ({against}):\n\n" + "\n".join(statements))
    return "\n\n".join(parts) + "\n"


def direction_statements(summary: dict) -> list[str]:
    lines = []
    for d in summary["direction"]:
        verdict = {
            "untestable": f"untestable: {BACKWARD} is at 0 without ablation, so it has nothing to lose",
            "forward more": "forward copying loses more",
            "backward more": "backward copying loses more",
            "not resolved": "the intervals overlap: not resolved",
        }[d["verdict"]]
        lines.append(
            f"- induction heads removed, k={d['k']}: {FORWARD} change {_change_text(d['forward'])}, "
            f"{BACKWARD} change {_change_text(d['backward'])}: **{verdict}**."
        )
    return lines


def _changes(summary: dict, task: str, score: str) -> str:
    """The pooled change of accuracy when the top k heads of `score` are removed, for each k, judged
    as the claims are."""
    if "matched" in summary:
        return ", ".join(
            f"k={j['k']} {_paired_text(j['comparisons']['none'])} ({_matched_reading(j)})"
            for j in summary["matched"]
            if j["task"] == task and j["score"] == score
        )
    texts = []
    for k in summary["config"]["k"]:
        judgement = _judge_drop(summary["rows"], score, task, k)
        if judgement is not None and "change" in judgement["ablated"]:
            texts.append(f"k={k} {_change_text(judgement['ablated'])} ({VERDICTS[judgement['verdict']]})")
    return ", ".join(texts)


def report_markdown(summary: dict) -> str:
    config = summary["config"]
    model = (
        config.get("model")
        or f"the {config.get('task')} model of {config.get('job_folder')} (step {config.get('checkpoint_step')})"
    )
    lines = [
        f"# Copying heads and what removing them does: {model}\n",
        f"{config['n_layers']} layers x {config['n_heads']} heads, position encoding {config['position']}. Scores on "
        f"{config['sequences']} random sequences per period (periods {', '.join(map(str, config['periods']))}), "
        f"each a block of T distinct tokens repeated twice"
        f"{' with a separator token between the copies' if config.get('separator') else ''}; "
        "a score is the attention of a query p in the second copy (its token's earlier occurrence at e), averaged "
        "over the copy and the sequences (mean ± sd over sequences).\n",
        "## Top heads per score (layer.head: mean ± sd)\n",
        "| score | what it measures | top heads |",
        "|---|---|---|",
    ]
    for name in SCORES:
        heads = ", ".join(
            f"{h['layer']}.{h['head']}: {h['mean']:.2f} ± {h['std']:.2f}" for h in summary["top_heads"][name]
        )
        lines.append(f"| {name} | {SCORE_MEANINGS[name]} | {heads} |")
    lines += [
        f"\n## Ablations ({config['ablation']} ablation)\n",
        "Accuracy (exact match) with its 95% Wilson interval, and its change against the unablated model "
        "(Newcombe 95%). Random controls: k heads drawn from those no ablated score "
        f"({', '.join(config['ablate'])}) puts in its top k.\n",
    ]
    recorded = config.get("recorded_accuracy")
    if recorded:
        none = next((r for r in summary["rows"] if r["ablation"] == "none"), None)
        measured = " / ".join(
            f"{none['cells'][label]['accuracy']:.3f}" if none and label in none["cells"] else "-" for label in recorded
        )
        lines.append(
            f"Unablated accuracy per bin ({', '.join(recorded)}): {measured}; recorded by training at step "
            f"{config['checkpoint_step']} on the same strings: {' / '.join(f'{a:.3f}' for a in recorded.values())}.\n"
        )
    for task in dict.fromkeys(task for task, _ in config["cells"]):
        task_labels = [label for t, label in config["cells"] if t == task]
        lines += [
            f"### {task}\n",
            "| ablation | heads removed | " + " | ".join(task_labels) + " | change, cells pooled |",
            "|---|---|" + "---|" * len(task_labels) + "---|",
        ]
        for row in (r for r in summary["rows"] if r["task"] == task):
            heads = "-" if row["draw"] == "pooled" else _heads_text(row["heads"][0])
            if row["eligible"] is not None:
                heads += f" (of {row['eligible']} eligible)"
            cells = [
                f"{_interval(row['cells'][label])} {_change_text(row['cells'][label])}".strip()
                if label in row["cells"]
                else ("skipped" if row["skipped"] else "-")
                for label in task_labels
            ]
            pooled = _change_text(row["pooled"]) if "pooled" in row else ""
            lines.append(f"| {_condition(row)} | {heads} | " + " | ".join(cells) + f" | {pooled} |")
        lines.append("")
    claims, direction = claim_statements(summary), direction_statements(summary)
    if "matched" in summary:
        lines += [
            *matched_lines(summary),
            "## The paper's claims on this model\n",
            "Read from the table above: a drop claim holds at the k where removing the score's heads drops the task "
            "beyond no ablation and every control after correction.\n",
            *matched_claim_statements(summary),
            "",
        ]
    if claims:
        lines += [
            "## The paper's claims on this model\n",
            "Judged on each task's strings pooled over its cells: a drop holds when the change's interval lies "
            "below 0 and the accuracy is below that of random heads (the difference's interval below 0). "
            "After correction: the larger of the two p-values, adjusted by Holm over the family of every testable "
            f"judgement below ({sum('p_holm' in j for j in summary['claims'])}); unpaired tests, as the run keeps "
            "counts only. A claim holds (or, for a claim that heads spare a task, fails) on drops that survive "
            "the correction.\n",
            *claims,
            "",
        ]
    if direction:
        lines += [
            "Does removing induction heads hurt forward copying more than backward copying? (disjoint change "
            "intervals)\n",
            *direction,
            "",
        ]
    lines += ["## The interpreter\n", INTERPRETER_TEXT]
    for task, entry in summary["interpreter"].items():
        reader = "first_occurrence" if entry["backward"] else "induction"
        witnesses = (
            f"verified witnesses with `prev[t]`: {'yes' if entry['local_witness'] else 'no'}, without "
            f"positions: {'yes' if entry['witness_without_positions'] else 'no'}"
        )
        removed = "; ".join(
            f"removing {name} heads: {_changes(summary, task, name)}"
            for name in dict.fromkeys(("previous_token", reader, *config["ablate"]))
            if _changes(summary, task, name)
        )
        lines.append(
            f"- {task} ({'backward' if entry['backward'] else 'forward'}, reads "
            f"`{BACKWARD_READ if entry['backward'] else FORWARD_READ}`): predicted {entry['prediction']} for "
            f"{config['position']}; {witnesses}" + (f"; {removed}" if removed else "") + "."
        )
    greedy = summary["greedy"]
    lines.append(
        f"\nCross-check: {greedy['disagreements']} of {greedy['checked']} unablated strings decoded greedily "
        "got a different verdict from teacher forcing."
    )
    if summary["evaluated"] < summary["planned"]:
        lines.append(f"\nIncomplete run: {summary['evaluated']} of {summary['planned']} ablation units evaluated.")
    lines.append(
        f"\nEvaluation: {summary['seconds']:.0f} s for {summary['evaluated']} units (compilation included; "
        "loading and scores not).\n"
    )
    lines += [f"![scores]({SCORES_FIGURE})\n", f"![ablations]({ABLATIONS_FIGURE})\n"]
    return "\n".join(lines)


def draw_scores(scores: dict, config: dict, path: Path) -> None:
    """A layer x head map of each score's mean, on one scale (attention weights, 0 to 1), so a
    score no head has stays dark."""
    plt = pyplot()
    figure, axes = plt.subplots(
        1, len(SCORES), figsize=(2.6 * len(SCORES) + 1, 1.5 + 0.2 * config["n_layers"]), squeeze=False, sharey=True
    )
    for ax, name in zip(axes[0], SCORES):
        image = ax.imshow(
            np.array(scores[name]["mean"]), aspect="auto", cmap="viridis", vmin=0, vmax=1, interpolation="nearest"
        )
        ax.set_title(name, fontsize=9)
        ax.set_xlabel("head")
        ax.set_xticks(range(config["n_heads"]))
        ax.tick_params(labelsize=7)
    axes[0][0].set_ylabel("layer")
    figure.colorbar(image, ax=axes[0].tolist(), fraction=0.02, label="mean attention weight")
    save_figure(figure, path, dpi=110, tight=False)


def draw_ablations(summary: dict, path: Path) -> None:
    """Accuracy against k per cell: each score's top heads removed, random heads (draws pooled,
    Wilson intervals), and the unablated model (dotted)."""
    plt = pyplot()
    config = summary["config"]
    cells = config["cells"]
    figure, axes = plt.subplots(1, len(cells), figsize=(3.4 * len(cells), 3.2), squeeze=False)
    for ax, (task, label) in zip(axes[0], cells):
        rows = [r for r in summary["rows"] if r["task"] == task and label in r["cells"]]
        for name in [*config["ablate"], "random"]:
            chosen = [
                r for r in rows if r["ablation"] == name and r["draw"] in (None, "pooled" if config["draws"] > 1 else 0)
            ]
            if not chosen:
                continue
            accuracy = np.array([r["cells"][label]["accuracy"] for r in chosen])
            errors = [
                accuracy - [r["cells"][label]["low"] for r in chosen],
                [r["cells"][label]["high"] for r in chosen] - accuracy,
            ]
            ax.errorbar(
                [r["k"] for r in chosen],
                accuracy,
                yerr=np.maximum(errors, 0),
                marker="o",
                capsize=3,
                linestyle="--" if name == "random" else "-",
                label=name,
            )
        for row in (r for r in rows if r["ablation"] == "none"):
            ax.axhline(row["cells"][label]["accuracy"], color="0.4", linestyle=":", label="none")
        ax.set_xscale("log", base=2)
        ax.set_xticks(config["k"], [str(k) for k in config["k"]])
        ax.set_title(f"{task} {label}", fontsize=9)
        ax.set_xlabel("heads removed (k)")
        ax.set_ylim(-0.05, 1.05)
    axes[0][0].set_ylabel("exact match")
    axes[0][-1].legend(fontsize=7)
    set_title(figure, f"{config['ablation']} ablation of each score's top k heads", fontsize=10)
    save_figure(figure, path, dpi=110)


def write_report(run_dir: Path) -> dict:
    """Rebuild summary.json, report.md and the figures from the run folder; return the summary."""
    run_dir = Path(run_dir)
    summary = summarize(run_dir)
    write_summary_and_report(run_dir, summary, report_markdown(summary))
    draw_scores(read_scores(run_dir), summary["config"], run_dir / SCORES_FIGURE)
    draw_ablations(summary, run_dir / ABLATIONS_FIGURE)
    return summary
