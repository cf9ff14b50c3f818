"""The training loop: loss on answer tokens only, a batch trained in parts equal to the whole
batch, stacked (vmapped) training equal to separate runs, resume after kill -9 equal to an
uninterrupted run, data parallelism equal to one device."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from crasplab.records.files import read_jsonl
from crasplab.train.config import TrainConfig
from crasplab.train.data import sample_batch, sequence_length
from crasplab.train.evaluate import build_eval_sets, greedy_disagreements, greedy_exact_match, teacher_forced_exact
from crasplab.train.loop import Job, run_stack
from crasplab.train.steps import (
    _answer_scores,
    init_stack,
    make_eval_step,
    make_optimizer,
    make_train_step,
    part_bounds,
)
from crasplab.train.trained import load_trained_model
from flax import nnx
from hypothesis import given
from hypothesis import strategies as st

from crasp.tasks import get_task
from tests.tiny import ROOT, TINY_MODEL, comparable, run_worker, tiny_config


def test_loss_is_cross_entropy_over_answer_and_eos_only():
    task = get_task("UR", alphabet_size=8)
    batch = sample_batch(task, np.random.default_rng(1), 4, (2, 5), sequence_length(task, 5), 12, False)
    logits_BxTxV = np.random.default_rng(2).normal(size=batch.tokens_BxT.shape + (len(task.vocab),))
    loss, _, exact_B = _answer_scores(jnp.asarray(logits_BxTxV), batch.as_dict())
    # Independent reference: walk each example's answer span explicitly.
    terms, exact = [], []
    for row in range(4):
        prompt_length = list(batch.tokens_BxT[row]).index(2) + 2  # BOS c.. SEP q
        length = int(batch.lengths_B[row])
        row_right = True
        for t in range(prompt_length - 1, length - 1):
            log_probs = logits_BxTxV[row, t] - np.log(np.exp(logits_BxTxV[row, t]).sum())
            terms.append(-log_probs[batch.tokens_BxT[row, t + 1]])
            row_right &= int(np.argmax(logits_BxTxV[row, t])) == batch.tokens_BxT[row, t + 1]
        exact.append(row_right)
    assert float(loss) == pytest.approx(np.mean(terms), rel=1e-5)
    assert list(np.asarray(exact_B)) == exact


@given(st.integers(1, 300), st.integers(1, 8))
def test_batch_parts_cover_the_batch_in_nearly_equal_consecutive_parts(batch_size, parts):
    bounds = part_bounds(batch_size, parts)
    sizes = np.diff(bounds)
    assert bounds[0] == 0 and bounds[-1] == batch_size
    assert len(sizes) == min(parts, batch_size)
    assert sizes.min() >= 1 and sizes.max() - sizes.min() <= 1


@pytest.mark.parametrize("parts", [2, 3])
def test_a_batch_trained_in_parts_takes_the_step_of_the_whole_batch(parts):
    """The parts' gradients, each part's loss divided by the whole batch's answer tokens, add up
    to the whole batch's gradient: loss, accuracy and parameters after three steps agree with one
    part up to rounding. Copies of different lengths give the parts different answer-token counts."""
    task = get_task("UF", alphabet_size=8)
    config = tiny_config()
    optimizer = make_optimizer(config)
    model = TINY_MODEL.build(len(task.vocab), 16, seed=3)
    results = {}
    for batch_parts in (1, parts):
        graphdef, rest, params_S, opt_state_S = init_stack([model], optimizer)
        step = make_train_step(graphdef, rest, optimizer, batch_parts)
        for index in range(3):
            batch = sample_batch(task, np.random.default_rng([7, index]), 9, (1, 4), sequence_length(task, 4), 16, True)
            params_S, opt_state_S, loss_S, accuracy_S = step(
                params_S, opt_state_S, {k: v[None] for k, v in batch.as_dict().items()}
            )
        results[batch_parts] = (params_S, float(loss_S[0]), float(accuracy_S[0]))
    (whole, whole_loss, whole_accuracy), (cut, cut_loss, cut_accuracy) = results[1], results[parts]
    assert cut_loss == pytest.approx(whole_loss, rel=1e-5)
    assert cut_accuracy == whole_accuracy
    for a, b in zip(jax.tree.leaves(whole), jax.tree.leaves(cut)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=2e-5, atol=2e-6)


def test_stacked_training_equals_separate_runs():
    """Two seeds in one vmapped step end with the parameters each reaches alone."""
    task = get_task("UF", alphabet_size=8)
    config = tiny_config()
    optimizer = make_optimizer(config)

    def train(seeds):
        models = [TINY_MODEL.build(len(task.vocab), 16, seed) for seed in seeds]
        graphdef, _, rest = nnx.split(models[0], nnx.Param, ...)
        params_S = jax.tree.map(lambda *x: jnp.stack(x), *[nnx.split(m, nnx.Param, ...)[1] for m in models])
        opt_state_S = jax.vmap(optimizer.init)(params_S)
        step = make_train_step(graphdef, rest, optimizer)
        for index in range(3):
            batches = [
                sample_batch(
                    task, np.random.default_rng([seed, index]), 8, (1, 4), sequence_length(task, 4), 16, True
                ).as_dict()
                for seed in seeds
            ]
            stacked = {k: np.stack([b[k] for b in batches]) for k in batches[0]}
            params_S, opt_state_S, loss_S, _ = step(params_S, opt_state_S, stacked)
        return params_S

    together = train([0, 1])
    for index, seed in enumerate([0, 1]):
        alone = train([seed])
        for a, b in zip(jax.tree.leaves(together), jax.tree.leaves(alone)):
            np.testing.assert_allclose(np.asarray(a[index]), np.asarray(b[0]), rtol=2e-5, atol=2e-6)


def write_job(folder: Path, config: TrainConfig) -> None:
    folder.mkdir(parents=True)
    job = Job(
        task_code="UR",
        seed=5,
        model=TINY_MODEL,
        train=config,
        task_overrides=dict(alphabet_size=8),
        out_dir=str(folder),
    )
    (folder / "job.json").write_text(json.dumps(job.to_dict()))


@pytest.mark.machine_dependent  # a race: the kill must land after a checkpoint and before the end
def test_killed_run_resumes_to_the_uninterrupted_result(tmp_path):
    config = tiny_config(max_steps=400, eval_every=100, checkpoint_every=20, log_every=10)
    whole, interrupted = tmp_path / "whole", tmp_path / "interrupted"
    write_job(whole, config)
    write_job(interrupted, config)
    assert run_worker(whole).wait(timeout=300) == 0

    process = run_worker(interrupted)
    deadline = time.monotonic() + 300
    # Kill after a checkpoint exists but before the run ends (it takes a few seconds past compile).
    while not (interrupted / "checkpoint.npz").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    assert not (interrupted / "result.json").exists(), "the run ended before it was killed; make it longer"
    assert run_worker(interrupted).wait(timeout=300) == 0

    assert comparable(interrupted) == comparable(whole)
    records, result = comparable(whole)
    assert sum(r["kind"] == "eval" for r in records) == 4
    assert all(b["greedy_disagreements"] == 0 for b in result["bins"])
    assert_reloaded_model_reproduces_the_result(whole, result)


def assert_reloaded_model_reproduces_the_result(folder: Path, result: dict) -> None:
    """train.trained gives back the model the job ended with: its accuracy on the job's own test
    strings is the recorded one, bin by bin."""
    trained = load_trained_model(folder)
    assert trained.step == result["steps"]
    config = trained.job.train
    eval_sets = build_eval_sets(
        trained.task, trained.job.seed, trained.setup.bins, config.eval_examples_per_length, trained.setup.max_positions
    )
    graphdef, rest, params_S, _ = init_stack([trained.model], make_optimizer(config))
    eval_step = make_eval_step(graphdef, rest)
    for eval_set, recorded in zip(eval_sets, result["bins"]):
        exact_SxN = teacher_forced_exact(eval_step, params_S, [eval_set], config.eval_batch_size, lambda part: part)
        assert round(float(exact_SxN.mean()), 6) == recorded["accuracy"]
        # Cached greedy decoding gives every string the teacher-forced verdict, and a verdict that
        # differs from it is counted as a disagreement.
        exact_N = exact_SxN[0].astype(bool)
        greedy_N = greedy_exact_match(
            trained.model, eval_set.batch.tokens_BxT, eval_set.prompt_lengths_N, eval_set.batch.lengths_B
        )
        assert np.array_equal(greedy_N, exact_N)
        assert greedy_disagreements(trained.model, eval_set, ~exact_N, 8) == 8


SHARDED_SCRIPT = """
import json, sys
import numpy as np
from crasplab.train.config import ModelSettings, TrainConfig
from crasplab.train.loop import Job, run_job
import jax
config = TrainConfig(**json.loads(sys.argv[1]))
job = Job(task_code="UF", seed=1, model=ModelSettings(pe="rope", n_layers=1, n_heads=2, d_model=16), train=config,
          task_overrides=dict(alphabet_size=8), out_dir=sys.argv[2])
run_job(job)
print(json.dumps(dict(devices=jax.device_count())))
"""


@pytest.mark.machine_dependent  # equal accuracies across device counts: this CPU's and XLA version's reductions
def test_two_devices_give_the_same_loss_as_one(tmp_path):
    config = tiny_config(max_steps=12, eval_every=12, log_every=4, checkpoint_every=12)
    values = {k: list(v) if isinstance(v, tuple) else v for k, v in config.to_dict().items()}
    outputs = {}
    for devices in (1, 2):
        env = dict(os.environ, XLA_FLAGS=f"--xla_force_host_platform_device_count={devices}")
        folder = tmp_path / f"devices{devices}"
        done = subprocess.run(
            [sys.executable, "-c", SHARDED_SCRIPT, json.dumps(values), str(folder)],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        assert json.loads(done.stdout.splitlines()[-1])["devices"] == devices
        outputs[devices] = read_jsonl(folder / "metrics.jsonl")
    losses = {d: [r["loss"] for r in records if r["kind"] == "train"] for d, records in outputs.items()}
    assert len(losses[1]) == 3
    np.testing.assert_allclose(losses[2], losses[1], rtol=1e-4)
    evals = {d: [r for r in records if r["kind"] == "eval"] for d, records in outputs.items()}
    assert [b["accuracy"] for b in evals[2][-1]["bins"]] == [b["accuracy"] for b in evals[1][-1]["bins"]]


def test_stack_rejects_jobs_that_differ_in_more_than_the_seed(tmp_path):
    jobs = [
        Job(task_code=code, seed=0, model=TINY_MODEL, train=tiny_config(), out_dir=str(tmp_path / code))
        for code in ("UF", "UB")
    ]
    with pytest.raises(ValueError, match="differ in more than the seed"):
        run_stack(jobs)


def test_a_job_folder_is_trained_by_one_process_at_a_time(tmp_path):
    from crasplab.train.workers import _lock_folder

    held = _lock_folder(tmp_path)
    with pytest.raises(SystemExit, match="being trained by another process"):
        _lock_folder(tmp_path)
    held.close()
    _lock_folder(tmp_path).close()


def test_workers_take_the_idlest_cores_first():
    """Two runs started side by side must not both pin their first worker to core 0: the pool
    orders the cores by how busy /proc/stat says they were (user nice system idle iowait ...)."""
    from crasplab.train.workers import idlest_first

    before = "cpu  300 0 100 600 0\ncpu0 200 0 50 250 0\ncpu1 100 0 50 350 0\ncpu2 0 0 0 0 0\n"
    # Between the readings core 0 was fully busy, core 1 idle, core 2 half idle and half waiting for
    # the disk (which counts as idle), core 3 busy for a third of the time.
    after = "cpu  500 0 100 900 100\ncpu0 400 0 50 250 0\ncpu1 100 0 50 550 0\ncpu2 0 0 0 100 100\ncpu3 100 0 0 200 0\n"
    before += "cpu3 0 0 0 0 0\n"
    assert idlest_first([0, 1, 2, 3], before, after) == [1, 2, 3, 0]
    assert idlest_first([0, 1], before, after) == [1, 0]
    assert idlest_first([0, 5], before, after) == [5, 0]  # a core the readings do not list counts as idle


class KilledBeforeResult(Exception):
    """Stands for kill -9 between a job's final checkpoint and its result.json."""


@pytest.mark.parametrize("stops_early", [False, True])
def test_a_kill_between_the_final_checkpoint_and_result_json_is_finished_on_rerun(
    tmp_path, monkeypatch, stops_early, tiny_train_config, tiny_model_settings
):
    import crasplab.train.loop as loop

    config = tiny_train_config(stop_after_perfect_evals=int(stops_early))
    if stops_early:  # every string right: the stopping rule is met at the first evaluation (step 8 of 24)
        monkeypatch.setattr(
            loop,
            "teacher_forced_exact",
            lambda step, params_S, sets, *_: np.ones((len(sets), sets[0].batch.lengths_B.shape[0])),
        )

    def job(name):
        return Job(
            task_code="UR",
            seed=5,
            model=tiny_model_settings,
            train=config,
            task_overrides=dict(alphabet_size=8),
            out_dir=str(tmp_path / name),
        )

    loop.run_job(job("whole"))
    write_json = loop.write_json

    def killed_at_result(path, value):
        if Path(path).name == "result.json":
            raise KilledBeforeResult
        write_json(path, value)

    monkeypatch.setattr(loop, "write_json", killed_at_result)
    with pytest.raises(KilledBeforeResult):
        loop.run_job(job("killed"))
    monkeypatch.setattr(loop, "write_json", write_json)
    assert loop.run_job(job("killed")).steps == (8 if stops_early else 24)
    assert comparable(tmp_path / "killed") == comparable(tmp_path / "whole")
    # Each process that trained the job recorded what decided its bits, and the step it started from.
    started = [json.loads(line)["from_step"] for line in (tmp_path / "killed" / "provenance.jsonl").open()]
    assert started == [0, 8 if stops_early else 24]


def stack_of_two(tmp_path, folder: str, config: TrainConfig) -> list[Job]:
    return [
        Job(
            task_code="UR",
            seed=seed,
            model=TINY_MODEL,
            train=config,
            task_overrides=dict(alphabet_size=8),
            out_dir=str(tmp_path / folder / f"seed{seed}"),
        )
        for seed in (0, 1)
    ]


def test_test_bins_scored_only_at_the_stop_train_the_same_bits_and_end_with_the_same_result(tmp_path):
    """With test_bins_at_stop_only (the protocol's), every evaluation but a job's last holds the
    training bin alone, and the training and the final result are those of a run that scores the
    test bins at every evaluation: evaluation draws nothing from the training stream."""
    config = tiny_config(max_steps=24, eval_every=8)
    every = stack_of_two(tmp_path, "every", config)
    at_stop = stack_of_two(tmp_path, "at_stop", config.replace(test_bins_at_stop_only=True))
    run_stack(every)
    run_stack(at_stop)
    for job_every, job_at_stop in zip(every, at_stop):
        records_every, result_every = comparable(job_every.folder)
        records_at_stop, result_at_stop = comparable(job_at_stop.folder)
        assert [r for r in records_every if r["kind"] == "train"] == [
            r for r in records_at_stop if r["kind"] == "train"
        ]
        evals_every = [r for r in records_every if r["kind"] == "eval"]
        evals_at_stop = [r for r in records_at_stop if r["kind"] == "eval"]
        assert [len(r["bins"]) for r in evals_every] == [2, 2, 2]
        assert [len(r["bins"]) for r in evals_at_stop] == [1, 1, 2]
        assert [r["bins"][0] for r in evals_every] == [r["bins"][0] for r in evals_at_stop]
        assert evals_every[-1] == evals_at_stop[-1]
        assert result_every == result_at_stop


def test_in_a_stack_only_the_job_an_evaluation_stops_gets_its_test_bins(tmp_path, monkeypatch):
    """Seeds trained as one stack stop at different evaluations: the one whose training bin is
    perfect twice (made so here at its first two evaluations) gets its test bins then and stops;
    the other keeps training with its training bin alone until its own last evaluation."""
    import crasplab.train.loop as loop

    scored = loop.teacher_forced_exact

    def seed_0_perfect_on_training(eval_step, params_S, stacked_sets, chunk, put):
        exact_SxN = scored(eval_step, params_S, stacked_sets, chunk, put)
        if stacked_sets[0].hi == 4:  # the training bin (lengths 1-4)
            exact_SxN[0] = True
        return exact_SxN

    monkeypatch.setattr(loop, "teacher_forced_exact", seed_0_perfect_on_training)
    jobs = stack_of_two(
        tmp_path,
        "stack",
        tiny_config(max_steps=32, eval_every=8, stop_after_perfect_evals=2, test_bins_at_stop_only=True),
    )
    reports = []
    run_stack(jobs, reports.append)
    done = [(r["seed"], r["step"]) for r in reports if r.get("done")]
    assert done == [(jobs[0].seed, 16), (jobs[1].seed, 32)]  # seed 0 reported done when it ended
    first_done = next(i for i, r in enumerate(reports) if r.get("done"))
    assert all(r["step"] <= 16 for r in reports[:first_done])  # before seed 1 trained on
    evals = [[r for r in comparable(job.folder)[0] if r["kind"] == "eval"] for job in jobs]
    assert [(r["step"], len(r["bins"])) for r in evals[0]] == [(8, 1), (16, 2)]
    assert [(r["step"], len(r["bins"])) for r in evals[1]][-1] == (32, 2)
    assert all(len(r["bins"]) == 1 for r in evals[1][:-1])
    assert [comparable(job.folder)[1]["steps"] for job in jobs] == [16, 32]


def test_the_last_progress_report_shows_the_last_evaluation(tmp_path):
    """A bar ends on the accuracy of the evaluation at the job's last step, the one result.json
    holds, not on the evaluation before it."""
    reports = []
    config = tiny_config(max_steps=12, eval_every=4, log_every=4)
    job = Job("UF", 0, TINY_MODEL, config, task_overrides=dict(alphabet_size=8), out_dir=str(tmp_path / "job"))
    result = run_stack([job], reports.append)[0]
    assert [r["step"] for r in reports if r.get("done")] == [12]
    reports = [r for r in reports if not r.get("done")]
    assert reports[-1]["step"] == 12
    assert reports[-1]["train_bin_accuracy"] == result.bins[0].accuracy
    evaluated = [r["bins"][0]["accuracy"] for r in comparable(job.folder)[0] if r["kind"] == "eval"]
    assert [r["train_bin_accuracy"] for r in reports] == evaluated


def test_a_seed_reported_done_shows_one_line_and_its_bar_stays_at_its_end(tmp_path, capsys):
    """Without bars, a job's own done report prints its line; the engine's finish after it, and
    a progress report from the same evaluation, change nothing."""
    from crasplab.train.workers import TaskBars

    config = tiny_config(max_steps=8, eval_every=4, log_every=4)
    job = Job("UF", 0, TINY_MODEL, config, task_overrides=dict(alphabet_size=8), out_dir=str(tmp_path / "job"))
    reports = []
    run_stack([job], reports.append)
    bars = TaskBars([job], enabled=False)
    for report in reports:
        bars.update(report)
    bars.finish(job)
    bars.close()
    lines = [line for line in capsys.readouterr().err.splitlines() if "done at step" in line]
    assert len(lines) == 1 and "seed 0 done at step 8" in lines[0]
    assert bars.steps[str(job.folder)] == 8


def test_two_jobs_of_one_task_and_seed_count_their_steps_apart_on_the_task_s_bar(tmp_path):
    """A sweep trains one task and seed in several configurations: each job's steps add to the bar."""
    from crasplab.train.workers import TaskBars

    config = tiny_config(max_steps=400)
    jobs = [Job("UF", 0, TINY_MODEL, config, out_dir=str(tmp_path / name / "seed0")) for name in ("L1", "L2")]
    bars = TaskBars(jobs, enabled=True, terminal=True)  # a disabled bar counts no steps
    for job, step in ((jobs[0], 100), (jobs[1], 50), (jobs[0], 200)):
        report = dict(task="UF", seed=0, folder=str(job.folder), step=step, max_steps=400, loss=1.0)
        bars.update(dict(report, train_bin_accuracy=None))
    assert bars.bars["UF"].n == 250 and bars.steps == {str(jobs[0].folder): 200, str(jobs[1].folder): 50}
    bars.close()
