"""experiments/sweep.py: the sweep's jobs and the verdict it builds from a selection (without
training), and one tiny sweep end to end."""

from __future__ import annotations

import json

import pytest

from crasplab.cli.sweep import SweepSettings, sweep_jobs, sweep_settings_of, verdict_settings
from crasplab.records.run_folder import RunFolderError
from crasplab.reports.selection import SELECTED, Configuration, NONE_FITS
from crasplab.train.config import QUICK
from experiments import sweep


def config_for(*flags: str) -> SweepSettings:
    return sweep.sweep_config(sweep.build_parser().parse_args(list(flags)))


def test_every_sweep_run_is_evaluated_on_the_training_bin_and_the_validation_bin_only(tmp_path):
    config = config_for("--tasks", "UL", "NF", "--grid", "small", "--lr", "1e-3", "3e-4", "--sweep-seeds", "0", "1")
    jobs = sweep_jobs(config, tmp_path)
    assert len(jobs) == 2 * 8 * 2 * 2  # tasks x (layers x heads x widths) x learning rates x seeds
    assert {job.train.test_bins for job in jobs} == {((1, 20), (21, 30))}  # quick: the verdict judges on 31-40
    assert {job.train.learning_rate for job in jobs} == {1e-3, 3e-4}
    assert all(job.model.d_ff == 0 and job.model.pe == "ape" for job in jobs)
    # The preset's per-task budgets are kept: copying trains its whole budget, retrieval stops early.
    assert {(job.task_code, job.train.max_steps, job.train.stop_after_perfect_evals) for job in jobs} == {
        ("UL", 16000, 1),
        ("NF", 10000, 0),
    }
    assert len({job.folder for job in jobs}) == len(jobs)


def test_the_verdict_trains_each_task_s_chosen_configuration_with_the_preset_s_bins():
    config = config_for("--tasks", "UL", "NF", "UR", "--seeds", "0", "1", "2")
    chosen = Configuration(n_layers=1, n_heads=2, d_model=16, learning_rate=1e-4)
    selection = dict(
        tasks={
            "UL": dict(status=SELECTED, selected=vars(chosen)),
            "NF": dict(status=NONE_FITS, selected=None),
            "UR": dict(status=SELECTED, selected=Configuration(4, 4, 256, 1e-3).to_dict()),
        }
    )
    settings = verdict_settings(config, selection)
    assert settings.tasks == ("UL", "UR") and settings.seeds == (0, 1, 2)  # NF: nothing fit, no verdict
    model = settings.model_for("UL")
    assert (model.n_layers, model.n_heads, model.d_model, model.d_ff) == (1, 2, 16, 0)
    assert settings.train["UL"].learning_rate == 1e-4 and settings.train["UR"].learning_rate == 1e-3
    assert settings.train["UL"].test_bins == QUICK.train.test_bins


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--layers", "1", "--heads", "3", "--d-model", "16"], "no configuration whose d_model the heads divide"),
        (["--validation-bin", "21-30,31-40"], "takes one LO-HI bin"),
    ],
)
def test_a_grid_or_bin_that_cannot_run_is_refused(flags, message):
    with pytest.raises(ValueError, match=message):
        config_for(*flags)


def test_a_sweep_selects_trains_its_verdict_and_reports_again_from_its_files(tmp_path, capsys):
    """End to end on the worker pool: two configurations of UL, the selection, the verdict seed of
    the chosen one; --report-only then rebuilds the same selection and verdict report."""
    out = tmp_path / "sweep"
    flags = ["--tasks", "UL", "--layers", "1", "--heads", "2", "--d-model", "16", "--lr", "1e-3", "3e-3"]
    flags += ["--max-steps", "250", "--seeds", "0", "--workers", "2", "--no-progress"]  # warmup is 200
    sweep.main(flags + ["--out", str(out)])
    printed = capsys.readouterr().out
    selection = json.loads((out / "selection.json").read_text())
    assert [c["finished"] for c in selection["tasks"]["UL"]["candidates"]] == [True, True]
    assert printed.endswith(f"report: {out / 'selection.md'}\n")
    chosen = selection["tasks"]["UL"]["status"] == SELECTED
    assert (out / "verdict" / "report.md").exists() is chosen

    def reports():
        return [(out / name).read_text() for name in ("selection.md", "verdict/report.md") if (out / name).exists()]

    before = reports()
    sweep.main(["--report-only", str(out)])
    assert reports() == before


def test_the_sweep_s_settings_come_back_from_config_json_and_a_hand_edit_is_refused_by_name(tmp_path):
    settings = config_for("--tasks", "UL", "--grid", "small", "--max-steps", "300")
    stored = json.loads(json.dumps(settings.to_dict()))
    assert SweepSettings.from_dict(stored) == settings
    (tmp_path / "config.json").write_text(json.dumps({**stored, "configurations": [dict(n_layers=0, n_heads=2)]}))
    with pytest.raises(RunFolderError) as error:
        sweep_settings_of(tmp_path)
    assert "setting configurations: missing Configuration setting(s) d_model, learning_rate" in str(error.value)
    (tmp_path / "config.json").write_text(json.dumps({**stored, "max_steps": 0}))
    with pytest.raises(RunFolderError, match="setting max_steps = 0 is not accepted"):
        sweep_settings_of(tmp_path)
