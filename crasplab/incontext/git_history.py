"""Synthetic git histories and the revert / cherry-pick prompts (retrieval/copying paper, section
4.2): reverting a range of commits takes them newest first, in the order `git log` lists them
(forward copying); cherry-picking them onto another branch takes them oldest first, in reverse
(backward copying). The prompt explains both commands in the same words whatever is asked, then
gives few-shot examples of the command asked:

    `git log --oneline` lists a branch's commits newest first, ... (the same text for both)

    History:
    4c0e9a2 Fix typo in parser
    ...
    Command: git revert
    Hashes: 4c0e9a2 ...

    (two more examples, then the test history, ending at "Hashes:")

A commit is a 7-digit hexadecimal hash, unique within its history, and a message drawn from a
verb and an object. A seed fixes every history, per number of commits and index, and both commands
see the same histories.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from crasplab.incontext.directions import BACKWARD, FORWARD, Direction

COMMANDS: dict[str, Direction] = {"revert": FORWARD, "cherry-pick": BACKWARD}
HASH_DIGITS = 7
VERBS = ("Add", "Fix", "Update", "Remove", "Refactor", "Rename", "Document", "Test", "Simplify", "Speed up")
OBJECTS = (
    "login form",
    "typo in README",
    "parser",
    "cache layer",
    "CI config",
    "date formatting",
    "error messages",
    "user settings",
    "API client",
    "database schema",
    "logging",
    "search index",
    "unit tests",
    "build script",
    "config loader",
    "retry logic",
    "dark mode",
    "export to CSV",
    "password reset",
    "rate limiter",
)

EXPLANATION = (
    "`git log --oneline` lists a branch's commits newest first, one per line: a 7-character hash, then the "
    "message. `git revert` undoes commits; it must take them newest first, in the order the log lists them. "
    "`git cherry-pick` copies commits onto another branch; it must take them oldest first, in the reverse of "
    "the order the log lists them. Each answer lists every hash of the history in the order the command must "
    "take them."
)


@dataclass(frozen=True)
class Commit:
    hash: str
    message: str


def history(rng: np.random.Generator, commits: int) -> list[Commit]:
    """`commits` commits, newest first, with distinct hashes."""
    hashes: list[str] = []
    while len(hashes) < commits:
        candidate = "".join(f"{digit:x}" for digit in rng.integers(16, size=HASH_DIGITS))
        if candidate not in hashes:
            hashes.append(candidate)
    return [Commit(h, f"{VERBS[rng.integers(len(VERBS))]} {OBJECTS[rng.integers(len(OBJECTS))]}") for h in hashes]


def answer(command: str, commits: list[Commit]) -> str:
    return " ".join(commit.hash for commit in COMMANDS[command].arrange(commits))


def format_question(command: str, commits: list[Commit]) -> str:
    lines = ["History:", *(f"{commit.hash} {commit.message}" for commit in commits), f"Command: git {command}"]
    return "\n".join(lines) + "\nHashes:"


@dataclass(frozen=True)
class GitItem:
    command: str
    commits: int
    index: int
    prompt: str
    expected: str  # the hashes in the order the command takes them, separated by spaces


def git_items(command: str, commits: int, n: int, seed: int, examples: int, example_commits: int) -> list[GitItem]:
    items = []
    for index in range(n):
        rng = np.random.default_rng([seed, commits, index])
        test = history(rng, commits)
        demos = [history(rng, example_commits) for _ in range(examples)]
        blocks = [
            EXPLANATION,
            *(f"{format_question(command, demo)} {answer(command, demo)}" for demo in demos),
            format_question(command, test),
        ]
        items.append(GitItem(command, commits, index, "\n\n".join(blocks), answer(command, test)))
    return items
