"""The program search: complete enumeration, exact observational equivalence, verified programs,
precise claims, determinism, and the errors a user can make."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crasp import expr as E
from crasp import prediction
from crasp.__main__ import main
from crasp.check import check_witness
from crasp.batch_evaluator import BatchEvaluator
from crasp.search import store as storage
from crasp.search import results
from crasp.search.build import Builder, tree_size
from crasp.search.driver import search
from crasp.search.enumerate import Budget, Enumerator
from crasp.search.grammar import ARITHMETIC, BOOL, COMPARISONS, S, T, Grammar
from crasp.tasks import PROGRAM_SPECIALS
from crasp.search.options import SampleOptions, SearchOptions
from crasp.search.report import claim
from crasp.search.sample import ABSENT_SYMBOLS, build_sample
from crasp.search.store import CATEGORIES, Category
from crasp.search.targets import CONTEXTS, Found, Targets
from crasp.syntax import parse, parse_file
from crasp.tasks import get_task
from crasp.witnesses import WITNESSES

TINY = Grammar("local", offsets=(1,), constants=(0, 1))
TINY_SAMPLE = SampleOptions(exhaustive_length=2, random_strings=2)


@pytest.fixture(scope="module")
def sample():
    return build_sample(get_task("UR"), TINY_SAMPLE)


def enumerated(sample, grammar=TINY, sizes=3, max_size=10):
    enumerator = Enumerator(grammar, sample, max_size, Budget())
    for size in range(1, sizes + 1):
        enumerator.run_level(size)
    return enumerator


# ------------------------------------------------------------------ values computed independently


def interpreter_value(node: E.Expr, sample) -> np.ndarray:
    """The node's value by crasp.evaluate, in the search's layout (s axis, t axis, positions)."""
    ids = {s: k for k, s in enumerate(sample.alphabet)}
    width = max(len(s) for s in sample.strings)
    tokens = np.full((len(sample.strings), width), -1)
    for row, string in enumerate(sample.strings):
        tokens[row, : len(string)] = [ids[x] for x in string]
    axes = tuple(sorted(node.free & {"s", "t"}))
    value = BatchEvaluator(tokens, ids).full(node, axes).array
    flat = np.concatenate([value[row, : len(s)] for row, s in enumerate(sample.strings)])  # (N, V...)
    V = len(sample.alphabet)
    shape = (len(flat), V if "s" in axes else 1, V if "t" in axes else 1)
    return np.moveaxis(flat.reshape(shape), 0, -1)


def semantic_key(node_type: str, value: np.ndarray) -> tuple[Category, bytes]:
    """The category of the variables the value really depends on, and the value's bytes."""
    variables = 0
    if value.shape[0] > 1 and (value != value[:1]).any():
        variables |= S
    else:
        value = value[:1]
    if value.shape[1] > 1 and (value != value[:, :1]).any():
        variables |= T
    else:
        value = value[:, :1]
    return Category(node_type, variables), np.ascontiguousarray(value).astype(np.int64).tobytes()


def kept_values(enumerator, sizes) -> dict[tuple[Category, bytes], int]:
    found = {}
    for category, store in enumerator.stores.items():
        for size in sizes:
            values, _ = store.level(size)
            if category.type == BOOL:
                values = enumerator.unpack(values)
            for row in values:
                found[(category, np.ascontiguousarray(row).astype(np.int64).tobytes())] = size
    return found


def brute_force(grammar: Grammar, max_size: int) -> dict[int, list[E.Expr]]:
    """Every expression of the grammar up to max_size, listed from the productions directly."""
    t = E.Var("t")
    by_size = {1: [atom.expression("t") for atom in grammar.atoms()]}
    for size in range(2, max_size + 1):
        found = []
        for node in by_size[size - 1]:
            if node.type == E.BOOL:
                found += [E.Not(node)] + [E.CountOf(node, offset) for offset in grammar.count_offsets]
                if "t" in node.free:
                    found += [E.Quantified(kind, t, node) for kind in ("any", "all")]
        for left_size in range(1, size - 1):
            for left, right in itertools.product(by_size[left_size], by_size[size - 1 - left_size]):
                if left.type == right.type == E.BOOL:
                    found += [E.And(left, right), E.Or(left, right)]
                elif left.type == right.type == E.COUNT:
                    found += [E.Compare(op, left, right) for op in COMPARISONS]
                    found += [E.Arith(op, left, right) for op in ARITHMETIC]
        by_size[size] = found
    return by_size


def test_enumeration_up_to_size_3_is_complete_and_minimal(sample):
    """Every value of every expression of size <= 3 (listed by brute force, evaluated by the
    interpreter) is kept, in the category of the variables it depends on, at its smallest size."""
    enumerator = enumerated(sample)
    kept = kept_values(enumerator, (1, 2, 3))
    smallest: dict[tuple[Category, bytes], int] = {}
    for size, nodes in brute_force(TINY, 3).items():
        for node in nodes:
            key = semantic_key(node.type, interpreter_value(node, sample))
            smallest.setdefault(key, size)
    assert kept == smallest


def test_kept_expressions_rebuild_to_their_values_and_sizes(sample):
    enumerator = enumerated(sample, sizes=5)
    builder = Builder(enumerator.table, enumerator.atoms)
    rng = np.random.default_rng(0)
    for behaviour in rng.choice(len(enumerator.table), 300, replace=False):
        kind, args, category = enumerator.table.describe(int(behaviour))
        node = builder.node(kind, args, "t" if category.variables & T else None, 1 if category.variables & T else 0)
        store = enumerator.stores[category]
        stored = store.fetch(np.array([enumerator.table.row[behaviour]]))[0]
        if category.type == BOOL:
            stored = enumerator.unpack(stored)
        assert np.array_equal(np.broadcast_to(interpreter_value(node, sample), stored.shape), stored), E.show(node)
        assert tree_size(node) == enumerator.table.size[behaviour]


@pytest.mark.parametrize("modulus", [1, 3])
def test_equal_fingerprints_never_merge_different_values(sample, monkeypatch, modulus):
    """With fingerprints forced to collide (taken modulo a tiny number), the kept values are the
    same as with real fingerprints: every merge is confirmed by comparing the values."""
    expected = kept_values(enumerated(sample, sizes=4), range(1, 5))
    real = storage.fingerprints
    monkeypatch.setattr(storage, "fingerprints", lambda rows, which=0: real(rows, which) % np.uint64(modulus))
    assert kept_values(enumerated(sample, sizes=4), range(1, 5)) == expected


def test_kept_values_of_a_category_are_pairwise_different(sample):
    enumerator = enumerated(sample, sizes=5)
    for store in enumerator.stores.values():
        rows = np.concatenate([store.level(size)[0].reshape(-1, int(np.prod(store.row_shape))) for size in range(1, 6)])
        assert len(np.unique(rows, axis=0)) == len(rows)


@settings(max_examples=20, deadline=None)
@given(choice=st.integers(0, 10**6))
def test_contexts_match_the_interpreter(sample, choice):
    """A Boolean in each context (`any t: Q(t) and #[j <= i] E >= 1`, ...) predicts at the needed
    positions exactly what the built expression computes there."""
    enumerator = enumerated(sample, sizes=5)
    builder, targets = Builder(enumerator.table, enumerator.atoms), Targets(sample)
    booleans = [b for b in range(len(enumerator.table)) if enumerator.table.describe(b)[2].type == BOOL]
    behaviour = booleans[choice % len(booleans)]
    kind, args, category = enumerator.table.describe(behaviour)
    packed = enumerator.stores[category].fetch(np.array([enumerator.table.row[behaviour]]))
    contexts = targets.in_contexts(category.variables, packed)
    for context, values in contexts.items():
        node = builder.found(
            Found(context, kind, args, int(enumerator.table.size[behaviour]), CATEGORIES.index(category))
        )
        expected = interpreter_value(node, sample)[:, 0, sample.needed]
        assert np.array_equal(values[0], expected if CONTEXTS[context][2] else expected[0]), E.show(node)


def test_the_sample_never_uses_the_symbols_that_stand_for_a_larger_alphabet(sample):
    absent = sample.alphabet[-ABSENT_SYMBOLS:]
    assert not any(x in absent for string in sample.strings for x in string)
    small = get_task("UR", alphabet_size=3)  # the task's own strings, up to the names of its symbols
    assert all(small.answer(list(s[1 : s.index("<sep>")]), s[s.index("<sep>") + 1]) == [s[-2]] for s in sample.strings)


def test_counterexamples_of_the_task_and_of_its_small_version_are_renamed_in_order(sample):
    assert get_task("UR").symbols[:2] == ("s0", "s1")  # 150 symbols; crasp.check's small version has a b c
    assert sample.relabel("<bos> s7 s3 s7 <sep> s3 s7 <eos>".split()) == tuple("<bos> b a b <sep> a b <eos>".split())
    assert sample.relabel("<bos> c b <sep> c b <eos>".split()) == tuple("<bos> b a <sep> b a <eos>".split())
    assert sample.relabel(["<bos>"] + [f"s{k}" for k in range(7)] + ["<sep>", "s1", "s2", "<eos>"]) is None


# ------------------------------------------------------------------ searches


@pytest.fixture(scope="module")
def majority_search():
    return search(get_task("Majority"), Grammar("none"), SearchOptions(max_size=8, time_limit=120))


def test_a_reported_program_passes_crasp_check_and_round_trips(majority_search, tmp_path, capsys):
    discovery = majority_search.discovery
    assert discovery is not None and discovery.check.verified
    task = get_task("Majority")
    assert check_witness(task, discovery.make, seed=1).verified  # other random strings than the search's
    assert discovery.size == tree_size(discovery.program.target.body)
    saved = tmp_path / "majority_found.crasp"
    saved.write_text(discovery.text)
    assert parse_file(saved) == discovery.program
    assert main(["run", str(saved), "--input", "<bos> b a b <sep> b <eos>"]) == 0
    predictions = capsys.readouterr().out.splitlines()[-1].split()
    assert predictions[-3:-1] == ["b", "<eos>"]  # at <sep> and at the answer (elsewhere nothing is asked)


def test_a_candidate_refuted_by_the_check_adds_its_counterexample_and_the_search_restarts():
    """A sample of three strings admits wrong programs; each refutation grows the sample until the
    program found passes the full check."""
    options = SearchOptions(max_size=8, time_limit=120, sample=SampleOptions(exhaustive_length=1, random_strings=0))
    outcome = search(get_task("Majority"), Grammar("none"), options)
    assert outcome.rounds > 1 and outcome.sample.sources["counterexamples"] == outcome.rounds - 1
    assert outcome.discovery is not None and outcome.discovery.check.verified
    assert check_witness(get_task("Majority"), outcome.discovery.make, seed=2).verified


def test_search_is_deterministic():
    def run():
        outcome = search(get_task("UL"), Grammar("none"), SearchOptions(max_size=6, sample=TINY_SAMPLE))
        return [(level.size, level.evaluated, sorted(level.kept.items())) for level in outcome.levels], claim(outcome)

    assert run() == run()


def test_an_exhausted_search_states_its_claim_relative_to_grammar_and_sample():
    outcome = search(get_task("UL"), Grammar("none"), SearchOptions(max_size=6, sample=TINY_SAMPLE))
    assert outcome.discovery is None and outcome.stopped is None and outcome.complete_through == 6
    text = claim(outcome)
    assert text.startswith("no program of size <= 6 in C-RASP[] over this grammar solves UL")
    assert "Grammar: C-RASP[] expressions" in text and "Sample: UL over task symbols a b c" in text
    counts = ", ".join(f"{level.size}: {level.behaviours:,}" for level in outcome.levels)
    assert f"Distinct behaviours per size (all categories) {counts}." in text and counts.startswith("1: 19, 2: 28")
    assert [level.size for level in outcome.levels] == [1, 2, 3, 4, 5, 6]


def test_a_budget_stop_reports_what_was_covered(capsys):
    status = main(
        [
            "search",
            "UL",
            "--max-size",
            "12",
            "--max-behaviours",
            "2000",
            "--no-progress",
            "--exhaustive-length",
            "2",
            "--random-strings",
            "2",
        ]
    )
    out = capsys.readouterr().out
    assert status == 1
    assert "stopped: behaviour limit (2,000)" in out and "no program of size <= 4 in C-RASP[]" in out
    assert "(stopped after" in out


def test_an_interrupted_search_claims_only_the_sizes_it_completed(monkeypatch):
    run_level = Enumerator.run_level

    def interrupted_at_size_5(self, size, plans=None):
        if size == 5:
            raise KeyboardInterrupt
        return run_level(self, size, plans)

    monkeypatch.setattr(Enumerator, "run_level", interrupted_at_size_5)
    outcome = search(get_task("UL"), Grammar("none"), SearchOptions(max_size=8, sample=TINY_SAMPLE))
    assert outcome.stopped == "interrupted" and outcome.complete_through == 4
    assert claim(outcome).startswith("no program of size <= 4 in C-RASP[]")


# ------------------------------------------------------------------ verdicts and the command line


def test_recorded_results_feed_the_predictions(majority_search, tmp_path, monkeypatch):
    monkeypatch.setattr(results, "RESULTS_PATH", tmp_path / "search_results.json")
    monkeypatch.setitem(WITNESSES, "Majority", ())
    prediction.verified_witnesses.cache_clear()
    exhausted = search(get_task("UL"), Grammar("none"), SearchOptions(max_size=5, sample=TINY_SAMPLE))
    assert results.save(results.record_of(exhausted, "python -m crasp search UL --max-size 5"))
    assert results.save(results.record_of(majority_search, "python -m crasp search Majority"))
    assert not results.save(results.record_of(exhausted, "weaker"))  # the same claim again adds nothing
    try:
        unknown = prediction.predict("UL", "nope")
        assert unknown.generalizes is None and unknown.label == "none up to size 5"
        assert "no program known in C-RASP[]" in unknown.reason and "no program of size <= 5" in unknown.reason
        found = prediction.predict("Majority", "nope")
        assert found.generalizes is True
        assert found.reason.endswith(f"found by search, size {majority_search.discovery.size}")
    finally:
        prediction.verified_witnesses.cache_clear()


@pytest.mark.parametrize(
    "argv, message",
    [
        (["search", "Nope"], "error: unknown task 'Nope'; accepted codes: UL, UR,"),
        (["search", "UR", "--max-size", "0"], "error: --max-size must be an integer from 1 to 30, got 0"),
        (
            ["search", "UR", "--fragment", "local", "--offsets", "0"],
            "error: --offsets (local distances c) must be integers from 1 to 64, got [0]",
        ),
        (["search", "UR", "--sample-alphabet", "9"], "error: --sample-alphabet must be an integer from 2 to 6, got 9"),
    ],
)
def test_user_errors_name_what_was_wrong_and_what_is_accepted(argv, message, capsys):
    assert main(argv) == 2
    assert capsys.readouterr().err.startswith(message)


def test_an_unknown_fragment_lists_the_accepted_ones(capsys):
    with pytest.raises(SystemExit) as exited:
        main(["search", "UR", "--fragment", "pos"])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "argument --fragment: invalid choice: 'pos'" in err
    assert all(f"'{fragment}'" in err.splitlines()[-1] for fragment in ("none", "local", "periodic", "all"))


def test_the_found_program_names_no_task_symbol(majority_search):
    text = majority_search.discovery.text
    body = text[text.index("output:") :]
    assert not any(f'"{symbol}"' in body for symbol in get_task("Majority").symbols)
    assert parse(text).alphabet[:3] == PROGRAM_SPECIALS


def test_a_saved_program_is_alphabet_generic_and_check_agrees_with_search(majority_search, tmp_path, capsys):
    """search --save then check --program on the same file: the saved program lists only the
    special symbols, so check's exhaustive stage runs it over a b c as well as over the task's own."""
    saved = tmp_path / "majority.crasp"
    assert main(["search", "Majority", "--max-size", "8", "--no-progress", "--save", str(saved)]) == 0
    assert saved.read_text() == majority_search.discovery.generic_text
    assert f"alphabet: {' '.join(PROGRAM_SPECIALS)} ...\n" in saved.read_text()
    capsys.readouterr()
    assert main(["check", "Majority", "--program", str(saved)]) == 0
    assert "agreement   100.00%" in capsys.readouterr().out
