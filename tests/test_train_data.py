"""Properties of the online batches, the learning-rate schedule and the atomic files of train/."""

import math
from fractions import Fraction

import jax
import numpy as np
import optax
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crasp.tasks import PAD_ID, get_task
from crasplab.records.files import read_jsonl
from crasplab.train.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from crasplab.train.config import ModelSettings, TrainConfig, bins_for_train_lengths
from crasplab.records.settings import SettingsError
from crasplab.train.data import (
    TRAIN_STREAM,
    LengthBuckets,
    batch_rng,
    effective_range,
    sample_batch,
    sample_training_batch,
    sequence_length,
)
from crasplab.train.loop import Job, TaskSetup
from crasplab.train.steps import learning_rate_schedule, make_optimizer

TASKS = ("UL", "UR", "NLFirst", "NRFirst", "NLLast", "NRLast", "UF", "UB", "NF", "NB")


@settings(max_examples=30, deadline=None)
@given(code=st.sampled_from(TASKS), hi=st.integers(3, 12), seed=st.integers(0, 2**31), offset=st.booleans())
def test_batch_targets_are_exactly_the_answer_and_eos(code, hi, seed, offset):
    task = get_task(code, alphabet_size=16) if code[0] == "U" else get_task(code)
    lo, hi = effective_range(task, 1, hi)
    max_positions = sequence_length(task, hi) + 7
    rng = np.random.default_rng(seed)
    batch = sample_batch(task, rng, 16, (lo, hi), sequence_length(task, hi), max_positions, offset)
    # Independently re-derive every example's answer from its own tokens with task.answer.
    for row in range(16):
        length = int(batch.lengths_B[row])
        tokens = batch.tokens_BxT[row]
        assert (tokens[length:] == PAD_ID).all()
        predicted_tokens = batch.targets_BxT[row][batch.loss_mask_BxT[row] == 1]
        symbols = [task.vocab[t] for t in predicted_tokens]
        assert symbols[-1] == "<eos>"
        sep = list(tokens).index(2)
        inputs = [task.vocab[t] for t in tokens[1:sep]]
        query = task.vocab[tokens[sep + 1]] if task.has_query else None
        assert symbols[:-1] == task.answer(inputs, query)
        assert lo <= len(inputs) <= hi
        positions = batch.positions_BxT[row][:length]
        assert (np.diff(positions) == 1).all() and positions[-1] < max_positions
        assert (positions[0] == 0) or offset


def test_offsets_cover_the_whole_position_table():
    task = get_task("UF", alphabet_size=16)
    batch = sample_batch(task, np.random.default_rng(0), 512, (1, 4), sequence_length(task, 4), 40, True)
    starts = batch.positions_BxT[:, 0]
    ends = starts + batch.lengths_B - 1
    assert starts.min() == 0 and ends.max() == 39


def test_batches_depend_only_on_seed_and_step():
    task = get_task("NF")
    make = lambda seed, step: (  # noqa: E731
        sample_batch(
            task,
            batch_rng(seed, TRAIN_STREAM, step),
            8,
            (1, 6),  # noqa: E731
            sequence_length(task, 6),
            20,
            True,
        ).tokens_BxT
    )
    assert np.array_equal(make(3, 17), make(3, 17))
    assert not np.array_equal(make(3, 17), make(3, 18))
    assert not np.array_equal(make(3, 17), make(4, 17))


@settings(max_examples=25, deadline=None)
@given(lo=st.integers(1, 8), width=st.integers(0, 30), count=st.integers(1, 12))
def test_length_buckets_partition_the_training_lengths(lo, width, count):
    task = get_task("UF", alphabet_size=64)
    buckets = LengthBuckets.split(task, (lo, lo + width), count)
    covered = [n for a, b in buckets.ranges for n in range(a, b + 1)]
    assert covered == list(range(lo, lo + width + 1))  # every length exactly once, in order
    assert len(buckets.ranges) == min(count, width + 1)
    assert buckets.sizes().max() - buckets.sizes().min() <= 1
    assert buckets.padded_lengths == tuple(sequence_length(task, b) for _, b in buckets.ranges)


def test_every_training_length_keeps_its_share_and_batches_are_tight():
    """A bucket is drawn in proportion to its number of lengths (then a length uniformly inside
    it: sample_batch), so each length gets 1/n of the examples, as with uniform lengths; and a
    batch is padded only to its own bucket's longest string."""
    task = get_task("UF", alphabet_size=64)
    buckets = LengthBuckets.split(task, (1, 20), 6)  # sizes 3 and 4
    rng = np.random.default_rng(0)
    draws = 40_000
    frequency = np.bincount([buckets.draw(rng) for _ in range(draws)], minlength=6) / draws
    expected = buckets.sizes() / 20
    # Within 5 standard deviations; drawing buckets equally often would be 0.02 off for each.
    assert np.abs(frequency - expected).max() < 5 * np.sqrt(0.2 * 0.8 / draws)
    for step in range(100):
        batch = sample_training_batch(task, batch_rng(0, TRAIN_STREAM, step), 32, buckets, 80, True)
        input_lengths = (batch.lengths_B - 3) // 2  # copying: BOS, input, SEP, copy, EOS
        assert any(
            lo <= input_lengths.min() and input_lengths.max() <= hi and batch.tokens_BxT.shape[1] == pad
            for (lo, hi), pad in zip(buckets.ranges, buckets.padded_lengths)
        )


def test_schedule_warms_up_then_decays_to_zero():
    config = TrainConfig(train_lengths=(1, 5), test_bins=((1, 5),), learning_rate=1e-3, warmup_steps=10, max_steps=110)
    schedule = learning_rate_schedule(config)
    assert float(schedule(0)) == 0.0
    assert float(schedule(5)) == pytest.approx(5e-4)
    assert float(schedule(10)) == pytest.approx(1e-3)
    assert float(schedule(60)) == pytest.approx(5e-4)
    assert float(schedule(110)) == pytest.approx(0.0, abs=1e-12)
    constant = learning_rate_schedule(config.replace(schedule="constant"))
    assert float(constant(100)) == pytest.approx(1e-3)


def _train_stack(optimizer, gradients_per_step):
    """Parameters of a stack of models after one optimizer update per step, vmapped as in training."""
    params = jax.tree.map(np.zeros_like, gradients_per_step[0])
    state = jax.vmap(optimizer.init)(params)
    for gradients in gradients_per_step:
        updates, state = jax.vmap(optimizer.update)(gradients, state, params)
        params = optax.apply_updates(params, updates)
    return params


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 2**31), scales=st.lists(st.floats(0.01, 100.0), min_size=2, max_size=2))
def test_clipping_scales_each_models_gradient_by_its_own_global_norm(seed, scales):
    """With max_grad_norm, each model of a stack gets AdamW fed its gradient scaled down to that norm
    where longer, the norm taken over all its parameters: neither per parameter array nor over
    the stack (a seed's numbers must not depend on the seeds trained beside it)."""
    rng = np.random.default_rng(seed)
    config = TrainConfig(
        train_lengths=(1, 5), test_bins=((1, 5),), learning_rate=1e-2, schedule="constant", warmup_steps=0
    )
    steps = [
        {
            "a": rng.normal(size=(2, 3)) * np.array([[1.0], [scales[0]]]) ** step,
            "b": rng.normal(size=(2, 2)) * np.array([[1.0], [scales[1]]]) ** step,
        }
        for step in range(3)
    ]

    def clipped(gradients, limit=1.0):
        norms = np.sqrt(sum((leaf**2).sum(axis=1) for leaf in gradients.values()))
        factor = np.minimum(1.0, limit / norms)[:, None]
        return {name: leaf * factor for name, leaf in gradients.items()}

    got = _train_stack(make_optimizer(config.replace(max_grad_norm=1.0)), steps)
    expected = _train_stack(make_optimizer(config), [clipped(g) for g in steps])
    for name in got:
        np.testing.assert_allclose(got[name], expected[name], rtol=1e-5, atol=1e-7)


def test_an_invalid_setting_cannot_be_built_and_its_error_names_the_setting():
    with pytest.raises(SettingsError, match="first test bin"):
        TrainConfig(train_lengths=(1, 5), test_bins=((1, 6), (7, 9)))
    with pytest.raises(SettingsError, match="max_grad_norm must be >= 0"):
        TrainConfig(max_grad_norm=-1.0)
    with pytest.raises(SettingsError, match="unknown TrainConfig setting"):
        TrainConfig().replace(learning_rat=1.0)
    with pytest.raises(SettingsError, match="unknown ModelSettings setting.*'position'"):
        ModelSettings.from_dict(dict(position="ape"))
    with pytest.raises(SettingsError, match="pe must be one of \\('ape', 'rope', 'nope', 'alibi'\\)"):
        ModelSettings(pe="xpos")
    with pytest.raises(SettingsError, match="test bin 15-30 starts at or below 20, where the bin before it ends"):
        TrainConfig(train_lengths=(1, 20), test_bins=((1, 20), (15, 30)))
    with pytest.raises(SettingsError, match="test bin 21-25 starts at or below 30"):
        TrainConfig(train_lengths=(1, 20), test_bins=((1, 20), (21, 30), (21, 25)))


def test_a_length_range_must_lie_within_what_the_sampler_produces():
    unique_copy = get_task("UF", alphabet_size=8)  # distinct symbols: inputs of 1 to 8
    with pytest.raises(
        ValueError,
        match=r"task UF, test bin 9-12: not within the lengths its sampler produces "
        r"\(1 to 8, with alphabet_size=8\)",
    ):
        effective_range(unique_copy, 9, 12, what="test bin")
    with pytest.raises(ValueError, match="1 to 8"):  # partly beyond: refused, not silently cut to 5-8
        effective_range(unique_copy, 5, 12)
    assert effective_range(unique_copy, 5, 8) == (5, 8)
    # Bins are written from 1, as in the papers; a sampler whose shortest input is longer starts there.
    first_retrieval = get_task("NLFirst")
    assert first_retrieval.min_length() == 3 and effective_range(first_retrieval, 1, 20) == (3, 20)
    with pytest.raises(ValueError, match="3 to 16384"):
        effective_range(first_retrieval, 1, 2)


@settings(max_examples=60, deadline=None)
@given(train_hi=st.integers(1, 200), preset_hi=st.integers(1, 60), widths=st.lists(st.integers(1, 40), max_size=4))
def test_bins_follow_new_training_lengths(train_hi, preset_hi, widths):
    preset_bins = [(1, preset_hi)]
    for width in widths:
        preset_bins.append((preset_bins[-1][1] + 1, preset_bins[-1][1] + width))
    bins = bins_for_train_lengths((1, train_hi), tuple(preset_bins))
    assert bins[0] == (1, train_hi) and len(bins) == len(preset_bins)
    TrainConfig(train_lengths=(1, train_hi), test_bins=bins)  # each beyond the one before
    for (lo, hi), (_, preset_bin_hi) in zip(bins[1:], preset_bins[1:]):  # each upper end's ratio kept
        assert hi == max(lo, math.floor(Fraction(preset_bin_hi * train_hi, preset_hi) + Fraction(1, 2)))
    if train_hi == preset_hi:
        assert bins == tuple(preset_bins)


def test_quick_bins_for_training_lengths_one_to_thirty_reach_twice_thirty():
    assert bins_for_train_lengths((1, 30), ((1, 20), (21, 30), (31, 40))) == ((1, 30), (31, 45), (46, 60))


def test_checkpoint_round_trip_and_structure_check(tmp_path):
    state = {"a": np.arange(6, dtype=np.float32).reshape(2, 3), "b": [np.ones(2, np.int32)]}
    save_checkpoint(tmp_path / "c.npz", state, {"step": 7})
    loaded, meta = load_checkpoint(tmp_path / "c.npz", state)
    assert meta == {"step": 7} and np.array_equal(loaded["a"], state["a"])
    with pytest.raises(CheckpointError, match="another structure: it was trained with other settings"):
        load_checkpoint(tmp_path / "c.npz", {"a": state["a"]})
    with pytest.raises(CheckpointError, match="shape"):
        load_checkpoint(tmp_path / "c.npz", {"a": np.zeros((3, 2)), "b": [np.ones(2)]})


def test_a_damaged_checkpoint_names_the_file_and_the_way_back(tmp_path):
    state = {"a": np.arange(6, dtype=np.float32)}
    save_checkpoint(tmp_path / "checkpoint.npz", state, {"step": 7})
    whole = (tmp_path / "checkpoint.npz").read_bytes()
    (tmp_path / "checkpoint.npz").write_bytes(whole[: len(whole) // 2])
    with pytest.raises(CheckpointError, match="checkpoint.npz: not a readable checkpoint.*delete it"):
        load_checkpoint(tmp_path / "checkpoint.npz", state)


def test_torn_last_line_of_metrics_is_ignored(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 1}\n{"step": 2}\n{"ste')
    assert read_jsonl(path) == [{"step": 1}, {"step": 2}]


@pytest.mark.parametrize("task_code", ["UF", "NLLast", "Majority"])
def test_a_longer_test_bin_within_the_position_reach_leaves_the_positions_trained_unchanged(task_code):
    """The recipe's position reach, not the test bins, sizes APE's table and its random offsets:
    a job tested to 40 and one tested to 30 train the same positions; without a reach (runs made
    before it) the table follows the longest bin, as it did."""
    overrides = dict(alphabet_size=64) if task_code == "UF" else {}

    def setup(bins, reach):
        train = TrainConfig(train_lengths=(1, 20), test_bins=bins, position_reach=reach)
        return TaskSetup.for_job(Job(task_code, 0, ModelSettings(), train, overrides))

    short, longer = ((1, 20), (21, 30)), ((1, 20), (21, 30), (31, 40))
    assert setup(short, 40).max_positions == setup(longer, 40).max_positions == setup(longer, 0).max_positions
    assert setup(short, 0).max_positions < setup(longer, 0).max_positions
    with pytest.raises(SettingsError, match="goes beyond position_reach=30.*raise position_reach"):
        TrainConfig(train_lengths=(1, 20), test_bins=longer, position_reach=30)
