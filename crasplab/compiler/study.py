"""The compiled witnesses measured: accuracy by length beside the interpreter, and the rounding study.

experiments/compiled.py drives it; every table and the figure are computed from the run folder's
metrics.jsonl (one record per (witness, encoding, dtype, length)), never typed in.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import jax
import numpy as np

from crasp import witnesses as W
from crasp.check import to_program_ids
from crasp.fragment import fragment_of
from crasp.nexttoken import check_teacher_forced, encode
from crasp.tasks import get_task
from crasplab.compiler import compile_program
from crasplab.compiler.run import answers_right, output_table, table_and_definitions
from crasplab.models.positions import SCHEMES
from crasplab.reports.figures import pyplot, save_figure
from crasplab.records.files import read_jsonl
from crasplab.records.run_folder import CONFIG_FILE, RunFolderError, read_run_config

# (task, witness, encodings it is compiled for): the C-RASP[] versions also for NoPE.
# What every config.json of experiments/compiled.py holds.
CONFIG_KEYS = ("lengths", "tasks", "samples", "alphabet_size", "seed")
WITNESS_RUNS: tuple[tuple[str, Callable, tuple[str, ...]], ...] = (
    ("UR", W.unique_right, ("ape", "rope")),
    ("UR", W.first_right_without_positions, ("nope",)),
    ("NRFirst", W.first_right, ("ape",)),
    ("NRFirst", W.first_right_without_positions, ("nope",)),
    ("UF", W.copy_forward, ("ape",)),
    ("UF", W.copy_forward_without_positions, ("nope",)),
    ("UB", W.copy_backward, ("ape",)),
    ("UB", W.copy_backward_without_positions, ("nope",)),
    ("Majority", W.majority, ("nope",)),
)
ROUNDING_TASK = "Majority at margin 1"
DTYPES = ("float32", "float64")


def rounding_record(kind: str, dtype: str, length: int, strings: int, right: int, count_error: float, **more) -> dict:
    """One length of the rounding study ("rounding": the whole model; "replay": crasplab.compiler.replay)."""
    return dict(
        kind=kind,
        task=ROUNDING_TASK,
        pe="nope",
        dtype=dtype,
        length=length,
        strings=strings,
        compiled_right=right,
        count_error=count_error,
        **more,
    )


def precision(dtype: str):
    """jax's 64-bit mode for float64 models only: float32 models run as they would without it
    (in that mode the score masks and integer positions would be 64-bit)."""
    return jax.enable_x64(dtype == "float64")


def task_for(code: str, alphabet_size: int | None):
    """The task at `alphabet_size` symbols where it takes that parameter (NRFirst keeps its 5)."""
    return get_task(code, alphabet_size=alphabet_size) if alphabet_size and code != "NRFirst" else get_task(code)


def witness_records(
    lengths: list[int], samples: int, seed: int, alphabet_size: int | None, tasks: list[str], dtypes=("float32",)
) -> Iterator[dict]:
    """One record per (witness, encoding, dtype, length): strings the compiled model and the interpreter answer."""
    for code, make, encodings in (run for run in WITNESS_RUNS if run[0] in tasks):
        task = task_for(code, alphabet_size)
        program = make(task.symbols)
        usable = [n for n in lengths if task.length_problem(n) is None]
        for pe in encodings:
            longest = max(task.sample(np.random.default_rng(0), 1, n).tokens.shape[1] for n in usable)
            compiled = compile_program(program, pe, max_length=max(64, longest))
            for dtype in dtypes:
                with precision(dtype):
                    yield from _witness_lengths(compiled, task, usable, samples, seed, dtype, make.__name__)


def _witness_lengths(compiled, task, lengths, samples, seed, dtype, witness) -> Iterator[dict]:
    model, program = compiled.model(dtype), compiled.program
    for length in lengths:
        started = time.perf_counter()
        examples = task.sample(np.random.default_rng((seed, length)), samples, length)
        ids = to_program_ids(examples.tokens, task.vocab, program)
        right = answers_right(output_table(model, ids), ids, examples.prompt_lengths, examples.lengths)
        interpreter = check_teacher_forced(program, ids, examples.prompt_lengths, examples.lengths).correct
        yield dict(
            kind="witness",
            task=task.code,
            witness=witness,
            pe=compiled.pe,
            dtype=dtype,
            symbols=len(task.symbols),
            fragment=fragment_of(program).name,
            layers=compiled.config.n_layers,
            heads=compiled.config.n_heads,
            d_model=compiled.config.d_model,
            parameters=compiled.parameters,
            length=length,
            strings=samples,
            compiled_right=int(right.sum()),
            interpreter_right=int(interpreter.sum()),
            seconds=round(time.perf_counter() - started, 2),
        )


def trained_records(run_dir: Path, lengths: list[int], samples: int, seed: int) -> Iterator[dict]:
    """The trained models of a length_gen.py run and the compiled witness for the same encoding, on the
    same strings (the trained task's symbols), answered exactly: greedy decoding for the trained
    model, the compiled table for the witness."""
    from crasplab.train.evaluate import greedy_exact_match
    from crasplab.train.trained import TrainedModelError, job_folders, load_trained_model

    for code, make, encodings in WITNESS_RUNS:
        try:
            folders = job_folders(run_dir, code)
        except TrainedModelError:
            continue
        for folder in folders:
            trained = load_trained_model(folder)
            task, pe = trained.task, trained.job.model.pe
            if pe not in encodings:
                continue
            program = make(task.symbols)
            # Only a learned position table bounds the lengths a trained model can read.
            table = trained.setup.max_positions if SCHEMES[pe].learned_table else None
            usable = {
                n: task.sample(np.random.default_rng((seed, n)), samples, n)
                for n in lengths
                if task.length_problem(n) is None
            }
            usable = {n: e for n, e in usable.items() if table is None or e.tokens.shape[1] <= table}
            longest = max([e.tokens.shape[1] for e in usable.values()] + [64])
            compiled = compile_program(program, pe, max_length=table or longest).model()
            for length, examples in usable.items():
                ids = to_program_ids(examples.tokens, task.vocab, program)
                right = answers_right(output_table(compiled, ids), ids, examples.prompt_lengths, examples.lengths)
                learned = greedy_exact_match(trained.model, examples.tokens, examples.prompt_lengths, examples.lengths)
                yield dict(
                    kind="trained",
                    task=code,
                    witness=make.__name__,
                    pe=pe,
                    dtype="float32",
                    length=length,
                    strings=samples,
                    compiled_right=int(right.sum()),
                    trained_right=int(learned.sum()),
                    train_lengths=list(trained.setup.train_range),
                    job=str(folder),
                )


def margin_one_strings(rng: np.random.Generator, n: int, length: int) -> list[list[str]]:
    """<bos> input <sep> a <eos> with `a` exactly once more frequent than `b` (an odd `length`)."""
    letters = ["a"] * ((length + 1) // 2) + ["b"] * (length // 2)
    return [["<bos>", *rng.permutation(letters), "<sep>", "a", "<eos>"] for _ in range(n)]


def rounding_records(lengths: list[int], samples: int, seed: int, dtypes: list[str]) -> Iterator[dict]:
    """Majority over {a, b} at margin 1 (the hardest comparison: two large, nearly equal counts).
    Besides the verdict, each record holds the largest rounding error of n[a] - n[b] at <sep> as
    the residual stream of the same pass holds it (in counts; the comparison fails from 1/2)."""
    program = W.majority(("a", "b"))
    for dtype in dtypes:
        with precision(dtype):
            compiled = compile_program(program, "nope", max_length=max(lengths) + 5, dtype=dtype)
            for length in (n + 1 - n % 2 for n in lengths):
                started = time.perf_counter()
                ids = encode(program, margin_one_strings(np.random.default_rng((seed, length)), samples, length))
                table, values = table_and_definitions(compiled, ids)
                prompts = np.full(samples, ids.shape[1] - 2)
                right = answers_right(table, ids, prompts, np.full(samples, ids.shape[1]))
                sep = ids.shape[1] - 3  # <bos> input <sep> a <eos>: a is counted once more than b there
                error = np.abs(values["n[a]"][:, sep] - values["n[b]"][:, sep] - 1).max()
                yield rounding_record(
                    "rounding",
                    dtype,
                    length,
                    samples,
                    int(right.sum()),
                    float(error),
                    seconds=round(time.perf_counter() - started, 2),
                )


def _witness_row(r: dict, symbols: int) -> dict:
    keep = ("task", "witness", "pe", "fragment", "layers", "heads", "d_model", "parameters")
    return dict({k: r[k] for k in keep}, symbols=symbols, by_dtype={})


def exact_up_to(by_length: dict) -> int:
    """The longest length below every failing one at which every string was right (0: none)."""
    failed = [n for n, (c, *_, s) in by_length.items() if c < s]
    exact = [n for n, (c, *_, s) in by_length.items() if c == s and (not failed or n < min(failed))]
    return max(exact, default=0)


def first_failure(by_length: dict) -> int | None:
    return min([n for n, (c, *_, s) in by_length.items() if c < s], default=None)


def read_config(run_dir: Path) -> dict:
    """config.json of an experiments/compiled.py run, validated: a folder of another experiment (a
    length_gen run) is a RunFolderError naming the file, not a KeyError."""
    config = read_run_config(run_dir, CONFIG_KEYS, "experiments/compiled.py")
    if isinstance(config["alphabet_size"], bool) or not isinstance(config["alphabet_size"], int):
        raise RunFolderError(
            f"{Path(run_dir) / CONFIG_FILE}: alphabet_size {config['alphabet_size']!r} is not an integer; restore "
            "the file compiled.py wrote, or run it again into another --out"
        )
    return config


def check_trained_runs(run_dirs: tuple[str, ...]) -> None:
    """Refuse, before anything is scored, a length_gen run (--trained) none of whose tasks has a
    compiled witness for its encoding: it would score nothing."""
    from crasplab.train.config import RunSettings
    from crasplab.train.trained import TrainedModelError

    witnessed = {(code, pe) for code, _, encodings in WITNESS_RUNS for pe in encodings}
    for run_dir in run_dirs:
        settings = RunSettings.of_run(Path(run_dir))
        trained = [(task, settings.model_for(task).pe) for task in settings.tasks]
        if not witnessed & set(trained):
            accepted = "; ".join(
                f"{code} ({', '.join(pe for task, pe in sorted(witnessed) if task == code)})"
                for code in dict.fromkeys(code for code, _, _ in WITNESS_RUNS)
            )
            raise TrainedModelError(
                f"--trained {run_dir}: the run trained {', '.join(f'{task} ({pe})' for task, pe in trained)}, and "
                f"no witness is compiled for any of those; --trained takes runs of {accepted}"
            )


def summarize(run_dir: Path) -> dict:
    alphabet_size = read_config(run_dir)["alphabet_size"]
    records = read_jsonl(Path(run_dir) / "metrics.jsonl")
    table, rounding, trained, replay, limit = {}, {}, {}, {}, None
    for r in records:
        if r["kind"] == "limit":
            limit = r["max_length"]
        elif r["kind"] == "replay":
            replay.setdefault(r["dtype"], {})[r["length"]] = [
                r["count_error"],
                r["strings"],
                r["chunk"],
                r.get("compiled_right"),
            ]
        elif r["kind"] == "trained":
            row = trained.setdefault(
                f"{r['task']} {r['pe']}",
                dict(task=r["task"], pe=r["pe"], witness=r["witness"], train_lengths=r["train_lengths"], by_length={}),
            )
            row["by_length"][r["length"]] = [r["compiled_right"], r["trained_right"], r["strings"]]
        elif r["kind"] == "witness":
            # Records written before they carried the alphabet's size: the run's --alphabet-size says it.
            symbols = r.get("symbols") or len(task_for(r["task"], alphabet_size).symbols)
            key = f"{r['task']} {r['witness']} {r['pe']} {symbols}"
            row = table.setdefault(key, _witness_row(r, symbols))
            by_length = row["by_dtype"].setdefault(r["dtype"], {})
            by_length[r["length"]] = [r["compiled_right"], r["interpreter_right"], r["strings"]]
        else:
            by_length = rounding.setdefault(r["dtype"], {})
            by_length[r["length"]] = [r["compiled_right"], r.get("count_error"), r["strings"]]
    for row in table.values():
        row["exact_up_to"] = {dtype: exact_up_to(by) for dtype, by in row["by_dtype"].items()}
    first = {dtype: first_failure(by) for dtype, by in rounding.items()}
    replayed_failure = {
        dtype: min([n for n, (_, total, _, right) in by.items() if right is not None and right < total], default=None)
        for dtype, by in replay.items()
    }
    return dict(
        witnesses=table,
        rounding=rounding,
        first_rounding_failure=first,
        trained=trained,
        replay=replay,
        first_replayed_failure=replayed_failure,
        compiled_limit=limit,
    )


def _witness_cells(row: dict) -> str:
    """ "n: float32 / float64 / interpreter right of strings" for each length (a dtype not run: -)."""
    lengths = sorted({n for by in row["by_dtype"].values() for n in by}, key=int)
    cells = []
    for n in lengths:
        runs = [row["by_dtype"].get(dtype, {}).get(n) for dtype in DTYPES]
        done = next(run for run in runs if run is not None)
        compiled = " / ".join("-" if run is None else str(run[0]) for run in runs)
        cells.append(f"{n}: {compiled} / {done[1]} of {done[2]}")
    return ", ".join(cells)


def _rounding_lines(summary: dict) -> list[str]:
    lines = [
        "",
        f"## Rounding: {ROUNDING_TASK} (NoPE)",
        "",
        "Largest error: of n[a] - n[b] at <sep>, read from the residual stream of the same pass, in "
        "counts; a wrong answer needs about 0.5 that lowers n[a] - n[b] (about 1 that raises it).",
        "",
        "| dtype | length | right | strings | largest error |",
        "|---|---|---|---|---|",
    ]
    for dtype, by in summary["rounding"].items():
        for n, (c, error, total) in sorted(by.items(), key=lambda x: int(x[0])):
            lines.append(f"| {dtype} | {n} | {c} | {total} | {'-' if error is None else f'{error:.3g}'} |")
    replay = summary.get("replay") or {}
    if replay:
        lines += [
            "",
            "### Replayed on <sep>'s prefill chunk (crasplab.compiler.replay)",
            "",
            f"The compiler builds this witness for strings up to {summary['compiled_limit']} tokens "
            "(beyond, a threshold's |gain * z| passes 2**30). Largest error as above. Where the whole "
            "model ran the same strings in float32, its error is the replay's; in float64 it differs "
            "because the whole model returns its outputs in float32 (the read's rounding, not the "
            "sums'), which the replay, reading the residual itself, does not.",
            "",
            "| dtype | length | chunk (tokens) | strings | right | largest error | whole model's |",
            "|---|---|---|---|---|---|---|",
        ]
        for dtype, by in replay.items():
            for n, (error, total, chunk, right) in sorted(by.items(), key=lambda x: int(x[0])):
                whole = summary["rounding"].get(dtype, {}).get(n)
                shown = "-" if whole is None or whole[1] is None else f"{whole[1]:.3g}"
                lines.append(
                    f"| {dtype} | {n} | {chunk} | {total} | {'-' if right is None else right} | {error:.3g} | {shown} |"
                )
    lines += [
        "",
        "| dtype | longest length, whole model | first failure | longest length, replayed | first failure, replayed |",
        "|---|---|---|---|---|",
    ]
    for dtype, by in summary["rounding"].items():
        failure, longest = summary["first_rounding_failure"][dtype], max(by, key=int)
        replayed = replay.get(dtype, {})
        far = max(replayed, key=int) if replayed else "-"
        far_failure = summary["first_replayed_failure"].get(dtype) if replayed else None
        lines.append(
            f"| {dtype} | {longest} | {failure if failure is not None else f'none up to {longest}'} | {far} | "
            f"{far_failure if far_failure is not None else (f'none up to {far}' if replayed else '-')} |"
        )
    return lines


def report(summary: dict) -> str:
    columns = " | ".join(f"exact up to length ({dtype})" for dtype in DTYPES)
    lines = [
        "# Compiled witnesses",
        "",
        "| task | symbols | witness | fragment | encoding | layers | heads | d_model | parameters | "
        f"{columns} | compiled ({' / '.join(DTYPES)}) / interpreter right, by length |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in summary["witnesses"].values():
        exact = " | ".join(str(row["exact_up_to"].get(dtype, "-")) for dtype in DTYPES)
        lines.append(
            f"| {row['task']} | {row['symbols']} | {row['witness']} | {row['fragment']} | {row['pe']} | "
            f"{row['layers']} | {row['heads']} | {row['d_model']} | {row['parameters']:,} | {exact} | "
            f"{_witness_cells(row)} |"
        )
    if summary.get("trained"):
        lines += [
            "",
            "## Compiled beside trained (the same strings)",
            "",
            "| task | encoding | trained on lengths | length | compiled right | trained right | strings |",
            "|---|---|---|---|---|---|---|",
        ]
        for row in summary["trained"].values():
            lo, hi = row["train_lengths"]
            for n, (c, t, total) in sorted(row["by_length"].items(), key=lambda x: int(x[0])):
                lines.append(f"| {row['task']} | {row['pe']} | {lo}-{hi} | {n} | {c} | {t} | {total} |")
    if summary["rounding"]:
        lines += _rounding_lines(summary)
    return "\n".join(lines) + "\n"


def figure(summary: dict, path: Path) -> None:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4))
    for row in summary["witnesses"].values():
        by_length = row["by_dtype"].get("float32") or next(iter(row["by_dtype"].values()))
        lengths = sorted(by_length, key=int)
        ax.plot(
            [int(n) for n in lengths],
            [by_length[n][0] / by_length[n][2] for n in lengths],
            marker="o",
            label=f"{row['task']} {row['pe']} ({row['witness']}, {row['symbols']} symbols)",
        )
    for row in summary.get("trained", {}).values():
        lengths = sorted(row["by_length"], key=int)
        ax.plot(
            [int(n) for n in lengths],
            [row["by_length"][n][1] / row["by_length"][n][2] for n in lengths],
            marker="x",
            linestyle="--",
            label=f"{row['task']} {row['pe']} trained ({row['train_lengths'][0]}-{row['train_lengths'][1]})",
        )
    ax.set_xscale("log")
    ax.set_xlabel("input length")
    ax.set_ylabel("exact match (solid: compiled, dashed: trained)")
    ax.set_ylim(-0.05, 1.05)
    ax.legend(fontsize=6)
    save_figure(fig, path)
