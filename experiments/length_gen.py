"""Length generalization from scratch: train one model per (task, seed), test on longer inputs,
and compare with the C-RASP prediction (APE -> C-RASP[pos], NoPE -> C-RASP[], RoPE -> the APE
prediction, no theorem).

    python experiments/length_gen.py --pe ape                       # quick preset on a CPU
    python experiments/length_gen.py --pe rope --preset paper --tasks UF NF
    python experiments/length_gen.py --report-only runs/length_gen/ape-quick

The run folder (default runs/length_gen/<pe>-<preset>/) holds config.json, predictions.json
(what the interpreter predicted when the run started), invocations.jsonl (each invocation's wall
time), summary.json, report.md, accuracy_by_length.png, and one job folder per task and seed
(<task>/seed<k>/) with its records (metrics.jsonl, result.json) and checkpoint. The job folders
are the run's only record: running the same command again resumes unfinished jobs from their
checkpoints and skips finished ones; the report is rebuilt from the files.
"""

from __future__ import annotations

import argparse

from crasp.discrimination import NON_UNIQUE_RETRIEVAL, SAMPLERS
from crasp.tasks import TASK_CODES
from crasplab.cli.arguments import (
    DistinctValues,
    add_length_flags,
    add_preset_flag,
    add_run_folder_flags,
    add_setting_flags,
    add_tasks_flag,
    at_least,
    fraction,
    run_from_flags,
)
from crasplab.cli.length_gen import Invocation, RunRequest, default_run_folder, report, run
from crasplab.models.config import DTYPES
from crasplab.models.positions import POSITIONS
from crasplab.verdicts.rules import DEFAULT_THRESHOLD
from crasplab.train.config import PRESETS, ModelSettings, TrainConfig, command_line_settings
from crasplab.cli.engine_flags import add_engine_flags, engine_settings

MODEL_FLAGS = command_line_settings(ModelSettings)
TRAIN_FLAGS = command_line_settings(TrainConfig)
# Flags whose accepted values are a fixed vocabulary.
CHOICES = {"pe": POSITIONS, "dtype": tuple(DTYPES)}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    pe_type, pe_help = MODEL_FLAGS["pe"]
    parser.add_argument("--pe", type=pe_type, choices=POSITIONS, default="ape", help=pe_help)
    add_preset_flag(parser, PRESETS)
    add_tasks_flag(
        parser,
        None,
        "task codes (default: the preset's ten retrieval and copying tasks); accepted: " + ", ".join(TASK_CODES),
        choices=TASK_CODES,
    )
    parser.add_argument(
        "--sampler",
        choices=tuple(SAMPLERS),
        default=None,
        help="how the retrieval tasks draw their strings: paper (the default) draws "
        f"{', '.join(NON_UNIQUE_RETRIEVAL)}'s context i.i.d.; official as the official code does "
        "(UL and UR over 5 symbols; the four i.i.d., with NLLast strings whose last occurrence is "
        "the final slot rejected; each range lo-hi holds max(4, lo) to hi - 1, longer lengths drawn "
        "as often as that code keeps their strings; the answer scored without its EOS: "
        "docs/official-sampler.md); spread spreads the number of occurrences and the distance of "
        "the retrieved one, so that a bin at 3x-4x the training length holds strings no bounded "
        "program exact on the training lengths gets right; repeat-break trains NF and NB on i.i.d. "
        "strings and tests them on a periodic stretch that then breaks, the strings on which no "
        "k-gram lookup exact on the training lengths copies. Without --tasks it runs the tasks the "
        "sampler draws (paper: the four); the run folder's default name ends in -<sampler>. With --tasks, "
        "every task given must be one the sampler draws or, for repeat-break, their controls UF and UB "
        "(--sampler spread --tasks NLLast runs; --sampler spread --tasks UF is refused): the two flags "
        "exclude each other only there",
    )
    parser.add_argument(
        "--seeds",
        nargs="+",
        type=at_least(0),
        default=None,
        metavar="SEED",
        action=DistinctValues,
        help="training seeds (default: the preset's)",
    )
    add_run_folder_flags(parser, "runs/length_gen/<pe>-<preset>[-<sampler>]")
    parser.add_argument(
        "--threshold",
        type=fraction,
        default=None,
        help="the accuracy a bin is read against (default: "
        f"{DEFAULT_THRESHOLD}); a --protocol run writes it into its rules (protocol.json) when it starts, and "
        "its report is read at that one",
    )
    parser.add_argument(
        "--protocol",
        action="store_true",
        help="the verdict protocol: a fixed recipe (preset 'protocol' by default, the quick scale; "
        "'protocol-paper', the paper's scale, on an accelerator), fresh seeds until 5 seeds per task fit (APE; 3 "
        "for other encodings), per-seed verdicts with intervals and the discrimination check of each test bin, "
        "all in the report. It excludes --seeds (it chooses its own) and every --preset but protocol, "
        "protocol-paper and protocol-rehearsal",
    )
    parser.add_argument(
        "--seed-block",
        type=at_least(0),
        default=0,
        metavar="K",
        help="with --protocol: draw the candidate seeds from the preset's K-th block of fresh ones (0: its own; "
        "protocol: 5000-5009, block 1: 5010-5019), for a run whose recipe or bins a run on the preset's seeds "
        "already informed (default 0)",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")
    add_engine_flags(parser)
    model = parser.add_argument_group(
        "model overrides (default: the preset's; a flag given here applies to every "
        "task, also to one whose model the preset changes)"
    )
    add_setting_flags(model, {name: flag for name, flag in MODEL_FLAGS.items() if name != "pe"}, CHOICES)
    train = parser.add_argument_group("training overrides (default: the preset's)")
    add_length_flags(train, "1-10,11-20,21-30")
    add_setting_flags(train, TRAIN_FLAGS)
    return parser


def request_from_flags(args: argparse.Namespace) -> RunRequest:
    """The flags as a RunRequest (crasplab.cli.length_gen makes the run's settings from it)."""
    return RunRequest(
        pe=args.pe,
        preset=args.preset,
        tasks=tuple(args.tasks or ()),
        sampler=args.sampler,
        seeds=tuple(args.seeds or ()),
        threshold=args.threshold,
        protocol=args.protocol,
        seed_block=args.seed_block,
        train_lengths=None if args.train_lengths is None else tuple(args.train_lengths),
        test_bins=args.test_bins,
        model_changes={
            name: value for name in MODEL_FLAGS if name != "pe" and (value := getattr(args, name)) is not None
        },
        train_changes={name: value for name in TRAIN_FLAGS if (value := getattr(args, name)) is not None},
    )


def invocation(args: argparse.Namespace) -> Invocation:
    """The command line read once, validated (SettingsError, TaskError otherwise)."""
    return Invocation.of(request_from_flags(args), engine_settings(args), show_progress=not args.no_progress)


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    run_from_flags(
        args,
        invocation,
        default_out=lambda settings: default_run_folder(settings.run, settings.sampler),
        run=run,
        report=report(args.threshold),
    )


if __name__ == "__main__":
    main()
