"""The length-generalization report and command line: numbers come from the run's files only."""

import json

import pytest

from crasp.prediction import Prediction
from crasplab.cli.length_gen import default_run_folder, run_settings
from experiments import length_gen
from crasplab.verdicts import predictions as run_predictions
from crasplab.records.job_folder import run_jobs, run_records
from crasplab.reports.length_gen import report_markdown, summarize, write_report
from crasplab.train.config import PRESETS, ModelSettings, RunSettings, TrainConfig
from crasplab.records.settings import SettingsError
from crasplab.train.runs import make_jobs
from tests.tiny import write_run_records


def settings_from_flags(args) -> RunSettings:
    """The run's settings from length_gen.py's parsed flags, as the script makes them."""
    return run_settings(length_gen.request_from_flags(args))


# Fixed predictions, so that the report is tested apart from the interpreter: UF generalizes, NF
# does not, NB unknown.
PREDICTIONS = {
    "UF": Prediction(True, "yes (C-RASP[local] witness)", ""),
    "NF": Prediction(False, "no (not in C-RASP[pos])", ""),
    "NB": Prediction(None, "unknown", ""),
}


@pytest.fixture
def verdicts(monkeypatch):
    """A run started in the test records PREDICTIONS in its predictions.json."""
    monkeypatch.setattr(run_predictions, "predict", lambda task_code, pe: PREDICTIONS[task_code])


def eval_record(task, seed, step, accuracies, n=1000):
    bins = [
        dict(lo=1 + 10 * k, hi=10 * (k + 1), accuracy=a, n=n, greedy_checked=8, greedy_disagreements=0)
        for k, a in enumerate(accuracies)
    ]
    return dict(kind="eval", task=task, seed=seed, step=step, bins=bins)


@pytest.fixture
def run_dir(tmp_path, verdicts):
    train = TrainConfig(train_lengths=(1, 10), test_bins=((1, 10), (11, 20), (21, 30))).to_dict()
    config = dict(
        preset="quick",
        tasks=["UF", "NF", "NB"],
        seeds=[0, 1],
        train={task: train for task in ("UF", "NF", "NB")},
        model=ModelSettings(pe="ape").to_dict(),
        task_overrides={task: {} for task in ("UF", "NF", "NB")},
        model_overrides={"NB": dict(n_layers=6)},
    )
    (tmp_path / "config.json").write_text(json.dumps(config))
    records = [
        eval_record("UF", 0, 500, [0.5, 0.0, 0.0]),  # superseded by the later evaluation
        eval_record("UF", 0, 1000, [1.0, 0.96, 0.94]),
        eval_record("UF", 1, 1000, [1.0, 0.9, 0.88]),
        eval_record("NF", 0, 1000, [1.0, 0.5, 0.4]),
        eval_record("NF", 1, 1000, [1.0, 0.1, 0.0]),
        eval_record("NB", 0, 1000, [1.0, 0.2, 0.0]),
        dict(kind="result", task="UF", seed=0, pe="ape", steps=1000, stopped_early=True, elapsed_s=10.0, bins=[]),
        dict(kind="result", task="UF", seed=1, pe="ape", steps=1000, stopped_early=False, elapsed_s=12.0, bins=[]),
    ]
    write_run_records(tmp_path, records)
    settings = RunSettings.from_dict(config)
    run_predictions.write_predictions(tmp_path, run_predictions.settings_predictions(settings, None))
    return tmp_path


def test_each_seed_is_observed_on_its_own_and_the_mean_decides_nothing(run_dir, verdicts):
    """Outside the protocol each fitted seed passes, fails or is inconclusive at the last bin by its
    own Wilson interval against the threshold (the protocol's seed rule); the mean over seeds is a
    number in the table, never an observation: UF's mean 0.91 is above 0.9, yet its seeds split."""
    summary = summarize(run_dir)
    rows = {row["task"]: row for row in summary["rows"]}
    assert rows["UF"]["bins"][2]["mean"] == pytest.approx(0.91)
    assert rows["UF"]["bins"][2]["std"] == pytest.approx(0.03)
    # 940 of 1000: [0.924, 0.953] lies above 0.9; 880 of 1000: [0.858, 0.898] lies below.
    assert [o["observation"] for o in rows["UF"]["observations"]] == ["passes", "fails"]
    assert rows["UF"]["observed"] == "1 passes, 1 fails" and rows["UF"]["agrees"] is None
    assert rows["UF"]["seeds_agreeing"] == 1
    assert rows["NF"]["observed"] == "2 fail" and rows["NF"]["agrees"] is True  # predicted "no"
    assert rows["NB"]["observed"] == "fails" and rows["NB"]["agrees"] is None  # no prediction
    assert (summary["agreements"], summary["judged"]) == (1, 1)
    assert rows["UF"]["finished"] and not rows["NF"]["finished"]
    at_095 = {row["task"]: row for row in summarize(run_dir, threshold=0.95)["rows"]}
    # At 0.95, [0.924, 0.953] straddles the threshold: seed 0 becomes inconclusive.
    assert at_095["UF"]["observed"] == "1 fails, 1 inconclusive" and at_095["UF"]["agrees"] is None


def test_one_seed_near_the_threshold_is_inconclusive_and_its_interval_shown(tmp_path, verdicts):
    """92 of 100 right is not evidence of reaching 0.9 (Wilson [0.850, 0.959]): the seed is
    inconclusive and the task counts neither way, whatever its accuracy."""
    train = TrainConfig(train_lengths=(1, 10), test_bins=((1, 10), (11, 20))).to_dict()
    config = dict(
        preset="quick",
        tasks=["UF"],
        seeds=[0],
        train={"UF": train},
        model=ModelSettings(pe="ape").to_dict(),
        task_overrides={"UF": {}},
    )
    (tmp_path / "config.json").write_text(json.dumps(config))
    write_run_records(tmp_path, [eval_record("UF", 0, 1000, [1.0, 0.92], n=100)])
    run_predictions.write_predictions(
        tmp_path, run_predictions.settings_predictions(RunSettings.from_dict(config), None)
    )
    summary = summarize(tmp_path)
    (row,) = summary["rows"]
    assert row["observed"] == "inconclusive" and row["agrees"] is None and summary["judged"] == 0
    assert "| inconclusive [0.850, 0.959] | - |" in report_markdown(summary)


def test_a_model_that_did_not_fit_is_not_judged(run_dir, verdicts):
    """Below 0.99 on its training lengths a model says nothing about length generalization: its
    seed is left out of the verdict, and a task none of whose seeds fit is reported as such and
    left out of the agreement count, whatever its longer bins show."""

    def add(record):
        write_run_records(run_dir, [record])

    add(eval_record("NF", 1, 2000, [0.95, 0.0, 0.0]))  # NF seed 1 no longer fits: seed 0 alone counts
    rows = {row["task"]: row for row in summarize(run_dir)["rows"]}
    assert (rows["NF"]["observed"], rows["NF"]["seeds_fit"], rows["NF"]["agrees"]) == (
        "1 fails, 1 did not fit",
        1,
        True,
    )
    add(eval_record("NF", 0, 2000, [0.5, 0.9, 0.9]))
    summary = summarize(run_dir)
    rows = {row["task"]: row for row in summary["rows"]}
    assert rows["NF"]["observed"] == "2 did not fit" and rows["NF"]["agrees"] is None
    assert summary["did_not_fit"] == ["NF"] and (summary["agreements"], summary["judged"]) == (0, 0)


def test_a_job_still_training_without_test_bins_waits_outside_the_summary(run_dir, verdicts):
    """A job that scores its test bins only when it stops (the protocol's jobs) has evaluations of
    the training bin alone until then: its seed is left out of the task's row, not read as a run
    whose last bin is the training bin (which would call a fitted model 'generalizes')."""
    write_run_records(run_dir, [eval_record("NF", 1, 1500, [1.0])])  # NF seed 1 trains on
    rows = {row["task"]: row for row in summarize(run_dir)["rows"]}
    assert rows["NF"]["seeds"] == [0] and rows["NF"]["bins"][2]["mean"] == pytest.approx(0.4)
    write_run_records(run_dir, [eval_record("NB", 0, 1500, [1.0])])  # the only NB seed trains on
    assert "NB" not in {row["task"] for row in summarize(run_dir)["rows"]}


def test_a_run_outside_the_protocol_is_read_at_the_threshold_asked_and_config_json_holds_none(run_dir, capsys):
    """How results are read is not a training setting: the report takes --threshold (default 0.9);
    a threshold left in config.json by an older lab decides nothing."""
    config = json.loads((run_dir / "config.json").read_text())
    assert "threshold" not in config
    (run_dir / "config.json").write_text(json.dumps(dict(config, threshold=0.95)))
    length_gen.main(["--report-only", str(run_dir)])
    assert json.loads((run_dir / "summary.json").read_text())["threshold"] == 0.9
    length_gen.main(["--report-only", str(run_dir), "--threshold", "0.95"])
    assert "agrees" in capsys.readouterr().out
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["threshold"] == 0.95 and summary["rows"][0]["observed"] == "1 fails, 1 inconclusive"


def test_the_job_folders_are_the_only_record_of_a_run(run_dir):
    """The report reads each job's folder and writes no copy of its records: a job whose folder is
    gone is gone from the report, and one that is back is back."""
    import shutil

    length_gen.main(["--report-only", str(run_dir)])
    assert not (run_dir / "metrics.jsonl").exists()
    assert summarize(run_dir)["rows"][0]["seeds"] == [0, 1]
    shutil.move(run_dir / "UF" / "seed1", run_dir / "elsewhere")
    assert summarize(run_dir)["rows"][0]["seeds"] == [0]
    shutil.move(run_dir / "elsewhere", run_dir / "UF" / "seed1")
    assert summarize(run_dir)["rows"][0]["seeds"] == [0, 1]


def test_a_report_shows_the_predictions_the_run_started_with(run_dir, monkeypatch):
    """The interpreter is not asked again when a report is rebuilt: predictions.json decides."""
    monkeypatch.setattr(run_predictions, "predict", lambda task_code, pe: Prediction(False, "changed since", ""))
    rows = {row["task"]: row for row in summarize(run_dir)["rows"]}
    assert rows["UF"]["predicted"]["label"] == "yes (C-RASP[local] witness)"


def test_a_run_made_before_predictions_json_gets_todays_marked_as_such(run_dir, capsys):
    (run_dir / "predictions.json").unlink()
    with pytest.raises(Exception, match="predictions.json is missing"):
        summarize(run_dir)
    length_gen.main(["--report-only", str(run_dir)])
    assert "the run predates predictions.json: these are the interpreter's of" in (run_dir / "report.md").read_text()
    assert "wrote today's predictions, marked so" in capsys.readouterr().err


def test_report_only_rebuilds_files_and_prints_the_table(run_dir, verdicts, capsys):
    length_gen.main(["--report-only", str(run_dir)])
    table = capsys.readouterr().out
    assert (
        "| UF | yes (C-RASP[local] witness) | 1.000 ± 0.000 | 0.930 ± 0.030 | 0.910 ± 0.030 | 1 passes, 1 fails "
        "| - (1 of 2 fitted seeds in line) |"
    ) in table
    assert json.loads((run_dir / "summary.json").read_text()) == json.loads(json.dumps(summarize(run_dir)))
    assert "2 of 2" in (run_dir / "report.md").read_text()
    assert (run_dir / "accuracy_by_length.png").read_bytes()[:4] == b"\x89PNG"


def test_every_flag_is_explained_and_overrides_apply(tmp_path):
    parser = length_gen.build_parser()
    for action in parser._actions:
        assert action.help, f"flag {action.option_strings} has no help text"
    args = parser.parse_args(
        [
            "--pe",
            "rope",
            "--preset",
            "quick",
            "--tasks",
            "UF",
            "--seeds",
            "3",
            "4",
            "--train-lengths",
            "1",
            "8",
            "--test-bins",
            "1-8,9-16",
            "--d-model",
            "32",
            "--learning-rate",
            "0.01",
            "--max-steps",
            "300",
        ]
    )
    settings = settings_from_flags(args)
    train = settings.train["UF"]
    assert train.train_lengths == (1, 8) and train.test_bins == ((1, 8), (9, 16))
    assert train.learning_rate == 0.01 and train.max_steps == 300
    assert settings.model == PRESETS["quick"].model.replace(pe="rope", d_model=32)
    assert settings.seeds == (3, 4) and settings.tasks == ("UF",)
    assert RunSettings.from_dict(json.loads(json.dumps(settings.to_dict()))) == settings  # as config.json stores it
    jobs = make_jobs(settings, tmp_path)
    assert [job.folder.name for job in jobs] == ["seed3", "seed4"]
    assert all(job.model.pe == "rope" for job in jobs)


def test_training_lengths_alone_move_the_presets_test_bins_with_them():
    """--train-lengths 1 30 on the quick preset tests 1.5x and 2x of 30, as 21-30 and 31-40 do of 20
    (it used to keep 21-30 and 31-40, inside the new training range)."""
    args = length_gen.build_parser().parse_args(
        ["--preset", "quick", "--tasks", "UF", "NF", "--train-lengths", "1", "30"]
    )
    settings = settings_from_flags(args)
    assert {task: train.test_bins for task, train in settings.train.items()} == {
        "UF": ((1, 30), (31, 45), (46, 60)),
        "NF": ((1, 30), (31, 45), (46, 60)),
    }


def test_training_lengths_move_the_recipes_position_reach_and_a_bin_beyond_it_is_refused():
    """The positions trained belong to the recipe: --train-lengths 1 30 moves the quick preset's
    reach of 40 to 60 as it moves its last bin, and --test-bins beyond the reach is an error that
    names the flag, not a larger table chosen silently."""
    parser = length_gen.build_parser()
    moved = settings_from_flags(parser.parse_args(["--preset", "quick", "--tasks", "UF", "--train-lengths", "1", "30"]))
    assert moved.train["UF"].position_reach == 60
    with pytest.raises(SettingsError, match="goes beyond position_reach=40"):
        settings_from_flags(parser.parse_args(["--preset", "quick", "--tasks", "UF", "--test-bins", "1-20,41-50"]))
    longer = parser.parse_args(["--preset", "quick", "--tasks", "UF", "--test-bins", "1-20,41-50"])
    longer.position_reach = 50
    assert settings_from_flags(longer).train["UF"].test_bins[-1] == (41, 50)


def test_a_seed_block_gives_a_protocol_run_fresh_candidate_seeds():
    parser = length_gen.build_parser()
    assert settings_from_flags(parser.parse_args(["--protocol", "--tasks", "UF"])).seeds == tuple(range(5000, 5010))
    block = settings_from_flags(parser.parse_args(["--protocol", "--tasks", "UF", "--seed-block", "1"]))
    assert block.seeds == tuple(range(5010, 5020))
    with pytest.raises(SettingsError, match="--seed-block chooses a protocol run's candidate seeds"):
        settings_from_flags(parser.parse_args(["--preset", "quick", "--tasks", "UF", "--seed-block", "1"]))


def test_a_sampler_runs_the_non_unique_retrieval_tasks_in_their_own_folder(tmp_path):
    parser = length_gen.build_parser()
    settings = settings_from_flags(parser.parse_args(["--protocol", "--sampler", "spread"]))
    assert settings.tasks == ("NLFirst", "NRFirst", "NLLast", "NRLast")
    assert {task: overrides for task, overrides in settings.task_overrides.items()} == {
        task: dict(occurrences="spread") for task in settings.tasks
    }
    assert {job.task_overrides["occurrences"] for job in make_jobs(settings, tmp_path)} == {"spread"}
    assert default_run_folder(settings, "spread").name == "ape-protocol-spread"
    unique = settings_from_flags(parser.parse_args(["--preset", "quick", "--tasks", "UL"]))
    assert unique.task_overrides["UL"] == PRESETS["quick"].overrides_for("UL")  # no sampler, no change
    with pytest.raises(SettingsError, match="does not apply to UL, NF"):
        settings_from_flags(parser.parse_args(["--sampler", "spread", "--tasks", "NLLast", "UL", "NF"]))


def test_the_official_sampler_draws_the_unique_retrieval_tasks_over_five_symbols_as_the_official_code():
    parser = length_gen.build_parser()
    official = settings_from_flags(parser.parse_args(["--protocol", "--sampler", "official"]))
    assert official.tasks == ("NLFirst", "NRFirst", "NLLast", "NRLast", "UL", "UR")
    assert official.task_overrides["UR"] == dict(alphabet_size=5)  # over the preset's 16
    assert official.task_overrides["NLLast"] == dict(occurrences="official")
    assert default_run_folder(official, "official").name == "ape-protocol-official"
    with pytest.raises(SettingsError, match="does not apply to NF"):
        settings_from_flags(parser.parse_args(["--sampler", "official", "--tasks", "UR", "NF"]))


def test_a_task_whose_model_the_preset_changes_trains_that_model_unless_a_flag_sets_it(tmp_path):
    quick = PRESETS["quick"]
    ((task, changes),) = quick.model_overrides.items()
    other = next(code for code in quick.tasks if code != task)
    parser = length_gen.build_parser()
    settings = settings_from_flags(parser.parse_args(["--preset", "quick", "--tasks", other, task]))
    models = {job.task_code: job.model for job in make_jobs(settings, tmp_path)}
    assert models[other] == quick.model.replace(pe="ape")
    assert models[task] == quick.model.replace(pe="ape", **changes) != models[other]
    assert RunSettings.from_dict(json.loads(json.dumps(settings.to_dict()))) == settings

    # A flag applies to every task, the changed one included.
    flag = "--" + next(iter(changes)).replace("_", "-")
    settings = settings_from_flags(parser.parse_args(["--preset", "quick", "--tasks", other, task, flag, "3"]))
    assert settings.model_overrides == {}
    assert {job.model for job in make_jobs(settings, tmp_path)} == {settings.model}

    absent = next(code for code in quick.tasks if code not in (task, other))
    with pytest.raises(SettingsError, match="not among the tasks"):
        RunSettings.from_dict({**settings.to_dict(), "model_overrides": {absent: dict(n_layers=3)}})
    with pytest.raises(SettingsError, match="unknown ModelSettings setting"):
        RunSettings.from_dict({**settings.to_dict(), "model_overrides": {task: dict(layers=3)}})


def test_the_report_names_the_model_and_each_task_whose_model_differs(run_dir, verdicts):
    write_report(run_dir)
    assert (
        "Model: 4 layers x 4 heads x d_model 256 (d_ff 1024, float32); NB: n_layers 6."
        in (run_dir / "report.md").read_text()
    )


def test_a_compile_cache_that_names_a_file_is_refused_before_anything_is_written(tmp_path, monkeypatch):
    (tmp_path / "a-file").touch()
    monkeypatch.setenv("CRASP_LAB_XLA_CACHE", str(tmp_path / "a-file"))
    with pytest.raises(SystemExit, match="CRASP_LAB_XLA_CACHE=.* names a file, not a folder"):
        length_gen.main(["--out", str(tmp_path / "run"), "--no-progress", "--tasks", "UL"])
    assert not (tmp_path / "run").exists()


def test_bad_bins_are_refused(capsys):
    with pytest.raises(SystemExit):
        length_gen.build_parser().parse_args(["--test-bins", "1-8,nine"])
    assert "expected LO-HI" in capsys.readouterr().err


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--tasks", "ZZ"], "invalid choice: 'ZZ'"),
        (["--seeds", "0", "0"], "argument --seeds: 0 given more than once"),
        (["--workers", "0"], "argument --workers: must be at least 1, got 0"),  # 0 used to mean the default
        (["--seeds", "-1"], "argument --seeds: must be at least 0, got -1"),
        (
            ["--tasks", "UF", "--test-bins", "1-20,400-500", "--position-reach", "500"],
            "task UF, test bin 400-500: not within the lengths its sampler produces (1 to 64, with alphabet_size=64)",
        ),
        # The quick preset's UF has 64 symbols: 1-80 used to be cut silently to 1-64.
        (["--tasks", "UF", "--train-lengths", "1", "80"], "task UF, training lengths 1-80: not within"),
        (["--test-bins", "1-20,15-30"], "test bin 15-30 starts at or below 20"),
        # Sizes that used to pass validation and fail inside the worker, after config.json was written.
        (["--tasks", "UL", "--batch-size", "1000000000"], "lower --batch-size"),
        (["--tasks", "UL", "--max-positions", "1000000000"], "lower --max-positions"),
        (["--tasks", "UL", "--eval-examples-per-length", "1000000000"], "lower --eval-examples-per-length"),
        (["--tasks", "UL", "--threshold", "nan"], "argument --threshold: must be a finite number"),
        (["--tasks", "UL", "--learning-rate", "inf"], "must be a finite number"),
    ],
)
def test_bad_settings_are_refused_before_anything_is_written(tmp_path, capsys, flags, message):
    """A typo must not leave a config.json behind that then refuses the corrected command."""
    out = tmp_path / "run"
    with pytest.raises(SystemExit) as exit_:
        length_gen.main(["--out", str(out), "--no-progress"] + flags)
    assert message in capsys.readouterr().err + str(exit_.value)
    assert not out.exists()


def test_an_out_that_is_a_file_is_refused(tmp_path):
    (tmp_path / "file").write_text("")
    with pytest.raises(SystemExit, match="is a file"):
        length_gen.main(["--out", str(tmp_path / "file"), "--tasks", "UF"])


def test_command_trains_reports_and_resumes_without_retraining(tmp_path, verdicts):
    """A tiny end-to-end run through the worker pool; the second invocation finds every job done."""
    out = tmp_path / "run"
    argv = [
        "--pe",
        "ape",
        "--preset",
        "quick",
        "--tasks",
        "UF",
        "NF",
        "--seeds",
        "0",
        "--out",
        str(out),
        "--n-layers",
        "1",
        "--n-heads",
        "2",
        "--d-model",
        "16",
        "--d-ff",
        "32",
        "--train-lengths",
        "1",
        "4",
        "--test-bins",
        "1-4,5-8",
        "--max-steps",
        "20",
        "--warmup-steps",
        "2",
        "--eval-every",
        "10",
        "--eval-examples-per-length",
        "5",
        "--greedy-examples-per-bin",
        "4",
        "--checkpoint-every",
        "10",
        "--workers",
        "2",
        "--no-progress",
    ]
    length_gen.main(argv)
    records = run_records(out, run_jobs(["UF", "NF"], [0]))
    assert [(job.task, job.final is not None) for job in records] == [("UF", True), ("NF", True)]
    assert records[0].finished
    for name in ("config.json", "summary.json", "report.md", "accuracy_by_length.png"):
        assert (out / name).exists(), name
    first = (out / "UF" / "seed0" / "result.json").read_text()
    length_gen.main(argv)
    assert (out / "UF" / "seed0" / "result.json").read_text() == first
    assert run_records(out, run_jobs(["UF", "NF"], [0])) == records
    # Each invocation leaves its wall time in the run's files, and the report sums them.
    invocations = [json.loads(line) for line in (out / "invocations.jsonl").read_text().splitlines()]
    assert [(i["jobs"], i["workers"], i["finished"]) for i in invocations] == [(2, "2 pinned CPU workers", True)] * 2
    total = sum(i["wall_s"] for i in invocations) / 60
    assert f"Wall time: {total:.1f} min over 2 invocation(s)" in (out / "report.md").read_text()


def test_the_headline_refuses_runs_of_two_recipes():
    """Tables of different recipes are not comparable, so the headline does not set them side by side."""
    from experiments.calibration import protocol_table

    runs = protocol_table.committed_runs(("protocol-clip-ape-unique", "protocol16k-ape-unique"))
    with pytest.raises(ValueError, match="one recipe"):
        protocol_table.headline(runs)


def test_the_headline_compares_the_model_too_and_controls_each_task_at_its_depth():
    """Runs of another model width are another recipe; NB, trained at 4 layers, counts only where UB
    at 4 layers generalizes (without a run that holds it: not counted, "not run"; with the kept UB
    run at 4 layers: not counted, for its verdicts), NF where UF at its depth does, from whichever
    run of the encoding holds it."""
    from experiments.calibration import protocol_table

    runs = protocol_table.committed_runs(("protocol-clip-ape-copying", "protocol-clip-ape-nb"))
    headline = protocol_table.headline(runs)
    nb = next(line for line in headline.splitlines() if line.startswith("| NB |"))
    assert nb.startswith("| NB | 4 |") and nb.count("its control UB at 4 layers not run") == 2
    # rechecked with the complete family of lookups, NB's bins of i.i.d. strings do not discriminate either
    assert "NB 21-30, NB 31-40: a bounded program passes; its control UB at 4 layers not run" in headline
    summary, settings = runs["protocol-clip-ape-nb"]
    wider = dict(
        runs, **{"protocol-clip-ape-nb": (summary, settings.replace(model=settings.model.replace(d_model=128)))}
    )
    with pytest.raises(ValueError, match="one recipe"):
        protocol_table.headline(wider)
    # UB at 4 layers, generalizing at both bins, makes NB's bins count (as UB's 2-layer row, moved)
    summary, settings = runs["protocol-clip-ape-copying"]
    deeper = dict(
        runs, **{"protocol-clip-ape-copying": (summary, settings.replace(model_overrides={"UB": {"n_layers": 4}}))}
    )
    cells = protocol_table.headline_cells(deeper)["ape"]
    assert all(b["control"]["verdict"] == "generalizes" for b in cells[("NB", 4, "paper's", 40)]["bins"])
    with_control = protocol_table.committed_runs(("protocol-clip-ape-nb", "protocol-clip-ape-ub4"))
    nb_bins = protocol_table.headline_cells(with_control)["ape"][("NB", 4, "paper's", 40)]["bins"]
    assert [b["control"]["verdict"] for b in nb_bins] == ["mixed", "fails"]
    assert "NB 21-30: a bounded program passes; its control UB at 4 layers mixed; NB 31-40: a bounded" in (
        protocol_table.headline(with_control)
    )


def test_a_row_with_too_few_fitted_seeds_reads_alike_whether_none_or_some_fit():
    """NoPE NRLast on the spread sampler fit on 1 of 10 seeds, NLLast on 0 of 10: both rows give
    no verdict, and both say how many unfitted seeds were still improving when the rate reached 0
    (the recipe's defect), which a row with one fitted seed once lost behind its bins."""
    from experiments.calibration import protocol_table

    runs = protocol_table.committed_runs(("protocol-clip-nope-spread",))
    summary, settings = runs["protocol-clip-nope-spread"]
    rows = {row["task"]: row for row in summary["protocol"]["rows"]}
    assert len(rows["NRLast"]["fitted"]) == 1 and not rows["NLLast"]["fitted"]
    headline = protocol_table.headline(runs)
    for task in ("NLLast", "NRLast"):
        improving = len(rows[task]["still_improving"])
        assert improving > 0
        line = next(line for line in headline.splitlines() if line.startswith(f"| {task} |"))
        assert line.endswith(f"fit; too few fitted seeds ({improving} still improving at the cap) |")
        table_line = next(
            line for line in protocol_table.table(summary, settings).splitlines() if line.startswith(f"| {task} |")
        )
        assert table_line.count(f"{improving} still improving at the cap") == 2  # each of the two test bins


@pytest.mark.parametrize(
    "run",
    [
        "protocol-ape",
        "protocol-ape-spread",
        "protocol-ape-copying",
        "protocol16k-ape-copying",
        "protocol-clip-ape-copying",
        "protocol-clip-rope-copying",
        "protocol-clip-rope",
    ],
)
def test_committed_protocol_runs_rebuild_their_reports_from_their_files(run, tmp_path, capsys):
    """A kept copy of a run (its job folders without checkpoints) is its own record: its report comes
    back the same from config.json, the job folders' records, protocol.json, predictions.json and
    invocations.jsonl."""
    import shutil

    from experiments.calibration import protocol_table

    shutil.copytree(protocol_table.EVIDENCE / run, tmp_path / run)
    length_gen.main(["--report-only", str(tmp_path / run)])
    assert (tmp_path / run / "report.md").read_text() == (protocol_table.EVIDENCE / run / "report.md").read_text()


def test_a_protocol_report_makes_no_mean_over_seeds_and_others_still_do(tmp_path):
    """Under the protocol a verdict is counted per seed: its report shows each seed's interval and
    no mean ± std (a mean of a bimodal set of seeds is a number no model has)."""
    import shutil

    from experiments.calibration import protocol_table

    for run, under_protocol in (("protocol-ape-spread", True), ("quick-run-ape", False)):
        shutil.copytree(protocol_table.EVIDENCE / run, tmp_path / run)
        report = report_markdown(summarize(tmp_path / run))
        assert ("## Verdicts under the protocol" in report) is under_protocol
        assert ("mean ± std" in report) is not under_protocol


def test_a_hand_edited_config_is_one_error_line_and_nothing_is_rebuilt(run_dir):
    config = json.loads((run_dir / "config.json").read_text())
    config["train"]["UF"] = dict(config["train"]["UF"], no_such_setting=1)
    (run_dir / "config.json").write_text(json.dumps(config))
    with pytest.raises(SystemExit, match="config.json is not the settings of a length_gen run"):
        length_gen.main(["--report-only", str(run_dir)])
    assert not (run_dir / "report.md").exists()
