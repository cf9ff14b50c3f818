"""A run records what decides its bits, and its report says when its jobs ran under different
machines or versions (whose numbers for the same seed need not be equal)."""

import hashlib
import json
import os
import shutil
import subprocess

import pytest

from crasplab.records.job_folder import EvalRecord, JobRecords
from crasplab.reports.length_gen import commits_markdown, environments, environments_markdown, job_commits
from crasplab.train.loop import Job, run_stack
from crasplab.train.provenance import (
    RUN_COMMIT_ENV,
    SOURCE_MANIFEST_FILE,
    UncommittedLabError,
    bits_key,
    cpu_description,
    lab_commit,
    provenance,
    require_committed_lab,
    require_run_commit,
    training_at,
    uncommitted_lab_files,
    write_source_manifest,
)
from tests.tiny import TINY_MODEL, tiny_config

CPUINFO = """processor\t: 0
model name\t: Example CPU @ 2.00GHz
flags\t\t: sse2 avx2 fma avx512f

processor\t: 1
model name\t: Another CPU
flags\t\t: sse2
"""


def test_the_first_processors_model_and_flags_are_read():
    cpu = cpu_description(CPUINFO)
    assert cpu["model"] == "Example CPU @ 2.00GHz"
    assert cpu["flags"] == ["avx2", "avx512f", "fma", "sse2"]
    assert cpu_description(CPUINFO.replace("fma ", ""))["flags_sha256"] != cpu["flags_sha256"]


def test_jobs_are_grouped_by_what_decides_their_bits():
    here = provenance()
    other_cpu = dict(here, cpu=cpu_description(CPUINFO))
    jobs = [
        JobRecords("UL", 0, (EvalRecord(500, ()),), (dict(here, from_step=0),), None),
        JobRecords("UR", 0, (), (dict(here, from_step=0), dict(other_cpu, from_step=500)), None),  # resumed elsewhere
    ]
    groups = environments(jobs)
    assert bits_key(here) != bits_key(other_cpu)
    assert [group["jobs"] for group in groups] == [[("UL", 0), ("UR", 0)], [("UR", 0)]]
    assert "2 environments" in environments_markdown(groups)
    assert "unknown" in environments_markdown([])


def _git(repo, *args):
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)


def _lab_checkout(tmp_path):
    """A committed checkout with one module of the lab's code and one document."""
    repo = tmp_path / "lab"
    (repo / "crasp").mkdir(parents=True)
    (repo / "crasp" / "tasks.py").write_text("X = 1\n")
    (repo / "README.md").write_text("the lab\n")
    _git(repo, "init", "-q")
    _git(repo, "add", ".")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "lab")
    return repo


def test_a_protocol_run_starts_only_from_committed_code(tmp_path):
    repo = _lab_checkout(tmp_path)
    head = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True).stdout
    assert require_committed_lab(source=repo) == head.strip()
    # documents and the run's own folder do not decide its numbers
    (repo / "README.md").write_text("edited\n")
    (repo / "experiments" / "run").mkdir(parents=True)
    (repo / "experiments" / "run" / "config.json").write_text("{}")
    assert require_committed_lab(repo / "experiments" / "run", source=repo) == head.strip()
    # an edited module, and a new one, do
    (repo / "crasp" / "tasks.py").write_text("X = 2\n")
    (repo / "crasp" / "new.py").write_text("Y = 1\n")
    assert {"crasp/new.py", "crasp/tasks.py"} <= set(uncommitted_lab_files(repo))
    with pytest.raises(UncommittedLabError, match="crasp/tasks.py"):
        require_committed_lab(source=repo)
    # a run folder inside the lab's code counts unless it is the run's own
    assert "experiments/run/config.json" in uncommitted_lab_files(repo)
    assert "experiments/run/config.json" not in uncommitted_lab_files(repo, repo / "experiments" / "run")


def test_a_copy_without_git_knows_its_commit_from_the_manifest_and_refuses_a_changed_file(tmp_path):
    """As on a lent GPU: the files travel, .git does not; lab-source.json, written in the committed
    checkout, names the commit, and any code file that differs from it is refused."""
    repo = _lab_checkout(tmp_path)
    head = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True).stdout
    (repo / "crasp" / "scratch.py").write_text("Z = 1\n")
    with pytest.raises(UncommittedLabError, match="crasp/scratch.py"):
        write_source_manifest(repo)  # only from committed code
    (repo / "crasp" / "scratch.py").unlink()
    assert write_source_manifest(repo)["files"].keys() == {"crasp/tasks.py"}
    copy = tmp_path / "copy"
    shutil.copytree(repo, copy, ignore=shutil.ignore_patterns(".git"))
    assert require_committed_lab(source=copy) == head.strip() == lab_commit(copy)
    (copy / "crasp" / "tasks.py").write_text("X = 3\n")
    (copy / "crasp" / "added.py").write_text("Y = 1\n")
    assert uncommitted_lab_files(copy) == ["crasp/tasks.py", "crasp/added.py"]
    assert lab_commit(copy) == head.strip() + "+changes"
    with pytest.raises(UncommittedLabError, match="crasp/tasks.py, crasp/added.py"):
        require_committed_lab(source=copy)
    # a copy whose .git is older than its files: git decides, and the manifest that disagrees is refused
    stale = tmp_path / "stale"
    shutil.copytree(repo, stale)
    (repo / "crasp" / "tasks.py").write_text("X = 4\n")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qam", "newer")
    newer = write_source_manifest(repo)["commit"]
    for name in ("crasp/tasks.py", SOURCE_MANIFEST_FILE):
        shutil.copy(repo / name, stale / name)
    disagrees = f"names commit {newer}.*git says this checkout is at {head.strip()}"
    for call in (lab_commit, uncommitted_lab_files, lambda source: require_committed_lab(source=source)):
        with pytest.raises(UncommittedLabError, match=disagrees):
            call(stale)
    (copy / SOURCE_MANIFEST_FILE).write_text("[]")
    with pytest.raises(UncommittedLabError, match="not the manifest"):
        lab_commit(copy)


def test_a_forged_manifest_in_a_checkout_does_not_hide_an_edited_file(tmp_path):
    """The probe: an edited file, and a lab-source.json naming HEAD with the digests of the files as
    they are (written by hand, or left by another copy). git decides: the edit is seen, and the
    manifest that disagrees is an error; --prepare refuses the edited checkout whatever the file says."""
    repo = _lab_checkout(tmp_path)
    head = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    (repo / "crasp" / "tasks.py").write_text("X = 2  # edited\n")
    forged = dict(commit=head, files={"crasp/tasks.py": hashlib.sha256(b"X = 2  # edited\n").hexdigest()})
    (repo / SOURCE_MANIFEST_FILE).write_text(json.dumps(forged))
    for call in (lab_commit, uncommitted_lab_files, lambda source: require_committed_lab(source=source)):
        with pytest.raises(UncommittedLabError, match="git says this checkout is at .* with changes to crasp/tasks.py"):
            call(repo)
    with pytest.raises(UncommittedLabError, match="uncommitted changes to crasp/tasks.py"):
        write_source_manifest(repo)
    (repo / SOURCE_MANIFEST_FILE).unlink()
    assert lab_commit(repo) == head + "+changes"


@pytest.mark.parametrize("commit", ["hello", "", "A" * 40, "0" * 39, 7])
def test_a_manifest_commit_is_forty_hex_digits(tmp_path, commit):
    copy = tmp_path / "copy"
    (copy / "crasp").mkdir(parents=True)
    (copy / "crasp" / "tasks.py").write_text("X = 1\n")
    (copy / SOURCE_MANIFEST_FILE).write_text(json.dumps(dict(commit=commit, files={})))
    with pytest.raises(UncommittedLabError, match="a commit of 40 hex digits"):
        lab_commit(copy)


def test_a_protocol_run_refuses_a_folder_that_is_no_checkout(tmp_path):
    with pytest.raises(UncommittedLabError, match="not a git checkout"):
        require_committed_lab(source=tmp_path)


def test_a_report_names_the_commits_that_trained_its_jobs():
    jobs = [
        JobRecords("UF", 1, (EvalRecord(500, ()),), (dict(lab_commit="abc", from_step=0),), None),
        JobRecords(
            "UF", 2, (), (dict(lab_commit="abc", from_step=0), dict(lab_commit="def+changes", from_step=500)), None
        ),  # resumed
    ]
    commits = job_commits(jobs)
    assert commits == {"abc": [["UF", 1], ["UF", 2]], "def+changes": [["UF", 2]]}
    text = commits_markdown(commits)
    assert "- abc: UF seeds 1, 2" in text
    assert "- def+changes (uncommitted changes: no commit holds the code): UF seed 2" in text


def test_each_stack_of_a_protocol_run_starts_only_on_the_commit_the_run_started_from(tmp_path):
    """A worker started late in a run imports the code as it is then: it refuses to train when that
    is no longer the run's code, edited or committed since (a commit of documents alone changes
    nothing it runs)."""
    repo = _lab_checkout(tmp_path)
    head = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    require_run_commit(source=repo)  # outside a protocol run: nothing to check
    with training_at(head):
        require_run_commit(source=repo)
        (repo / "README.md").write_text("edited\n")  # documents do not decide the numbers
        require_run_commit(source=repo)
        (repo / "crasp" / "tasks.py").write_text("X = 2\n")
        with pytest.raises(UncommittedLabError, match=f"started at commit {head}.*uncommitted"):
            require_run_commit(source=repo)
        (repo / "crasp" / "tasks.py").write_text("X = 1\n")
        _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-am", "documents only")
        require_run_commit(source=repo)  # a new commit, the same code
        (repo / "crasp" / "tasks.py").write_text("X = 2\n")
        _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-am", "edit")
        with pytest.raises(
            UncommittedLabError, match=f"started at commit {head}, and the lab's code is now [0-9a-f]{{40}}"
        ):
            require_run_commit(source=repo)
    assert RUN_COMMIT_ENV not in os.environ


def test_a_stack_refuses_to_train_on_another_commit_than_its_runs_before_writing_anything(tmp_path):
    job = Job(
        "UF", 0, TINY_MODEL, tiny_config(), task_overrides=dict(alphabet_size=8), out_dir=str(tmp_path / "UF" / "seed0")
    )
    with training_at("0" * 40), pytest.raises(UncommittedLabError, match="started at commit 0000"):
        run_stack([job])
    assert not (tmp_path / "UF" / "seed0" / "metrics.jsonl").exists()
