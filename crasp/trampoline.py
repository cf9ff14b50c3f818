"""Recursion without Python's call stack, for algorithms that follow the depth of a program.

A program can nest far deeper than Python's recursion limit (about 1,000 frames): thousands of
brackets, or thousands of definitions each using the previous one, which the evaluators follow
into the bodies. The parser, the printer and both evaluators are therefore written as generators
that *yield* the generator of each sub-computation instead of calling it, and receive its result:

    def size(node):
        total = 1
        for child in node.children():
            total += yield size(child)
        return total

    trampoline(size(root))

`trampoline` runs them on an explicit stack, so depth costs heap memory only. An exception
raised by a sub-computation is thrown into its caller at the `yield`, exactly as with a call.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any, TypeVar

Result = TypeVar("Result")

# A recursive computation: a generator that yields its sub-computations and returns its result.
Computation = Generator[Any, Any, Result]


def trampoline(computation: Computation[Result]) -> Result:
    """The result of `computation`, running every sub-computation it yields on an explicit stack."""
    stack: list[Generator] = [computation]
    result: Any = None
    error: BaseException | None = None
    while True:
        try:
            request = stack[-1].send(result) if error is None else stack[-1].throw(error)
        except StopIteration as done:
            result, error = done.value, None
        except BaseException as raised:  # handed to the caller, as a call would hand it
            result, error = None, raised
        else:
            stack.append(request)
            result, error = None, None
            continue
        stack.pop()
        if not stack:
            if error is not None:
                raise error
            return result
