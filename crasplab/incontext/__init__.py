"""Pretrained models, in context and fine-tuned: prompts, the model's greedy answers, what is read
from them, and fine-tuning on the formal tasks.

formal_prompts   few-shot prompts for the ten retrieval and copying tasks, seeded per task and length
greedy           batched greedy answer lines and continuations with the KV cache
directions       forward and backward copying, tied to their formal tasks (UF/NF, UB/NB)
lorem            seeded lorem-ipsum paragraphs cut at a token length, and their copy prompts
git_history      synthetic git histories and the revert / cherry-pick prompts
alignment        an output aligned to its reference: errors, transition tokens, ambiguity
settings         the frozen, validated settings of the pretrained, finetune, realistic and mechanism experiments
answering        the resumable loop that answers prompts into a run folder, batch by batch
finetune         fine-tuning a pretrained model (LoRA or full) on one formal task, resumable, in a job folder
finetune_config  its settings (learning rate, steps, LoRA rank, what is trained)
finetune_data    its training and evaluation items from the few-shot prompts
"""
