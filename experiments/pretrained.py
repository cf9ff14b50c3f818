"""Few-shot in-context evaluation of a pretrained model on the ten retrieval and copying tasks
(retrieval/copying paper, section 4.1): does the model show the directional bias (right/forward
above left/backward) and the uniqueness gap that the paper reports for Llama-3 and Qwen2.5?

    python experiments/pretrained.py --model smollm2              # 1200 prompts, about 8 minutes on 2 CPU cores
    python experiments/pretrained.py --model path/to/model.gguf --lengths 10 30 50 --n 50
    python experiments/pretrained.py --report-only runs/pretrained/smollm2

Prompt format (incontext.formal_prompts): tokens separated by spaces, demonstrations one per line,
then the test item; greedy decoding until the end of the line; exact match of the stripped line.
  retrieval  ` a b c d | c: d` (4 demonstrations), alphabet: ASCII letters and digits (62)
  copying    `a b c d e : a b c d e` (5 demonstrations of length 5), alphabet: ASCII letters (52)
Demonstrations have a fixed short length (flags), so the test lengths probe in-context length
generalization.

The run folder (default runs/pretrained/<model name>) holds config.json, results.jsonl (one record
per prompt, rewritten atomically after every batch), summary.json, report.md and
accuracy_by_length.png. Running the same command again continues where an interrupted run
stopped; the examples are fixed by the seed, per task and length.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from crasplab.cli.arguments import HelpFormatter, at_least
from crasplab.cli.experiment import answer_pending, evaluate_and_report, in_batches
from crasp.tasks import COPYING_CODES, RETRIEVAL_AND_COPYING, RETRIEVAL_CODES
from crasplab.incontext.formal_prompts import (COPYING_ALPHABET, RETRIEVAL_ALPHABET, Demonstrations, cell_items,
                                      check_prompt_lengths)
from crasplab.incontext.greedy import answer_lines, check_answers_fit
from crasplab.models.config import DTYPES
from crasplab.models.loading import NAMED_MODELS, UnsupportedModelError, load_with_tokenizer
from crasplab.results.in_context import RESULTS_FILE, report_markdown, write_report
from crasplab.results.run_folder import check_output_folder
from crasplab.train.allocator import restart_with_huge_page_blocks

TASKS = RETRIEVAL_AND_COPYING


def run_config(args: argparse.Namespace, pretrained) -> dict:
    return dict(
        model=args.model, model_path=str(pretrained.path), architecture=pretrained.architecture, tasks=list(args.tasks),
        lengths=list(args.lengths), n=args.n, seed=args.seed, dtype=args.dtype,
        retrieval_demonstrations=args.retrieval_demonstrations, retrieval_demo_length=args.retrieval_demo_length,
        copying_demonstrations=args.copying_demonstrations, copying_demo_length=args.copying_demo_length,
        retrieval_alphabet=RETRIEVAL_ALPHABET, copying_alphabet=COPYING_ALPHABET,
    )


def demonstrations(args: argparse.Namespace) -> Demonstrations:
    return Demonstrations(retrieval=(args.retrieval_demonstrations, args.retrieval_demo_length),
                          copying=(args.copying_demonstrations, args.copying_demo_length))


def run_folder(args: argparse.Namespace) -> Path:
    """The folder the run writes to, refused before loading anything if it cannot be one."""
    return check_output_folder(args.out or Path("runs/pretrained") / Path(str(args.model)).stem)


def prompt_batches(args: argparse.Namespace) -> list[list[dict]]:
    """Every prompt of the run as an entry to answer, batched per length and task kind (alike
    prompt and answer lengths, so alike compiled shapes)."""
    batches = []
    for length in args.lengths:
        for kind in (RETRIEVAL_CODES, COPYING_CODES):
            cell = [dict(task=item.task, length=item.length, index=item.index, prompt=item.prompt, expected=item.expected)
                    for code in args.tasks if code in kind
                    for item in cell_items(code, length, args.n, args.seed, *demonstrations(args).for_task(code))]
            batches += in_batches(cell, args.batch_size)
    return batches


def evaluate(args: argparse.Namespace) -> Path:
    """Evaluate every prompt the run folder lacks, saving after each batch; return the folder."""
    check_prompt_lengths(args.tasks, args.lengths, demonstrations(args))
    out = run_folder(args)
    started = time.perf_counter()
    try:
        pretrained = load_with_tokenizer(args.model, dtype=args.dtype)
    except UnsupportedModelError as error:
        raise SystemExit(f"error: {error}")
    print(f"loaded {pretrained.architecture} from {pretrained.path} in {time.perf_counter() - started:.1f} s")
    newline_id = pretrained.tokenizer.encode("\n")[-1]

    def answer(batch: list[dict]) -> list[dict]:
        outputs = answer_lines(pretrained, [entry["prompt"] for entry in batch], [entry["expected"] for entry in batch],
                               newline_id, args.batch_size)
        return [dict(entry, output=output, correct=output == entry["expected"]) for entry, output in zip(batch, outputs)]

    batches = prompt_batches(args)
    for batch in batches:
        check_answers_fit(pretrained, [entry["prompt"] for entry in batch], [entry["expected"] for entry in batch],
                          "--lengths, or the --retrieval-/--copying-demonstrations and -demo-length flags")
    answer_pending(out, run_config(args, pretrained), batches, answer,
                   lambda record: (record["task"], record["length"], record["index"]), started, RESULTS_FILE)
    return out


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
    parser.add_argument("--dtype", choices=tuple(DTYPES), default="float32",
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
    evaluate_and_report(build_parser().parse_args(argv), evaluate, write_report, report_markdown)


if __name__ == "__main__":
    restart_with_huge_page_blocks()
    sys.exit(main())
