"""Fine-tune a pretrained model per task on short inputs and test it on longer ones (retrieval/copying
paper, section 4.3): do the expressible tasks keep working beyond the training lengths, do the
inexpressible non-unique ones drop, and does the directional bias seen in context go away?

    python experiments/finetune.py --model smollm2                      # quick preset on a CPU (UF UB NF NB)
    python experiments/finetune.py --model smollm2 --preset paper       # for a GPU
    python experiments/finetune.py --model smollm2 --tasks UF UB --method lora --learning-rate 1e-3
    python experiments/finetune.py --report-only runs/finetune/smollm2-quick

Each task starts from the pretrained weights. Prompts are the in-context experiment's few-shot
prompts (experiments/pretrained.py: demonstrations one per line, tokens separated by spaces, then
the item); training draws fresh prompts with input lengths in the training range and puts the loss
on the item's answer and its line break only. The same test prompts are answered greedily by the
pretrained model (in context, before) and by each fine-tuned model (after), at every length of
every bin; the first bin is the training range.

The run folder (default runs/finetune/<model name>-<preset>) holds config.json, results.jsonl
(one record per test prompt and stage), metrics.jsonl (training records), summary.json,
report.md, accuracy_by_length.png, and one folder per task (<task>/seed<seed>/) with its
checkpoint while it trains and its fine-tuned parameters (model.npz) after. Running the same
command again continues an interrupted run and ends with the same numbers.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import jax

from crasplab.cli.arguments import HelpFormatter, add_length_flags, add_setting_flags, at_least
from crasplab.cli.experiment import evaluate_and_report
from crasp.tasks import RETRIEVAL_AND_COPYING
from crasplab.incontext.formal_prompts import COPYING_ALPHABET, RETRIEVAL_ALPHABET, Demonstrations, check_prompt_lengths
from crasplab.incontext.greedy import check_answers_fit
from crasplab.models.config import DTYPES
from crasplab.models.loading import NAMED_MODELS, load_with_tokenizer
from crasplab.results.finetune import report_markdown, write_report
from crasplab.results.length_gen import DEFAULT_THRESHOLD, collect_metrics
from crasplab.results.run_folder import check_output_folder, open_run_folder
from crasplab.train.allocator import restart_with_huge_page_blocks
from crasplab.train.config import bins_for_train_lengths, command_line_settings
from crasplab.train.finetune import FinetuneRun
from crasplab.train.finetune_config import METHODS, PRESETS, FinetuneConfig
from crasplab.train.finetune_data import eval_items

CONFIG_FLAGS = command_line_settings(FinetuneConfig)
# Flags whose accepted values are a fixed vocabulary.
CHOICES = {"method": METHODS, "dtype": tuple(DTYPES)}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=HelpFormatter)
    parser.add_argument("--model", default="smollm2",
                        help=f"a named model ({', '.join(f'{k}: {v.description}' for k, v in NAMED_MODELS.items())}), "
                             "a GGUF file (llama architecture) or a Hugging Face checkpoint folder (llama, qwen2, gpt2)")
    parser.add_argument("--preset", choices=sorted(PRESETS), default=None,
                        help="experiment scale; default: paper on an accelerator, quick on a CPU. "
                             + " ".join(f"{p.name}: {p.description}." for p in PRESETS.values()))
    parser.add_argument("--tasks", nargs="+", default=None, choices=RETRIEVAL_AND_COPYING, metavar="CODE",
                        help=f"task codes (default: the preset's); accepted: {', '.join(RETRIEVAL_AND_COPYING)}")
    parser.add_argument("--seed", type=at_least(0), default=0,
                        help="fixes the training prompts, the test prompts and the LoRA initialization")
    parser.add_argument("--threshold", type=float, default=None,
                        help="a fine-tuned model generalizes when its accuracy on the last bin is at least this "
                             f"(default: {DEFAULT_THRESHOLD} for a new run; with --report-only, the run's own)")
    parser.add_argument("--out", type=Path, default=None, help="run folder (default: runs/finetune/<model name>-<preset>)")
    parser.add_argument("--report-only", type=Path, default=None, metavar="RUN_DIR",
                        help="rebuild summary.json, report.md and the figure of an existing run folder; train nothing")
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")
    settings = parser.add_argument_group("settings (default: the preset's)")
    add_length_flags(settings, "1-10,11-15,16-20")
    add_setting_flags(settings, CONFIG_FLAGS, CHOICES)
    return parser


def run_settings(args: argparse.Namespace) -> dict:
    """config.json without the model's details: the preset with the command line's changes."""
    preset = PRESETS[args.preset or ("quick" if jax.default_backend() == "cpu" else "paper")]
    changes = {name: getattr(args, name) for name in CONFIG_FLAGS if getattr(args, name) is not None}
    if args.train_lengths is not None:
        changes["train_lengths"] = tuple(args.train_lengths)
        changes["test_bins"] = bins_for_train_lengths(args.train_lengths, preset.config.test_bins)
    if args.test_bins is not None:
        changes["test_bins"] = args.test_bins
    config = preset.config.replace(**changes)
    tasks = list(args.tasks or preset.tasks)
    # The first bin is the training range, so these are every length a prompt is drawn at.
    demonstrations = (config.demonstrations, config.demo_length)
    check_prompt_lengths(tasks, sorted({n for lo, hi in config.test_bins for n in range(lo, hi + 1)}),
                         Demonstrations(retrieval=demonstrations, copying=demonstrations))
    return dict(model=args.model, preset=preset.name, tasks=tasks, seed=args.seed,
                threshold=DEFAULT_THRESHOLD if args.threshold is None else args.threshold,
                finetune=config.to_dict(), retrieval_alphabet=RETRIEVAL_ALPHABET, copying_alphabet=COPYING_ALPHABET)


def check_longest_prompts(pretrained, settings: dict) -> None:
    """Refuse (ContextError) test prompts whose answers would run past the model's context: those
    at the longest test length, which is also longer than every training string."""
    config = settings["finetune"]
    longest = max(hi for _, hi in config["test_bins"])
    for code in settings["tasks"]:
        items = eval_items(code, [longest], config["examples_per_length"], settings["seed"], config["demonstrations"],
                           config["demo_length"])
        check_answers_fit(pretrained, [item.prompt for item in items], [item.expected for item in items],
                          "--train-lengths or --test-bins, or --demonstrations or --demo-length")


def finetune(args: argparse.Namespace) -> Path:
    """Fine-tune and answer everything the run folder lacks; return the folder."""
    try:  # everything that could fail is checked before the first file is written
        settings = run_settings(args)
        out = check_output_folder(args.out or Path("runs/finetune") / f"{Path(args.model).stem}-{settings['preset']}")
        started = time.monotonic()
        pretrained = load_with_tokenizer(args.model, dtype=settings["finetune"]["dtype"])
        check_longest_prompts(pretrained, settings)
    except ValueError as error:  # ConfigError, TaskError, RunFolderError, UnsupportedModelError: each says what to do
        raise SystemExit(f"error: {error}")
    print(f"loaded {pretrained.architecture} from {pretrained.path} in {time.monotonic() - started:.1f} s")
    settings.update(model_path=str(pretrained.path), architecture=pretrained.architecture)
    open_run_folder(out, settings, may_change=("threshold",))
    run = FinetuneRun(out, pretrained, settings["tasks"], FinetuneConfig.from_dict(settings["finetune"]),
                      settings["seed"], show_progress=not args.no_progress)
    try:
        run.run()
    finally:
        collect_metrics(out, [(code, settings["seed"]) for code in settings["tasks"]])
    print(f"\n{out}: wall time of this invocation {(time.monotonic() - started) / 60:.1f} min", file=sys.stderr)
    return out


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    evaluate_and_report(args, finetune, lambda out: write_report(out, args.threshold), report_markdown)


if __name__ == "__main__":
    restart_with_huge_page_blocks()
    main()
