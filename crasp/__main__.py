"""Command line: `python -m crasp {run,fragment,check,tasks,search}`; `--help` on each explains it."""

from __future__ import annotations

import argparse
import sys

from crasp.expr import CraspError
from crasp.search.options import SearchError
from crasp.tasks import TaskError


def _run(args) -> None:
    from crasp.library import load_program
    from crasp.trace import format_trace

    program = load_program(args.program)
    print(format_trace(program, args.input.split()))


def _fragment(args) -> None:
    from crasp.fragment import POSITION_ENCODINGS, fragment_of
    from crasp.library import example_names, load_program

    width = max(len(p) for p in args.programs or example_names())
    print(f"{'program':<{width}} | fragment                | " + " | ".join(f"{pe.upper():<4}" for pe in POSITION_ENCODINGS))
    for name in args.programs or example_names():
        fragment = fragment_of(load_program(name))
        verdicts = " | ".join(("yes " if fragment.predicts_generalization(pe) else "no  ") for pe in POSITION_ENCODINGS)
        print(f"{name:<{width}} | {fragment.name:<23} | {verdicts}")
    print("yes = a witness in this fragment predicts length generalization (Huang et al. 2025; "
          "RoPE: APE prediction, no theorem)")


def _check(args) -> None:
    from crasp.check import check_witness
    from crasp.tasks import get_task
    from crasp.prediction import predict
    from crasp.witnesses import WITNESSES

    codes = [get_task(code).code for code in args.tasks] if args.tasks else list(WITNESSES)
    header = f"{'task':<26} | {'witness':<32} | {'fragment':<16} | APE | NoPE | strings | agreement | seconds"
    print(header)
    print("-" * len(header))
    failed = []
    for code in codes:
        task = get_task(code)
        makers = WITNESSES.get(task.code, ())
        if not makers:
            print(f"{code:<26} | {'(none: ' + predict(code, 'ape').label + ')':<32} |")
            continue
        for make in makers:
            report = check_witness(task, make, samples_per_length=args.samples, seed=args.seed)
            ape = "yes" if report.fragment.predicts_generalization("ape") else "no"
            nope = "yes" if report.fragment.predicts_generalization("nope") else "no"
            print(f"{code:<26} | {make.__name__:<32} | {report.fragment.name:<16} | {ape:<3} | {nope:<4} | "
                  f"{report.strings:>7} | {report.agreement:>8.2%} | {report.seconds:>7.2f}", flush=True)
            if report.counterexample:
                failed.append(f"{code} / {make.__name__}: smallest counterexample:\n  {report.counterexample}")
    for failure in failed:
        print(failure)
    if failed:
        raise SystemExit(1)


def _tasks(args) -> None:
    from crasp.tasks import TASK_CODES, get_task
    from crasp.prediction import predict

    rows = [(code, predict(code, "ape").label, predict(code, "nope").label, get_task(code).description)
            for code in TASK_CODES]
    header = ("task", "APE (C-RASP[pos])", "NoPE (C-RASP[])", "definition")
    widths = [max(len(row[k]) for row in rows + [header]) for k in range(3)]
    for row in [header] + rows:
        print(" | ".join(cell.ljust(width) for cell, width in zip(row, widths)) + f" | {row[3]}")
    if args.verbose:
        for code in TASK_CODES:
            for pe in ("ape", "nope"):
                print(f"{code} {pe}: {predict(code, pe).reason}")


def _search(args) -> int:
    from crasp.search.command import run

    return run(args)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m crasp", description="The C-RASP[pos] interpreter.")
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="trace a program on one input: one row per definition, one column per position")
    run.add_argument("program", help="a .crasp file, or the name of a shipped example (majority, previous_token, unique_copy)")
    run.add_argument("--input", required=True, help='the string, symbols separated by spaces: "<bos> a b <sep>"')
    run.set_defaults(handler=_run)
    fragment = commands.add_parser("fragment", help="the smallest fragment of C-RASP containing each program, "
                                                    "and what it predicts for APE, RoPE and NoPE")
    fragment.add_argument("programs", nargs="*", help=".crasp files or example names (default: every shipped example)")
    fragment.set_defaults(handler=_fragment)
    check = commands.add_parser("check", help="verify every witness program against its task: exhaustively on "
                                              "short strings over a reduced alphabet, then on random samples up to length 300")
    check.add_argument("tasks", nargs="*", help="task codes (default: every task with a witness)")
    check.add_argument("--samples", type=int, default=200, help="random strings per sampled length (default 200)")
    check.add_argument("--seed", type=int, default=0, help="seed of the random samples (default 0)")
    check.set_defaults(handler=_check)
    tasks = commands.add_parser("tasks", help="every task with its one-line definition and what theory predicts "
                                              "(decided by verifying the witnesses)")
    tasks.add_argument("--verbose", action="store_true", help="also print the reason behind each prediction")
    tasks.set_defaults(handler=_tasks)
    search = commands.add_parser("search", help="enumerate C-RASP programs for a task by increasing size: print a "
                                                "program verified by `check`, or show that none exists up to a size")
    from crasp.search.command import add_arguments

    add_arguments(search)
    search.set_defaults(handler=_search)
    args = parser.parse_args(argv)
    try:
        status = args.handler(args)
    except (CraspError, TaskError, SearchError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    return status or 0


if __name__ == "__main__":
    sys.exit(main())
