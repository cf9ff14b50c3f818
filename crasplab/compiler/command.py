"""`python -m crasp compile PROGRAM --pe ape|rope|nope --out DIR [--task TASK --lengths N ... --preset NAME]`.

Registered with crasp's command line through the entry point group "crasp.commands"
(pyproject.toml), so crasp never imports the lab by name.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import jax.numpy as jnp
import numpy as np

from crasp.check import language_samples
from crasp.check import lookup, program_for, to_program_ids
from crasp.evaluate import evaluate
from crasp.languages import Language
from crasp.library import load_source
from crasp.nexttoken import check_teacher_forced, encode
from crasp.tasks import Task
from crasplab.compiler import DEFAULT_MAX_LENGTH, compile_program, definition_places
from crasplab.compiler.folder import CHECKPOINT_FILE, DESCRIPTION_FILE, compiled_checkpoint, save_compiled
from crasplab.compiler.job import compiled_job, write_compiled_job
from crasplab.compiler.lower import CompileError
from crasplab.compiler.positions import COMPILED_ENCODINGS
from crasplab.compiler.run import answers_right, output_table, require_dtype_available
from crasplab.errors import command_boundary
from crasplab.records.run_folder import check_output_folder
from crasplab.train.config import PRESETS

DEFAULT_LENGTHS = (10, 100, 1000)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("program", help="a .crasp file, or the name of a shipped example")
    parser.add_argument(
        "--pe",
        required=True,
        choices=COMPILED_ENCODINGS,
        help="position encoding of the compiled transformer (nope: C-RASP[] programs only)",
    )
    parser.add_argument(
        "--out",
        required=True,
        metavar="DIR",
        help="folder for compiled.json, checkpoint.npz and listing.txt: a new or empty one, or one this command "
        "wrote (a folder of anything else is refused)",
    )
    parser.add_argument(
        "--task",
        metavar="NAME",
        help="compile over this task's symbols (a generic program reads "
        "them), score the compiled model on its strings, and write DIR/config.json and DIR/TASK/seed0 "
        "(with --seed k: seedk), the job folder train.trained.load_trained_model and "
        "experiments/mechanism.py --run DIR --task TASK read; or a language (listed by python -m crasp tasks): "
        "an acceptance program scored on crasp check's strings of each length, no job folder",
    )
    parser.add_argument(
        "--lengths",
        type=int,
        nargs="+",
        default=list(DEFAULT_LENGTHS),
        metavar="N",
        help="with --task: input lengths to score (default 10 100 1000; lengths the task's sampler "
        "cannot produce are skipped and named)",
    )
    parser.add_argument("--samples", type=int, default=20, help="with --task: strings per length (default 20)")
    parser.add_argument(
        "--seed", type=int, default=0, help="with --task: seed of the strings, and the job folder's (default 0)"
    )
    parser.add_argument(
        "--preset",
        choices=sorted(PRESETS),
        default="quick",
        help="with --task: the length_gen preset whose training lengths and test bins the job folder records "
        "(default quick), so the compiled model is tested on the strings that preset's trained models are",
    )
    parser.add_argument(
        "--max-length",
        type=int,
        default=DEFAULT_MAX_LENGTH,
        help=f"longest string, in tokens, the model is built for (default {DEFAULT_MAX_LENGTH}; "
        "the APE table has this many rows)",
    )
    parser.add_argument(
        "--show",
        metavar="INPUT",
        help='run the compiled model on this string ("a b a b") and print, '
        "for every head that is not a plain average, the key each position attends to most",
    )
    parser.add_argument(
        "--dtype",
        choices=("float32", "float64"),
        default="float32",
        help="compute dtype (float64 needs JAX_ENABLE_X64=1)",
    )


def register(commands) -> None:
    """Add `compile` to crasp's subcommands (the entry point crasp's command line calls)."""
    parser = commands.add_parser(
        "compile",
        help="compile a program into the weights of the lab's transformer, "
        "list what each head and MLP computes, and optionally score it on "
        "a task beside the interpreter",
    )
    add_arguments(parser)
    parser.set_defaults(handler=run)


def run(args) -> int:
    """The command, inside the lab's error boundary: a user error is one `error:` line."""
    with command_boundary():
        return _compile(args)


def _compile(args) -> int:
    # A folder of anything else is refused before the compile's seconds are spent.
    check_output_folder(args.out, marker=DESCRIPTION_FILE, writer="python -m crasp compile")
    require_dtype_available(args.dtype)
    source = load_source(args.program)
    target = lookup(args.task) if args.task else None
    program = program_for(source, target) if target else source.program()
    compiled = compile_program(
        program, args.pe, args.max_length, args.dtype, places=definition_places(source.text, source.name)
    )
    # Everything is built before anything is written: the job refuses a --max-length too short for
    # the preset's test bins, and the sizes to write are known.
    checkpoint = compiled_checkpoint(compiled, source.name)
    prepared = (
        compiled_job(
            compiled, args.out, target.code, PRESETS[args.preset].train_for(target.code), args.preset, args.seed
        )
        if isinstance(target, Task)
        else None
    )
    out = Path(args.out)
    sizes = {out / CHECKPOINT_FILE: len(checkpoint)} | (
        {prepared.job.files.checkpoint_file: len(prepared.checkpoint)} if prepared else {}
    )
    print(
        f"writing {out}: {megabytes(sum(sizes.values()))} ("
        + ", ".join(f"{path.relative_to(out)} {megabytes(size)}" for path, size in sizes.items())
        + ", and text files of a few kB)",
        flush=True,
    )
    if prepared is not None:
        write_compiled_job(prepared, out)
    save_compiled(compiled, out, source.name, checkpoint)
    job = prepared.job if prepared else None
    print(compiled.listing())
    print(f"written: {args.out}")
    if job is not None:
        print(
            f"job folder: {job.folder} (experiments/length_gen.py --report-only {args.out}; "
            f"experiments/mechanism.py --run {args.out} --task {target.code})"
        )
    if args.show:
        print(attention_table(compiled, args.show.split()))
    if isinstance(target, Language):
        score_language(compiled, target, args)
    elif target is not None:
        score(compiled, target, args)
    return 0


def megabytes(size: int) -> str:
    return f"{size / 1e6:.1f} MB"


def attention_table(compiled, symbols: list[str]) -> str:
    """Per position, the key each non-averaging head attends to most, and with what weight."""
    ids = encode(compiled.program, [symbols])
    weights = np.asarray(compiled.model()(jnp.asarray(ids), return_attention=True).attention_LxBxHxTxS)[:, 0]
    width = max(5, *(len(s) for s in symbols))
    row = lambda name, cells: f"{name:<12}|" + "".join(f"{c:>{width + 1}}" for c in cells)  # noqa: E731
    blocks = []
    for head in (h for h in compiled.heads if h.group.kind != "uniform"):
        pattern = weights[head.layer, head.index]
        blocks += [
            f"layer {head.layer} head {head.index} ({head.group.label}):",
            row("position", range(1, len(symbols) + 1)),
            row("symbol", symbols),
            row("attends to", pattern.argmax(axis=-1) + 1),
            row("weight", [f"{w:.2f}" for w in pattern.max(axis=-1)]),
        ]
    return "\n".join(blocks) or "every head averages over j <= i"


def _require_fits(compiled, length: int, tokens: int) -> None:
    if tokens > compiled.max_length:
        raise CompileError(
            f"length {length} gives strings of {tokens} tokens, beyond the "
            f"{compiled.max_length} the model was built for; raise --max-length"
        )


SCORE_HEADER = f"{'length':>6} | {'strings':>7} | compiled right | interpreter right | seconds"


def _score_row(length: int, strings: int, compiled_right: int, interpreter_right: int, started: float) -> str:
    return (
        f"{length:>6} | {strings:>7} | {compiled_right:>14} | {interpreter_right:>17} | "
        f"{time.perf_counter() - started:7.1f}"
    )


def score(compiled, task: Task, args) -> None:
    """Per length: strings the compiled model answers exactly, beside the interpreter's count."""
    model = compiled.model()
    lengths = [n for n in args.lengths if task.length_problem(n) is None]
    skipped = [n for n in args.lengths if n not in lengths]
    if skipped:
        print(f"skipped lengths {' '.join(map(str, skipped))}: {task.length_problem(skipped[0])}")
    print(SCORE_HEADER)
    for length in lengths:
        started = time.perf_counter()
        examples = task.sample(np.random.default_rng((args.seed, length)), args.samples, length)
        _require_fits(compiled, length, examples.tokens.shape[1])
        ids = to_program_ids(examples.tokens, task.vocab, compiled.program)
        table = output_table(model, ids)
        right = answers_right(table, ids, examples.prompt_lengths, examples.lengths)
        interpreter = check_teacher_forced(compiled.program, ids, examples.prompt_lengths, examples.lengths).correct
        print(_score_row(length, args.samples, int(right.sum()), int(interpreter.sum()), started), flush=True)


def score_language(compiled, language: Language, args) -> None:
    """Per length: strings (crasp check's mix: uniform, members, members with one symbol changed)
    whose membership the compiled model's accepted Boolean at the last position gets right,
    beside the interpreter's."""
    model, program = compiled.model(), compiled.program
    print(SCORE_HEADER)
    for length in args.lengths:
        started = time.perf_counter()
        _require_fits(compiled, length, length)
        strings = language_samples(language, np.random.default_rng((args.seed, length)), args.samples, length)
        ids = encode(program, strings)
        members = np.array([language.contains(s) for s in strings])
        accepted = output_table(model, ids)[:, length - 1, 0]  # every column holds the accepted Boolean
        interpreted = evaluate(program, ids, [program.accept])[program.accept].array[:, length - 1]
        right, interpreter = int((accepted == members).sum()), int((interpreted == members).sum())
        print(_score_row(length, args.samples, right, interpreter, started), flush=True)
