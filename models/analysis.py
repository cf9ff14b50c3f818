"""Attention-head analysis of any models.Transformer: per-head attention scores on repeated random
sequences, the heads each score ranks highest, and exact-match answers with heads removed.

Scores (Olsson et al. 2022's induction score, its mirror and three companions). A sequence is
an optional prefix (BOS), then a block of T distinct tokens, an optional separator, and the same
block again. A query at position p of the second copy holds the token that first occurred at
e = p - T (p - T - 1 after a one-token separator); each score is a head's attention weight on one
key, averaged over the queries of the second copy:

    induction         e + 1   the successor of the earlier occurrence (forward copying, right retrieval)
    anti_induction    e - 1   its predecessor (backward copying, left retrieval)
    previous_token    p - 1   the previous token: the relation prev[t] of the C-RASP[local] witnesses
    first_occurrence  e       the earlier (first) occurrence of the same token
    first_position    0       the first position (BOS, or the first token where a model has none)

Ablation: `ablation(...)` removes heads as data (`Interventions`): a removed head outputs its
mean over a reference batch (mean ablation, `reference_means`) or zeros (zero ablation), before
the output projection. `answer_exact` scores answers teacher-forced: a string is right when every
answer token is the argmax after the tokens before it, which is exact match of greedy decoding
(the first wrong token is generated in both) for the answer's own tokenization.
"""

from __future__ import annotations

from dataclasses import dataclass

import jax.numpy as jnp
import numpy as np
from flax import nnx

from crasplab.models.interventions import Interventions, mean_head_outputs

# Random streams: the score sequences, seeded by (seed, SCORE_STREAM, period); the random heads,
# by (seed, HEAD_STREAM, k, draw).
SCORE_STREAM, HEAD_STREAM = 0, 1
SCORES = ("induction", "anti_induction", "previous_token", "first_occurrence", "first_position")
SCORE_MEANINGS = {
    "induction": "to e + 1, the token after the earlier occurrence e",
    "anti_induction": "to e - 1, the token before the earlier occurrence",
    "previous_token": "to p - 1, the previous token",
    "first_occurrence": "to e, the earlier occurrence itself",
    "first_position": "to position 0 (BOS, or the first token)",
}


def repeated_sequences(
    rng: np.random.Generator, candidates_C, n: int, period: int, prefix=(), separator=()
) -> np.ndarray:
    """tokens_NxT: `prefix`, `period` distinct candidates in random order, `separator`, the same candidates again."""
    candidates_C = np.asarray(candidates_C)
    if period > len(candidates_C):
        raise ValueError(f"period {period} needs {period} distinct tokens; only {len(candidates_C)} candidates")
    blocks_NxP = np.stack([rng.choice(candidates_C, period, replace=False) for _ in range(n)])

    def fixed(tokens):
        return np.broadcast_to(np.asarray(tokens, dtype=blocks_NxP.dtype), (n, len(tokens)))

    return np.concatenate([fixed(prefix), blocks_NxP, fixed(separator), blocks_NxP], axis=1).astype(np.int32)


def score_edges(prefix_length: int, period: int, separator_length: int = 0) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """For each score, the (query, key) positions whose attention weights it averages."""
    earlier_Q = prefix_length + np.arange(period)
    second_Q = earlier_Q + period + separator_length
    edges = {
        "induction": (second_Q, earlier_Q + 1),
        "anti_induction": (second_Q, earlier_Q - 1),
        "previous_token": (second_Q, second_Q - 1),
        "first_occurrence": (second_Q, earlier_Q),
    }
    kept = {"first_position": (second_Q, np.zeros_like(second_Q))}
    for name, (queries_Q, keys_Q) in edges.items():
        # A key before the block is the prefix, not a neighbour. Position 0 stays out even where the
        # block starts there: heads that park their attention on the first token (sinks) would
        # score on it whatever their role.
        inside_Q = (keys_Q >= prefix_length) & (keys_Q > 0)
        kept[name] = (queries_Q[inside_Q], keys_Q[inside_Q])
    return kept


@nnx.jit
def _edge_weights(model, tokens_BxT, edges):
    attention_LxBxHxTxS = model(tokens_BxT, return_attention=True).attention_LxBxHxTxS
    return {
        name: attention_LxBxHxTxS[:, :, :, queries_Q, keys_Q].mean(-1).transpose(1, 0, 2)
        for name, (queries_Q, keys_Q) in edges.items()
    }


@dataclass(frozen=True)
class HeadScore:
    mean_LxH: np.ndarray  # over every sequence of every period
    std_LxH: np.ndarray  # spread of the per-sequence scores
    period_means_PxLxH: np.ndarray  # one mean per period

    def as_json(self) -> dict:
        def rounded(array):
            return np.round(array, 6).tolist()

        return dict(
            mean=rounded(self.mean_LxH), std=rounded(self.std_LxH), period_means=rounded(self.period_means_PxLxH)
        )


def head_scores(
    model,
    candidates_C,
    periods: list[int],
    n: int,
    seed: int,
    prefix=(),
    separator=(),
    batch_size: int = 50,
    progress=None,
) -> dict[str, HeadScore]:
    """Every score of every (layer, head) on n sequences per period (seeded by seed and period alone).

    `progress(sequences_done)` is called after each batch."""
    per_period = []
    for period in periods:
        rng = np.random.default_rng([seed, SCORE_STREAM, period])
        tokens_NxT = repeated_sequences(rng, candidates_C, n, period, prefix, separator)
        edges = {
            name: (jnp.asarray(q), jnp.asarray(k))
            for name, (q, k) in score_edges(len(prefix), period, len(separator)).items()
        }
        batches = []
        for start in range(0, n, batch_size):
            batches.append(
                {
                    name: np.asarray(w)
                    for name, w in _edge_weights(model, tokens_NxT[start : start + batch_size], edges).items()
                }
            )
            if progress:
                progress(len(batches[-1]["induction"]))
        per_period.append({name: np.concatenate([b[name] for b in batches]) for name in SCORES})
    return {
        name: HeadScore(
            mean_LxH=np.concatenate([p[name] for p in per_period]).mean(axis=0),
            std_LxH=np.concatenate([p[name] for p in per_period]).std(axis=0, ddof=1),
            period_means_PxLxH=np.stack([p[name].mean(axis=0) for p in per_period]),
        )
        for name in SCORES
    }


Head = tuple[int, int]  # (layer, head)


def top_heads(score_LxH: np.ndarray, k: int) -> list[Head]:
    """The k heads with the highest score, highest first (ties: the earlier layer and head first)."""
    n_heads = score_LxH.shape[1]
    order = np.argsort(-np.asarray(score_LxH).ravel(), kind="stable")[:k]
    return [(int(i) // n_heads, int(i) % n_heads) for i in order]


def random_heads(rng: np.random.Generator, eligible: list[Head], k: int) -> list[Head] | None:
    """k of the `eligible` heads drawn uniformly, sorted; None when there are fewer than k."""
    if len(eligible) < k:
        return None
    return sorted(eligible[i] for i in rng.choice(len(eligible), k, replace=False))


def ablation(heads: list[Head], means_LxHxK: np.ndarray | None, config) -> Interventions:
    """Interventions removing `heads`: each outputs its mean (means_LxHxK) or zeros (None).

    Always the same pytree of arrays, so one compiled program serves every ablation, no ablation
    (an empty list) included: a kept head gives head * 1 + mean * 0, exactly its output."""
    mask_LxH = np.ones((config.n_layers, config.n_heads), np.float32)
    for layer, head in heads:
        mask_LxH[layer, head] = 0.0
    if means_LxHxK is None:
        means_LxHxK = np.zeros((config.n_layers, config.n_heads, config.head_dim), np.float32)
    return Interventions(head_mask_LxH=jnp.asarray(mask_LxH), head_mean_LxHxK=jnp.asarray(means_LxHxK))


@dataclass(frozen=True)
class AnswerBatch:
    """Strings with answers: answer_NxT marks the positions t whose next token t + 1 is an answer
    token (the end-of-answer token included), so the logits at t must predict it."""

    tokens_NxT: np.ndarray
    positions_NxT: np.ndarray
    mask_NxT: np.ndarray  # True: a real token
    answer_NxT: np.ndarray

    def rows(self, rows_R: np.ndarray) -> AnswerBatch:
        return AnswerBatch(
            self.tokens_NxT[rows_R], self.positions_NxT[rows_R], self.mask_NxT[rows_R], self.answer_NxT[rows_R]
        )

    @classmethod
    def from_prompts(
        cls, prompt_ids: list[list[int]], answer_ids: list[list[int]], pad_id: int, width_multiple: int = 16
    ) -> AnswerBatch:
        """Prompts followed by their answers, right-padded to a multiple of `width_multiple` (so a
        few compiled shapes serve many batches)."""
        lengths_N = np.array([len(p) + len(a) for p, a in zip(prompt_ids, answer_ids)])
        width = -(-int(lengths_N.max()) // width_multiple) * width_multiple
        tokens_NxT = np.full((len(lengths_N), width), pad_id, np.int32)
        answer_NxT = np.zeros((len(lengths_N), width), bool)
        for row, (prompt, answer) in enumerate(zip(prompt_ids, answer_ids)):
            tokens_NxT[row, : lengths_N[row]] = prompt + answer
            answer_NxT[row, len(prompt) - 1 : lengths_N[row] - 1] = True
        positions_NxT = np.broadcast_to(np.arange(width, dtype=np.int32), tokens_NxT.shape).copy()
        return cls(tokens_NxT, positions_NxT, np.arange(width) < lengths_N[:, None], answer_NxT)


@nnx.jit
def _exact(model, tokens_BxT, positions_BxT, mask_BxT, answer_BxT, interventions):
    logits_BxTxV = model(tokens_BxT, positions_BxT, mask_BxT, interventions=interventions).logits_BxTxV
    right_BxT = jnp.argmax(logits_BxTxV[:, :-1], axis=-1) == tokens_BxT[:, 1:]
    return jnp.all(right_BxT | ~answer_BxT[:, :-1], axis=1)


def _chunks(n: int, size: int):
    """Row indices of each chunk of `size` rows; the last one filled up by repeating rows, so every
    chunk has one compiled shape."""
    for start in range(0, n, size):
        yield np.arange(start, start + size) % n, min(size, n - start)


def answer_exact(model, batch: AnswerBatch, interventions: Interventions, chunk: int) -> np.ndarray:
    """exact_N: every answer token is the model's argmax (teacher forcing), under `interventions`."""
    exact = []
    for rows_R, real in _chunks(len(batch.tokens_NxT), chunk):
        part = batch.rows(rows_R)
        exact.append(
            np.asarray(
                _exact(model, part.tokens_NxT, part.positions_NxT, part.mask_NxT, part.answer_NxT, interventions)
            )[:real]
        )
    return np.concatenate(exact)


_mean_heads = nnx.jit(mean_head_outputs)


def reference_means(model, batches: list[AnswerBatch], chunk: int) -> np.ndarray:
    """Each head's output averaged over every real token of `batches`: [L, H, K], for mean ablation."""
    total_LxHxK, count = 0.0, 0
    for batch in batches:
        for rows_R, real in _chunks(len(batch.tokens_NxT), chunk):
            part = batch.rows(rows_R)
            mask_RxT = part.mask_NxT & (np.arange(len(rows_R)) < real)[:, None]  # repeated rows do not count
            tokens = int(mask_RxT.sum())
            means_LxHxK = np.asarray(_mean_heads(model, part.tokens_NxT, part.positions_NxT, mask_RxT), np.float64)
            total_LxHxK, count = total_LxHxK + tokens * means_LxHxK, count + tokens
    return (total_LxHxK / count).astype(np.float32)


@dataclass(frozen=True)
class Ablation:
    """One condition: `heads` removed. name: "none", a score (its top k heads) or "random" (k
    heads drawn, draw number `draw`, from the `eligible` heads no ablated score puts in its top k),
    or a control matched to the top k heads of the score `matches` (crasplab.incontext.controls);
    heads None: fewer than k heads are eligible."""

    name: str
    k: int
    draw: int
    heads: list[Head] | None
    eligible: int | None = None  # random controls only
    matches: str | None = None  # matched controls only


def ablation_plan(
    score_means: dict[str, np.ndarray], ablate: list[str], k_grid: list[int], draws: int, seed: int
) -> list[Ablation]:
    """No ablation, then for each k: the top k heads of each score in `ablate`, then `draws` random
    controls, each seeded by (seed, k, draw) alone."""
    n_layers, n_heads = next(iter(score_means.values())).shape
    plan = [Ablation("none", 0, 0, [])]
    for k in k_grid:
        targeted = {name: top_heads(score_means[name], k) for name in ablate}
        plan += [Ablation(name, k, 0, heads) for name, heads in targeted.items()]
        excluded = {head for heads in targeted.values() for head in heads}
        eligible = [
            (layer, head) for layer in range(n_layers) for head in range(n_heads) if (layer, head) not in excluded
        ]
        plan += [
            Ablation(
                "random",
                k,
                draw,
                random_heads(np.random.default_rng([seed, HEAD_STREAM, k, draw]), eligible, k),
                len(eligible),
            )
            for draw in range(draws)
        ]
    return plan
