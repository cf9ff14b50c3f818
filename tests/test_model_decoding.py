"""KV-cache decoding equals full forward passes, with padded batches of different prompt lengths."""

import jax.numpy as jnp
import numpy as np
import pytest

from crasplab.models import generate
from crasplab.models.generate import left_align
from tests.tiny import STYLES, random_tokens, tiny_model

PROMPT_LENGTHS = np.array([6, 3, 1])


def right_padded_prompts(pad_id=0):
    prompts_BxT = np.asarray(random_tokens((3, 6), seed=5))
    return np.where(np.arange(6) < PROMPT_LENGTHS[:, None], prompts_BxT, pad_id)


@pytest.mark.parametrize("style", ["gpt2_ape", "llama_rope_gqa", "gpt2_alibi", "gemma3_window"])
def test_cached_logits_equal_full_forward_at_every_step_for_a_padded_batch(style):
    model = tiny_model(**STYLES[style])
    tokens_BxT, positions_BxT, mask_BxT = left_align(right_padded_prompts(), PROMPT_LENGTHS, pad_id=0)
    continuation_BxC = np.asarray(random_tokens((3, 4), seed=6))
    steps = continuation_BxC.shape[1]

    cache = model.init_cache(3, 6 + steps)
    prefill = model(tokens_BxT, positions_BxT, mask_BxT, cache=cache)
    cached_logits = [prefill.logits_BxTxV[:, -1]]
    cache = prefill.cache
    for step in range(steps):
        output = model(continuation_BxC[:, step : step + 1], (PROMPT_LENGTHS + step)[:, None], cache=cache)
        cached_logits.append(output.logits_BxTxV[:, 0])
        cache = output.cache

    # Each row alone, unpadded, in one full forward pass: the logits after every prefix.
    for row, length in enumerate(PROMPT_LENGTHS):
        sequence_1xS = np.concatenate([tokens_BxT[row, 6 - length :], continuation_BxC[row]])[None]
        full_1xSxV = model(jnp.asarray(sequence_1xS)).logits_BxTxV
        for step in range(steps + 1):
            np.testing.assert_allclose(cached_logits[step][row], full_1xSxV[0, length - 1 + step], atol=1e-5)


def greedy_alone(model, prompt, max_new_tokens, eos_id):
    """The reference: one prompt, no padding, a full forward pass per generated token."""
    sequence = list(prompt)
    for _ in range(max_new_tokens):
        token = int(jnp.argmax(model(jnp.asarray([sequence])).logits_BxTxV[0, -1]))
        sequence.append(token)
        if token == eos_id:
            break
    return sequence[len(prompt) :]


@pytest.mark.parametrize("style", ["gpt2_ape", "llama_rope_gqa", "gpt2_alibi", "gemma3_window"])
def test_generate_matches_each_prompt_decoded_alone_without_cache(style):
    model = tiny_model(**STYLES[style])
    prompts_BxT = right_padded_prompts(pad_id=0)
    generation = generate(model, prompts_BxT, PROMPT_LENGTHS, max_new_tokens=5, eos_id=None)
    expected = [greedy_alone(model, prompts_BxT[row, :length], 5, None) for row, length in enumerate(PROMPT_LENGTHS)]
    np.testing.assert_array_equal(generation.tokens_BxN, np.array(expected))
    assert len({tuple(row) for row in expected}) > 1  # the rows really differ
    np.testing.assert_array_equal(generation.lengths_B, [5, 5, 5])
    uncached = generate(model, prompts_BxT, PROMPT_LENGTHS, max_new_tokens=5, eos_id=None, use_cache=False)
    np.testing.assert_array_equal(uncached.tokens_BxN, generation.tokens_BxN)


def test_generate_stops_at_eos_and_pads_after_it():
    model = tiny_model(**STYLES["gpt2_ape"])
    prompts_BxT = right_padded_prompts(pad_id=0)
    free = np.asarray(generate(model, prompts_BxT, PROMPT_LENGTHS, max_new_tokens=7, eos_id=None).tokens_BxN)
    eos_id = int(free[0, 2])
    stopped = generate(model, prompts_BxT, PROMPT_LENGTHS, max_new_tokens=7, eos_id=eos_id, pad_id=15)
    for row in range(3):
        hits = np.flatnonzero(free[row] == eos_id)
        length = hits[0] + 1 if hits.size else 7
        assert stopped.lengths_B[row] == length
        np.testing.assert_array_equal(stopped.tokens_BxN[row, :length], free[row, :length])
        assert np.all(np.asarray(stopped.tokens_BxN[row, length:]) == 15)


def test_generate_rejects_bad_input_clearly():
    model = tiny_model(max_positions=8)
    prompts_BxT = right_padded_prompts()
    with pytest.raises(ValueError, match=r"position 10 .*table of 8 rows"):
        generate(model, prompts_BxT, PROMPT_LENGTHS, max_new_tokens=6, eos_id=3)
    with pytest.raises(ValueError, match=r"prompt lengths must lie in \[1, 6\]"):
        generate(model, prompts_BxT, np.array([7, 1, 1]), max_new_tokens=2, eos_id=3)
    with pytest.raises(ValueError, match="one per prompt"):
        generate(model, prompts_BxT, np.array([2, 2]), max_new_tokens=2, eos_id=3)
