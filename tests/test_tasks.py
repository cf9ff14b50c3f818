"""Properties of the task library: format, constraints, reference answers, seeds and errors.

The expected answers and constraints are restated here from the task definitions in
spec/tasks.md, written plainly and independently of crasp/tasks.
"""

import itertools
import string
from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crasp.tasks import (
    BOS_ID,
    EOS_ID,
    PAD_ID,
    SEP_ID,
    SPECIAL_TOKENS,
    TASK_CODES,
    UNBOUNDED,
    Claim,
    InvalidInputError,
    ParameterError,
    SamplerError,
    UnknownTaskError,
    Expressibility,
    get_task,
    parameters_of,
    TASKS,
)

RETRIEVAL = {"UL", "UR", "NLFirst", "NRFirst", "NLLast", "NRLast"}
NON_UNIQUE_RETRIEVAL = {"NLFirst", "NRFirst", "NLLast", "NRLast"}
MAX_TEST_LENGTH = 40


def expected_answer(task, inputs, query):
    """The definitions of spec/tasks.md, restated."""
    code = task.code
    if code in RETRIEVAL:
        occurrence = {
            "UL": inputs.index(query),
            "UR": inputs.index(query),
            "NLFirst": inputs.index(query),
            "NRFirst": inputs.index(query),
            "NLLast": len(inputs) - 1 - inputs[::-1].index(query),
            "NRLast": len(inputs) - 1 - inputs[::-1].index(query),
        }[code]
        neighbour = occurrence - 1 if code in {"UL", "NLFirst", "NLLast"} else occurrence + 1
        assert 0 <= neighbour < len(inputs), "the answer position must lie inside the context"
        return [inputs[neighbour]]
    if code in {"UF", "NF", "RepeatCopy"}:
        return list(inputs)
    if code in {"UB", "NB"}:
        return inputs[::-1]
    if code in {"BinaryMajority", "Majority"}:
        return [Counter(inputs).most_common(1)[0][0]]
    if code == "Sort":
        return sorted(inputs, key=task.symbols.index)
    if code == "Parity":
        return [str(inputs.count("1") % 2)]
    if code == "Addition":
        x, y = "".join(inputs).split("+")
        return list(bin(int(x, 2) + int(y, 2))[2:])
    if code == "BinaryMajorityInterleave":
        return ["1" if inputs[k::3].count("1") > inputs[k::3].count("0") else "0" for k in range(3)]
    raise AssertionError(f"no restated definition for {code}")


def check_constraints(task, inputs, query, length):
    """What the sampler promises about one example, beyond the answer."""
    code = task.code
    assert len(inputs) == length
    assert set(inputs) <= set(task.symbols)
    if code in {"UL", "UR"}:
        assert inputs.count(query) == 1
    if code in NON_UNIQUE_RETRIEVAL:
        positions = [i for i, s in enumerate(inputs) if s == query]
        if task.occurrences == "iid":
            assert len(positions) >= 2
        else:
            lo, hi = task.occurrences
            assert lo <= len(positions) <= (max(lo, length // 5) if hi is None else hi)
        if task.non_adjacent:
            assert all(b - a >= 2 for a, b in zip(positions, positions[1:]))
    if code in {"UF", "UB", "Sort"}:
        assert len(set(inputs)) == len(inputs)
    if code == "BinaryMajority":
        assert inputs.count("0") != inputs.count("1")
    if code == "Majority":
        counts = sorted(Counter(inputs).values(), reverse=True)
        assert len(counts) == 1 or counts[0] > counts[1]
    if code == "BinaryMajorityInterleave":
        assert all(inputs[k::3].count("0") != inputs[k::3].count("1") for k in range(3))
    if code == "Addition":
        x, y = "".join(inputs).split("+")
        assert x and y and (len(x) == 1 or x[0] == "1") and (len(y) == 1 or y[0] == "1")


@st.composite
def tasks(draw, codes=TASK_CODES):
    """A task with randomized sampler parameters."""
    code = draw(st.sampled_from(codes))
    params = {}
    if "alphabet_size" in parameters_of(TASKS[code]):
        params["alphabet_size"] = draw(st.sampled_from([2, 3, 5, 26, 62, 150]))
    if code in NON_UNIQUE_RETRIEVAL:
        params["non_adjacent"] = draw(st.booleans())
        lo = draw(st.integers(2, 4))
        params["occurrences"] = draw(st.sampled_from(["iid", (lo, None), (lo, lo), (lo, lo + 2)]))
    return get_task(code, **params)


@st.composite
def requests(draw):
    task = draw(tasks())
    length = draw(st.integers(task.min_length(), min(task.max_length(), MAX_TEST_LENGTH)))
    return task, length, draw(st.integers(0, 2**32 - 1)), draw(st.integers(1, 6))


@settings(max_examples=400, deadline=None)
@given(requests())
def test_samples_have_the_format_constraints_and_reference_answers(request):
    task, length, seed, n = request
    examples = task.sample(np.random.default_rng(seed), n, length)
    tokens = examples.tokens
    assert tokens.dtype == np.int32 and tokens.shape == (n, examples.lengths.max())
    assert task.vocab[:4] == SPECIAL_TOKENS and len(set(task.vocab)) == len(task.vocab)
    query_width = 1 if task.code in RETRIEVAL else 0
    for r in range(n):
        row = [int(t) for t in tokens[r]]
        prompt_length, total = int(examples.prompt_lengths[r]), int(examples.lengths[r])
        assert prompt_length == length + 2 + query_width
        assert row[0] == BOS_ID and row[length + 1] == SEP_ID and row[total - 1] == EOS_ID
        assert all(t == PAD_ID for t in row[total:])
        content = row[1 : length + 1] + row[length + 2 : total - 1]
        assert all(t >= len(SPECIAL_TOKENS) for t in content), "no special token inside input, query or answer"
        inputs = [task.vocab[t] for t in row[1 : length + 1]]
        query = task.vocab[row[length + 2]] if query_width else None
        answer = [task.vocab[t] for t in row[prompt_length : total - 1]]
        assert examples.inputs[r] == inputs and examples.answers[r] == answer
        assert (examples.queries[r] if query_width else examples.queries) == query
        check_constraints(task, inputs, query, length)
        assert answer == expected_answer(task, inputs, query) == task.answer(inputs, query)


@settings(max_examples=60, deadline=None)
@given(requests())
def test_same_seed_same_examples_and_other_seeds_differ(request):
    task, length, seed, n = request
    first = task.sample(np.random.default_rng(seed), n, length).tokens
    again = task.sample(np.random.default_rng(seed), n, length).tokens
    assert np.array_equal(first, again)
    # 64 long inputs from two seeds coincide only if the sampler ignores its generator.
    long_length = min(task.max_length(), 30)
    one = task.sample(np.random.default_rng(seed), 64, long_length).tokens
    other = task.sample(np.random.default_rng(seed + 1), 64, long_length).tokens
    assert not np.array_equal(one, other)


@settings(max_examples=100, deadline=None)
@given(tasks())
def test_every_length_between_min_and_max_can_be_sampled(task):
    assert task.length_problem(task.min_length() - 1) is not None
    top = min(task.max_length(), MAX_TEST_LENGTH)
    for length in range(task.min_length(), top + 1):
        assert task.length_problem(length) is None
        task.sample(np.random.default_rng(length), 2, length)
    if task.max_length() != UNBOUNDED:
        with pytest.raises(SamplerError, match=task.code):
            task.sample(np.random.default_rng(0), 1, task.max_length() + 1)


def placement_exists(code, length, non_adjacent, occurrences):
    """Brute force: is there a set of query positions the task accepts in a context of this length?"""
    if occurrences == "iid":
        needed = 2  # more occurrences only make a placement harder
    else:
        lo, hi = occurrences
        needed = max(lo, length // 5) if hi is None else hi  # every count up to hi must fit
    for positions in itertools.combinations(range(length), needed):
        first, last = positions[0], positions[-1]
        target = {"NLFirst": first - 1, "NRFirst": first + 1, "NLLast": last - 1, "NRLast": last + 1}[code]
        adjacent = any(b - a == 1 for a, b in zip(positions, positions[1:]))
        if 0 <= target < length and not (non_adjacent and adjacent):
            return True
    return False


@pytest.mark.parametrize("code", sorted(NON_UNIQUE_RETRIEVAL))
@pytest.mark.parametrize("non_adjacent", [False, True])
@pytest.mark.parametrize("occurrences", ["iid", (2, None), (3, 3)])
def test_non_unique_minimum_length_is_the_shortest_valid_placement(code, non_adjacent, occurrences):
    task = get_task(code, non_adjacent=non_adjacent, occurrences=occurrences)
    shortest = next(length for length in range(1, 20) if placement_exists(code, length, non_adjacent, occurrences))
    assert task.min_length() == shortest
    with pytest.raises(SamplerError, match=f"task {code}: cannot sample length={shortest - 1}"):
        task.sample(np.random.default_rng(0), 4, shortest - 1)


def test_pretrained_non_unique_sets_cover_the_occurrence_range_and_both_ends():
    task = get_task("NRFirst", alphabet_size=62, occurrences=(2, None), non_adjacent=True)
    examples = task.sample(np.random.default_rng(1), 3000, 20)
    counts = {inputs.count(query) for inputs, query in zip(examples.inputs, examples.queries)}
    assert counts == {2, 3, 4}
    first_positions = {inputs.index(query) for inputs, query in zip(examples.inputs, examples.queries)}
    assert 0 in first_positions
    last_positions = {19 - inputs[::-1].index(query) for inputs, query in zip(examples.inputs, examples.queries)}
    assert 19 in last_positions


@pytest.mark.parametrize("code, allowed", [("UL", set(range(1, 6))), ("UR", set(range(0, 5)))])
def test_unique_query_reaches_every_position_that_has_the_neighbour(code, allowed):
    examples = get_task(code, alphabet_size=5).sample(np.random.default_rng(2), 2000, 6)
    positions = {inputs.index(query) for inputs, query in zip(examples.inputs, examples.queries)}
    assert positions == allowed


def test_symbol_names():
    assert get_task("UR", alphabet_size=62).symbols == tuple(
        string.ascii_lowercase + string.ascii_uppercase + string.digits
    )
    assert get_task("UF", alphabet_size=52).symbols == tuple(string.ascii_letters)
    assert get_task("Majority").symbols == tuple(string.ascii_lowercase)
    assert get_task("RepeatCopy").symbols == ("a", "b")
    assert get_task("UF").symbols == tuple(f"s{k}" for k in range(150))
    assert get_task("Parity").symbols == ("0", "1")
    assert get_task("Addition").symbols == ("0", "1", "+")
    for code in TASK_CODES:
        vocab = get_task(code).vocab
        assert (
            vocab[PAD_ID] == "<pad>"
            and vocab[BOS_ID] == "<bos>"
            and vocab[SEP_ID] == "<sep>"
            and vocab[EOS_ID] == "<eos>"
        )


def test_registry_codes_names_and_descriptions():
    assert TASK_CODES == (
        "UL",
        "UR",
        "NLFirst",
        "NRFirst",
        "NLLast",
        "NRLast",
        "UF",
        "UB",
        "NF",
        "NB",
        "BinaryMajority",
        "Majority",
        "Sort",
        "RepeatCopy",
        "Parity",
        "Addition",
        "BinaryMajorityInterleave",
    )
    for code in TASK_CODES:
        task = get_task(code)
        assert task.code == code and get_task(task.name) == task
        assert task.description and "\n" not in task.description
    assert get_task("UF").name == "UniqueCopyForward"


# The spec's tables (spec/tasks.md): code -> (C-RASP[pos], C-RASP[]).
SPEC_TABLE = {
    "UL": (True, False),
    "UR": (True, False),
    "NLFirst": (True, False),
    "NRFirst": (True, False),
    "NLLast": (False, False),
    "NRLast": (False, False),
    "UF": (True, False),
    "UB": (True, False),
    "NF": (False, False),
    "NB": (False, False),
    "BinaryMajority": (True, True),
    "Majority": (True, True),
    "Sort": (True, True),
    "RepeatCopy": (False, False),
    "Parity": (False, False),
    "Addition": (False, False),
    "BinaryMajorityInterleave": (True, False),
}


@pytest.mark.parametrize("code", TASK_CODES)
def test_literature_claims_follow_the_spec_table(code):
    claims = get_task(code).literature
    assert set(claims) == {"pos", "none"}
    assert (claims["pos"].table_says_expressible, claims["none"].table_says_expressible) == SPEC_TABLE[code]
    for claim in claims.values():
        assert claim.argument and claim.source
        assert (
            claim.expressible
            is {
                Expressibility.EXPRESSIBLE: True,
                Expressibility.NOT_EXPRESSIBLE: False,
                Expressibility.NO_PROGRAM_KNOWN: None,
            }[claim.verdict]
        )
    # Whatever is impossible with positions is impossible without them.
    if claims["pos"].verdict is Expressibility.NOT_EXPRESSIBLE:
        assert claims["none"].verdict is Expressibility.NOT_EXPRESSIBLE


@pytest.mark.parametrize(
    "codes, cited",
    [
        (("NLLast", "NRLast"), ["Lemma 6", "Lemmas 35-36"]),
        (("NF", "NB", "RepeatCopy"), ["Theorem 12", "Lemma 8"]),
        (("Parity", "Addition"), ["not a checked citation"]),
    ],
)
def test_impossibility_claims_cite_their_proofs(codes, cited):
    for code in codes:
        claim = get_task(code).literature["pos"]
        assert claim.verdict is Expressibility.NOT_EXPRESSIBLE
        assert all(reference in claim.argument for reference in cited), claim.argument
    # Communication complexity cannot separate last-occurrence retrieval: each side can send, for
    # every symbol, its neighbour at its last occurrence in constantly many bits.
    assert "communication" not in get_task("NLLast").literature["pos"].argument


def test_a_claim_cannot_contradict_the_table_or_lack_an_argument():
    with pytest.raises(ValueError, match="contradicts"):
        Claim(Expressibility.NOT_EXPRESSIBLE, True, "argument", "source")
    with pytest.raises(ValueError, match="argument and a source"):
        Claim(Expressibility.NOT_EXPRESSIBLE, False, "", "source")


@pytest.mark.parametrize(
    "code, params, pattern",
    [
        ("Nope", {}, r"unknown task 'Nope'; accepted codes: UL, UR"),
        ("UF", {"foo": 1}, r"task UF: unknown parameter\(s\) foo; accepted: alphabet_size \(default 150\)"),
        ("Parity", {"alphabet_size": 3}, r"task Parity: unknown parameter\(s\) alphabet_size; accepted: none"),
        ("UR", {"alphabet_size": 1}, r"task UR: parameter alphabet_size=1 is invalid; accepted: an integer >= 2"),
        ("NF", {"alphabet_size": "5"}, r"task NF: parameter alphabet_size='5' is invalid"),
        (
            "NLLast",
            {"occurrences": (1, 3)},
            r"task NLLast: parameter occurrences=\(1, 3\) is invalid; accepted: \"iid\"",
        ),
        ("NLLast", {"occurrences": (4, 3)}, r"parameter occurrences=\(4, 3\) is invalid"),
        ("NLLast", {"occurrences": "often"}, r"parameter occurrences='often' is invalid"),
        ("NRFirst", {"non_adjacent": "yes"}, r"task NRFirst: parameter non_adjacent='yes' is invalid; accepted: True"),
        (
            "UL",
            {"alphabet_size": 10**12},
            r"task UL: parameter alphabet_size=1000000000000 is invalid; accepted: an integer >= 2 and <= 4096",
        ),
        (
            "NLLast",
            {"occurrences": (9000, 9000), "non_adjacent": True},
            r"task NLLast: no input length from 1 to 16384 can be sampled with alphabet_size=5, "
            r"occurrences=\(9000, 9000\), non_adjacent=True",
        ),
        (["UL"], {}, r"a task code is a string, got \['UL'\] \(list\); accepted codes: UL, UR, NLFirst"),
    ],
)
def test_bad_task_requests_name_the_task_and_parameter(code, params, pattern):
    error = UnknownTaskError if code in ("Nope", ["UL"]) else ParameterError
    with pytest.raises(error, match=pattern):
        get_task(code, **params)


@pytest.mark.parametrize(
    "code, params, length, pattern",
    [
        (
            "UF",
            {},
            151,
            r"task UF: cannot sample length=151: an input of 151 distinct symbols needs alphabet_size >= 151",
        ),
        ("Sort", {"alphabet_size": 10}, 11, r"task Sort: cannot sample length=11: .*alphabet_size=10"),
        ("UL", {}, 1, r"task UL: cannot sample length=1: the query needs a neighbour"),
        (
            "NLFirst",
            {"occurrences": (2, None), "non_adjacent": True},
            3,
            r"task NLFirst: cannot sample length=3: 2 occurrences of the query \(non-adjacent",
        ),
        ("NRLast", {}, 2, r"task NRLast: cannot sample length=2"),
        ("NLLast", {"occurrences": (5, 5)}, 4, r"task NLLast: cannot sample length=4: 5 occurrences"),
        ("Addition", {}, 2, r"task Addition: cannot sample length=2: the input x\+y"),
        ("BinaryMajorityInterleave", {}, 2, r"task BinaryMajorityInterleave: cannot sample length=2"),
        ("Parity", {}, 0, r"task Parity: cannot sample length=0: inputs have at least one symbol; accepted lengths"),
        ("Majority", {}, 2.5, r"task Majority: length=2.5 is not an integer"),
        (
            "NF",
            {},
            10**9,
            r"task NF: cannot sample length=1000000000: inputs have at most MAX_LENGTH=16384 symbols; "
            r"accepted lengths with alphabet_size=5, repeat_break_from=0: 1 to 16384",
        ),
    ],
)
def test_unsatisfiable_lengths_raise_sampler_errors(code, params, length, pattern):
    with pytest.raises(SamplerError, match=pattern):
        get_task(code, **params).sample(np.random.default_rng(0), 4, length)


def test_bad_sample_arguments():
    task = get_task("UF")
    with pytest.raises(SamplerError, match="task UF: n=0 is not a valid number of examples"):
        task.sample(np.random.default_rng(0), 0, 5)
    with pytest.raises(
        SamplerError,
        match=r"task UF: n=1000000000 is not a valid number of examples; accepted: "
        r"integers from 1 to 111848 at length=5 \(at most MAX_SAMPLE_ELEMENTS=",
    ):
        task.sample(np.random.default_rng(0), 10**9, 5)
    with pytest.raises(TypeError, match="rng must be a numpy.random.Generator"):
        task.sample(0, 1, 5)


@pytest.mark.parametrize(
    "code, inputs, query, pattern",
    [
        ("UR", ["a", "b"], "c", "must occur exactly once in the context, it occurs 0 times"),
        ("UR", ["a", "b", "a"], "a", "must occur exactly once"),
        ("UR", ["a", "b"], "b", "right neighbour of the query occurrence at context position 1 lies outside"),
        ("NLFirst", ["a", "b", "a"], "a", "left neighbour of the query occurrence at context position 0 lies outside"),
        ("NRLast", ["a", "b"], "a", "must occur at least twice"),
        ("UL", ["a", "b"], None, "needs the query symbol"),
        ("UF", ["a", "a"], None, "must be distinct"),
        ("NF", ["a", "z"], None, r"unknown symbols \['z'\]"),
        ("NF", ["a"], "a", "takes no query"),
        ("Majority", ["a", "b"], None, "2 symbols tie as most frequent"),
        ("BinaryMajority", ["0", "1"], None, "has no majority"),
        ("BinaryMajorityInterleave", ["0", "1", "1", "1"], None, "has no majority"),
        ("Addition", ["1", "+"], None, r"two non-empty bit strings joined by one '\+'"),
    ],
)
def test_reference_answer_rejects_inputs_outside_the_task(code, inputs, query, pattern):
    task = get_task(code, alphabet_size=5) if "alphabet_size" in parameters_of(TASKS[code]) else get_task(code)
    with pytest.raises(InvalidInputError, match=f"task {code}: .*{pattern}"):
        task.answer(inputs, query)


def test_reference_answers_on_hand_checked_examples():
    assert get_task("Addition").answer(list("11+1")) == list("100")
    assert get_task("Addition").answer(list("0+0")) == ["0"]
    assert get_task("NLLast").answer(list("abcab"), "a") == ["c"]
    assert get_task("NRFirst").answer(list("abcab"), "a") == ["b"]
    assert get_task("Sort", alphabet_size=62).answer(list("b0Aa")) == list("abA0")
    assert get_task("BinaryMajorityInterleave").answer(list("100110101")) == list("100")
