"""crasplab.compiler.replay: the Majority witness replayed on <sep>'s prefill chunk must be the whole
model's computation (the same error to the last bit in float32, the same verdict), at lengths
chosen as the prefill chunks them."""

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from crasp import witnesses as W
from crasp.nexttoken import encode
from crasplab.compiler import compile_program
from crasplab.compiler.replay import MAX_SCORES, replay_length, replay_records, replay_string, sep_chunk
from crasplab.compiler.run import PREFILL_CHUNK
from crasplab.compiler.study import margin_one_strings, rounding_records


@given(st.integers(1, 10**8))
def test_replay_lengths_are_odd_and_sep_lies_in_a_chunk_that_fits(n):
    length = replay_length(n)
    tokens = length + 3  # <bos> input <sep> a <eos>
    start, end = sep_chunk(tokens)
    assert length % 2 == 1 and length <= n + 1
    assert start <= tokens - 3 < end <= tokens and end - start <= PREFILL_CHUNK
    assert (end - start) * tokens <= MAX_SCORES or end - start == 4
    if PREFILL_CHUNK * (n + 4) <= MAX_SCORES:
        assert length == n + 1 - n % 2  # short lengths are kept as they are
    else:
        assert length > n - 2 * PREFILL_CHUNK  # moved down by less than two chunks


def test_the_replay_is_the_whole_models_computation_in_float32():
    whole = list(rounding_records([1201], 3, 5, ["float32"]))
    replayed = [r for r in replay_records([1201], 3, 5, ["float32"]) if r["kind"] == "replay"]
    assert whole[0]["count_error"] == replayed[0]["count_error"] > 0
    assert whole[0]["compiled_right"] == replayed[0]["compiled_right"] == 3
    assert replayed[0]["chunk"] == (1201 + 3) - PREFILL_CHUNK * 2


def test_the_replay_reads_sep_in_the_chunk_before_the_last_and_in_a_string_fed_whole():
    # 1023 + 3 tokens: <sep> (0-based 1023) ends the second chunk, the third holds "a <eos>"
    assert sep_chunk(1023 + 3) == (512, 1024)
    for length in (1023, 9):
        whole = list(rounding_records([length], 2, 1, ["float32"]))
        replayed = [r for r in replay_records([length], 2, 1, ["float32"]) if r["kind"] == "replay"]
        assert whole[0]["count_error"] == replayed[0]["count_error"], length
        assert whole[0]["compiled_right"] == replayed[0]["compiled_right"] == 2, length


def test_the_replayed_verdict_reads_the_table_at_sep():
    program = W.majority(("a", "b"))
    compiled = compile_program(program, "nope", max_length=2000)
    string = margin_one_strings(np.random.default_rng(3), 1, 1501)[0]
    error, right = replay_string(compiled, encode(program, [string]))
    wrong_answer = [*string[:-2], "b", "<eos>"]  # b follows <sep>, but a is the majority
    assert right and replay_string(compiled, encode(program, [wrong_answer])) == (error, False)
