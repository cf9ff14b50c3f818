"""The lab's one error boundary: an error a user's flags, files, folders or machine can cause ends
a command as one `error: ...` line and exit code 1, never as a traceback.

Such an error is a LabError (each subclass's message says what was wrong, where, and what to do)
or one of the interpreter's own (CraspError, TaskError, SearchError). Every entry point runs its
body inside `command_boundary()`:

    the experiment scripts      crasplab.cli.experiment.run_experiment (through run_from_flags)
    the training worker         python -m crasplab.train.workers (its `__main__` block)
    python -m crasp compile     crasplab.compiler.command.run

Ctrl-C (SIGINT) and `kill` (SIGTERM) end a command with one line and exit 130 or 143, after the
`finally` blocks of the interrupted code have run: a length_gen run records its invocation as
unfinished, with its wall time. (A SIGKILL runs nothing; that invocation's time is not recorded.)
An OSError that no code below turned into a LabError (a path that is missing, read-only or on a
full disk) is one line too, naming the path. A bug (any other exception) still shows its
traceback: it is for the lab to fix, not the user.
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
from collections.abc import Iterator

from crasp.expr import CraspError
from crasp.search.options import SearchError
from crasp.tasks import TaskError

EXIT_INTERRUPTED, EXIT_TERMINATED = 130, 143


class LabError(Exception):
    """An error the user can act on: its message names what was wrong, where, and what to do."""


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the process was so that it stops as it does on Ctrl-C (every `finally`
    runs; code that keeps its state on a KeyboardInterrupt keeps it on a kill too)."""


USER_ERRORS = (LabError, CraspError, TaskError, SearchError)


def _terminate(signum, frame) -> None:
    raise Terminated()


@contextlib.contextmanager
def command_boundary() -> Iterator[None]:
    """Run a command's body: a user error becomes SystemExit("error: ..."), an interruption one
    line on stderr and SystemExit(130) (Ctrl-C) or SystemExit(143) (SIGTERM)."""
    in_main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _terminate) if in_main_thread else None
    try:
        yield
    except USER_ERRORS as error:
        raise SystemExit(f"error: {error}") from None
    except OSError as error:  # what the machine says of a path (missing, read-only, full): the user's to fix
        where = f"{error.filename}: " if error.filename else ""
        raise SystemExit(
            f"error: {where}{error.strerror or error} ({type(error).__name__}); check that path (it exists, "
            "it is writable, its disk has room) or give another"
        ) from None
    except KeyboardInterrupt as interruption:
        terminated = isinstance(interruption, Terminated)
        print(
            f"{'terminated (SIGTERM)' if terminated else 'interrupted (Ctrl-C)'}: the files written so far are "
            "kept; a run resumes when the same command runs again",
            file=sys.stderr,
        )
        raise SystemExit(EXIT_TERMINATED if terminated else EXIT_INTERRUPTED) from None
    finally:
        if in_main_thread:
            signal.signal(signal.SIGTERM, previous)
