"""The SentencePiece tokenizer of a GGUF's metadata (tokenizer.ggml.model "llama", as Gemma's files
carry it) against llama.cpp's algorithm written out here: join the adjacent pair whose joined piece
has the highest score, again and again, then spell any piece outside the vocabulary in byte pieces."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from crasplab.models.loading.errors import UnsupportedModelError
from crasplab.models.loading.tokenizer import tokenizer_from_gguf_metadata

SPACE = "\u2581"
CONTROL = ["<pad>", "<eos>", "<bos>", "<unk>"]
BYTES = [f"<0x{value:02X}>" for value in range(256)]
# Normal pieces, each with its own score (higher joins first).
PIECES = {
    SPACE: 0.0,
    "a": -1.0,
    "b": -2.0,
    "c": -3.0,
    "ab": -4.0,
    "bc": -5.0,
    f"{SPACE}a": -6.0,
    "abc": -7.0,
    f"{SPACE}ab": -8.0,
    "ca": -9.0,
    f"{SPACE}{SPACE}": -10.0,
    f"{SPACE}abc": -11.0,
}
TOKENS = CONTROL + BYTES + list(PIECES) + ["\n"]
TYPES = [3] * len(CONTROL) + [6] * len(BYTES) + [1] * len(PIECES) + [4]  # control, byte, normal, user-defined
SCORES = [-1000.0] * len(CONTROL) + [0.0] * len(BYTES) + list(PIECES.values()) + [-1000.0]


def metadata(**changes) -> dict:
    return {
        "tokenizer.ggml.model": "llama",
        "tokenizer.ggml.tokens": TOKENS,
        "tokenizer.ggml.scores": SCORES,
        "tokenizer.ggml.token_type": TYPES,
        "tokenizer.ggml.bos_token_id": 2,
        "tokenizer.ggml.eos_token_id": 1,
        "tokenizer.ggml.unknown_token_id": 3,
        "tokenizer.ggml.add_bos_token": True,
        "tokenizer.ggml.add_space_prefix": False,
    } | changes


TOKENIZER = tokenizer_from_gguf_metadata(metadata(), "test")


def llama_cpp_pieces(text: str) -> list[int]:
    symbols = list(text.replace(" ", SPACE))
    while True:
        joinable = [(PIECES[a + b], -i) for i, (a, b) in enumerate(zip(symbols, symbols[1:])) if a + b in PIECES]
        if not joinable:
            break
        i = -max(joinable)[1]  # the highest score; the leftmost among equals
        symbols[i : i + 2] = [symbols[i] + symbols[i + 1]]
    ids = []
    for symbol in symbols:
        ids += [TOKENS.index(symbol)] if symbol in PIECES else [TOKENS.index(BYTES[b]) for b in symbol.encode()]
    return ids


def llama_cpp_ids(text: str) -> list[int]:
    """With BOS first, and the user-defined "\n" matched whole before the pieces join."""
    ids = [2]
    for i, part in enumerate(text.split("\n")):
        ids += ([TOKENS.index("\n")] if i else []) + llama_cpp_pieces(part)
    return ids


@given(st.text(alphabet="abc \u00e9\n", max_size=14))
def test_ids_follow_llama_cpp_and_decode_back(text):
    assert TOKENIZER.encode(text) == llama_cpp_ids(text)
    assert TOKENIZER.decode(TOKENIZER.encode(text)[1:]) == text


def test_examples_join_by_score_and_fall_back_to_bytes():
    assert [TOKENIZER.token(i) for i in TOKENIZER.encode(" abc é")] == [
        "<bos>",
        f"{SPACE}abc",
        SPACE,
        "<0xC3>",
        "<0xA9>",
    ]
    assert TOKENIZER.special_ids >= {0, 1, 2, 3}


def test_space_prefix_when_the_file_asks_for_it():
    tokenizer = tokenizer_from_gguf_metadata(metadata(**{"tokenizer.ggml.add_space_prefix": True}), "test")
    assert tokenizer.encode("abc") == [2, TOKENS.index(f"{SPACE}abc")]
    assert tokenizer.decode(tokenizer.encode("abc")[1:]) == "abc"


def test_scores_that_do_not_fit_the_vocabulary_are_an_error():
    with pytest.raises(UnsupportedModelError, match="has 273 tokens, 2 scores and 273 token types"):
        tokenizer_from_gguf_metadata(metadata(**{"tokenizer.ggml.scores": [0.0, 1.0]}), "test.gguf")
    with pytest.raises(UnsupportedModelError, match="tokenizer.ggml.scores is str 'x'; expected an array of numbers"):
        tokenizer_from_gguf_metadata(metadata(**{"tokenizer.ggml.scores": "x"}), "test.gguf")
    with pytest.raises(UnsupportedModelError, match="tokenizer.ggml.model is 'bert'; supported: 'gpt2'"):
        tokenizer_from_gguf_metadata(metadata(**{"tokenizer.ggml.model": "bert"}), "test.gguf")
