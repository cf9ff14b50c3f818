"""The flags the experiment scripts share (crasplab.cli.arguments): each is defined once, so every
script that has it parses it alike, and the flags' defaults are the settings types' defaults."""

import argparse
from dataclasses import dataclass

import pytest

from crasplab.cli import arguments
from crasplab.cli.experiment import Report
from crasplab.incontext.settings import GitRunSettings, LoremRunSettings, MechanismSettings, PretrainedSettings
from crasplab.records.settings import Settings, SettingsError
from crasplab.incontext.finetune_config import PRESETS
from experiments import finetune, mechanism, pretrained, realistic


def _realistic_command(name: str) -> argparse.ArgumentParser:
    commands = next(a for a in realistic.build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return commands.choices[name]


PARSERS = {
    "pretrained": pretrained.build_parser,
    "mechanism": mechanism.build_parser,
    "finetune": finetune.build_parser,
    "realistic lorem": lambda: _realistic_command("lorem"),
    "realistic git": lambda: _realistic_command("git"),
}
# Which scripts share which flag; finetune's --tasks defaults to its preset's, so it has its own help.
SHARED = {
    "--model": list(PARSERS),
    "--out": list(PARSERS),
    "--report-only": list(PARSERS),
    "--seed": list(PARSERS),
    "--tasks": ["pretrained", "mechanism"],
    "--lengths": ["pretrained", "mechanism"],
    "--n": ["pretrained", "mechanism"],
    "--batch-size": ["pretrained", "realistic lorem", "realistic git"],
    "--dtype": ["pretrained", "realistic lorem", "realistic git"],
}


# The help of these names each script's own default model, run folder or report files, or what its seed fixes.
HELP_OF_ITS_OWN = ("--model", "--out", "--report-only", "--seed")


def _definition(script: str, flag: str) -> tuple:
    """What a flag accepts and, where it is the same for every script, what its help says."""
    action = PARSERS[script]()._option_string_actions[flag]
    kind = getattr(action.type, "__qualname__", action.type)  # at_least(1) is a new closure per call
    help_text = None if flag in HELP_OF_ITS_OWN else action.help
    return type(action), action.nargs, kind, action.choices, action.metavar, help_text


@pytest.mark.parametrize("flag", list(SHARED))
def test_a_shared_flag_is_defined_alike_in_every_script_that_has_it(flag):
    definitions = {script: _definition(script, flag) for script in SHARED[flag]}
    assert len(set(definitions.values())) == 1, definitions


@pytest.mark.parametrize("script", list(PARSERS))
def test_help_gives_each_default_once_and_never_none(script):
    """A default of None means "not given", which the flag's help says in words (--out: the folder
    named after the model): the help adds no "(default: None)" after that text."""
    parser = PARSERS[script]()
    text = " ".join(parser.format_help().split())
    assert "(default: None)" not in text
    assert f"(default: {parser._option_string_actions['--seed'].default})" in text  # a real default stays


@pytest.mark.parametrize(
    "flag, values, message",
    [
        ("--seed", ["-1"], "must be at least 0, got -1"),
        ("--seed", ["x"], "'x' is not an integer"),
        ("--lengths", ["0"], "must be at least 1, got 0"),
        ("--lengths", ["5", "5"], "5 given more than once"),
        ("--tasks", ["UF", "UB", "UF"], "UF given more than once"),
        ("--tasks", ["Majority"], "invalid choice: 'Majority'"),
        ("--n", ["0"], "must be at least 1, got 0"),
        ("--batch-size", ["0"], "must be at least 1, got 0"),
    ],
)
def test_every_script_with_a_shared_flag_refuses_the_same_bad_values_while_parsing(flag, values, message, capsys):
    for script in SHARED[flag]:
        with pytest.raises(SystemExit):
            PARSERS[script]().parse_args([flag, *values])
        assert f"argument {flag}: {message}" in capsys.readouterr().err, script


@pytest.mark.parametrize(
    "script, argv, expected",
    [
        (pretrained, [], PretrainedSettings()),
        (mechanism, [], MechanismSettings()),
        (realistic, ["lorem"], LoremRunSettings()),
        (realistic, ["git"], GitRunSettings()),
        (
            finetune,
            ["--preset", "quick"],
            finetune.FinetuneSettings(preset="quick", tasks=PRESETS["quick"].tasks, finetune=PRESETS["quick"].config),
        ),
    ],
)
def test_without_flags_a_script_runs_its_settings_types_defaults(script, argv, expected):
    assert script.settings_from(script.build_parser().parse_args(argv)) == expected


def test_flags_given_reach_the_settings():
    argv = ["--tasks", "UB", "UF", "--lengths", "7", "3", "--n", "2", "--seed", "5", "--batch-size", "3"]
    settings = pretrained.settings_from(pretrained.build_parser().parse_args([*argv, "--copying-demo-length", "4"]))
    assert (settings.tasks, settings.lengths, settings.n, settings.seed, settings.batch_size) == (
        ("UB", "UF"),
        (7, 3),
        2,
        5,
        3,
    )
    assert (
        settings.copying_demo_length == 4 and settings.retrieval_demo_length == PretrainedSettings.retrieval_demo_length
    )


@dataclass(frozen=True)
class Toy(Settings):
    lengths: tuple[int, ...] = (1, 2)
    seed: int = 0

    def check(self) -> None:
        self.require(self.seed >= 0, "seed", "an integer of at least 0")


def _toy_args(**flags) -> argparse.Namespace:
    return argparse.Namespace(**{"lengths": [3, 4], "seed": 1, "out": None, "report_only": None, **flags})


def test_settings_from_flags_reads_every_flag_but_the_run_folders_and_validates():
    assert arguments.settings_from_flags(Toy, _toy_args()) == Toy(lengths=(3, 4), seed=1)
    assert arguments.settings_from_flags(Toy, _toy_args(seed=2), seed=7) == Toy(lengths=(3, 4), seed=7)
    with pytest.raises(SettingsError, match="setting seed = -1"):
        arguments.settings_from_flags(Toy, _toy_args(seed=-1))
    with pytest.raises(TypeError, match="verbose"):  # a flag that no setting reads is a mistake, not ignored
        arguments.settings_from_flags(Toy, _toy_args(verbose=True))


def test_flags_of_settings_default_to_the_settings_and_list_flags_take_distinct_values(capsys):
    parser = argparse.ArgumentParser()
    arguments.add_flags_of(parser, Toy, {"seed": (arguments.at_least(0), "fixes everything")})
    arguments.add_list_flag(parser, "--lengths", Toy.lengths, "lengths", type=int)
    defaults = parser.parse_args([])
    assert defaults.seed == 0 and defaults.lengths == [1, 2]  # a list: what argparse gives when the flag is given
    assert parser.parse_args(["--seed", "3", "--lengths", "5", "6"]).lengths == [5, 6]
    with pytest.raises(SystemExit):
        parser.parse_args(["--lengths", "5", "5"])
    assert "argument --lengths: 5 given more than once" in capsys.readouterr().err


def _toy_experiment(tmp_path, calls: list) -> tuple:
    def settings_from(args):
        calls.append("settings")
        return arguments.settings_from_flags(Toy, args)

    def run(settings, out):
        calls.append(("run", settings, out))

    def write(out):
        calls.append(("report", out))
        return {"seed": 1}

    return settings_from, lambda settings: tmp_path / f"default-{settings.seed}", run, Report(write, str)


def test_run_from_flags_runs_into_out_or_the_default_folder_and_report_only_builds_no_settings(tmp_path, capsys):
    calls = []
    arguments.run_from_flags(_toy_args(), *_toy_experiment(tmp_path, calls))
    assert calls == [
        "settings",
        ("run", Toy(lengths=(3, 4), seed=1), tmp_path / "default-1"),
        ("report", tmp_path / "default-1"),
    ]

    calls.clear()
    arguments.run_from_flags(_toy_args(out=tmp_path / "chosen"), *_toy_experiment(tmp_path, calls))
    assert calls[1:] == [("run", Toy(lengths=(3, 4), seed=1), tmp_path / "chosen"), ("report", tmp_path / "chosen")]

    calls.clear()
    arguments.run_from_flags(_toy_args(seed=-1, report_only=tmp_path / "old"), *_toy_experiment(tmp_path, calls))
    assert calls == [("report", tmp_path / "old")]  # invalid flags do not matter: nothing runs
    assert f"report: {tmp_path / 'old' / 'report.md'}" in capsys.readouterr().out

    with pytest.raises(SystemExit, match="^error: setting seed = -1"):
        arguments.run_from_flags(_toy_args(seed=-1), *_toy_experiment(tmp_path, calls))
