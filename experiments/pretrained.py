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

from crasp.tasks import COPYING_CODES, RETRIEVAL_AND_COPYING, RETRIEVAL_CODES
from crasplab.cli import arguments
from crasplab.cli.experiment import Report
from crasplab.incontext.answering import answer_pending, graded_answers, in_batches
from crasplab.incontext.formal_prompts import COPYING_ALPHABET, RETRIEVAL_ALPHABET, cell_items
from crasplab.incontext.greedy import answer_budget, check_answers_fit
from crasplab.models.memory import check_batch_memory, check_prompt_count, decoding_bytes
from crasplab.incontext.settings import PretrainedSettings
from crasplab.models.config import DTYPES
from crasplab.models.loading import NAMED_MODELS, load_with_tokenizer
from crasplab.reports.in_context import families_markdown, report_markdown, summarize, write_report
from crasplab.records.run_folder import RESULTS_FILE
from crasplab.train.allocator import restart_with_huge_page_blocks

TASKS = RETRIEVAL_AND_COPYING
DEFAULTS = PretrainedSettings()


def default_out(settings: PretrainedSettings) -> Path:
    return Path("runs/pretrained") / Path(settings.model).stem


def prompt_batches(settings: PretrainedSettings) -> list[list[dict]]:
    """Every prompt of the run as an entry to answer, batched per length and task kind (alike
    prompt and answer lengths, so alike compiled shapes)."""
    batches = []
    for length in settings.lengths:
        for kind in (RETRIEVAL_CODES, COPYING_CODES):
            cell = [
                dict(task=item.task, length=item.length, index=item.index, prompt=item.prompt, expected=item.expected)
                for code in settings.tasks
                if code in kind
                for item in cell_items(code, length, settings.n, settings.seed, *settings.demonstrations.for_task(code))
            ]
            batches += in_batches(cell, settings.batch_size)
    return batches


def check_batches(pretrained, batches: list[list[dict]], batch_size: int) -> None:
    """Refuse prompts and answers beyond the model's context, or batches beyond the machine's memory."""
    for batch in batches:
        prompts, expected = [entry["prompt"] for entry in batch], [entry["expected"] for entry in batch]
        check_answers_fit(
            pretrained,
            prompts,
            expected,
            "--lengths, or the --retrieval-/--copying-demonstrations and -demo-length flags",
        )
        positions = max(map(len, pretrained.tokenizer.encode_batch(prompts))) + answer_budget(
            pretrained.tokenizer, expected
        )
        check_batch_memory(
            decoding_bytes(pretrained.config, batch_size + 1, positions),
            f"decoding {batch_size + 1} prompts of up to {positions} tokens at once",
            "--batch-size",
        )


def run(settings: PretrainedSettings, out: Path) -> None:
    """Evaluate every prompt the run folder lacks, saving after each batch."""
    check_prompt_count(len(settings.tasks) * len(settings.lengths) * settings.n, "--n")
    started = time.perf_counter()
    pretrained = load_with_tokenizer(settings.model, dtype=settings.dtype)
    print(f"loaded {pretrained.architecture} from {pretrained.path} in {time.perf_counter() - started:.1f} s")
    newline_id = pretrained.tokenizer.encode("\n")[-1]
    answer = graded_answers(pretrained, newline_id, settings.batch_size, str.__eq__)
    batches = prompt_batches(settings)
    check_batches(pretrained, batches, settings.batch_size)
    config = dict(
        settings.to_dict(),
        model_path=str(pretrained.path),
        architecture=pretrained.architecture,
        retrieval_alphabet=RETRIEVAL_ALPHABET,
        copying_alphabet=COPYING_ALPHABET,
    )
    answer_pending(
        out,
        config,
        batches,
        answer,
        lambda record: (record["task"], record["length"], record["index"]),
        started,
        RESULTS_FILE,
        may_change=settings.RESULTS_UNCHANGED,
    )


DEMONSTRATION_FLAGS = {
    "retrieval_demonstrations": (arguments.at_least(1), "demonstrations before a retrieval item"),
    "retrieval_demo_length": (arguments.at_least(1), "context length of retrieval demonstrations"),
    "copying_demonstrations": (arguments.at_least(1), "demonstrations before a copying item"),
    "copying_demo_length": (arguments.at_least(1), "source length of copying demonstrations"),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=arguments.HelpFormatter)
    arguments.add_model_flag(parser, DEFAULTS.model, NAMED_MODELS)
    arguments.add_prompt_flags(parser, DEFAULTS)
    arguments.add_seed_flag(parser, DEFAULTS.seed, "every prompt")
    arguments.add_batch_size_flag(parser, DEFAULTS.batch_size)
    arguments.add_dtype_flag(parser, DEFAULTS.dtype, DTYPES)
    arguments.add_flags_of(parser, DEFAULTS, DEMONSTRATION_FLAGS)
    arguments.add_run_folder_flags(parser, "runs/pretrained/<model name>")
    parser.add_argument(
        "--compare",
        nargs="+",
        type=Path,
        metavar="RUN",
        help="print the pooled gaps of these run folders side by side with the paper's pattern, and stop",
    )
    return parser


def settings_from(args: argparse.Namespace) -> PretrainedSettings:
    flags = {name: value for name, value in vars(args).items() if name != "compare"}  # where to read, not a setting
    return arguments.settings_from_flags(PretrainedSettings, argparse.Namespace(**flags))


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    compare = vars(args).pop("compare")  # where to read, not a setting of a run
    if compare:
        print(families_markdown([summarize(folder) for folder in compare]))
        return
    arguments.run_from_flags(args, settings_from, default_out, run, Report(write_report, report_markdown))


if __name__ == "__main__":
    restart_with_huge_page_blocks()
    sys.exit(main())
