"""Copying in realistic settings (retrieval/copying paper, section 4.2), on any model the lab loads:

    python experiments/realistic.py lorem      # lorem-ipsum paragraphs, forward and backward
    python experiments/realistic.py git        # git revert (history in order) and cherry-pick (in reverse)
    python experiments/realistic.py lorem --model path/to/model.gguf --lengths 100 500 --n 20
    python experiments/realistic.py git --report-only runs/realistic/git/smollm2

lorem: repeat a lorem-ipsum paragraph (incontext.lorem: a fixed Latin word list, shuffled words and
sentences, some words and sentences repeated) word by word, in order (forward) or last word first
(backward), after an instruction and few-shot demonstrations. Greedy decoding stops at the end of
the line or at 1.5x the reference length. The report aligns each output to its reference token by
token and asks whether errors come after ambiguous tokens (tokens with several different
successors in the reference) more than after the others.

git: list the hashes of a synthetic history (7-hex hashes, short messages) in the order `git
revert` takes them (newest first, as the log lists them: forward) or `git cherry-pick` does
(oldest first: backward), after the same explanation of both commands and three examples of the
command asked. Exact match of the hash list.

Default sizes fit a 2-core CPU with SmolLM2-135M: lorem, paragraphs of 50 100 200 400 tokens, --n 6
per length and direction (48 prompts, about 14 minutes); git, histories of 2 4 8 16 commits, --n 10
per size and command (80 prompts, about 8 minutes).

Each command writes a run folder (default runs/realistic/<experiment>/<model name>): config.json,
results.jsonl (one record per prompt, rewritten atomically after every batch), summary.json,
report.md and a figure. Running the same command again continues where an interrupted run stopped;
a seed fixes every prompt.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

from crasplab.cli.arguments import HelpFormatter, at_least
from crasplab.cli.experiment import answer_pending, in_batches
from crasplab.incontext.directions import DIRECTIONS
from crasplab.incontext.git_history import COMMANDS, git_items
from crasplab.incontext.greedy import (ContextError, GenerationMemoryError, answer_lines, check_answers_fit, check_context,
                              continuation_lines)
from crasplab.incontext.lorem import LoremSettings
from crasplab.models.config import DTYPES
from crasplab.models.loading import NAMED_MODELS, UnsupportedModelError, load_with_tokenizer
from crasplab.results.files import ResultFileError
from crasplab.results.realistic import RESULTS_FILE, report_markdown, write_report
from crasplab.results.run_folder import RunFolderError, check_output_folder
from crasplab.train.allocator import restart_with_huge_page_blocks

OUTPUT_LIMIT = 1.5  # lorem outputs are read up to this many times the reference's tokens


def token_ids(tokenizer, text: str) -> list[int]:
    """The tokens of `text` alone, without the BOS that prompts get."""
    return tokenizer.backend.encode(text, add_special_tokens=False).ids


def load_model(args: argparse.Namespace):
    try:
        return load_with_tokenizer(args.model, dtype=args.dtype)
    except UnsupportedModelError as error:
        raise SystemExit(f"error: {error}")


def check_sizes(pretrained, sizes: list[int], positions_per_unit: float, flag: str, holds: str, why: str) -> None:
    """Refuse at once a size that no prompt and answer of it could fit in the model's context, for
    any text: building such prompts takes minutes (or never ends) before
    incontext.greedy.check_context can look. `holds` is formatted with the largest size that may fit."""
    context = pretrained.config.max_positions
    too_large = [size for size in sizes if size * positions_per_unit > context]
    if too_large:
        raise SystemExit(f"error: {flag} {' '.join(map(str, too_large))}: the context of {context} positions of "
                         f"{pretrained.path} holds {holds.format(math.floor(context / positions_per_unit))} ({why}); "
                         f"choose smaller {flag}")


def common_config(args: argparse.Namespace, pretrained) -> dict:
    return dict(experiment=args.experiment, model=args.model, model_path=str(pretrained.path),
                architecture=pretrained.architecture, n=args.n, seed=args.seed, dtype=args.dtype)


def evaluate_lorem(args: argparse.Namespace, out: Path) -> None:
    """Copy every paragraph the run folder lacks; a record keeps the reference's and the output's
    tokens (and the reference's token texts) for the alignment the report makes."""
    started = time.perf_counter()
    pretrained = load_model(args)
    tokenizer = pretrained.tokenizer
    settings = LoremSettings(args.seed, args.demonstrations, args.demo_length, args.repeat_word, args.repeat_sentence)

    check_sizes(pretrained, args.lengths, 1 + OUTPUT_LIMIT, "--lengths", "paragraphs of at most {} tokens",
                f"each token needs {1 + OUTPUT_LIMIT:g} positions: one in the prompt, up to {OUTPUT_LIMIT:g} in "
                "the copy")

    def count(text: str) -> int:
        return len(token_ids(tokenizer, text))

    batches, cell_limits = [], {}
    for length in args.lengths:
        for name in args.directions:
            cell = []
            for item in settings.items(DIRECTIONS[name], length, args.n, count):
                reference_ids = token_ids(tokenizer, item.reference)
                cell.append(dict(direction=name, length=length, index=item.index, prompt=item.prompt,
                                 reference=item.reference, reference_ids=reference_ids,
                                 reference_pieces=[tokenizer.decode([token]) for token in reference_ids],
                                 limit=math.ceil(OUTPUT_LIMIT * len(reference_ids))))
            # One decoding budget per cell, whatever is left to do, so every batch of it shares a shape.
            cell_limits[(name, length)] = max(entry["limit"] for entry in cell)
            check_context(pretrained, [entry["prompt"] for entry in cell], cell_limits[(name, length)],
                          "--lengths, --demonstrations or --demo-length")
            batches += in_batches(cell, args.batch_size)
    newline_id = token_ids(tokenizer, "\n")[-1]

    def answer(batch: list[dict]) -> list[dict]:
        outputs = continuation_lines(pretrained, [entry["prompt"] for entry in batch], [entry["limit"] for entry in batch],
                                     cell_limits[(batch[0]["direction"], batch[0]["length"])], newline_id, args.batch_size)
        return [dict(entry, output=output, output_ids=token_ids(tokenizer, output)) for entry, output in zip(batch, outputs)]

    config = dict(common_config(args, pretrained), lengths=args.lengths, directions=args.directions,
                  demonstrations=args.demonstrations, demo_length=args.demo_length, repeat_word=args.repeat_word,
                  repeat_sentence=args.repeat_sentence, output_limit=OUTPUT_LIMIT)
    answer_pending(out, config, batches, answer, lambda r: (r["direction"], r["length"], r["index"]), started,
                   RESULTS_FILE)


def evaluate_git(args: argparse.Namespace, out: Path) -> None:
    """Ask for every hash list the run folder lacks."""
    started = time.perf_counter()
    pretrained = load_model(args)
    tokenizer = pretrained.tokenizer
    check_sizes(pretrained, args.commits, 2, "--commits", "at most {} commits",
                "each needs 2 positions at least: its hash in the history and in the answer")
    batches = []
    for commits in args.commits:
        for command in args.commands:
            cell = [dict(command=item.command, commits=commits, index=item.index, prompt=item.prompt, expected=item.expected)
                    for item in git_items(command, commits, args.n, args.seed, args.examples, args.example_commits)]
            check_answers_fit(pretrained, [entry["prompt"] for entry in cell], [entry["expected"] for entry in cell],
                              "--commits, --examples or --example-commits")
            batches += in_batches(cell, args.batch_size)
    newline_id = token_ids(tokenizer, "\n")[-1]

    def answer(batch: list[dict]) -> list[dict]:
        outputs = answer_lines(pretrained, [entry["prompt"] for entry in batch], [entry["expected"] for entry in batch],
                               newline_id, args.batch_size)
        return [dict(entry, output=output, correct=output.split() == entry["expected"].split())
                for entry, output in zip(batch, outputs)]

    config = dict(common_config(args, pretrained), commits=args.commits, commands=args.commands,
                  examples=args.examples, example_commits=args.example_commits)
    answer_pending(out, config, batches, answer, lambda r: (r["command"], r["commits"], r["index"]), started,
                   RESULTS_FILE)


def probability(text: str) -> float:
    """An argparse type: a probability in [0, 1]."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"must lie in [0, 1], got {value}")
    return value


def distinct(flag: str, values: list) -> list:
    """`values` if no value repeats (a repeated length would evaluate the same prompts twice)."""
    repeated = sorted({value for value in values if values.count(value) > 1})
    if repeated:
        raise SystemExit(f"error: {flag} lists {', '.join(map(str, repeated))} more than once; give each value once")
    return values


def add_experiment(experiments, shared: argparse.ArgumentParser, name: str, summary: str,
                   sizes: tuple[str, list[int], str], conditions: tuple[str, tuple[str, ...], str],
                   n: tuple[int, str]) -> argparse.ArgumentParser:
    """The subcommand of an experiment that evaluates every condition at every size, n prompts each.

    --batch-size defaults to n: on a CPU a decoding step costs about the same for one row as for
    ten (it reads every weight once), so each (size, condition) cell is decoded in one batch."""
    parser = experiments.add_parser(name, parents=[shared], formatter_class=HelpFormatter, help=summary,
                                    description=f"{summary[0].upper()}{summary[1:]} (see the main --help).")
    flag, default, text = sizes
    parser.add_argument(flag, nargs="+", type=at_least(1), default=default, metavar="N", help=text)
    flag, choices, text = conditions
    parser.add_argument(flag, nargs="+", choices=choices, default=list(choices), help=text)
    parser.add_argument("--n", type=at_least(1), default=n[0], help=n[1])
    parser.add_argument("--batch-size", type=at_least(1), default=n[0],
                        help="prompts decoded together (plus one filler row that fixes the compiled shape)")
    return parser


def build_parser() -> argparse.ArgumentParser:
    shared = argparse.ArgumentParser(add_help=False)
    shared.add_argument("--model", default="smollm2",
                        help=f"a named model ({', '.join(f'{k}: {v.description}' for k, v in NAMED_MODELS.items())}), "
                             "a GGUF file (llama architecture) or a Hugging Face checkpoint folder (llama, qwen2, gpt2)")
    shared.add_argument("--seed", type=at_least(0), default=0, help="fixes every prompt")
    shared.add_argument("--dtype", choices=tuple(DTYPES), default="float32", help="compute dtype (parameters stay float32)")
    shared.add_argument("--out", type=Path, default=None,
                        help="run folder (None: runs/realistic/<experiment>/<model name>)")
    shared.add_argument("--report-only", type=Path, default=None, metavar="RUN_DIR",
                        help="rebuild summary.json, report.md and the figure of an existing run folder; evaluate nothing")

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=HelpFormatter)
    experiments = parser.add_subparsers(dest="experiment", required=True, metavar="{lorem,git}")
    lorem = add_experiment(
        experiments, shared, "lorem", "lorem-ipsum copying, forward and backward, with the ambiguity analysis",
        sizes=("--lengths", [50, 100, 200, 400],
               "paragraph lengths in tokens of the model's tokenizer (the paper goes to 500 and 2000)"),
        conditions=("--directions", tuple(DIRECTIONS), "forward: in order; backward: word by word, last word first"),
        n=(6, "paragraphs per length (each copied in every direction)"))
    lorem.add_argument("--demonstrations", type=at_least(0), default=2, help="demonstration paragraphs in each prompt")
    lorem.add_argument("--demo-length", type=at_least(1), default=30, help="length of a demonstration, in tokens")
    lorem.add_argument("--repeat-word", type=probability, default=0.15,
                       help="probability that a word repeats a word already used")
    lorem.add_argument("--repeat-sentence", type=probability, default=0.15,
                       help="probability that a sentence repeats an earlier sentence")
    git = add_experiment(
        experiments, shared, "git", "git revert (forward) and cherry-pick (backward) of a synthetic history",
        sizes=("--commits", [2, 4, 8, 16], "commits per history"),
        conditions=("--commands", tuple(COMMANDS),
                    "revert: hashes in the log's order (forward); cherry-pick: reversed (backward)"),
        n=(10, "histories per size (each asked with every command)"))
    git.add_argument("--examples", type=at_least(0), default=3, help="few-shot examples in each prompt")
    git.add_argument("--example-commits", type=at_least(1), default=4, help="commits in each example history")
    return parser


EVALUATE = {"lorem": (evaluate_lorem, "lengths", "directions"), "git": (evaluate_git, "commits", "commands")}


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    evaluate, *listed = EVALUATE[args.experiment]
    for name in listed:
        distinct(f"--{name}", getattr(args, name))
    try:
        out = args.report_only
        if out is None:
            out = check_output_folder(args.out or Path("runs/realistic") / args.experiment / Path(str(args.model)).stem)
            evaluate(args, out)
        summary = write_report(args.experiment, out)
    except (RunFolderError, ResultFileError, ContextError, GenerationMemoryError) as error:
        raise SystemExit(f"error: {error}")
    print(report_markdown(args.experiment, summary))
    print(f"report: {out / 'report.md'}")


if __name__ == "__main__":
    restart_with_huge_page_blocks()
    sys.exit(main())
