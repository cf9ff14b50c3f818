"""Fine-tune a pretrained model per task on short inputs and test it on longer ones (retrieval/copying
paper, section 4.3): do the expressible tasks keep working beyond the training lengths, do the
inexpressible non-unique ones drop, and does the directional bias seen in context go away?

    python experiments/finetune.py --model smollm2                      # quick preset on a CPU (UF UB NF NB)
    python experiments/finetune.py --model smollm2 --preset paper       # for a GPU
    python experiments/finetune.py --model smollm2 --preset power --seed 1 --out runs/finetune/smollm2-power-seed1
                                                                        # sized for a gap of 0.2 (CPU, ~25 min a seed)
    python experiments/finetune.py --model smollm2 --tasks UF UB --method lora --learning-rate 1e-3
    python experiments/finetune.py --report-only runs/finetune/smollm2-quick

Each task starts from the pretrained weights. Prompts are the in-context experiment's few-shot
prompts (experiments/pretrained.py: demonstrations one per line, tokens separated by spaces, then
the item); training draws fresh prompts with input lengths in the training range and puts the loss
on the item's answer and its line break only. The same test prompts are answered greedily by the
pretrained model (in context, before) and by each fine-tuned model (after), at every length of
every bin; the first bin is the training range.

The run folder (default runs/finetune/<model name>-<preset>) holds config.json, results.jsonl
(one record per test prompt and stage), predictions.json, summary.json, report.md,
accuracy_by_length.png, and one folder per task (<task>/seed<seed>/) with its training records
(metrics.jsonl), its checkpoint while it trains and its fine-tuned parameters (model.npz) after.
Running the same command again continues an interrupted run and ends with the same numbers.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from crasp.tasks import RETRIEVAL_AND_COPYING
from crasplab.cli.arguments import (
    HelpFormatter,
    add_length_flags,
    add_model_flag,
    add_preset_flag,
    add_run_folder_flags,
    add_seed_flag,
    add_setting_flags,
    add_tasks_flag,
    chosen_preset,
    fraction,
    run_from_flags,
)
from crasplab.cli.experiment import Report
from crasplab.incontext.formal_prompts import COPYING_ALPHABET, RETRIEVAL_ALPHABET
from crasplab.incontext.greedy import answer_budget, check_answers_fit
from crasplab.models.memory import check_batch_memory, check_prompt_count, decoding_bytes, training_bytes
from crasplab.incontext.settings import FinetuneSettings
from crasplab.records.settings import SettingsError
from crasplab.models.config import DTYPES
from crasplab.models.loading import NAMED_MODELS, load_with_tokenizer
from crasplab.reports.finetune import report_markdown, write_report
from crasplab.verdicts.predictions import predictions_for, write_predictions
from crasplab.verdicts.rules import DEFAULT_THRESHOLD
from crasplab.records.run_folder import open_run_folder
from crasplab.train.allocator import restart_with_huge_page_blocks
from crasplab.train.config import bins_for_train_lengths, command_line_settings
from crasplab.incontext.finetune import FinetuneRun
from crasplab.incontext.finetune_config import METHODS, PRESETS, FinetuneConfig
from crasplab.incontext.finetune_data import eval_items

CONFIG_FLAGS = command_line_settings(FinetuneConfig)
# Flags whose accepted values are a fixed vocabulary.
CHOICES = {"method": METHODS, "dtype": tuple(DTYPES)}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=HelpFormatter)
    add_model_flag(parser, FinetuneSettings.model, NAMED_MODELS)
    add_preset_flag(parser, PRESETS)
    add_tasks_flag(parser, None, f"task codes (default: the preset's); accepted: {', '.join(RETRIEVAL_AND_COPYING)}")
    add_seed_flag(parser, FinetuneSettings.seed, "the training prompts, the test prompts and the LoRA initialization")
    parser.add_argument(
        "--threshold",
        type=fraction,
        default=None,
        help="a fine-tuned model generalizes when its accuracy on the last bin is at least this "
        f"(default: {DEFAULT_THRESHOLD} for a new run; with --report-only, the run's own)",
    )
    add_run_folder_flags(parser, "runs/finetune/<model name>-<preset>")
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")
    settings = parser.add_argument_group("settings (default: the preset's)")
    add_length_flags(settings, "1-10,11-15,16-20")
    add_setting_flags(settings, CONFIG_FLAGS, CHOICES)
    return parser


def settings_from(args: argparse.Namespace) -> FinetuneSettings:
    """The preset with the command line's changes."""
    preset = chosen_preset(args.preset, PRESETS)
    changes = {name: getattr(args, name) for name in CONFIG_FLAGS if getattr(args, name) is not None}
    if args.train_lengths is not None:
        changes["train_lengths"] = tuple(args.train_lengths)
        changes["test_bins"] = bins_for_train_lengths(args.train_lengths, preset.config.test_bins)
    if args.test_bins is not None:
        changes["test_bins"] = args.test_bins
    return FinetuneSettings(
        model=args.model,
        preset=preset.name,
        tasks=tuple(args.tasks or preset.tasks),
        seed=args.seed,
        threshold=DEFAULT_THRESHOLD if args.threshold is None else args.threshold,
        finetune=preset.config.replace(**changes),
    )


def default_out(settings: FinetuneSettings) -> Path:
    return Path("runs/finetune") / f"{Path(settings.model).stem}-{settings.preset}"


def check_against_model(pretrained, settings: FinetuneSettings) -> None:
    """Refuse (ContextError) test prompts whose answers would run past the model's context: those
    at the longest test length, which is also longer than every training string; (BatchMemoryError)
    training or test batches beyond the machine's memory; and LoRA adapters wider than the model."""
    config = settings.finetune
    if config.method == "lora" and config.lora_rank > pretrained.config.d_model:
        raise SettingsError(
            f"--lora-rank {config.lora_rank} is wider than the model ({pretrained.config.d_model}): an "
            f"adapter of rank r adds r x (in + out) values per layer; give a rank up to "
            f"{pretrained.config.d_model}"
        )
    longest = max(hi for _, hi in config.test_bins)
    for code in settings.tasks:
        for length, rows, flag, estimate in (
            (config.train_lengths[1], config.batch_size, "--batch-size", training_bytes),
            (longest, config.eval_batch_size + 1, "--eval-batch-size", decoding_bytes),
        ):
            items = eval_items(
                code, [length], config.examples_per_length, settings.seed, config.demonstrations, config.demo_length
            )
            prompts, expected = [item.prompt for item in items], [item.expected for item in items]
            check_answers_fit(
                pretrained, prompts, expected, "--train-lengths or --test-bins, or --demonstrations or --demo-length"
            )
            positions = max(map(len, pretrained.tokenizer.encode_batch(prompts))) + answer_budget(
                pretrained.tokenizer, expected
            )
            check_batch_memory(
                estimate(pretrained.config, rows, positions),
                f"a batch of {rows} {code} prompts of up to {positions} tokens",
                flag,
            )


def run(settings: FinetuneSettings, out: Path, show_progress: bool = True) -> None:
    """Fine-tune and answer everything the run folder lacks."""
    config = settings.finetune
    test_lengths = sum(hi - lo + 1 for lo, hi in config.test_bins)
    check_prompt_count(len(settings.tasks) * test_lengths * config.examples_per_length, "--examples-per-length")
    started = time.monotonic()
    pretrained = load_with_tokenizer(settings.model, dtype=config.dtype)
    check_against_model(pretrained, settings)
    print(f"loaded {pretrained.architecture} from {pretrained.path} in {time.monotonic() - started:.1f} s")
    open_run_folder(
        out,
        dict(
            settings.to_dict(),
            model_path=str(pretrained.path),
            architecture=pretrained.architecture,
            retrieval_alphabet=RETRIEVAL_ALPHABET,
            copying_alphabet=COPYING_ALPHABET,
        ),
        may_change=("threshold",),
    )
    # Fine-tuning tests the APE theorem: a pretrained model's learned positions play its part.
    write_predictions(out, predictions_for("ape", settings.tasks))
    finetune_run = FinetuneRun(
        out, pretrained, list(settings.tasks), settings.finetune, settings.seed, show_progress=show_progress
    )
    finetune_run.run()
    print(f"\n{out}: wall time of this invocation {(time.monotonic() - started) / 60:.1f} min", file=sys.stderr)


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    run_from_flags(
        args,
        settings_from,
        default_out,
        lambda settings, out: run(settings, out, show_progress=not args.no_progress),
        Report(lambda out: write_report(out, args.threshold), report_markdown),
    )


if __name__ == "__main__":
    restart_with_huge_page_blocks()
    main()
