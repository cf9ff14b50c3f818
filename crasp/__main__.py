"""Command line: `python -m crasp {run,fragment,check,agreement,tasks,search,discriminates}`; `--help` on each
explains it."""

from __future__ import annotations

import argparse
import os
import sys
from importlib.metadata import entry_points

from crasp.expr import CraspError
from crasp.output_files import OVERWRITE_FLAG, OVERWRITE_HELP
from crasp.search.options import SearchError
from crasp.tasks import TaskError


def _run(args) -> None:
    from crasp.check import lookup, program_for
    from crasp.library import load_source
    from crasp.trace import format_trace

    source = load_source(args.program)
    symbols = args.input.split()
    if args.task:
        program = program_for(source, lookup(args.task))
    else:  # a generic program reads the symbols it lists and then the input's others, in sorted order
        program = source.program(source.listed + tuple(sorted(set(symbols) - set(source.listed))))
    if args.plot:  # a bad path or an input too long to draw is refused before anything is computed
        from crasp.plot import check_plot_request, save_trace_plot

        check_plot_request(args.plot, len(symbols), args.overwrite)
    print(format_trace(program, symbols))
    if args.plot:
        save_trace_plot(program, symbols, args.plot, args.overwrite)
        print(f"picture: {args.plot}")


def _fragment(args) -> None:
    from crasp.fragment import fragment_of
    from crasp.library import example_names, load_program
    from crasp.position_encodings import ENCODINGS

    width = max(len(p) for p in args.programs or example_names())
    columns = {code: max(4, len(e.name)) for code, e in ENCODINGS.items()}
    print(
        f"{'program':<{width}} | fragment                | "
        + " | ".join(f"{ENCODINGS[code].name:<{w}}" for code, w in columns.items())
    )
    for name in args.programs or example_names():
        fragment = fragment_of(load_program(name))
        verdicts = " | ".join(
            f"{'yes' if fragment.predicts_generalization(code) else 'no':<{w}}" for code, w in columns.items()
        )
        print(f"{name:<{width}} | {fragment.name:<23} | {verdicts}")
    sources = sorted({e.theorem.source for e in ENCODINGS.values() if e.theorem})
    lenders = dict.fromkeys(e.borrows for e in ENCODINGS.values() if e.borrows)
    borrowed = "; ".join(
        f"{', '.join(e.name for e in ENCODINGS.values() if e.borrows == lender)}: "
        f"{ENCODINGS[lender].name} prediction, no theorem"
        for lender in lenders
    )
    print(f"yes = a witness in this fragment predicts length generalization ({', '.join(sources)}; {borrowed})")


def _check_program(args) -> int:
    from crasp.check import check_program, lookup, vocabulary_of
    from crasp.languages import Language
    from crasp.position_encodings import PE_NAMES, POSITION_ENCODINGS
    from crasp.library import load_source
    from crasp.prediction import predict
    from crasp.trace import format_trace

    if len(args.tasks) != 1:
        raise CraspError(
            f"--program checks one program against one task or language; got {len(args.tasks)} names "
            "(python -m crasp tasks lists both)"
        )
    source, target = load_source(args.program), lookup(args.tasks[0])
    report = check_program(source, target, samples_per_length=args.samples, seed=args.seed)
    kind = "language" if isinstance(target, Language) else "task"
    print(f"{source.name} on {kind} {report.task}: {target.description}")
    print(f"alphabet    {source.describe_alphabet(vocabulary_of(target))}")
    print(f"checked     {report.strings} strings: {report.method}")
    print(f"agreement   {report.agreement:.2%} ({report.agreeing} of {report.strings})")
    print(f"fragment    {report.fragment.name}")
    if report.failure:
        print(f"shortest counterexample:\n  {' '.join(report.failure.string)}\n  {report.failure.problem}\n")
        print(format_trace(report.failure.program, list(report.failure.string)) + "\n")
        print(f"predicts    nothing: the program disagrees with the {kind}")
        return 1
    width = max(len(name) for name in PE_NAMES.values()) + 1
    for k, pe in enumerate(POSITION_ENCODINGS):
        print(
            f"{'predicts' if k == 0 else '':<11} {PE_NAMES[pe] + ':':<{width}} {report.fragment.program_prediction(pe)}"
        )
    # Where this program predicts nothing, the lab's other programs for the task (or a proof) may.
    silent = [pe for pe in POSITION_ENCODINGS if not report.fragment.predicts_generalization(pe)]
    if kind == "task" and silent:
        labels = ", ".join(f"{PE_NAMES[pe]}: {predict(report.task, pe).label}" for pe in silent)
        print(f"the lab     {labels}, from every program it knows for {report.task} (python -m crasp tasks --verbose)")
    return 0


def _check(args) -> int | None:
    if args.program:
        return _check_program(args)
    from crasp.check import check_witness
    from crasp.languages import LANGUAGES
    from crasp.position_encodings import PE_NAMES, WITH_THEOREM
    from crasp.prediction import predict
    from crasp.tasks import get_task
    from crasp.witnesses import WITNESSES

    languages = [name for name in args.tasks if name in LANGUAGES]
    if languages:
        raise CraspError(
            f"{languages[0]} is a language: the lab has no witness for it; check your program "
            f"against it with `python -m crasp check {languages[0]} --program FILE`"
        )
    codes = [get_task(code).code for code in args.tasks] if args.tasks else list(WITNESSES)
    columns = " | ".join(PE_NAMES[pe] for pe in WITH_THEOREM)
    header = f"{'task':<26} | {'witness':<32} | {'fragment':<16} | {columns} | strings | agreement | seconds"
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
            verdicts = " | ".join(
                f"{'yes' if report.fragment.predicts_generalization(pe) else 'no':<{len(PE_NAMES[pe])}}"
                for pe in WITH_THEOREM
            )
            print(
                f"{code:<26} | {make.__name__:<32} | {report.fragment.name:<16} | {verdicts} | "
                f"{report.strings:>7} | {report.agreement:>8.2%} | {report.seconds:>7.2f}",
                flush=True,
            )
            if report.counterexample:
                failed.append(f"{code} / {make.__name__}: smallest counterexample:\n  {report.counterexample}")
    for failure in failed:
        print(failure)
    if failed:
        raise SystemExit(1)


def _agreement(args) -> None:
    from crasp.approximations import SIDE_OF_TASK, last_within_window
    from crasp.check import agreement_by_length, check_lengths, lookup, program_for
    from crasp.fragment import fragment_of
    from crasp.languages import Language
    from crasp.library import load_source

    target = lookup(args.task)
    if isinstance(target, Language):
        raise CraspError(
            f"{target.name} is a language; agreement by length measures next-token programs on a task "
            "(python -m crasp tasks lists them)"
        )
    if (args.program is None) == (args.window is None):
        raise CraspError("give either --program FILE or --window W (a window program, for NLLast and NRLast)")
    longest = max(check_lengths(target, args.lengths))
    if args.seed < 0:
        raise CraspError(f"--seed {args.seed}: accepted: an integer >= 0")
    if args.program is not None:
        source = load_source(args.program)
        program, name = program_for(source, target), source.name
    elif target.code not in SIDE_OF_TASK:
        raise CraspError(
            f"window programs exist for {' and '.join(SIDE_OF_TASK)} (retrieval at the last occurrence), "
            f"not for {target.code}; measure your own program with --program FILE"
        )
    elif args.window > longest:  # it would see the whole context at every length, at a cost linear in W
        raise CraspError(
            f"--window {args.window}: longer than the longest of --lengths ({longest}), where it already "
            f"sees the whole context; accepted: a window of at most {longest}"
        )
    else:
        try:
            program = last_within_window(SIDE_OF_TASK[target.code], args.window)(target.symbols)
        except ValueError as error:
            raise CraspError(f"--window {args.window}: {error}")
        name = program.title
    # Measured before anything is printed: a length the sampler cannot produce is an error, not half a table.
    by_length = agreement_by_length(target, program, args.lengths, args.samples, args.seed)
    print(f"{name} ({fragment_of(program).name})")
    print(f"on task {target.code}: {target.description}")
    print(f"{'length':>6} | agreement ({args.samples} strings per length)")
    for length, agreement in by_length.items():
        print(f"{length:>6} | {agreement:.1%}")


def _tasks(args) -> None:
    from crasp.languages import LANGUAGES
    from crasp.position_encodings import WITH_THEOREM, encoding
    from crasp.prediction import predict
    from crasp.tasks import TASK_CODES, get_task

    # One column per encoding that a theorem covers; the others borrow one of these predictions.
    rows = [
        (code, *(predict(code, pe).label for pe in WITH_THEOREM), get_task(code).description) for code in TASK_CODES
    ]
    fragment_names = {"C-RASP[periodic, local]": "C-RASP[pos]"}  # the short name the tables use
    header = (
        "task",
        *(
            f"{encoding(pe).name} ({fragment_names.get(f, f)})"
            for pe in WITH_THEOREM
            for f in [encoding(pe).theorem.fragment]
        ),
        "definition",
    )
    widths = [max(len(row[k]) for row in rows + [header]) for k in range(len(header) - 1)]
    for row in [header] + rows:
        print(" | ".join(cell.ljust(width) for cell, width in zip(row, widths)) + f" | {row[-1]}")
    if args.verbose:
        for code in TASK_CODES:
            for pe in WITH_THEOREM:
                print(f"{code} {pe}: {predict(code, pe).reason}")
    print("\nLanguages, for acceptance programs (python -m crasp check NAME --program FILE):")
    width = max(len(name) for name in LANGUAGES)
    for language in LANGUAGES.values():
        print(f"{language.name:<{width}} | {language.description}")


def _search(args) -> int:
    from crasp.search.command import run

    return run(args)


def _discriminates(args) -> int:
    from crasp.discrimination_command import run

    return run(args)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m crasp", description="The C-RASP[pos] interpreter.")
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser(
        "run", help="trace a program on one input: one row per definition, one column per position"
    )
    run.add_argument(
        "program", help="a .crasp file, or the name of a shipped example (majority, previous_token, unique_copy)"
    )
    run.add_argument("--input", required=True, help='the string, symbols separated by spaces: "<bos> a b <sep>"')
    run.add_argument(
        "--task",
        metavar="NAME",
        help="read the symbols of this task or language (a generic program "
        "otherwise reads the input's symbols, in sorted order)",
    )
    run.add_argument(
        "--plot",
        metavar="FILE",
        help="also draw the trace into this picture (.png, .pdf or .svg, a new file): Booleans as filled cells, "
        "counts as numbers",
    )
    run.add_argument(OVERWRITE_FLAG, action="store_true", help=OVERWRITE_HELP)
    run.set_defaults(handler=_run)
    fragment = commands.add_parser(
        "fragment",
        help="the smallest fragment of C-RASP containing each program, and what it predicts for APE, RoPE and NoPE",
    )
    fragment.add_argument("programs", nargs="*", help=".crasp files or example names (default: every shipped example)")
    fragment.set_defaults(handler=_fragment)
    check = commands.add_parser(
        "check",
        help="verify every witness program against its task, or your program "
        "(--program) against a task or language: exhaustively on short strings "
        "over a reduced alphabet, then on random samples up to length 300",
    )
    check.add_argument(
        "tasks",
        nargs="*",
        metavar="NAME",
        help="task codes (default: every task with a witness); with --program, one task or language "
        "(python -m crasp tasks lists both)",
    )
    check.add_argument(
        "--program",
        metavar="FILE",
        help="check this .crasp file (or shipped example) instead of the "
        "witnesses; prints the fragment, the prediction for each "
        "position encoding, or the shortest counterexample and "
        "its trace",
    )
    check.add_argument("--samples", type=int, default=200, help="random strings per sampled length (default 200)")
    check.add_argument("--seed", type=int, default=0, help="seed of the random samples (default 0)")
    check.set_defaults(handler=_check)
    agreement = commands.add_parser(
        "agreement",
        help="how often a program that is not a witness answers a task right, at each length of the task's own sampler",
    )
    agreement.add_argument("task", metavar="TASK", help="a task code (python -m crasp tasks lists them)")
    agreement.add_argument("--program", metavar="FILE", help="a .crasp file (or shipped example) to measure")
    agreement.add_argument(
        "--window",
        type=int,
        metavar="W",
        help="instead of --program, for NLLast or NRLast: the "
        "C-RASP[local] program that looks for the query "
        "only among the last W context tokens",
    )
    agreement.add_argument(
        "--lengths",
        type=int,
        nargs="+",
        default=[10, 20, 40, 150],
        metavar="N",
        help="input lengths (default: 10 20 40 150)",
    )
    agreement.add_argument("--samples", type=int, default=500, help="random strings per length (default 500)")
    agreement.add_argument("--seed", type=int, default=0, help="seed of the random strings (default 0)")
    agreement.set_defaults(handler=_agreement)
    tasks = commands.add_parser(
        "tasks",
        help="every task with its one-line definition and what theory predicts (decided by verifying the witnesses)",
    )
    tasks.add_argument("--verbose", action="store_true", help="also print the reason behind each prediction")
    tasks.set_defaults(handler=_tasks)
    search = commands.add_parser(
        "search",
        help="enumerate C-RASP programs for a task by increasing size: print a "
        "program verified by `check`, or show that none exists up to a size",
    )
    from crasp.search.command import add_arguments

    add_arguments(search)
    search.set_defaults(handler=_search)
    discriminates = commands.add_parser(
        "discriminates",
        help="for a task predicted not to generalize: can test "
        "bins tell it from bounded programs exact on the "
        "training lengths?",
    )
    from crasp.discrimination_command import add_arguments as add_discrimination_arguments

    add_discrimination_arguments(discriminates)
    discriminates.set_defaults(handler=_discriminates)
    add_installed_commands(commands, sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(argv)
    try:
        status = args.handler(args)
        sys.stdout.flush()  # a reader that has gone (`| head`) shows here, not at exit as a traceback
    except (CraspError, TaskError, SearchError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # What remains to print has no reader: send it nowhere, so that the exit flush is quiet too.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    return status or 0


def add_installed_commands(commands, argv: list[str]) -> None:
    """Add the commands that other installed packages register (entry point group "crasp.commands":
    the lab's `compile`), so that crasp imports none of them by name. Only the command `argv` names is
    loaded: loading `compile` imports jax, seconds that every other command would pay; the others
    are listed by name alone, for `--help` and for argparse's list of choices."""
    named = next((word for word in argv if not word.startswith("-")), None)
    for entry in entry_points(group="crasp.commands"):
        if entry.name == named:
            entry.load()(commands)
        else:
            commands.add_parser(
                entry.name, help=f"installed by {entry.dist.name}: `python -m crasp {entry.name} --help` describes it"
            )


if __name__ == "__main__":
    sys.exit(main())
