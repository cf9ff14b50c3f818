"""Several training steps per device call (TrainConfig.steps_per_call, a jax.lax.scan over batches
sampled ahead): the steps of single calls up to the rounding the stacked tests allow, in the
compiled step and in a whole job; and the setting refuses counts it does not divide."""

import jax
import numpy as np
import pytest
from crasplab.records.job_folder import read_metrics
from crasplab.records.settings import SettingsError
from crasplab.train.data import sample_batch, sequence_length, stack_batches, stack_steps
from crasplab.train.loop import Job, run_job
from crasplab.train.steps import init_stack, make_optimizer, make_scanned_train_step, make_train_step

from crasp.tasks import get_task
from tests.tiny import TINY_MODEL, tiny_config

# The tolerance of the stacked-training tests (tests/test_train_loop.py): stacking and padding
# change the order of float32 sums, nothing else.
RTOL, ATOL = 2e-5, 2e-6


def step_batches(task, seeds, steps):
    """Each step's stacked batch for `seeds`, of a width of its own (lengths 1-2, 1-3, 1-4, ...)."""
    batches = []
    for index in range(steps):
        longest = 2 + index % 3
        per_seed = [
            sample_batch(
                task, np.random.default_rng([seed, index]), 8, (1, longest), sequence_length(task, longest), 16, True
            )
            for seed in seeds
        ]
        batches.append(stack_batches(per_seed).as_dict())
    return batches


def train(models, optimizer, make_step, calls):
    """The state after each call of make_step's step, and each step's losses and accuracies ([steps, S])."""
    graphdef, rest, params_S, opt_state_S = init_stack(models, optimizer)
    step = make_step(graphdef, rest, optimizer, batch_parts=2)
    losses, accuracies = [], []
    for batch in calls:
        params_S, opt_state_S, loss, accuracy = step(params_S, opt_state_S, batch)
        losses.append(np.asarray(loss).reshape(-1, len(models)))  # [S] for one step, [K, S] for K
        accuracies.append(np.asarray(accuracy).reshape(-1, len(models)))
    return (params_S, opt_state_S), np.concatenate(losses), np.concatenate(accuracies)


@pytest.mark.machine_dependent  # bit for bit: the scanned body compiles to this CPU's single step
def test_k_steps_per_call_train_as_k_single_steps():
    """Two seeds, eight steps of batches of different widths, as two calls of four scanned steps:
    each step's loss and accuracy in order, and the parameters and optimizer state at the end, bit
    for bit those of eight single steps on the calls' batches (each padded to its call's widest);
    and the losses and accuracies of the unpadded single steps up to rounding. (The parameters of
    the unpadded steps differ in what rounding alone drives: the key bias, whose exact gradient is
    0 since a softmax ignores a constant added to a row, moves by Adam's normalised noise.)"""
    task = get_task("UF", alphabet_size=8)
    optimizer = make_optimizer(tiny_config())
    models = [TINY_MODEL.build(len(task.vocab), 16, seed) for seed in (0, 1)]
    batches = step_batches(task, (0, 1), 8)
    assert len({b["tokens_BxT"].shape[-1] for b in batches}) > 1  # the calls pad steps to one width
    calls = [stack_steps(batches[start : start + 4]) for start in (0, 4)]
    assert calls[0]["tokens_BxT"].shape[:2] == (4, 2)

    state, losses, accuracies = train(models, optimizer, make_scanned_train_step, calls)
    padded_steps = [{name: array[i] for name, array in call.items()} for call in calls for i in range(4)]
    single_state, single_losses, single_accuracies = train(models, optimizer, make_train_step, padded_steps)
    np.testing.assert_array_equal(losses, single_losses)
    np.testing.assert_array_equal(accuracies, single_accuracies)
    for a, b in zip(jax.tree.leaves(state), jax.tree.leaves(single_state)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))

    _, unpadded_losses, unpadded_accuracies = train(models, optimizer, make_train_step, batches)
    np.testing.assert_allclose(losses, unpadded_losses, rtol=RTOL, atol=ATOL)
    np.testing.assert_array_equal(accuracies, unpadded_accuracies)


def test_a_job_trained_k_steps_per_call_records_what_single_steps_record(tmp_path):
    """A whole job (logging, evaluations, checkpoints between calls) at 4 steps per call: the same
    training records up to rounding, the same evaluations and steps, and job.json keeps the setting."""
    folders = {}
    for k in (1, 4):
        job = Job(
            task_code="UR",
            seed=5,
            model=TINY_MODEL,
            train=tiny_config(steps_per_call=k),
            task_overrides=dict(alphabet_size=8),
            out_dir=str(tmp_path / f"k{k}" / "UR" / "seed5"),
        )
        run_job(job)
        folders[k] = job.files
    records = {k: read_metrics(files) for k, files in folders.items()}
    train = {k: [r for r in rs if r.kind == "train"] for k, rs in records.items()}
    assert [r.step for r in train[4]] == [r.step for r in train[1]] == [4, 8, 12, 16, 20, 24]
    np.testing.assert_allclose([r.loss for r in train[4]], [r.loss for r in train[1]], rtol=1e-4)
    evals = {k: [(r.step, [b.accuracy for b in r.bins]) for r in rs if r.kind == "eval"] for k, rs in records.items()}
    assert evals[4] == evals[1]
    assert folders[4].read_result().steps == folders[1].read_result().steps == 24
    assert folders[4].read_job_values()["train"]["steps_per_call"] == 4


@pytest.mark.parametrize("name", ["log_every", "eval_every", "checkpoint_every", "max_steps"])
def test_steps_per_call_must_divide_every_count(name):
    counts = dict(log_every=4, eval_every=8, checkpoint_every=8, max_steps=24)
    with pytest.raises(SettingsError, match=f"steps_per_call=4 does not divide {name}=6"):
        tiny_config(steps_per_call=4, **{**counts, name: 6}).check()
