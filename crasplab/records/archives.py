"""Archives the lab reads back (benchmarks/gpu_run.py's runs.tar.gz), checked member by member.

tarfile's extraction filters are not relied on: the Python the lab supports (3.11 from 3.11.4 on)
had bypasses of filter="data" fixed only in later patch releases (CVE-2025-4517 and its siblings),
and a crafted archive wrote outside its target through them. Here every member is checked before
a byte of it is written, by rules that do not depend on the Python:

- a regular file or a folder; a link (symbolic or hard), a device, a fifo is refused;
- its name relative, without `..`, and unique once normalized (`a/./b` and `a/b` are one name);
- the archive holds at most `max_members` members and `max_bytes` bytes in all, counted from the
  headers before anything is read, and again from what is read.

The members are written into a fresh scratch folder that holds nothing else (so no link can be
there to follow), created beside the target so that what is taken from it moves into place with
a rename on the same file system. Anything wrong is an ArchiveError naming the archive, the
member and what is accepted; the scratch folder is then removed.
"""

from __future__ import annotations

import contextlib
import gzip
import os
import shutil
import tarfile
import tempfile
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from crasplab.errors import LabError

# What one runs.tar.gz of the lab holds is far below both: a run's finished jobs without their
# checkpoints are a few megabytes in a few hundred files (the largest kept run, evidence/trials,
# is 8 MB in all).
MAX_MEMBERS = 100_000
MAX_BYTES = 1024**3
_CHUNK = 1 << 20
# What a file that is not a whole gzip-compressed tar raises while it is read.
_UNREADABLE = (tarfile.TarError, EOFError, zlib.error, gzip.BadGzipFile)


class ArchiveError(LabError, ValueError):
    """An archive that is not one the lab can read safely: unreadable, or with a member refused."""


@dataclass(frozen=True)
class Limits:
    """The most an archive may hold: members, and bytes in all."""

    max_members: int = MAX_MEMBERS
    max_bytes: int = MAX_BYTES


def member_path(name: str) -> PurePosixPath:
    """A member's name as a path relative to the target, normalized; ValueError (saying why) for
    a name that is absolute, climbs out with `..`, or names nothing."""
    if name.startswith("/") or "\\" in name or "\0" in name:
        raise ValueError("an absolute path, or one with a backslash or a NUL (the lab writes relative POSIX paths)")
    parts = [part for part in name.split("/") if part not in ("", ".")]
    if ".." in parts:
        raise ValueError("a path with '..' (it could point outside the target folder)")
    if not parts:
        raise ValueError("a name that names no file")
    return PurePosixPath(*parts)


def _member_kind(member: tarfile.TarInfo) -> str:
    for kind, test in (
        ("a symbolic link", member.issym),
        ("a hard link", member.islnk),
        ("a device", lambda: member.ischr() or member.isblk()),
        ("a fifo", member.isfifo),
    ):
        if test():
            return kind
    return "a member of another kind"


@contextlib.contextmanager
def extracted(archive: Path, beside: Path, limits: Limits = Limits()) -> Iterator[Path]:
    """The gzip-compressed tar `archive` extracted, member by member as the module's rules allow,
    into a scratch folder created in `beside` (made if missing); the folder is removed when the
    block ends. What the block takes from it moves into `beside` with a rename."""
    archive, beside = Path(archive), Path(beside)
    if not archive.is_file():
        raise ArchiveError(f"{archive} is not a file; give the runs.tar.gz that benchmarks/gpu_run.py packed")
    beside.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=".unpacking-", dir=beside))
    try:
        _extract(archive, scratch, limits)
        yield scratch
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _extract(archive: Path, scratch: Path, limits: Limits) -> None:
    seen: set[PurePosixPath] = set()
    total = 0
    try:
        with tarfile.open(archive, "r:gz") as tar:
            # tar.next() reads one header at a time: a member is refused before the next is read, so
            # a bomb's count or size stops it before its data are decompressed.
            while (member := tar.next()) is not None:
                where = f"{archive}: member {member.name!r}"
                if len(seen) >= limits.max_members:
                    raise ArchiveError(
                        f"{archive} holds more than {limits.max_members} members, more than the lab packs; "
                        "it is not an archive of the lab's"
                    )
                try:
                    path = member_path(member.name)
                except ValueError as error:
                    raise ArchiveError(f"{where} is refused: {error}") from None
                if path in seen:
                    raise ArchiveError(f"{where} is refused: its path comes twice (the lab packs each file once)")
                seen.add(path)
                if member.isdir():
                    (scratch / path).mkdir(parents=True, exist_ok=True)
                    continue
                if not member.isreg():
                    raise ArchiveError(
                        f"{where} is refused: {_member_kind(member)}; the lab reads only regular files and folders"
                    )
                total += member.size
                if total > limits.max_bytes:
                    raise ArchiveError(
                        f"{where} is refused: with it the archive holds {total} bytes, more than the "
                        f"{limits.max_bytes} the lab reads back"
                    )
                _write_member(tar, member, scratch / path)
    except _UNREADABLE as error:
        raise ArchiveError(
            f"{archive} is not a whole gzip-compressed tar ({type(error).__name__}: {error}); copy it again "
            "from the folder that came back"
        ) from None
    except OSError as error:
        raise ArchiveError(f"cannot extract {archive} into {scratch}: {error.strerror}") from None


def _write_member(tar: tarfile.TarFile, member: tarfile.TarInfo, target: Path) -> None:
    """A regular member's bytes, no more than its header says, into a file created anew
    (O_EXCL and O_NOFOLLOW: nothing already there is written through)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    source = tar.extractfile(member)
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    with os.fdopen(fd, "wb") as out:
        left = member.size
        while left > 0:
            chunk = source.read(min(_CHUNK, left))
            if not chunk:
                raise tarfile.ReadError(f"member {member.name!r} ends before its {member.size} bytes")
            out.write(chunk)
            left -= len(chunk)
