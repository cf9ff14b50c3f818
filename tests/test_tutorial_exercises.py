"""docs/exercises/ is solvable with the lab as shipped: each exercise's reference solution
(tests/exercises/<exercise>.crasp) passes the exercise's own check command, in the fragment the
exercise asks for, and the index lists every exercise as its page states it."""

from __future__ import annotations

import re
import shlex

import pytest

from tests.teaching_harness import REPOSITORY, console_blocks, run_crasp

EXERCISES = REPOSITORY / "docs" / "exercises"
SOLUTIONS = REPOSITORY / "tests" / "exercises"
PAGES = sorted(EXERCISES.glob("[0-9][0-9]-*.md"))
FRAGMENT = re.compile(r"^\*\*Fragment:\*\* (C-RASP\[[^\]]*\])", re.MULTILINE)


def _check_command(page) -> list[str]:
    [block] = console_blocks(page.read_text())
    [command] = block.commands
    return shlex.split(command.command)


def test_there_are_eight_to_ten_exercises_each_with_a_solution():
    assert 8 <= len(PAGES) <= 10
    assert sorted(p.stem for p in SOLUTIONS.glob("*.crasp")) == [p.stem for p in PAGES]


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.stem)
def test_the_reference_solution_passes_the_exercise_check(page):
    words = _check_command(page)
    words[words.index("--program") + 1] = str(SOLUTIONS / f"{page.stem}.crasp")
    status, printed = run_crasp(shlex.join(words))
    assert status == 0, printed
    assert "\nagreement   100.00% " in printed
    assert f"\nfragment    {FRAGMENT.search(page.read_text()).group(1)}\n" in printed


def test_the_index_lists_every_exercise_as_its_page_states_it():
    index = (EXERCISES / "README.md").read_text()
    rows = re.findall(r"^\| (\d+) \| \[[^\]]+\]\(([^)]+)\) \| (\w+) \| (C-RASP\[[^\]]*\]) \|", index, re.MULTILINE)
    assert [row[1] for row in rows] == [page.name for page in PAGES]
    for number, name, target, fragment in rows:
        page = EXERCISES / name
        words = _check_command(page)
        assert page.read_text().startswith(f"# {number}. ")
        assert words[4] == target and FRAGMENT.search(page.read_text()).group(1) == fragment
