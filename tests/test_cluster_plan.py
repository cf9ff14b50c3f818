"""The paper grid's dry run (experiments/paper_grid.py, crasplab.train.plan): every job of the
paper-scale protocol's first round listed, placed longest first on the engine's slots (stacks of
seeds on the accelerator path), the time estimated from the step time, bad flags refused."""

from __future__ import annotations

import re

import pytest

from tests.tiny import TINY_MODEL, tiny_config
from crasplab.train.config import PRESETS
from crasplab.train.loop import Job
from crasplab.train.device import ACCELERATOR_PATH_ENV, REHEARSE
from crasplab.train.plan import H200_PAPER_STEP_S, measure_step_seconds, place, step_shape
from experiments import paper_grid


def job(task: str, max_steps: int) -> Job:
    return Job(
        task_code=task,
        seed=0,
        model=TINY_MODEL,
        train=tiny_config(max_steps=max_steps),
        task_overrides=dict(alphabet_size=8),
        out_dir=f"{task}-{max_steps}",
    )


def test_jobs_are_placed_longest_first_on_the_slot_that_frees_first():
    jobs = [job("UR", 10), job("UR", 40), job("UR", 30), job("UR", 20)]
    seconds = {step_shape(jobs[0]): 1.0}
    placements = {p.job.out_dir: (p.slot, p.start_s, p.end_s) for p in place([[j] for j in jobs], 2, seconds)}
    assert placements == {
        "UR-40": (0, 0.0, 40.0),
        "UR-30": (1, 0.0, 30.0),
        "UR-20": (1, 30.0, 50.0),
        "UR-10": (0, 40.0, 50.0),
    }


@pytest.mark.slow
def test_a_step_is_measured_on_the_jobs_own_shapes():
    seconds = measure_step_seconds(job("UR", 10))
    assert 0 < seconds < 5


def test_a_stack_is_measured_as_a_stack():
    assert measure_step_seconds(job("UR", 10), stack=3) > 0


def dry_run_rows(tmp_path, capsys, *flags) -> tuple[list[str], str]:
    paper_grid.main(["--dry-run", "--out", str(tmp_path), *flags])
    text = capsys.readouterr().out
    assert not any(tmp_path.iterdir()), "a dry run wrote files"
    return [line for line in text.splitlines() if line.startswith(str(tmp_path))], text


# The protocol's first round: every task with 5 seeds under APE, 3 under RoPE and NoPE; ten
# tasks on the paper's sampler, four on the spread sampler.
FIRST_ROUND = (5 + 3 + 3) * (10 + 4)


def test_the_dry_run_lists_the_first_round_of_every_encoding_and_sampler(tmp_path, capsys):
    rows, text = dry_run_rows(tmp_path, capsys, "--step-seconds", "0.1", "--workers", "4")
    assert len(rows) == FIRST_ROUND
    runs = {row.split()[0].split("/")[-3] for row in rows}
    assert runs == {f"{pe}-{sampler}" for pe in ("ape", "rope", "nope") for sampler in ("paper", "spread")}
    assert {row.split()[0].split("/")[-1] for row in rows} <= {f"seed{s}" for s in range(9000, 9005)}
    assert {int(row.split()[1]) for row in rows} == {0, 1, 2, 3}
    # Every job has a 30,000-step cap: at 0.1 s a step, one job is 0.83 slot-hours.
    hours = float(re.search(r"at most ([\d.]+) h \(([\d.]+) slot-hours", text).group(2))
    assert hours == round(FIRST_ROUND * 30_000 * 0.1 / 3600, 2)


def test_on_the_accelerator_path_the_seeds_of_a_task_are_one_unit_timed_as_a_stack(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv(ACCELERATOR_PATH_ENV, REHEARSE)
    rows, text = dry_run_rows(tmp_path, capsys, "--step-seconds", "h200", "--pes", "ape", "--samplers", "paper")
    assert len(rows) == 10 * 5 and {int(row.split()[1]) for row in rows} == {0}
    assert f"a stack of 5: {5 * H200_PAPER_STEP_S * 1000:.1f} ms/step" in text
    hours = float(re.search(r"at most ([\d.]+) h", text).group(1))
    assert hours == pytest.approx(10 * 30_000 * 5 * H200_PAPER_STEP_S / 3600, abs=0.01)


@pytest.mark.parametrize(
    "flags, says",
    [
        (["--stack-size", "0"], "error: --stack-size must be at least 1"),
        (["--gpu-share", "-0.5"], "error: --gpu-share must be in [0, 1]"),
        (["--engine", "ray", "--ray-address", "127.0.0.1:1"], "error: cannot reach the Ray cluster"),
    ],
)
def test_the_dry_run_refuses_bad_engine_flags_with_one_line(tmp_path, flags, says):
    with pytest.raises(SystemExit) as refused:
        paper_grid.main(["--dry-run", "--step-seconds", "0.1", "--out", str(tmp_path), *flags])
    assert str(refused.value).startswith(says)


@pytest.mark.parametrize("value", ["-1", "0", "nan", "inf", "h100"])
def test_the_dry_run_refuses_a_step_time_that_is_not_a_duration(tmp_path, value, capsys):
    with pytest.raises(SystemExit):
        paper_grid.main(["--dry-run", "--step-seconds", value, "--out", str(tmp_path)])
    assert "--step-seconds" in capsys.readouterr().err


def test_the_paper_protocol_preset_is_appendix_b_as_written_with_fresh_seeds():
    """Nothing in protocol-paper was tuned: the paper's model and optimizer, lengths 1-50, at most
    30,000 steps, every batch mixing all lengths, the protocol's bins to 4x (UF and UB to 150,
    where their 150 symbols end) and seeds no other preset has trained."""
    preset = PRESETS["protocol-paper"]
    model, train = preset.model, preset.train
    assert (model.n_layers, model.n_heads, model.d_model) == (4, 4, 256)
    assert (train.learning_rate, train.weight_decay, train.batch_size) == (1e-4, 0.01, 64)
    assert (train.train_lengths, train.max_steps, train.length_buckets) == ((1, 50), 30_000, 1)
    assert train.max_grad_norm == 1.0  # as the official code's Trainer clips
    assert train.test_bins == ((1, 50), (51, 100), (101, 150), (151, 200))
    assert all(preset.train_for(task).test_bins[-1] == (101, 150) for task in ("UF", "UB"))
    others = {seed for name, other in PRESETS.items() if name != preset.name for seed in other.seeds}
    assert min(preset.seeds) == 9000 and not others & set(preset.seeds)
