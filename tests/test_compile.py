"""Compiled C-RASP programs: the transformer's output table equals the interpreter's, everywhere.

Each case compiles a witness for a position encoding whose fragment allows it and compares the
model's table (logits > 0, so positions with no output or several outputs count too) with
crasp.nexttoken's on every valid string up to length 6 over 3 symbols, as `crasp check` does.
"""

import numpy as np
import re

import pytest
from crasplab.models import generate as model_generate
from hypothesis import given, settings
from hypothesis import strategies as st

from crasp import witnesses as W
from crasp.__main__ import main
from crasp.check import exhaustive_strings, small_version, to_program_ids
from crasp.nexttoken import encode, generate
from crasp.nexttoken import output_table as interpreter_table
from crasp.tasks import get_task
from crasplab.compiler import CompileError, compile_program, compile_text
from crasplab.compiler.folder import load_compiled
from crasplab.compiler.run import interpreter_definitions, output_table, probe_definitions

CASES = [
    ("UR", W.unique_right, "ape"),
    ("UR", W.unique_right, "rope"),
    ("UR", W.first_right_without_positions, "nope"),
    ("NRFirst", W.first_right, "ape"),
    ("UF", W.copy_forward, "ape"),
    ("UF", W.copy_forward_without_positions, "nope"),
    ("UB", W.copy_backward, "rope"),
    ("UB", W.copy_backward_without_positions, "nope"),
    ("Majority", W.majority, "nope"),
    ("Sort", W.sort, "nope"),
    ("BinaryMajorityInterleave", W.binary_majority_interleave, "ape"),
]


def short_strings(code):
    task = small_version(get_task(code))
    return task, exhaustive_strings(task, 6)


@pytest.mark.parametrize("code, make, pe", CASES, ids=[f"{c}-{m.__name__}-{pe}" for c, m, pe in CASES])
def test_output_table_equals_the_interpreters_on_every_short_string(code, make, pe):
    task, strings = short_strings(code)
    program = make(task.symbols)
    model = compile_program(program, pe, max_length=64).model()
    ids = encode(program, strings)
    real = ids >= 0
    differs = (output_table(model, ids) != interpreter_table(program, ids)).any(axis=-1) & real
    assert not differs.any(), f"{int(differs.sum())} positions differ, first in {strings[np.argwhere(differs)[0][0]]}"
    assert real.sum() > 50


@pytest.mark.parametrize("code, make, pe", [("UF", W.copy_forward, "rope"), ("Majority", W.majority, "nope")])
def test_every_definition_probed_in_the_residual_stream_equals_crasp_evaluate(code, make, pe):
    task, strings = short_strings(code)
    compiled = compile_program(make(task.symbols), pe, max_length=64)
    ids = encode(compiled.program, strings)
    probed, evaluated = probe_definitions(compiled, ids), interpreter_definitions(compiled, ids)
    real = ids >= 0
    assert set(probed) == set(evaluated) and len(probed) > 10
    for label, value in probed.items():
        assert np.abs(value - evaluated[label])[real].max() < 1e-3, label


def test_long_strings_through_the_kv_cache_in_chunks_equal_the_interpreter():
    task = get_task("Majority")
    program = W.majority(task.symbols)
    examples = task.sample(np.random.default_rng(0), 3, 1000)
    ids = to_program_ids(examples.tokens, task.vocab, program)
    model = compile_program(program, "nope", max_length=2048).model()
    chunked = output_table(model, ids, chunk=256)
    assert (chunked == interpreter_table(program, ids))[ids >= 0].all()
    assert (chunked == output_table(model, ids, chunk=None)).all()


def test_greedy_generation_equals_the_interpreters():
    task = get_task("UF", alphabet_size=8)
    program = W.copy_forward(task.symbols)
    model = compile_program(program, "ape", max_length=64).model()
    examples = task.sample(np.random.default_rng(1), 4, 6)
    ids = to_program_ids(examples.tokens, task.vocab, program)
    generated = model_generate(
        model, ids, examples.prompt_lengths, max_new_tokens=8, eos_id=program.alphabet.index("<eos>"), pad_id=0
    )
    for row in range(4):
        prompt = [program.alphabet[k] for k in ids[row, : examples.prompt_lengths[row]]]
        expected = generate(program, prompt, 8)
        got = [program.alphabet[k] for k in np.asarray(generated.tokens_BxN)[row, : int(generated.lengths_B[row])]]
        assert got == expected


@settings(max_examples=6, deadline=None)
@given(
    op=st.sampled_from(["<", "<=", "=", "!=", ">=", ">"]),
    shift=st.integers(-2, 2),
    strings=st.lists(st.lists(st.sampled_from("ab"), min_size=1, max_size=12), min_size=1, max_size=20),
)
def test_random_count_comparisons_agree_at_every_position(op, shift, strings):
    text = (
        (f'alphabet: <bos> a b\naccept: more\nmore := #[j <= i] Q("a") {op} #[j <= i] Q("b") + {shift}\n')
        if shift >= 0
        else (f'alphabet: <bos> a b\naccept: more\nmore := #[j <= i] Q("a") {op} #[j <= i] Q("b") - {-shift}\n')
    )
    compiled = compile_text(text, "random.crasp", "nope", max_length=64)
    ids = encode(compiled.program, [["<bos>", *s] for s in strings])
    table = output_table(compiled.model(), ids)[..., 0]
    probed = interpreter_definitions(compiled, ids)["more"] > 0.5
    assert (table == probed)[ids >= 0].all()


@pytest.mark.parametrize(
    "text, pe, says",
    [
        (
            'alphabet: <bos> a\naccept: back\nback := #[j <= i, j = i - 1] Q("a") >= 1\n',
            "nope",
            ["definition `back` (prog.crasp:3)", "needs positions", "C-RASP[]"],
        ),
        ("alphabet: <bos> a\naccept: odd\nodd := MOD(2, 1)\n", "rope", ["MOD(2, 1)", "only the APE table"]),
        (
            'alphabet: a b\naccept: seen\nseen := #[j <= i] Q("a") >= 1\n',
            "nope",
            ["definition `seen` (prog.crasp:3)", "<bos>", "--pe ape"],
        ),
    ],
)
def test_unsupported_programs_are_refused_naming_the_node_and_its_place(text, pe, says):
    with pytest.raises(CompileError) as error:
        compile_text(text, "prog.crasp", pe, max_length=64)
    for words in says:
        assert words in str(error.value)


def test_an_encoding_that_biases_the_scores_is_refused_with_the_ones_the_compiler_builds():
    """ALiBi's bias would tilt the averaging heads: the compiler's table (compiler.positions)
    refuses it, and the error says which encodings the compiler builds."""
    with pytest.raises(CompileError, match="position encoding 'alibi'; the compiler builds ape, rope and nope"):
        compile_text('alphabet: <bos> a\naccept: seen\nseen := #[j <= i] Q("a") >= 1\n', "prog.crasp", "alibi", 64)


GENERIC_MAJORITY = """alphabet: <bos> <sep> <eos> ...
output: O
n[s] := #[j <= i] Q(s)
letter[s] := not (s = "<bos>" or s = "<sep>" or s = "<eos>")
most[s] := letter[s] and (all u: n[s] >= n[u])
after_answer := #[j <= i] Q("<sep>") >= 1 and not Q("<sep>")
O[s] := Q("<sep>") and most[s] or after_answer and s = "<eos>"
"""


def test_compile_command_writes_a_checkpoint_that_loads_and_scores_the_task(tmp_path, capsys):
    source, out = tmp_path / "majority.crasp", tmp_path / "compiled"
    source.write_text(GENERIC_MAJORITY)
    status = main(
        [
            "compile",
            str(source),
            "--pe",
            "nope",
            "--out",
            str(out),
            "--task",
            "BinaryMajority",
            "--lengths",
            "3",
            "7",
            "--samples",
            "5",
            "--max-length",
            "64",
        ]
    )
    printed = capsys.readouterr().out
    assert status == 0
    assert "head 0: average over j <= i" in printed and "most[" in (out / "listing.txt").read_text()
    rows = [line.split("|") for line in printed.splitlines() if line.strip().startswith(("3 |", "7 |"))]
    assert [(r[2].strip(), r[3].strip()) for r in rows] == [("5", "5"), ("5", "5")]
    loaded = load_compiled(out)
    ids = encode(loaded.program, [["<bos>", "1", "0", "1", "<sep>", "1", "<eos>"]])
    assert (output_table(loaded.model, ids) == interpreter_table(loaded.program, ids)).all()


def test_compile_command_refuses_what_it_cannot_build(tmp_path, capsys):
    program = tmp_path / "local.crasp"
    program.write_text('alphabet: <bos> a\naccept: back\nback := #[j <= i, j = i - 1] Q("a") >= 1\n')
    with pytest.raises(SystemExit, match=f"^error: .*{re.escape(str(program))}:3"):
        main(["compile", str(program), "--pe", "nope", "--out", str(tmp_path / "out")])


@pytest.mark.parametrize("make", [W.unique_right, W.copy_forward_without_positions, W.copy_backward])
def test_the_keyed_rewrite_keeps_the_model_linear_in_the_alphabet(make):
    """Unrolled, `any t: Q(t) and #[j <= i] (K[t] and R[s]) >= 1` is one head channel and one step
    per pair (s, t); keyed, one per s: doubling the symbols must not quadruple the width."""
    pe = "nope" if "without" in make.__name__ else "ape"
    small, large = (compile_program(make(get_task("UF", alphabet_size=n).symbols), pe, max_length=64) for n in (8, 16))
    assert large.config.d_model < 2.2 * small.config.d_model
    assert any(head.group.kind == "keyed" for head in large.heads)


@pytest.mark.slow  # strings of 10^4 tokens through the cache: a few minutes on 2 cores
@pytest.mark.parametrize(
    "code, make, pe",
    [
        ("Majority", W.majority, "nope"),
        ("NRFirst", W.first_right, "ape"),
        ("UR", W.first_right_without_positions, "nope"),
    ],
)
def test_sampled_strings_of_ten_thousand_tokens_agree_with_the_interpreter(code, make, pe):
    task = get_task(code, alphabet_size=8) if code == "UR" else get_task(code)
    program = make(task.symbols)
    examples = task.sample(np.random.default_rng(0), 2, 10_000)
    ids = to_program_ids(examples.tokens, task.vocab, program)
    model = compile_program(program, pe, max_length=ids.shape[1] + 1).model()
    assert (output_table(model, ids) == interpreter_table(program, ids))[ids >= 0].all()
