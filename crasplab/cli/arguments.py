"""The flags the experiment scripts share (--model, --out, --report-only, --preset, --seed, the
few-shot prompts' --tasks --lengths --n, the decoding --batch-size and --dtype), each defined here
once; argument types that refuse bad values while the flags are parsed, and the help formatter.
settings_from_flags turns parsed flags into an experiment's settings, and run_from_flags runs the
experiment (crasplab.cli.experiment) where --out or --report-only says."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

from crasp.tasks import RETRIEVAL_AND_COPYING
from crasplab.cli.experiment import Experiment, Report, run_experiment
from crasplab.records.settings import LARGEST_FLOAT, LARGEST_INT

S = TypeVar("S")


class HelpFormatter(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
    """The script's docstring as written, and every flag's default: the value, or, where it is None
    (the flag's help says in words what happens without it: `--out`'s folder named after the
    model), nothing added."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        return action.help if action.default is None else super()._get_help_string(action)


def at_least(minimum: int, maximum: int = LARGEST_INT) -> Callable[[str], int]:
    """An argparse type: an integer from `minimum` to `maximum` (by default the largest a setting
    holds: crasplab.records.settings.LARGEST_INT)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}, got {value}")
        if value > maximum:
            raise argparse.ArgumentTypeError(f"must be at most {maximum}, got {value}")
        return value

    return parse


def finite(text: str) -> float:
    """An argparse type: a finite number (nan and inf would reach config.json and the optimizer)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be a finite number, got {text}")
    if abs(value) > LARGEST_FLOAT:  # float32's largest: the arrays a setting reaches
        raise argparse.ArgumentTypeError(f"must be of magnitude at most {LARGEST_FLOAT:.4g}, got {text}")
    return value


def above_zero(text: str) -> float:
    """An argparse type: a finite number above 0 (a duration, a rate)."""
    value = finite(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be above 0, got {value:g}")
    return value


def fraction(text: str) -> float:
    """An argparse type: a number from 0 to 1 (a probability, a threshold on an accuracy)."""
    value = finite(text)
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"must lie in [0, 1], got {value}")
    return value


class DistinctValues(argparse.Action):
    """A list flag (nargs="+") whose values may not repeat: `--tasks UF UF` or `--lengths 6 6`
    would evaluate the same prompts twice."""

    def __call__(self, parser, namespace, values: Sequence, option_string=None):
        repeated = sorted({value for value in values if list(values).count(value) > 1}, key=str)
        if repeated:
            parser.error(
                f"argument {option_string}: {' '.join(map(str, repeated))} given more than once; give each value once"
            )
        setattr(namespace, self.dest, list(values))


def flag_name(setting: str) -> str:
    """The command-line flag of a setting: batch_size -> --batch-size."""
    return f"--{setting.replace('_', '-')}"


def add_list_flag(parser, flag: str, default: Sequence | None, help: str, **keywords) -> None:
    """A flag of one or more values, none given twice (DistinctValues); `keywords` go to add_argument."""
    parser.add_argument(
        flag,
        nargs="+",
        action=DistinctValues,
        default=None if default is None else list(default),
        help=help,
        **keywords,
    )


def add_flags_of(parser, defaults, flags: dict[str, tuple[Callable[[str], object], str]]) -> None:
    """One --flag-name per setting in `flags` (setting: (argparse type, help)), its default the
    value the experiment's settings `defaults` hold."""
    for name, (kind, text) in flags.items():
        parser.add_argument(flag_name(name), type=kind, default=getattr(defaults, name), help=text)


def add_seed_flag(parser, default: int, fixes: str) -> None:
    """--seed; `fixes` says what it fixes in this experiment (prompts, draws, initializations)."""
    parser.add_argument("--seed", type=at_least(0), default=default, help=f"fixes {fixes}")


def add_tasks_flag(
    parser, default: Sequence[str] | None, help: str = "task codes", choices: Sequence[str] = RETRIEVAL_AND_COPYING
) -> None:
    """--tasks: task codes, by default among the retrieval and copying tasks (the ones with a
    few-shot prompt format)."""
    add_list_flag(parser, "--tasks", default, help, choices=choices, metavar="CODE")


def add_prompt_flags(parser, defaults) -> None:
    """--tasks, --lengths and --n: which few-shot prompts of experiments/pretrained.py are asked
    (experiments/mechanism.py evaluates the same ones); defaults from the settings `defaults`."""
    add_tasks_flag(parser, defaults.tasks)
    add_list_flag(
        parser,
        "--lengths",
        defaults.lengths,
        "test input lengths (context length for retrieval, source length for copying); unique copying needs L <= 52",
        type=at_least(1),
        metavar="L",
    )
    parser.add_argument("--n", type=at_least(1), default=defaults.n, help="prompts per task and length")


def add_batch_size_flag(
    parser, default: int, help: str = "prompts decoded together (plus one filler row that fixes the compiled shape)"
) -> None:
    """--batch-size: rows per forward pass, the flag an out-of-memory error tells the user to lower."""
    parser.add_argument("--batch-size", type=at_least(1), default=default, help=help)


def add_dtype_flag(parser, default: str, dtypes: Sequence[str]) -> None:
    """--dtype of a pretrained model's forward passes. `dtypes` (crasplab.models.config.DTYPES) is
    passed in: importing the models here would load JAX before the flags are parsed."""
    parser.add_argument(
        "--dtype", choices=tuple(dtypes), default=default, help="compute dtype (parameters stay float32)"
    )


def add_model_flag(parser, default: str | None, named_models: dict, default_text: str = "") -> None:
    """--model: a named model, a GGUF file or a Hugging Face checkpoint folder."""
    named = ", ".join(f"{name}: {model.description}" for name, model in named_models.items())
    parser.add_argument(
        "--model",
        default=default,
        help=f"a named model ({named}), a GGUF file (llama architecture) or a Hugging Face checkpoint "
        f"folder (llama, qwen2, gpt2){default_text}",
    )


def add_run_folder_flags(
    parser, default_out: str, report_files: str = "summary.json, report.md and the figure"
) -> None:
    """--out (the run folder) and --report-only (rebuild the report of a run folder, run nothing)."""
    parser.add_argument("--out", type=Path, default=None, help=f"run folder (default: {default_out})")
    parser.add_argument(
        "--report-only",
        type=Path,
        default=None,
        metavar="RUN_DIR",
        help=f"rebuild {report_files} of an existing run folder; run nothing",
    )


def settings_from_flags(settings_type: type[S], args: argparse.Namespace, **resolved) -> S:
    """The experiment's settings (validated as they are built) from the flags named like them
    (--batch-size: batch_size), `resolved` replacing those the script works out itself: the one
    place a Namespace becomes settings. --out and --report-only say where, not what, so they are
    no settings; any other flag without a setting is a TypeError here, not a flag silently ignored."""
    flags = {name: value for name, value in vars(args).items() if name not in ("out", "report_only")}
    return settings_type(**{**flags, **resolved})


def run_from_flags(
    args: argparse.Namespace,
    settings_from: Callable[[argparse.Namespace], S],
    default_out: Callable[[S], Path],
    run: Callable[[S, Path], None],
    report: Report,
) -> None:
    """The end of every experiment script's main (crasplab.cli.experiment): run the experiment
    whose settings `settings_from(args)` reads into --out (default: `default_out(settings)`), or
    with --report-only rebuild that folder's report."""
    experiment = Experiment(settings=lambda: settings_from(args), default_out=default_out, run=run, report=report)
    run_experiment(experiment, out=args.out, report_only=args.report_only)


def add_preset_flag(parser, presets: dict) -> None:
    """--preset: a named experiment scale (each preset has a name and a description)."""
    parser.add_argument(
        "--preset",
        choices=sorted(presets),
        default=None,
        help=f"experiment scale; default: {DEFAULT_PRESET} on every machine (--preset paper for the paper's recipe). "
        + " ".join(f"{p.name}: {p.description.rstrip('.')}." for p in presets.values()),
    )


# The preset without --preset, on every machine: a default that followed the machine (paper on an
# accelerator) chose the paper's hours-long recipe without a word for a newcomer with a GPU.
DEFAULT_PRESET = "quick"


def chosen_preset(name: str | None, presets: dict):
    """The preset `name`, or without one DEFAULT_PRESET."""
    return presets[name or DEFAULT_PRESET]


def length_bins(text: str) -> tuple[tuple[int, int], ...]:
    """An argparse type: inclusive length bins written LO-HI,LO-HI,... (e.g. 1-10,11-20)."""
    try:
        bins = tuple(tuple(int(x) for x in part.split("-")) for part in text.split(","))
        if any(len(b) != 2 for b in bins):
            raise ValueError
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected LO-HI,LO-HI,... such as 1-10,11-20,21-30") from None
    return bins


def add_length_flags(group, example_bins: str) -> None:
    """--train-lengths LO HI and --test-bins LO-HI,...: the length ranges of a training run."""
    group.add_argument(
        "--train-lengths",
        type=at_least(1),
        nargs=2,
        default=None,
        metavar=("LO", "HI"),
        help="training input lengths, inclusive. Without --test-bins, the test bins are the preset's "
        "moved with them: the first is this range, each later one keeps its upper end's ratio to "
        "the longest training length (quick: --train-lengths 1 30 tests 1-30, 31-45, 46-60)",
    )
    group.add_argument(
        "--test-bins",
        type=length_bins,
        default=None,
        metavar="LO-HI,...",
        help=f"test bins, the first one the training range, each later one beyond the one before, e.g. {example_bins}",
    )


def add_setting_flags(group, flags: dict[str, tuple[type, str]], choices: dict[str, tuple] | None = None) -> None:
    """One --flag-name per setting (train.config.command_line_settings), default None: the preset's."""
    for name, (kind, text) in flags.items():
        group.add_argument(
            flag_name(name),
            type=finite if kind is float else kind,
            choices=(choices or {}).get(name),
            default=None,
            help=text,
        )
