"""Crafted archives against crasplab.records.archives: each is refused with an ArchiveError naming
the archive and the member, and nothing is written outside the target folder, nor left in it.
The rules are the lab's own, not tarfile's filters, so this suite holds on every Python the lab
supports (it imports nothing but the module and numpy-only crasp)."""

from __future__ import annotations

import gzip
import io
import tarfile
import time
from pathlib import Path

import pytest

from crasplab.records.archives import ArchiveError, Limits, extracted, member_path


def _member(name: str, kind: bytes = tarfile.REGTYPE, data: bytes = b"", **fields) -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.size = len(data) if kind == tarfile.REGTYPE else 0
    for key, value in fields.items():
        setattr(info, key, value)
    return info, data


def _archive(path: Path, members: list[tuple[tarfile.TarInfo, bytes]]) -> Path:
    with tarfile.open(path, "w:gz", format=tarfile.PAX_FORMAT) as tar:
        for info, data in members:
            tar.addfile(info, io.BytesIO(data) if info.isreg() else None)
    return path


@pytest.fixture
def places(tmp_path):
    """The target folder, and a folder outside it that a crafted archive aims at."""
    target, outside = tmp_path / "runs", tmp_path / "outside"
    outside.mkdir()
    return target, outside


def _refused(archive: Path, target: Path, outside: Path, match: str, limits: Limits = Limits()) -> None:
    with pytest.raises(ArchiveError, match=match):
        with extracted(archive, target, limits):
            pytest.fail("a refused archive reached the block")
    assert list(outside.iterdir()) == [], "something was written outside the target"
    assert not target.exists() or list(target.iterdir()) == [], "the scratch folder was left behind"


def test_an_archive_of_files_and_folders_extracts_as_it_was_packed(tmp_path, places):
    target, _ = places
    archive = _archive(
        tmp_path / "runs.tar.gz",
        [_member("run", tarfile.DIRTYPE), _member("run/config.json", data=b"{}"), _member("./run/a/b.txt", data=b"x")],
    )
    with extracted(archive, target) as scratch:
        assert scratch.parent == target
        files = sorted(str(p.relative_to(scratch)) for p in scratch.rglob("*") if p.is_file())
        assert files == ["run/a/b.txt", "run/config.json"]
        assert (scratch / "run/a/b.txt").read_bytes() == b"x"
    assert list(target.iterdir()) == []


@pytest.mark.parametrize(
    "name",
    ["/{outside}/evil", "../outside/evil", "run/../../outside/evil", "run/..", "..", "run\\..\\evil", ".", "./"],
)
def test_a_path_that_is_absolute_climbs_out_or_names_nothing_is_refused(tmp_path, places, name):
    target, outside = places
    archive = _archive(tmp_path / "runs.tar.gz", [_member(name.format(outside=outside), data=b"evil")])
    _refused(archive, target, outside, "is refused")


@pytest.mark.parametrize(
    "link",
    [
        dict(name="run/out", kind=tarfile.SYMTYPE, linkname="{outside}"),  # symbolic link out
        dict(name="run/out", kind=tarfile.SYMTYPE, linkname="../../outside"),  # symbolic link out, relative
        dict(name="run/in", kind=tarfile.SYMTYPE, linkname="config.json"),  # symbolic link in
        dict(name="run/loop", kind=tarfile.SYMTYPE, linkname="."),  # a link to its own folder
        dict(name="run/hard-out", kind=tarfile.LNKTYPE, linkname="{outside}/victim"),  # hard link out
        dict(name="run/hard-in", kind=tarfile.LNKTYPE, linkname="run/config.json"),  # hard link in
    ],
)
def test_links_in_and_out_are_refused_before_anything_is_written_through_them(tmp_path, places, link):
    target, outside = places
    members = [
        _member("run/config.json", data=b"{}"),
        _member(link["name"], link["kind"], linkname=link["linkname"].format(outside=outside)),
        _member(f"{link['name']}/evil", data=b"evil"),  # what would be written through the link
        _member(f"{link['name']}/{link['name']}/evil", data=b"evil"),  # and through a loop
    ]
    _refused(_archive(tmp_path / "runs.tar.gz", members), target, outside, "link; the lab reads only regular files")


@pytest.mark.parametrize(
    "kind, said", [(tarfile.CHRTYPE, "a device"), (tarfile.BLKTYPE, "a device"), (tarfile.FIFOTYPE, "a fifo")]
)
def test_devices_and_fifos_are_refused(tmp_path, places, kind, said):
    target, outside = places
    archive = _archive(tmp_path / "runs.tar.gz", [_member("run/full", kind, devmajor=1, devminor=7)])
    _refused(archive, target, outside, said)


def test_a_member_claiming_ten_gigabytes_is_refused_from_its_header_alone(tmp_path, places):
    """The header claims 10 GB; the archive holds 10 bytes of it. Nothing is read or written."""
    target, outside = places
    header = tarfile.TarInfo("run/huge.bin")
    header.size = 10 * 1000**3
    archive = tmp_path / "runs.tar.gz"
    archive.write_bytes(gzip.compress(header.tobuf(tarfile.PAX_FORMAT) + b"0123456789"))
    start = time.monotonic()
    _refused(archive, target, outside, "10000000000 bytes, more than the 1073741824")
    assert time.monotonic() - start < 30  # not a timing of the lab: a read of 10 GB would never end here


def test_a_bomb_is_refused_by_size_before_it_is_decompressed(tmp_path, places):
    """64 MB of zeros in a 64 KB archive, read under a cap of 1 MB."""
    target, outside = places
    archive = _archive(tmp_path / "runs.tar.gz", [_member("run/zeros", data=bytes(64 * 1024**2))])
    assert archive.stat().st_size < 1024**2
    _refused(archive, target, outside, "more than the 1048576 the lab reads back", Limits(max_bytes=1024**2))


def test_a_bomb_of_members_is_refused_by_their_count(tmp_path, places):
    target, outside = places
    members = [_member(f"run/{i}", data=b"") for i in range(101)]
    _refused(_archive(tmp_path / "runs.tar.gz", members), target, outside, "more than 100 members", Limits(100))


def test_a_path_that_comes_twice_is_refused(tmp_path, places):
    target, outside = places
    archive = _archive(tmp_path / "runs.tar.gz", [_member("run/a", data=b"1"), _member("run/./a", data=b"2")])
    _refused(archive, target, outside, "comes twice")


@pytest.mark.parametrize(
    "content",
    [b"", b"not an archive", gzip.compress(b"not a tar" * 100), "truncated"],
    ids=["empty", "not gzip", "gzip of no tar", "truncated"],
)
def test_a_file_that_is_not_a_whole_archive_is_one_error(tmp_path, places, content):
    target, outside = places
    archive = tmp_path / "runs.tar.gz"
    if content == "truncated":
        whole = _archive(tmp_path / "whole.tar.gz", [_member("run/a", data=bytes(range(256)) * 400)]).read_bytes()
        content = whole[: len(whole) // 2]
    archive.write_bytes(content)
    _refused(archive, target, outside, "is not a whole gzip-compressed tar")


def test_a_folder_or_a_missing_file_is_not_an_archive(tmp_path, places):
    target, outside = places
    _refused(tmp_path, target, outside, "is not a file")


@pytest.mark.parametrize("name", ["run/a", "run/./a", "run//a", "./run/a/"])
def test_names_normalize_to_one_relative_path(name):
    assert str(member_path(name)) == "run/a"
