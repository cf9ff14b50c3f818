"""Nothing is replaced without asking (issue 61 E): every command that writes where the user says is
listed here, and each file it writes goes through crasp.output_files (each folder through
check_output_folder or check_new_folder): a link, a fifo or a folder at the path is refused and left
as it was, an existing file is replaced only with --overwrite."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from crasp.__main__ import main as crasp_main
from crasp.output_files import OutputFileError, check_output_file, write_output_file
from tests.tiny import ROOT

# (source file, flag): every flag of a command that names a file it writes ...
FILE_WRITERS = {
    ("crasp/search/command.py", "--save"),
    ("crasp/__main__.py", "--plot"),
    ("benchmarks/device_throughput.py", "--json"),
}
# ... and every flag that names a folder it writes into (a run folder, resumed only by its own
# command: check_output_folder; or a new one: check_new_folder).
FOLDER_WRITERS = {
    ("crasplab/cli/arguments.py", "--out"),
    ("crasplab/compiler/command.py", "--out"),
    ("crasplab/export.py", "--out"),
    ("experiments/paper_grid.py", "--out"),
    ("benchmarks/gpu_run.py", "--out"),
    ("benchmarks/gpu_run.py", "--into"),
    ("benchmarks/paper_preset_dtypes.py", "--out"),
    ("experiments/calibration/rebuild_kept.py", "--into"),
}
OUTPUT_FLAG = re.compile(r"add_argument\(\s*(?:[A-Z_]+,\s*)?\"(--(?:out|save|plot|json|into|output|dest)[a-z-]*)\"")


def test_every_flag_that_names_an_output_is_listed_here():
    found = set()
    for folder in ("crasp", "crasplab", "experiments", "benchmarks"):
        for path in (ROOT / folder).rglob("*.py"):
            found |= {(str(path.relative_to(ROOT)), flag) for flag in OUTPUT_FLAG.findall(path.read_text())}
    assert found == FILE_WRITERS | FOLDER_WRITERS


@pytest.fixture(params=["file", "link", "fifo"])
def occupied(request, tmp_path) -> Path:
    """A path that holds something: a file of the user's, a link to one, or a fifo (a device is not
    made here: a regression would replace it, as the probe replaced /dev/full)."""
    path, mine = tmp_path / "out.crasp", tmp_path / "mine.txt"
    mine.write_text("mine")
    if request.param == "file":
        path.write_text("mine")
    elif request.param == "link":
        path.symlink_to(mine)
    else:
        os.mkfifo(path)
    return path


def _as_it_was(path: Path) -> tuple:
    info = os.lstat(path)
    return info.st_mode, info.st_ino, path.read_text() if path.is_file() and not path.is_symlink() else None


def test_a_program_found_by_search_is_not_saved_over_anything_without_asking(occupied, capsys):
    """The probe: `crasp search --save PATH` replaced a program, a link, even /dev/full as root."""
    before = _as_it_was(occupied)
    code = crasp_main(["search", "Majority", "--no-progress", "--save", str(occupied)])
    assert code != 0 and _as_it_was(occupied) == before
    error = capsys.readouterr().err.strip()
    kind = "exists; give --overwrite" if occupied.is_file() and not occupied.is_symlink() else "the lab writes only"
    assert error.startswith("error: --save ") and kind in error and len(error.splitlines()) == 1


def test_overwrite_replaces_a_regular_file_and_nothing_else(tmp_path):
    path = tmp_path / "program.crasp"
    path.write_text("old")
    write_output_file(check_output_file(path, "--save", overwrite=True), "--save", lambda f: f.write(b"new"), True)
    assert path.read_text() == "new"
    link = tmp_path / "link.crasp"
    link.symlink_to(path)
    with pytest.raises(OutputFileError, match="is a symbolic link"):
        check_output_file(link, "--save", overwrite=True)
    with pytest.raises(OutputFileError, match="is not a regular file"):
        check_output_file("/dev/null", "--save", overwrite=True)


def test_a_path_taken_while_the_command_worked_is_not_replaced(tmp_path):
    """The check runs again right before the write: a search takes minutes."""
    path = check_output_file(tmp_path / "program.crasp", "--save")
    path.write_text("written meanwhile")
    with pytest.raises(OutputFileError, match="exists; give --overwrite"):
        write_output_file(path, "--save", lambda f: f.write(b"new"))
    assert path.read_text() == "written meanwhile"


def test_a_trace_picture_is_not_drawn_over_a_file_without_asking(tmp_path, capsys):
    picture = tmp_path / "trace.png"
    picture.write_text("mine")
    argv = ["run", "majority", "--input", "<bos> a b a", "--plot", str(picture)]
    assert crasp_main(argv) != 0 and picture.read_text() == "mine"
    assert "error: --plot" in capsys.readouterr().err
    assert crasp_main([*argv, "--overwrite"]) == 0 and picture.read_bytes().startswith(b"\x89PNG")


def test_the_benchmark_refuses_an_existing_json_before_it_measures(tmp_path):
    numbers = tmp_path / "throughput.json"
    numbers.write_text("mine")
    command = [sys.executable, "benchmarks/device_throughput.py", "--json", str(numbers)]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 1 and numbers.read_text() == "mine"
    assert done.stderr.strip().splitlines()[-1].startswith(f"error: --json {numbers}: exists; give --overwrite")
