"""The sweep's selection rule (crasplab.reports.selection) on synthetic result files: no training.

Each case writes the result.json files a sweep would leave and checks the choice: the best
validation accuracy among the configurations that fit, ties to the smaller model whatever the
listing order, nothing when no configuration fits or a run is unfinished, and a clear error
when a run lacks the validation bin."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crasplab.records.files import ResultFileError, write_json
from crasplab.records.job_folder import BinEval, JobResult
from crasplab.reports.selection import (
    GRIDS,
    NONE_FITS,
    PENDING,
    SELECTED,
    Candidate,
    Configuration,
    grid,
    select,
    select_per_task,
    selection_markdown,
    sweep_folder,
)

TRAIN_BIN, VALIDATION_BIN = (1, 20), (21, 30)
SMALL = Configuration(n_layers=1, n_heads=2, d_model=16, learning_rate=1e-3)
MEDIUM = Configuration(n_layers=2, n_heads=4, d_model=64, learning_rate=1e-3)
LARGE = Configuration(n_layers=4, n_heads=4, d_model=256, learning_rate=1e-4)


def write_result(
    sweep: Path, task: str, configuration: Configuration, seed: int, train: float, validation: float | None
) -> None:
    bins = [BinEval(*TRAIN_BIN, accuracy=train, n=100)]
    if validation is not None:
        bins.append(BinEval(*VALIDATION_BIN, accuracy=validation, n=100))
    result = JobResult(task, seed, "ape", steps=100, stopped_early=False, elapsed_s=1.0, bins=tuple(bins))
    write_json(sweep_folder(sweep, task, configuration, seed) / "result.json", result.to_dict())


def choose(sweep: Path, configurations: list[Configuration], seeds=(0,), task: str = "UL") -> dict:
    return select_per_task(sweep, [task], configurations, seeds, {task: (TRAIN_BIN, VALIDATION_BIN)})["tasks"][task]


def test_the_best_validation_accuracy_among_the_runs_that_fit_wins(tmp_path):
    write_result(tmp_path, "UL", SMALL, 0, train=0.98, validation=1.00)  # does not fit: its 1.00 does not count
    write_result(tmp_path, "UL", MEDIUM, 0, train=1.00, validation=0.80)
    write_result(tmp_path, "UL", LARGE, 0, train=0.99, validation=0.90)
    entry = choose(tmp_path, [SMALL, MEDIUM, LARGE])
    assert entry["status"] == SELECTED and Configuration.from_dict(entry["selected"]) == LARGE
    assert [c["fits"] for c in entry["candidates"]] == [False, True, True]


def test_a_configuration_fits_on_the_mean_over_its_seeds(tmp_path):
    write_result(tmp_path, "UL", SMALL, 0, train=1.00, validation=0.95)
    write_result(tmp_path, "UL", SMALL, 1, train=0.96, validation=0.95)  # mean 0.98: below the fit threshold
    write_result(tmp_path, "UL", MEDIUM, 0, train=1.00, validation=0.50)
    write_result(tmp_path, "UL", MEDIUM, 1, train=0.99, validation=0.70)
    entry = choose(tmp_path, [SMALL, MEDIUM], seeds=(0, 1))
    assert Configuration.from_dict(entry["selected"]) == MEDIUM
    assert entry["candidates"][1]["validation_accuracy"] == 0.6


@given(order=st.permutations([SMALL, MEDIUM, LARGE]))
@settings(max_examples=12, deadline=None)
def test_ties_go_to_the_smaller_model_whatever_the_listing_order(order):
    candidates = [
        Candidate(configuration, finished=True, train_accuracy=1.0, validation_accuracy=0.9) for configuration in order
    ]
    assert select(candidates) == (SELECTED, next(c for c in candidates if c.configuration == SMALL))


def test_ties_between_equal_sizes_go_to_fewer_heads_then_the_lower_learning_rate():
    configurations = [Configuration(2, 4, 64, 1e-3), Configuration(2, 2, 64, 1e-3), Configuration(2, 2, 64, 1e-4)]
    candidates = [Candidate(c, True, 1.0, 0.5) for c in configurations]
    assert select(candidates)[1].configuration == Configuration(2, 2, 64, 1e-4)


def test_no_selection_when_no_configuration_fits_and_the_closest_is_named(tmp_path):
    write_result(tmp_path, "UR", SMALL, 0, train=0.33, validation=0.30)
    write_result(tmp_path, "UR", MEDIUM, 0, train=0.88, validation=0.70)
    entry = choose(tmp_path, [SMALL, MEDIUM], task="UR")
    assert (entry["status"], entry["selected"], entry["closest_on_training_bin"]) == (NONE_FITS, None, MEDIUM.name)
    assert "no configuration fits (closest: L2-H4-D64-lr0.001)" in selection_markdown(
        dict(fit_threshold=0.99, seeds=[0], tasks={"UR": entry})
    )


def test_an_unfinished_run_holds_the_selection_back(tmp_path):
    write_result(tmp_path, "UL", SMALL, 0, train=1.00, validation=1.00)
    entry = choose(tmp_path, [SMALL, MEDIUM])  # MEDIUM has no result.json yet
    assert (entry["status"], entry["selected"]) == (PENDING, None)
    assert entry["candidates"][1] == dict(
        configuration=MEDIUM.name, finished=False, fits=False, train_accuracy=None, validation_accuracy=None
    )


def test_a_run_without_the_validation_bin_is_refused_with_its_path_and_bins(tmp_path):
    write_result(tmp_path, "UL", SMALL, 0, train=1.00, validation=None)
    path = sweep_folder(tmp_path, "UL", SMALL, 0) / "result.json"
    with pytest.raises(ResultFileError, match=rf"{path}: no evaluation of the bin 21-30 \(it holds 1-20\)"):
        choose(tmp_path, [SMALL])


def test_a_result_file_that_is_not_json_names_itself(tmp_path):
    path = sweep_folder(tmp_path, "UL", SMALL, 0) / "result.json"
    path.parent.mkdir(parents=True)
    path.write_text("{")
    with pytest.raises(ResultFileError, match=rf"{path}: not JSON"):
        choose(tmp_path, [SMALL])


def test_the_rule_is_applied_to_each_task_on_its_own_files(tmp_path):
    for task, (small, medium) in {"UL": (0.9, 0.8), "NF": (0.1, 0.3)}.items():
        write_result(tmp_path, task, SMALL, 0, train=1.0, validation=small)
        write_result(tmp_path, task, MEDIUM, 0, train=1.0, validation=medium)
    bins = {task: (TRAIN_BIN, VALIDATION_BIN) for task in ("UL", "NF")}
    chosen = select_per_task(tmp_path, ["UL", "NF"], [SMALL, MEDIUM], [0], bins)["tasks"]
    assert {task: Configuration.from_dict(e["selected"]) for task, e in chosen.items()} == {"UL": SMALL, "NF": MEDIUM}
    assert json.loads(json.dumps(chosen)) == chosen  # selection.json holds it as is


def test_huang_grid_has_54_configurations_and_heads_must_divide_the_width():
    assert len(grid(**GRIDS["huang"])) == 54
    assert grid(n_layers=(1,), n_heads=(3, 4), d_model=(16,), learning_rate=(1e-3,)) == [Configuration(1, 4, 16, 1e-3)]
    assert len({c.name for c in grid(**GRIDS["huang"])}) == 54  # one folder per configuration
