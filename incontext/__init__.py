"""Pretrained models in context: prompts, and the model's greedy answers to them.

    formal_prompts   few-shot prompts for the ten retrieval and copying tasks, seeded per task and length
    greedy           batched greedy answer lines with the KV cache
"""
