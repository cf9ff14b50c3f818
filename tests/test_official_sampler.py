"""The official sampler, whole (`--sampler official`, docs/official-sampler.md): lengths drawn as
the official code draws them (it draws the length anew with every string it rejects, so a length
comes up in proportion to the probability that a string of it is kept), its length ranges
(max(4, lo) to hi - 1), and the answer token scored without the EOS after it."""

import itertools

import numpy as np
import pytest

from crasp.tasks import get_task
from crasp.tasks.retrieval import official_acceptance, official_lengths
from crasplab.cli.length_gen import RunRequest, run_settings
from crasplab.records.settings import SettingsError
from crasplab.train.config import TrainConfig
from crasplab.train.data import (
    LengthBuckets,
    batch_rng,
    draw_lengths,
    length_counts,
    make_batch,
    sample_training_batch,
    sequence_length,
)
from crasplab.train.evaluate import build_eval_sets, greedy_disagreements, teacher_forced_exact
from crasplab.train.loop import Job, TaskSetup
from crasplab.train.steps import init_stack, make_eval_step, make_optimizer
from tests.tiny import TINY_MODEL

OFFICIAL_TRAINING = (4, 49)  # the official code's training range 1-50
NON_UNIQUE = ("NLFirst", "NRFirst", "NLLast", "NRLast")


def kept_by_the_official_code(context: tuple[int, ...], query_position: int, rank: str) -> bool:
    """The official code's rejection, as the spec writes it (shared/spec/experiments.md): the query is
    the token at `query_position`; rejected when it occurs once, and for both "last" tasks when its
    last occurrence is the final context slot."""
    query = context[query_position]
    occurrences = [i for i, symbol in enumerate(context) if symbol == query]
    return len(occurrences) >= 2 and not (rank == "last" and occurrences[-1] == len(context) - 1)


@pytest.mark.parametrize("alphabet_size, rank", [(3, "first"), (3, "last"), (5, "first"), (5, "last")])
def test_the_acceptance_is_the_fraction_of_every_context_and_query_the_official_code_keeps(alphabet_size, rank):
    """Counted over every context of lengths 1-6 and every query position, each equally likely."""
    for length in range(1, 7):
        kept = sum(
            kept_by_the_official_code(context, position, rank)
            for context in itertools.product(range(alphabet_size), repeat=length)
            for position in range(length)
        )
        exact = kept / (alphabet_size**length * length)
        assert official_acceptance(np.array([length]), alphabet_size, rank)[0] == pytest.approx(exact, abs=1e-12)


def exact_distribution(code: str) -> np.ndarray:
    """P(length) over OFFICIAL_TRAINING: the official code draws a length uniformly and keeps it with
    the acceptance of its string, else draws again, so P is the acceptance normalized."""
    rank = "last" if code.endswith("Last") else "first"
    kept = official_acceptance(np.arange(OFFICIAL_TRAINING[0], OFFICIAL_TRAINING[1] + 1), 5, rank)
    return kept / kept.sum()


def total_variation(lengths: np.ndarray, exact: np.ndarray) -> float:
    counts = np.bincount(lengths - OFFICIAL_TRAINING[0], minlength=len(exact))
    return 0.5 * float(np.abs(counts / counts.sum() - exact).sum())


# With n draws over K lengths, E[TV] <= 0.5 * sqrt(K / n) (Jensen and Cauchy-Schwarz): 0.011 for
# 100,000 draws over 46 lengths, and one draw moves TV by at most 1/n, so (McDiarmid) a draw from
# the exact distribution exceeds BOUND with probability below exp(-2n (0.02 - 0.011)^2) < 1e-7.
# A uniform draw lies 0.040 (first) and 0.064 (last) from it: it stays above BOUND with the same
# margin the other way.
DRAWS, BOUND = 100_000, 0.02


def training_lengths(task, buckets: LengthBuckets) -> np.ndarray:
    """DRAWS input lengths as training draws them. In one bucket (the paper's presets), the lengths
    of 1000 training batches of 100. In several, every batch draws one bucket, so 1000 batches
    would hold only 1000 independent bucket draws: 100,000 batches of one length each."""
    if len(buckets.ranges) == 1:
        batches = [sample_training_batch(task, batch_rng(0, 0, step), 100, buckets, 60, False) for step in range(1000)]
        return np.concatenate([batch.lengths_B for batch in batches]) - (sequence_length(task, 4) - 4)
    rng = np.random.default_rng(0)
    return np.concatenate([draw_lengths(task, rng, 1, buckets.ranges[buckets.draw(rng)]) for _ in range(DRAWS)])


@pytest.mark.parametrize("buckets", [1, 5])
@pytest.mark.parametrize("code", ["NRFirst", "NLLast"])
def test_100000_training_lengths_follow_the_official_distribution_and_a_uniform_draw_does_not(code, buckets):
    task = get_task(code, occurrences="official")
    exact = exact_distribution(code)
    assert exact[-1] / exact[0] == pytest.approx(2.05 if code.endswith("First") else 3.63, abs=0.005)
    lengths = training_lengths(task, LengthBuckets.split(task, OFFICIAL_TRAINING, buckets))
    assert len(lengths) == DRAWS
    assert total_variation(lengths, exact) < BOUND
    uniform = np.random.default_rng(0).integers(OFFICIAL_TRAINING[0], OFFICIAL_TRAINING[1] + 1, size=DRAWS)
    assert total_variation(uniform, exact) > BOUND


def simulated_official_lengths(rng: np.random.Generator, rank: str, n: int) -> np.ndarray:
    """The official code's procedure as the spec describes it, written here on its own: a length
    uniform in 4-49, an i.i.d. context over 5 symbols, the query at a uniform position; a rejected
    string draws its length again."""
    kept = []
    while sum(len(k) for k in kept) < n:
        lengths_N = rng.integers(OFFICIAL_TRAINING[0], OFFICIAL_TRAINING[1] + 1, size=n)
        contexts_NxM = rng.integers(5, size=(n, OFFICIAL_TRAINING[1]))
        positions_N = (rng.random(n) * lengths_N).astype(int)
        inside_NxM = np.arange(OFFICIAL_TRAINING[1])[None, :] < lengths_N[:, None]
        is_query_NxM = (contexts_NxM == contexts_NxM[np.arange(n), positions_N][:, None]) & inside_NxM
        ok_N = is_query_NxM.sum(axis=1) >= 2
        if rank == "last":
            ok_N &= ~is_query_NxM[np.arange(n), lengths_N - 1]
        kept.append(lengths_N[ok_N])
    return np.concatenate(kept)[:n]


@pytest.mark.parametrize("code", ["NLFirst", "NRLast"])
def test_the_official_procedure_simulated_draws_the_exact_distribution(code):
    """The exact distribution is the official procedure's: 100,000 lengths it keeps lie within BOUND."""
    rank = "last" if code.endswith("Last") else "first"
    lengths = simulated_official_lengths(np.random.default_rng(1), rank, DRAWS)
    assert total_variation(lengths, exact_distribution(code)) < BOUND


def test_only_the_official_sampler_weights_its_lengths():
    lengths = np.arange(2, 60)
    for code in ("UL", "UR", *NON_UNIQUE):
        assert np.all(get_task(code).length_weights(lengths) == 1)
    assert np.all(get_task("UL", alphabet_size=5).length_weights(lengths) == 1)  # the official code keeps every UL
    assert np.all(get_task("NRLast", occurrences="spread").length_weights(lengths) == 1)
    assert len(set(get_task("NRLast", occurrences="official").length_weights(lengths))) == len(lengths)


@pytest.mark.parametrize("per_length", [1, 20, 100])
def test_test_strings_per_length_follow_the_weights_and_add_up_to_the_uniform_count(per_length):
    task = get_task("NLLast", occurrences="official")
    counts = length_counts(task, (51, 99), per_length)
    assert counts.sum() == per_length * 49
    shares = per_length * 49 * task.length_weights(np.arange(51, 100))
    shares /= task.length_weights(np.arange(51, 100)).sum()
    assert np.all(np.abs(counts - shares) < 1)  # largest remainders: each within one string of its share
    assert np.all(length_counts(get_task("NLLast"), (51, 99), per_length) == per_length)


def test_the_official_sampler_trains_and_tests_the_official_ranges_without_the_eos():
    official = run_settings(RunRequest(preset="paper", sampler="official"))
    for code in official.tasks:
        train = official.train[code]
        assert train.train_lengths == OFFICIAL_TRAINING
        assert train.test_bins == (OFFICIAL_TRAINING, (51, 99), (101, 149))
        assert not train.retrieval_eos
    paper = run_settings(RunRequest(preset="paper", sampler="paper"))
    assert all(train.retrieval_eos and train.test_bins[-1] == (101, 150) for train in paper.train.values())
    assert official_lengths(1, 20) == (4, 19) and official_lengths(21, 30) == (21, 29)
    with pytest.raises(SettingsError, match="the range 21-21 holds none"):
        run_settings(RunRequest(preset="quick", sampler="official", test_bins=((1, 20), (21, 21))))


def test_without_the_eos_the_loss_covers_the_retrieval_answer_alone_and_copying_keeps_its_eos():
    tokens_BxT = np.array([[0, 5, 6, 2, 5, 6, 1, 3]])  # BOS c c SEP q answer EOS PAD
    prompt_B, length_B = np.array([5]), np.array([7])
    with_eos = make_batch(tokens_BxT, prompt_B, length_B, np.zeros(1, int), 8)
    without = make_batch(tokens_BxT, prompt_B, length_B, np.zeros(1, int), 8, score_eos=False)
    assert list(np.flatnonzero(with_eos.loss_mask_BxT[0])) == [4, 5]  # predict the answer, then EOS
    assert list(np.flatnonzero(without.loss_mask_BxT[0])) == [4]
    config = TrainConfig(retrieval_eos=False)
    assert not config.scores_eos(get_task("UR")) and config.scores_eos(get_task("UF"))
    assert TrainConfig().scores_eos(get_task("UR"))


def test_exact_match_and_its_greedy_cross_check_leave_out_the_eos_alike():
    """An untrained model gets some answers right and few EOS after them: its verdicts differ with
    and without the EOS, and greedy decoding agrees with teacher forcing under each."""
    job = Job(
        task_code="NRFirst",
        seed=3,
        model=TINY_MODEL,
        train=TrainConfig(train_lengths=(4, 9), test_bins=((4, 9),), retrieval_eos=False),
        task_overrides=dict(occurrences="official"),
    )
    setup = TaskSetup.for_job(job)
    assert not setup.score_eos
    model = job.model.build(len(setup.task.vocab), setup.max_positions, 0)
    graphdef, rest, params_S, _ = init_stack([model], make_optimizer(job.train))
    verdicts = {}
    for score_eos in (True, False):
        (eval_set,) = build_eval_sets(setup.task, job.seed, setup.bins, 60, setup.max_positions, score_eos)
        exact_N = teacher_forced_exact(make_eval_step(graphdef, rest), params_S, [eval_set], 120, lambda p: p)[0]
        assert greedy_disagreements(model, eval_set, exact_N, len(exact_N)) == 0
        verdicts[score_eos] = exact_N.astype(bool)
    assert np.all(verdicts[False] >= verdicts[True]) and np.any(verdicts[False] & ~verdicts[True])
