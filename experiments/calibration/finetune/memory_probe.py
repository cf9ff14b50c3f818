"""Resident memory of this process around each task's fine-tuning (SmolLM2, the quick settings
cut to 4 steps, no test prompts): what a run keeps between tasks, and what malloc_trim hands back.

    python experiments/calibration/finetune/memory_probe.py UF UB NF
"""

import gc
import sys
import tempfile
from pathlib import Path

from crasplab.models.loading import load_with_tokenizer
from crasplab.incontext.finetune import TaskTraining, return_free_memory
from crasplab.incontext.finetune_config import PRESETS


def resident(tag: str) -> None:
    fields = dict(line.split(":", 1) for line in open("/proc/self/status"))
    print(f"{tag}: VmRSS {fields['VmRSS'].strip()}, VmHWM {fields['VmHWM'].strip()}", flush=True)


def main() -> None:
    resident("start")
    pretrained = load_with_tokenizer("smollm2")
    resident("loaded")
    config = PRESETS["quick"].config.replace(max_steps=4, log_every=2, checkpoint_every=2)
    with tempfile.TemporaryDirectory() as folder:
        for code in sys.argv[1:]:
            model = TaskTraining(code, 0, config, Path(folder) / code).finetuned(pretrained, show_progress=False)
            resident(f"{code} trained")
            del model
            gc.collect()
            resident(f"{code} freed")
            return_free_memory()
            resident(f"{code} handed back")


if __name__ == "__main__":
    main()
