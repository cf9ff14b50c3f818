"""Run folders and their files: a changed command is refused, files are never torn, and every
file the lab reads back gets an error that names it."""

import errno
import json
import os
import re
import socket
import subprocess
import sys
from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crasplab.records import files, run_folder
from crasplab.records.files import (
    ResultFileError,
    append_jsonl,
    read_jsonl,
    remove_stale_temporaries,
    write_json,
    write_jsonl,
)
from crasplab.records.run_folder import (
    RunFolderError,
    holding_run_folders,
    open_run_folder,
    read_run_config,
    read_run_settings,
)
from crasplab.records.settings import Settings, SettingsError

SETTINGS = dict(pe="ape", tasks=["UF"], seeds=[0, 1], threshold=0.9, bins=((1, 10), (11, 20)))


def test_a_new_folder_gets_the_settings_and_the_same_command_resumes_it(tmp_path):
    open_run_folder(tmp_path / "run", SETTINGS)
    open_run_folder(tmp_path / "run", SETTINGS)  # tuples and lists compare as the file stores them
    assert json.loads((tmp_path / "run" / "config.json").read_text())["bins"] == [[1, 10], [11, 20]]


def test_a_changed_setting_is_refused_and_named_with_both_values_unless_it_may_change(tmp_path):
    open_run_folder(tmp_path, SETTINGS)
    with pytest.raises(RunFolderError) as refused:
        open_run_folder(tmp_path, dict(SETTINGS, tasks=["UB"], seeds=[0]))
    assert 'different settings (seeds: [0, 1] in the folder, [0] now; tasks: ["UF"] in the folder, ["UB"] now)' in str(
        refused.value
    )
    open_run_folder(tmp_path, dict(SETTINGS, threshold=0.5), may_change=("threshold",))
    assert json.loads((tmp_path / "config.json").read_text())["threshold"] == 0.5


def test_a_changed_setting_inside_a_group_is_named_by_its_dotted_path(tmp_path):
    """A job's settings nest (train, model): the refusal names the field, not the group."""
    nested = dict(SETTINGS, train=dict(max_steps=300, lr=0.001), model=dict(d_model=16))
    open_run_folder(tmp_path, nested)
    with pytest.raises(RunFolderError) as refused:
        open_run_folder(tmp_path, dict(nested, train=dict(max_steps=400, lr=0.001, warmup=5)))
    assert "(train.max_steps: 300 in the folder, 400 now; train.warmup: absent in the folder, 5 now)" in str(
        refused.value
    )


@pytest.mark.parametrize("content", [b"[1, 2]", b"\xff\xfe binary", b"{not json"])
def test_a_config_that_is_not_settings_is_refused_with_its_path(tmp_path, content):
    (tmp_path / "config.json").write_bytes(content)
    with pytest.raises(RunFolderError, match="unreadable config.json"):
        open_run_folder(tmp_path, SETTINGS)
    with pytest.raises(RunFolderError, match="config.json is not the settings of a run of the test"):
        read_run_config(tmp_path, ("pe",), "the test")


def test_a_folder_without_a_run_and_an_out_that_is_a_file_are_refused(tmp_path):
    with pytest.raises(RunFolderError, match="holds no run: it has no config.json"):
        read_run_config(tmp_path, ("pe",), "the test")
    (tmp_path / "file").write_text("")
    with pytest.raises(RunFolderError, match="file is a file"):
        open_run_folder(tmp_path / "file", SETTINGS)


@settings(max_examples=30, deadline=None)
@given(
    records=st.lists(st.dictionaries(st.text(max_size=5), st.integers() | st.text(max_size=5), max_size=3), max_size=5),
    cut=st.integers(1, 40),
)
def test_a_torn_last_line_is_skipped_and_the_next_append_starts_a_line_of_its_own(tmp_path_factory, records, cut):
    path = tmp_path_factory.mktemp("jsonl") / "metrics.jsonl"
    write_jsonl(path, records)
    append_jsonl(path, {"last": "x" * 50})
    whole = path.read_bytes()
    path.write_bytes(whole[: len(whole) - cut])  # a writer killed during its last append
    kept = records + ([{"last": "x" * 50}] if cut == 1 else [])  # with only its newline lost, the record is whole
    assert read_jsonl(path) == kept
    append_jsonl(path, {"next": 1})  # a rerun's first record: never glued onto the torn line
    assert read_jsonl(path) == kept + [{"next": 1}]


def test_a_corrupt_line_in_the_middle_names_the_file_and_line(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 1}\n{"step": oops}\n{"step": 3}\n')
    with pytest.raises(ResultFileError, match="metrics.jsonl:2: not a JSON record"):
        read_jsonl(path)


# --- one process per run folder ---------------------------------------------------------------------

HOLD_THE_LOCK = (
    "import sys; from crasplab.records.run_folder import lock_run_folder; lock_run_folder(sys.argv[1]); "
    "print('locked', flush=True); sys.stdin.read()"
)


def test_a_second_process_on_a_run_folder_is_refused_until_the_first_ends(tmp_path):
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_THE_LOCK, str(tmp_path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout.readline() == "locked\n"
        with pytest.raises(RunFolderError, match=f"^{re.escape(str(tmp_path))} is in use by another process"):
            open_run_folder(tmp_path, SETTINGS)
        assert not (tmp_path / "config.json").exists()
    finally:
        holder.communicate("")  # ends the holder, which releases its lock
    with holding_run_folders():
        open_run_folder(tmp_path, SETTINGS)
        open_run_folder(tmp_path, SETTINGS)  # the same process may open its folder again (a resume)
    assert (tmp_path / "config.json").exists()


# --- temporaries left by killed writers ----------------------------------------------------------------

WRITE_FOREVER = (
    "import sys, time; from crasplab.records.files import atomic_write; "
    "atomic_write(sys.argv[1], lambda f: (f.write(b'x' * 4096), f.flush(), print('writing', flush=True), "
    "time.sleep(600)))"
)


def test_a_temporary_left_by_a_writer_killed_mid_write_is_removed_on_the_next_start(tmp_path):
    with holding_run_folders():
        open_run_folder(tmp_path, SETTINGS)  # the run that the writer below belongs to
    target = tmp_path / "task" / "seed0" / "checkpoint.npz"
    writer = subprocess.Popen([sys.executable, "-c", WRITE_FOREVER, str(target)], stdout=subprocess.PIPE, text=True)
    assert writer.stdout.readline() == "writing\n"
    writer.kill()  # kill -9 in the middle of the write
    writer.wait()
    (orphan,) = target.parent.glob(".*.tmp")
    host = socket.gethostname().replace(".", "-")
    assert orphan.name.startswith(f".checkpoint.npz.{host}.{writer.pid}.") and not target.exists()
    live = tmp_path / f".results.jsonl.{host}.{os.getpid()}.abcd1234.tmp"  # a write in progress in a live process
    remote = tmp_path / f".results.jsonl.other-host.{writer.pid}.abcd1234.tmp"  # its process cannot be looked up
    for kept in (live, remote):
        kept.write_text("")
    with holding_run_folders():
        open_run_folder(tmp_path, SETTINGS)
    assert not orphan.exists() and live.exists() and remote.exists()
    assert remove_stale_temporaries(tmp_path) == []


# --- folders that cannot be written --------------------------------------------------------------------


def _read_only(*args, **kwargs):
    raise PermissionError(errno.EACCES, "Permission denied")


def test_a_read_only_folder_is_an_error_naming_the_file_not_a_traceback(tmp_path, monkeypatch):
    monkeypatch.setattr(files.tempfile, "mkstemp", _read_only)
    with pytest.raises(
        ResultFileError,
        match=f"^cannot write {re.escape(str(tmp_path))}/summary.json: Permission denied; make its folder writable",
    ):
        write_json(tmp_path / "summary.json", {})
    with pytest.raises(RunFolderError, match="cannot write .*config.json: Permission denied"):
        with holding_run_folders():
            open_run_folder(tmp_path, SETTINGS)
    monkeypatch.setattr(run_folder, "open", _read_only, raising=False)
    with pytest.raises(RunFolderError, match="cannot write .*\\.lock: Permission denied"):
        open_run_folder(tmp_path / "new", SETTINGS)


# --- config.json edited by hand ------------------------------------------------------------------------


@dataclass(frozen=True)
class ToySettings(Settings):
    tasks: tuple[str, ...] = ("UF",)
    seed: int = 0
    threshold: float = 0.9
    batch_size: int = 4

    RESULTS_UNCHANGED = ("batch_size",)

    def check(self) -> None:
        self.require(0 <= self.threshold <= 1, "threshold", "a number from 0 to 1")


@pytest.mark.parametrize(
    "edit, message",
    [
        (
            lambda c: c.pop("seed"),
            "is not the settings of a run of the toy \\(a JSON object with tasks, seed, threshold\\)",
        ),
        (lambda c: c.update(tasks="UF"), "setting tasks = 'UF' is not accepted; expected a list"),
        (lambda c: c.update(threshold="high"), "setting threshold = 'high' is not accepted; expected a finite number"),
        (lambda c: c.update(threshold=2), "setting threshold = 2.0 is not accepted; expected a number from 0 to 1"),
        (lambda c: c.update(seed=True), "setting seed = True is not accepted; expected an integer"),
        (lambda c: c.update(tasks=["UF", "UF"]), 'setting tasks = \\["UF", "UF"\\] lists UF more than once'),
    ],
    ids=["missing-seed", "tasks-a-string", "threshold-a-word", "threshold-out-of-range", "seed-a-boolean", "repeated"],
)
def test_a_hand_edited_config_is_refused_naming_the_setting(tmp_path, edit, message):
    config = ToySettings().to_dict()
    del config["batch_size"]  # a setting that does not change the numbers may be absent (older runs)
    recorded = read_run_settings(_with_config(tmp_path, config), ToySettings, "the toy")
    assert recorded.settings == ToySettings() and recorded.written == config and recorded.facts == {}
    edit(config)
    with pytest.raises(RunFolderError, match=message):
        read_run_settings(_with_config(tmp_path, config), ToySettings, "the toy")


def _with_config(folder, config: dict):
    (folder / "config.json").write_text(json.dumps(config))
    return folder


@given(lengths=st.lists(st.integers(1, 9), min_size=1, max_size=6))
def test_a_list_setting_is_accepted_exactly_when_no_value_repeats(lengths):
    @dataclass(frozen=True)
    class Lengths(Settings):
        lengths: tuple[int, ...] = (1,)

    if len(set(lengths)) == len(lengths):
        assert Lengths(lengths=lengths).lengths == tuple(lengths)  # a JSON list comes back as a tuple
    else:
        with pytest.raises(SettingsError, match="more than once; give each value once"):
            Lengths(lengths=lengths)


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -float("inf"), "0.5", None])
def test_a_float_setting_must_be_a_finite_number(value):
    with pytest.raises(SettingsError, match="expected a finite number"):
        ToySettings(threshold=value)
