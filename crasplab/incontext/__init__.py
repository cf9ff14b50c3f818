"""Pretrained models in context: prompts, the model's greedy answers, and what is read from them.

formal_prompts   few-shot prompts for the ten retrieval and copying tasks, seeded per task and length
greedy           batched greedy answer lines and continuations with the KV cache
directions       forward and backward copying, tied to their formal tasks (UF/NF, UB/NB)
lorem            seeded lorem-ipsum paragraphs cut at a token length, and their copy prompts
git_history      synthetic git histories and the revert / cherry-pick prompts
alignment        an output aligned to its reference: errors, transition tokens, ambiguity
settings         the frozen, validated settings of the pretrained, finetune, realistic and mechanism experiments
answering        the resumable loop that answers prompts into a run folder, batch by batch
memory           lower-bound memory estimates of a batch, checked against the machine before a run starts
"""
