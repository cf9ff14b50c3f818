"""Programs at the limits: counts beyond 32 bits, out-of-range constants, deep nesting, many definitions."""

import time

import numpy as np
import pytest

from crasp import expr as E
from crasp.evaluate import count_bound, count_dtype, evaluate
from crasp.expr import MAX_CONSTANT, CraspRangeError, Q, count
from crasp.fragment import fragment_of
from crasp.nexttoken import encode
from crasp.program import Program, print_program
from crasp.reference import reference_value
from crasp.syntax import CraspSyntaxError, parse
from crasp.trace import format_trace

HEADER = "alphabet: a b\naccept: top\n"
STRING = list("abbab")


def fast_and_reference(program: Program, string: list[str]) -> tuple[list, list]:
    """The accepted Boolean at every position, from both evaluators."""
    fast = evaluate(program, encode(program, [string]), [program.accept])[program.accept].array[0].tolist()
    node = program.target.use()
    return fast, [reference_value(program, string, node, i, {}) for i in range(1, len(string) + 1)]


def test_counts_do_not_wrap_at_32_bits():
    program = parse(HEADER + 'top := #[j <= i] Q("a") + 2147483647 >= 1\n')
    fast, reference = fast_and_reference(program, STRING)
    assert fast == reference == [True] * len(STRING)


def test_a_sum_beyond_64_bits_is_an_error_not_a_wrapped_value():
    # d0 = 2**40 - 1 + (number of a's so far), doubled 23 times: beyond int64 once an `a` is seen.
    lines = [f'd0 := {MAX_CONSTANT - 1} + #[j <= i] Q("a")'] + [f"d{k} := d{k - 1} + d{k - 1}" for k in range(1, 24)]
    program = parse(HEADER + "\n".join(lines) + "\ntop := d23 > 0\n")
    assert reference_value(program, ["b", "a"], program.target.use(), 2, {}) is True  # Python ints are exact
    strings = [["b"]] * 9 + [["b", "a"]]
    with pytest.raises(
        CraspRangeError,
        match=r"`d22 \+ d22` leaves the exact range of counts, "
        r"-2\*\*63 .. 2\*\*63 - 1, at position 2 of string 9",
    ):
        evaluate(program, encode(program, strings), memory_budget=1)  # in several chunks
    assert evaluate(program, encode(program, strings[:9]))["top"].array.all()


@pytest.mark.parametrize(
    "build, message",
    [
        (lambda: count(Q("a")) + (MAX_CONSTANT + 1), f"the count constant {MAX_CONSTANT + 1} is outside"),
        (lambda: count(Q("a")) >= -MAX_CONSTANT - 1, f"the count constant {-MAX_CONSTANT - 1} is outside"),
        (lambda: E.MOD(MAX_CONSTANT + 1, 0), f"the modulus m of MOD\\(m, r\\) {MAX_CONSTANT + 1} is outside"),
        (lambda: count(Q("a"), offset=MAX_CONSTANT + 1), f"the distance c of j = i - c {MAX_CONSTANT + 1} is outside"),
    ],
)
def test_constants_beyond_the_bound_are_refused_where_they_are_built(build, message):
    with pytest.raises(
        CraspRangeError,
        match=message + r" the accepted range: integers from -1099511627776 to "
        r"1099511627776 \(2\*\*40\)",
    ):
        build()
    count(Q("a"), offset=MAX_CONSTANT) + MAX_CONSTANT >= -MAX_CONSTANT  # the bound itself is accepted


@pytest.mark.parametrize(
    "body, column, written",
    [
        ('#[j <= i] Q("a") >= 1099511627777', 28, "the count constant 1099511627777"),
        ('#[j <= i] Q("a") >= -1099511627777', 28, "the count constant -1099511627777"),
        ('#[j <= i] Q("a") >= ' + "9" * 5000, 28, "the count constant " + "9" * 5000),  # too long for int()
        ("MOD(99999999999999999999, 0)", 12, "the modulus m of MOD(m, r) 99999999999999999999"),
        ('#[j <= i, j = i - 1099511627777] Q("a") >= 1', 26, "the distance c of j = i - c 1099511627777"),
    ],
)
def test_constants_beyond_the_bound_are_syntax_errors_at_their_place(body, column, written):
    with pytest.raises(CraspSyntaxError) as caught:
        parse(HEADER + f"top := {body}\n", "big.crasp")
    error = caught.value
    assert str(error).startswith(f"big.crasp:3:{column}: {written} is outside the accepted range")


def test_thousands_of_definitions_parse_in_linear_time():
    # A chain, each definition using the previous one: the case that used to take quadratic time.
    lines = ['d0 := Q("a")'] + [f"d{k} := not d{k - 1}" for k in range(1, 4000)]
    started = time.perf_counter()
    program = parse(HEADER + "\n".join(lines) + "\ntop := d3999\n")
    assert time.perf_counter() - started < 5  # about 0.3 s; quadratic parsing took about 25 s
    assert len(program.definitions) == 4001


def check_everything_runs(program: Program) -> None:
    """Printing, parsing, fragment analysis, both evaluators and the trace, on a deep program."""
    assert parse(print_program(program)) == program
    assert fragment_of(program).name == "C-RASP[]"
    fast, reference = fast_and_reference(program, STRING)
    assert fast == reference
    assert format_trace(program, STRING).endswith(f"accepted (top at the last position): {'yes' if fast[-1] else 'no'}")


def test_a_chain_of_5000_definitions_written_last_first():
    # Listed top first, so resolving each definition follows the chain to its very end.
    lines = ["top := d4999 >= 3"] + [f'd{k} := d{k - 1} + #[j <= i] Q("a")' for k in range(4999, 0, -1)]
    program = parse(HEADER + "\n".join(lines) + '\nd0 := #[j <= i] Q("b")\n')
    check_everything_runs(program)


@pytest.mark.parametrize(
    "innermost, nest, outside",
    [
        ('#[j <= i] Q("a") >= 2', lambda inner: f'(not ({inner} and Q("b")) or Q("a"))', ""),
        ('#[j <= i] Q("a")', lambda inner: f"(1 + {inner})", " >= 2002"),
        ('#[j <= i] Q("a")', lambda inner: f'(Q("a") ? {inner} : 0)', " >= 1"),
    ],
)
def test_2000_nested_brackets(innermost, nest, outside):
    body = innermost
    for _ in range(2000):
        body = nest(body)
    check_everything_runs(parse(HEADER + f"top := {body}{outside}\n"))


def test_deep_expressions_built_in_python():
    node = Q("a")
    for _ in range(5000):
        node = ~node | Q("b")
    check_everything_runs(Program.build(["a", "b"], accept=node.named("top")))


class CountedDefinitions(tuple):
    """A program's definitions that count every element handed out by iteration, and stop the
    run once a budget is spent: a linear scan per name lookup spends it on a long chain."""

    def __new__(cls, definitions, budget: int):
        counted = super().__new__(cls, definitions)
        counted.visits, counted.budget = 0, budget
        return counted

    def __iter__(self):
        for definition in tuple.__iter__(self):
            self.visits += 1
            if self.visits > self.budget:
                raise AssertionError(f"more than {self.budget} definitions visited: a lookup scans the list")
            yield definition


def test_running_a_chain_of_20000_definitions_visits_each_a_bounded_number_of_times():
    n = 20_000
    lines = ['d0 := Q("a")'] + [f"d{k} := not d{k - 1}" for k in range(1, n)]
    parsed = parse(HEADER + "\n".join(lines) + f"\ntop := d{n - 1}\n")
    # The quadratic version (a scan of the list per lookup) visits about n^2 / 2 = 2 * 10^8.
    definitions = CountedDefinitions(parsed.definitions, budget=20 * len(parsed.definitions))
    program = Program(parsed.alphabet, definitions, accept=parsed.accept)
    assert format_trace(program, STRING).endswith(
        "accepted (top at the last position): yes"
    )  # 19,999 negations of Q("a") at a "b"
    assert definitions.visits >= len(definitions)  # the count saw the run


@pytest.mark.parametrize("constant", [32766, 32767, 2147483646, 2147483647])
def test_counts_at_the_edge_of_the_narrow_types_are_exact(constant):
    # The evaluator computes in the narrowest type count_dtype proves wide enough; one past its edge
    # must move to the next type, not wrap.
    program = parse(HEADER + f'top := #[j <= i] Q("a") + {constant} > {constant}\n')
    fast, reference = fast_and_reference(program, STRING)
    assert fast == reference == [True] * len(STRING)
    assert count_bound(program, len(STRING)) == constant + len(STRING)
    assert count_dtype(program, len(STRING)) == (np.int32 if constant < 2**31 - len(STRING) else np.int64)
