"""The search outcome in words: per-size counts, the program found, or what an exhausted search
shows (and relative to what)."""

from __future__ import annotations

from crasp.search.driver import SearchOutcome
from crasp.search.targets import CONTEXTS


def level_line(level) -> str:
    categories = ", ".join(f"{name} {count:,}" for name, count in sorted(level.kept.items()))
    state = "" if level.complete else f" (stopped after {level.evaluated:,} of {level.planned:,})"
    return (
        f"size {level.size:>2}: {level.evaluated:>12,} expressions evaluated, {level.behaviours:>10,} distinct "
        f"behaviours kept in {level.seconds:7.1f} s{state}" + (f"  [{categories}]" if categories else "")
    )


def claim(outcome: SearchOutcome) -> str:
    """What a search without a program shows, with the grammar and sample it is relative to."""
    k = outcome.complete_through
    grammar = outcome.grammar
    if k == 0:
        return f"no size of {grammar.title} was enumerated completely: nothing is shown"
    # Booleans over s and t are enumerated only below the maximum size (a quantifier must follow).
    pairs = k if k < outcome.options.max_size else k - 1
    forms = [
        f"`#[j <= i] E >= 1` with E over s of size <= {k} (size <= {k + CONTEXTS['held'][0]})",
        f"`any t: Q(t) and E` and `any t: Q(t) and #[j <= i] E >= 1` with E over s, t of size <= {pairs} "
        f"(size <= {pairs + CONTEXTS['current held'][0]})",
    ]
    text = (
        f"no program of size <= {k} in {grammar.title} over this grammar solves {outcome.task.code}: every output "
        f"O[s] whose expression (written out in full) has at most {k} nodes mispredicts a string of the sample; "
        f"nor does any output of the forms {'; '.join(forms)}"
    )
    if outcome.rejected:
        text += (
            f"; except {outcome.rejected} output(s) right on the whole sample that crasp check refuted on "
            "strings the sample cannot hold (other outputs with the same values on the sample were not tried)"
        )
    if outcome.uncovered:
        text += (
            f"; and {len(outcome.uncovered)} of the sample's predictions are made by no output of these forms "
            f"(e.g. {outcome.uncovered[0]}), so no program `g1 ? A1 : g2 ? A2 : ...` choosing among such "
            "outputs solves it either, whatever its conditions g"
        )
    counts = ", ".join(f"{level.size}: {level.behaviours:,}" for level in outcome.levels if level.complete)
    return (
        text + f". Distinct behaviours per size (all categories) {counts}. Grammar: {grammar.describe()}. "
        f"Sample: {outcome.sample.describe()}."
    )


def summary(outcome: SearchOutcome) -> str:
    """The text the command prints after the per-size lines."""
    rounds = (
        f"{outcome.rounds} round(s), {outcome.sample.sources.get('counterexamples', 0)} counterexample(s) "
        f"added, {outcome.verifications} verification(s)"
    )
    discovery = outcome.discovery
    if discovery is not None:
        check = discovery.check
        return (
            f"found: {discovery.shape}, size {discovery.size} (nodes of O[s] written out), while enumerating "
            f"size {discovery.enumerated_size}, after {discovery.seconds:.1f} s ({rounds})\n"
            f"crasp check: verified on {check.strings:,} strings ({check.fragment.name}; every string up to "
            f"input length 6 over 3 symbols, then random strings up to length 300)\n\n{discovery.text}"
        )
    stopped = f"stopped: {outcome.stopped}; " if outcome.stopped else ""
    return f"{stopped}{rounds}, {outcome.seconds:.1f} s\n{claim(outcome)}"
