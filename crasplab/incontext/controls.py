"""Random-head controls matched to the heads an ablation removes (experiments/mechanism.py).

The mechanism experiment's first control, "random" (models.analysis.ablation_plan), draws k heads
among those that no ablated score puts in its top k. It so leaves out every head that scores high
on anything, and removes mostly heads that do little: a targeted ablation then looks specific
when its heads merely matter more than most (SmolLM2's four top "anti-induction" heads, in layers
0 and 2 with scores of at most 0.08, cost UF 0.25). A matched control removes heads like the
ablated ones in everything but the score under test. Each ablated score and k gets these named
sets, each drawn `draws` times:

- "same-layers": for each ablated head, a head of the same layer that the ablation keeps,
  uniformly and without replacement; none where a layer has too few heads left.
- "same-ranks": for each ablated head, one of the RANK_NEIGHBOURS heads nearest to it in its
  ranks under every other score (the L1 distance between rank vectors), none of them among the
  score's top k: heads that do as much of everything else, without the score under test.

A drop that holds against both is specific to the score's heads beyond their layers and beyond
what they share with other kinds of head.
"""

from __future__ import annotations

import numpy as np

from crasplab.models.analysis import SCORES, Ablation, Head, top_heads

CONTROL_SETS = ("same-layers", "same-ranks")
# How many of the nearest heads in rank a same-ranks control chooses among, for each ablated head:
# enough that the draws differ, few enough that every choice is close in rank.
RANK_NEIGHBOURS = 4
# The random stream of a matched control: (seed, MATCHED_STREAM, score, set, k, draw), apart from
# models.analysis's SCORE_STREAM and HEAD_STREAM.
MATCHED_STREAM = 2


def matched_plan(
    score_means: dict[str, np.ndarray], ablate: list[str], k_grid: list[int], sets: list[str], draws: int, seed: int
) -> list[Ablation]:
    """For each k, each score in `ablate` and each control set in `sets`: `draws` controls matched to
    the score's top k heads (Ablation.matches names the score), each seeded by (seed, score, set, k,
    draw) alone, so that adding a score or a set leaves the others' draws as they were."""
    ranks = {name: _ranks(score_means[name]) for name in SCORES}
    plan = []
    for k in k_grid:
        for score in ablate:
            ablated = top_heads(score_means[score], k)
            for control in sets:
                for draw in range(draws):
                    rng = np.random.default_rng(
                        [seed, MATCHED_STREAM, SCORES.index(score), CONTROL_SETS.index(control), k, draw]
                    )
                    if control == "same-layers":
                        heads, eligible = same_layer_heads(rng, ablated, score_means[score].shape)
                    else:
                        others = [ranks[name] for name in SCORES if name != score]
                        heads, eligible = same_rank_heads(rng, ablated, np.stack(others, axis=-1))
                    plan.append(Ablation(control, k, draw, heads, eligible, matches=score))
    return plan


def same_layer_heads(rng: np.random.Generator, ablated: list[Head], shape: tuple[int, int]) -> tuple:
    """(heads, eligible): for each ablated head, another head of its layer that is not ablated
    (sorted; None where a layer has fewer such heads than it has ablated ones), and how many heads
    the ablated heads' layers keep."""
    n_heads = shape[1]
    chosen = []
    layers = sorted({layer for layer, _ in ablated})
    kept = {layer: [(layer, h) for h in range(n_heads) if (layer, h) not in ablated] for layer in layers}
    eligible = sum(len(heads) for heads in kept.values())
    for layer in layers:
        needed = sum(1 for ablated_layer, _ in ablated if ablated_layer == layer)
        if len(kept[layer]) < needed:
            return None, eligible
        chosen += [kept[layer][i] for i in rng.choice(len(kept[layer]), needed, replace=False)]
    return sorted(chosen), eligible


def same_rank_heads(rng: np.random.Generator, ablated: list[Head], ranks_LxHxS: np.ndarray) -> tuple:
    """(heads, eligible): for each ablated head in turn, one of the RANK_NEIGHBOURS heads nearest to
    it in `ranks_LxHxS` (ranks under the other scores) among those neither ablated nor chosen
    already (ties: the earlier layer and head), and how many heads are not ablated."""
    n_layers, n_heads, _ = ranks_LxHxS.shape
    candidates = [(layer, h) for layer in range(n_layers) for h in range(n_heads) if (layer, h) not in ablated]
    if len(candidates) < len(ablated):
        return None, len(candidates)
    chosen: list[Head] = []
    for layer, head in ablated:
        free = [c for c in candidates if c not in chosen]
        distance = [int(np.abs(ranks_LxHxS[c] - ranks_LxHxS[layer, head]).sum()) for c in free]
        nearest = np.argsort(distance, kind="stable")[:RANK_NEIGHBOURS]
        chosen.append(free[int(rng.choice(nearest))])
    return sorted(chosen), len(candidates)


def _ranks(score_LxH: np.ndarray) -> np.ndarray:
    """Each head's rank under a score, 0 for the highest (ties: the earlier layer and head first)."""
    order = np.argsort(-np.asarray(score_LxH).ravel(), kind="stable")
    ranks = np.empty(order.size, dtype=np.int64)
    ranks[order] = np.arange(order.size)
    return ranks.reshape(np.shape(score_LxH))
