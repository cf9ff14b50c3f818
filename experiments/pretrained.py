"""Few-shot in-context evaluation of a pretrained model on the ten retrieval and copying tasks
(retrieval/copying paper, section 4.1): does the model show the directional bias (right/forward
above left/backward) and the uniqueness gap that the paper reports for Llama-3 and Qwen2.5?

    python experiments/pretrained.py --model smollm2              # 1200 prompts, about 8 minutes on 2 CPU cores
    python experiments/pretrained.py --model path/to/model.gguf --lengths 10 30 50 --n 50
    python experiments/pretrained.py --report-only runs/pretrained/smollm2

Prompt format (spec/tasks.md): tokens separated by spaces, demonstrations one per line, then the
test item; greedy decoding until the end of the line; exact match of the stripped line.
  retrieval  ` a b c d | c: d` (4 demonstrations), alphabet: ASCII letters and digits (62)
  copying    `a b c d e : a b c d e` (5 demonstrations of length 5), alphabet: ASCII letters (52)
Non-unique retrieval: the query occurs 2 to max(2, length // 5) times at non-adjacent positions;
non-unique copying draws symbols i.i.d. Demonstrations have a fixed short length (flags), so the
test lengths probe in-context length generalization.

The run folder (default runs/pretrained/<model name>) holds config.json, results.jsonl (one record
per prompt, rewritten atomically after every batch), summary.json, report.md and
accuracy_by_length.png. Running the same command again continues where an interrupted run
stopped; the examples are fixed by the seed, per task and length.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tqdm import tqdm

from crasp.tasks import TASK_CLASSES, UNBOUNDED, TaskError, get_task
from crasp.tasks.copying import Copy, RepeatCopy
from crasp.tasks.retrieval import Retrieval
from experiments._pretrained_report import (CONFIG_FILE, RESULTS_FILE, RunFolderError, read_run_config, report_markdown,
                                            write_report)
from models.generate import generate
from models.loading import NAMED_MODELS, UnsupportedModelError, load_pretrained
from train.checkpoint import read_jsonl, write_json, write_jsonl


def _paper_tasks(family: type) -> tuple[str, ...]:
    # The paper's tasks of a family in the registry's order, which also seeds each task's prompts;
    # repeat copy is Huang et al.'s copying over {a, b}, not one of the paper's.
    return tuple(cls.code for cls in TASK_CLASSES if issubclass(cls, family) and cls is not RepeatCopy)


RETRIEVAL_TASKS = _paper_tasks(Retrieval)
COPYING_TASKS = _paper_tasks(Copy)
TASKS = RETRIEVAL_TASKS + COPYING_TASKS
RETRIEVAL_ALPHABET = 62  # crasp.tasks' 62 symbols: ASCII letters, then digits
COPYING_ALPHABET = 52  # ASCII letters
# Prompts of a batch are padded to a multiple of this many tokens, and the number of generated
# tokens is rounded up likewise, so a handful of compiled programs serve the whole run.
WIDTH_BUCKET = 32
NEW_TOKENS_BUCKET = 8


def pretrained_task(code: str):
    """The task with the pretrained-model sampler parameters of spec/tasks.md."""
    if code in RETRIEVAL_TASKS:
        extra = {} if code in ("UL", "UR") else dict(occurrences=(2, None), non_adjacent=True)
        return get_task(code, alphabet_size=RETRIEVAL_ALPHABET, **extra)
    return get_task(code, alphabet_size=COPYING_ALPHABET)


def format_item(code: str, inputs: list[str], query: str | None) -> str:
    """The prompt line of one item, up to where the answer starts."""
    if code in RETRIEVAL_TASKS:
        return " " + " ".join(inputs) + f" | {query}:"
    return " ".join(inputs) + " :"


def format_answer(answer: list[str]) -> str:
    return " " + " ".join(answer)


@dataclass(frozen=True)
class Item:
    task: str
    length: int
    index: int
    prompt: str
    expected: str  # the answer line, stripped


def cell_items(code: str, length: int, n: int, seed: int, demonstrations: int, demo_length: int) -> list[Item]:
    """The n prompts of one (task, length) cell; the seed fixes them whatever else is evaluated."""
    task = pretrained_task(code)
    rng = np.random.default_rng([seed, TASKS.index(code), length])
    tests = task.sample(rng, n, length)
    demos = task.sample(rng, n * demonstrations, demo_length)
    test_queries = tests.queries or [None] * n
    demo_queries = demos.queries or [None] * (n * demonstrations)
    items = []
    for i in range(n):
        lines = [format_item(code, demos.inputs[j], demo_queries[j]) + format_answer(demos.answers[j])
                 for j in range(i * demonstrations, (i + 1) * demonstrations)]
        lines.append(format_item(code, tests.inputs[i], test_queries[i]))
        items.append(Item(code, length, i, "\n".join(lines), " ".join(tests.answers[i])))
    return items


def answer_line(tokenizer, generated: list[int]) -> str:
    """The generated text up to the first special token or line break, stripped."""
    special = tokenizer.special_ids
    end = next((k for k, token in enumerate(generated) if token in special), len(generated))
    return tokenizer.decode(generated[:end]).split("\n", 1)[0].strip()


def _round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


def evaluate_batch(pretrained, items: list[Item], newline_id: int, batch_size: int) -> list[str]:
    """Greedy answer lines for a batch of prompts (batched prefill, then KV-cache decoding)."""
    tokenizer = pretrained.tokenizer
    prompts = tokenizer.encode_batch([item.prompt for item in items])
    answer_tokens = max(len(tokenizer.encode(" " + item.expected + "\n")) for item in items)
    max_new_tokens = _round_up(answer_tokens + 2, NEW_TOKENS_BUCKET)
    width = _round_up(max(map(len, prompts)), WIDTH_BUCKET)
    # models.generate pads to the longest prompt of the batch and compiles once per shape: filler
    # rows of exactly the bucket width fix the padded width and the batch size, so batches share
    # compiled programs. Their outputs are dropped.
    rows = [*prompts, *[[newline_id] * width] * (batch_size + 1 - len(prompts))]
    tokens_BxT = np.full((len(rows), width), newline_id, dtype=np.int32)
    for r, row in enumerate(rows):
        tokens_BxT[r, : len(row)] = row
    generation = generate(pretrained.model, tokens_BxT, np.array([len(row) for row in rows]),
                          max_new_tokens=max_new_tokens, eos_id=newline_id, pad_id=newline_id)
    generated_BxN = np.asarray(generation.tokens_BxN)
    return [answer_line(tokenizer, generated_BxN[r].tolist()) for r in range(len(items))]


def run_config(args: argparse.Namespace, pretrained) -> dict:
    return dict(
        model=args.model, model_path=str(pretrained.path), architecture=pretrained.architecture, tasks=list(args.tasks),
        lengths=list(args.lengths), n=args.n, seed=args.seed, dtype=args.dtype,
        retrieval_demonstrations=args.retrieval_demonstrations, retrieval_demo_length=args.retrieval_demo_length,
        copying_demonstrations=args.copying_demonstrations, copying_demo_length=args.copying_demo_length,
        retrieval_alphabet=RETRIEVAL_ALPHABET, copying_alphabet=COPYING_ALPHABET,
    )


def check_lengths(args: argparse.Namespace) -> None:
    """Refuse, before loading anything, lengths a task's sampler cannot satisfy."""
    for code in args.tasks:
        task = pretrained_task(code)
        _, demo_length = demo_settings(args, code)
        for flag, lengths in (("--lengths", args.lengths), ("demonstration length", [demo_length])):
            bad = [length for length in lengths if not task.min_length() <= length <= task.max_length()]
            if bad:
                accepted = (f"{task.min_length()} or more" if task.max_length() == UNBOUNDED
                            else f"{task.min_length()} to {task.max_length()}")
                raise SystemExit(f"error: {flag} {bad}: task {code} (alphabet of {task.alphabet_size}) accepts "
                                 f"lengths {accepted}")


def run_folder(args: argparse.Namespace) -> Path:
    """The folder the run writes to, refused before loading anything if it cannot be one."""
    out = args.out or Path("runs/pretrained") / Path(str(args.model)).stem
    if out.exists() and not out.is_dir():
        raise SystemExit(f"error: --out {out} is a file; give a new folder, or the folder of a run to resume")
    return out


def open_run_folder(out: Path, config: dict) -> list[dict]:
    """Write config.json, or check it against a previous run's; return the records so far."""
    if (out / CONFIG_FILE).exists():
        saved = read_run_config(out)
        changed = sorted(key for key in config.keys() | saved.keys() if config.get(key) != saved.get(key))
        if changed:
            raise SystemExit(f"error: {out} holds a run with other settings ({', '.join(changed)}); "
                             "use another --out or the original flags to resume it")
    write_json(out / CONFIG_FILE, config)
    return read_jsonl(out / RESULTS_FILE)


def pending_batches(args: argparse.Namespace, done: set[tuple[str, int, int]]) -> list[list[Item]]:
    """The prompts not evaluated yet, batched per length and task kind (alike prompt and answer
    lengths, so alike compiled shapes)."""
    batches = []
    for length in args.lengths:
        for kind in (RETRIEVAL_TASKS, COPYING_TASKS):
            pending = [item for code in args.tasks if code in kind
                       for item in cell_items(code, length, args.n, args.seed, *demo_settings(args, code))
                       if (item.task, item.length, item.index) not in done]
            batches += [pending[k: k + args.batch_size] for k in range(0, len(pending), args.batch_size)]
    return batches


def evaluate(args: argparse.Namespace) -> Path:
    """Evaluate every prompt the run folder lacks, saving after each batch; return the folder."""
    check_lengths(args)
    out = run_folder(args)
    started = time.perf_counter()
    try:
        pretrained = load_pretrained(args.model, dtype=args.dtype)
    except UnsupportedModelError as error:
        raise SystemExit(f"error: {error}")
    if pretrained.tokenizer is None:
        raise SystemExit(f"error: {pretrained.path} has no tokenizer.json; the prompts need the model's tokenizer")
    print(f"loaded {pretrained.architecture} from {pretrained.path} in {time.perf_counter() - started:.1f} s")
    records = open_run_folder(out, run_config(args, pretrained))
    batches = pending_batches(args, {(r["task"], r["length"], r["index"]) for r in records})
    newline_id = pretrained.tokenizer.encode("\n")[-1]
    evaluated, generation_seconds = 0, 0.0
    for batch in tqdm(batches, desc="batches", unit="batch"):
        batch_started = time.perf_counter()
        outputs = evaluate_batch(pretrained, batch, newline_id, args.batch_size)
        seconds = time.perf_counter() - batch_started
        records += [dict(task=item.task, length=item.length, index=item.index, prompt=item.prompt, expected=item.expected,
                         output=output, correct=output == item.expected, seconds=seconds / len(batch))
                    for item, output in zip(batch, outputs)]
        write_jsonl(out / RESULTS_FILE, records)
        evaluated += len(batch)
        generation_seconds += seconds
    if evaluated:
        print(f"evaluated {evaluated} prompts in {generation_seconds:.1f} s of generation "
              f"({evaluated / generation_seconds:.2f} prompts/s); wall time {time.perf_counter() - started:.1f} s")
    else:
        print("nothing left to evaluate; rebuilding the report")
    return out


def demo_settings(args: argparse.Namespace, code: str) -> tuple[int, int]:
    if code in RETRIEVAL_TASKS:
        return args.retrieval_demonstrations, args.retrieval_demo_length
    return args.copying_demonstrations, args.copying_demo_length


class HelpFormatter(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
    """The module docstring as written, and every flag's default."""


def at_least(minimum: int) -> Callable[[str], int]:
    """An argparse type: an integer of at least `minimum`, so that a bad count stops the command while
    its flags are parsed, before a run folder is written that the corrected command would refuse."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}, got {value}")
        return value

    return parse


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=HelpFormatter)
    parser.add_argument("--model", default="smollm2",
                        help=f"a named model ({', '.join(f'{k}: {v.description}' for k, v in NAMED_MODELS.items())}), "
                             "a GGUF file (llama architecture) or a Hugging Face checkpoint folder (llama, qwen2, gpt2)")
    parser.add_argument("--tasks", nargs="+", default=list(TASKS), choices=TASKS, metavar="CODE",
                        help="task codes")
    parser.add_argument("--lengths", nargs="+", type=int, default=[10, 20, 40], metavar="L",
                        help="test input lengths (context length for retrieval, source length for copying); "
                             "unique copying needs L <= 52")
    parser.add_argument("--n", type=at_least(1), default=40, help="prompts per task and length")
    parser.add_argument("--seed", type=at_least(0), default=0, help="fixes every prompt")
    parser.add_argument("--batch-size", type=at_least(1), default=16,
                        help="prompts decoded together (plus one filler row that fixes the compiled shape)")
    parser.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32",
                        help="compute dtype (parameters stay float32)")
    parser.add_argument("--retrieval-demonstrations", type=at_least(1), default=4,
                        help="demonstrations before a retrieval item")
    parser.add_argument("--retrieval-demo-length", type=at_least(1), default=4,
                        help="context length of retrieval demonstrations")
    parser.add_argument("--copying-demonstrations", type=at_least(1), default=5,
                        help="demonstrations before a copying item")
    parser.add_argument("--copying-demo-length", type=at_least(1), default=5,
                        help="source length of copying demonstrations")
    parser.add_argument("--out", type=Path, default=None, help="run folder (None: runs/pretrained/<model name>)")
    parser.add_argument("--report-only", type=Path, default=None, metavar="RUN_DIR",
                        help="rebuild summary.json, report.md and the figure of an existing run folder; evaluate nothing")
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    try:
        out = args.report_only or evaluate(args)
        summary = write_report(out)
    except (TaskError, RunFolderError) as error:
        raise SystemExit(f"error: {error}")
    print(report_markdown(summary))
    print(f"report: {out / 'report.md'}")


if __name__ == "__main__":
    sys.exit(main())
