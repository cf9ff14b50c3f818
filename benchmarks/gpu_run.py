"""One prepared command for a GPU lent for a few minutes: the machine and its versions, the tests
marked `device`, the throughput benchmark, then as much of the paper-scale APE protocol as fits,
packed into a few files that come back. Rehearsed on the CPU by the test suite (--rehearse).

A lent GPU machine has no package registry and no git; its image has
every package that training from scratch imports (jax, flax, optax, numpy, matplotlib, tqdm,
pytest, hypothesis; torch and transformers for the Hugging Face side of the benchmark). It lacks
gguf, rapidfuzz and Ray, which training never imports, so no wheel has to travel. Should a
package be missing there, bring its wheel (python3 -m pip download --no-deps --only-binary=:all:
--python-version 3.12 --platform manylinux2014_x86_64 -d .whl NAME==VERSION) and install it before
this script (python3 -m pip install --no-index --no-deps .whl/*.whl).

1. Here, in a committed checkout (a protocol run starts only from committed code):

       python benchmarks/gpu_run.py --prepare

   writes lab-source.json (ignored by git): the commit and a digest of every code file, by which
   the machine, which gets the files but not .git, knows which commit it runs and that nothing
   differs from it.
2. On the GPU machine, from the checkout's root, with lab-source.json carried along:

       python3 -m pip install -q --no-index --no-deps --no-build-isolation -e . && \
       python3 benchmarks/gpu_run.py --out "$OUT"

   One command of at most --minutes (default 8.5, which leaves the install and a margin inside
   the device tool's 10-minute limit: run it with timeout_s=600). Planned parts, with the time
   each may take:
     setup (the install above)                          ~0.3 min
     machine: versions, devices, nvidia-smi             ~0.1 min
     tests marked `device` (tests/test_train_accelerator.py)  at most 2 min
     benchmarks/device_throughput.py (paper preset, float32 and bfloat16: a stack of ten, four
       and eight stacks of five, one model against Hugging Face's)  at most 3.5 min
     benchmarks/paper_preset_dtypes.py (NLFirst and NLLast, 3 seeds, 2000 steps in each dtype
       under the protocol's recipe, and its verdict by the rule it states)  at most 4 min
     the APE protocol at the paper's scale (paper_grid.py --pes ape --samplers paper), every task's
       seeds as one stack, several stacks at once: what is left, less 0.5 min for packing; its
       own time limit 1.25 min before that, for the evaluations that end jobs to complete
   Each part runs in its own process under its own time limit; one that fails or runs out is
   reported and the next part runs. --dtype auto trains in bfloat16 where the dtype check (this
   call's, or an earlier call's on a machine still warm) said bfloat16 trains the same, in float32
   otherwise; a run folder keeps the dtype it started in. --skip tests throughput dtypes gives the
   training all of it, and
   --tasks trains only some tasks (NLFirst NRFirst NLLast NRLast: the Last tasks and their
   controls, four stacks at once), --samplers spread (or paper spread) the spread sampler's run,
   the one where a Last task's 151-200 bin discriminates at these lengths. The protocol's
   discrimination checks run on the CPU cores beside the training, and without progress bars the
   training log has a line per task every 30 s (steps, loss, training-bin accuracy) and one per
   stack started and per seed done.
3. What comes back, in the output folder (8 files):
     summary.md          every part: its command, exit status, wall time; the tests' and the
                         benchmark's tables, the dtype check's verdict; which jobs finished
     machine.json        versions, device, CPU, the lab's commit (lab-source.json's, checked)
     tests.log, throughput.log, throughput.json, dtypes.log, training.log   each part's output
     runs.tar.gz         the run folders (runs/paper/ape-paper): the run's own files and every
                         finished job folder without its checkpoints (a finished job needs none);
                         unfinished jobs are left out and train from the start next time
4. Here again:

       python benchmarks/gpu_run.py --unpack FOLDER_THAT_CAME_BACK --into runs/paper

   adds the finished jobs to the local run folders and rebuilds their reports (crasplab.cli.unpack:
   the archive checked member by member, nothing local removed or changed, a differing local job
   kept and reported as a conflict); the same paper_grid.py command, on this or another GPU, trains the rest. A
   machine still warm from the last call keeps runs/ (ignored by git): the same command there
   resumes the unfinished jobs from their checkpoints (so the 2026-12-04 run's calls 3-5 did).

--rehearse runs all of it on this CPU in about two minutes, on the accelerator's code path
(CRASPLAB_ACCELERATOR_PATH=rehearse) with gguf, rapidfuzz and Ray hidden as on the GPU machine
(tokenizers and safetensors too, from the parts that train from scratch, which must not need them),
the protocol-rehearsal preset and the benchmark's smallest settings: what CI runs so that the
command cannot first fail on the machine it was prepared for.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path

from crasp.tasks import TASK_CODES
from crasplab.cli.arguments import above_zero
from crasplab.errors import LabError, command_boundary
from crasplab.records.files import write_json
from crasplab.records.job_folder import job_folders
from crasplab.records.run_folder import check_new_folder
from crasplab.train.device import ACCELERATOR_PATH_ENV, REHEARSE
from crasplab.train.provenance import SOURCE_MANIFEST_FILE, provenance, write_source_manifest

import paper_preset_dtypes

ROOT = Path(__file__).resolve().parents[1]
# What the rehearsal hides: what the GPU machine lacks, from every part; and from the parts that
# train from scratch, tokenizers and safetensors too, which the machine has (Hugging Face's side
# of the benchmark needs them) but training from scratch must not need (only pretrained models do).
ABSENT_ON_DEVICE = ("gguf", "rapidfuzz", "ray")
NOT_FOR_TRAINING = ("tokenizers", "safetensors")
PACK_RESERVE_S = 30.0  # the packing, after the training's ceiling
# Between the training's time limit and its ceiling: the evaluations that end jobs complete (a
# deadline cuts only those that end none), the last checkpoints, the report.
FINISHING_S = 75.0
DEVICE_RUNS = Path("runs") / "paper"
CHECKPOINT_SUFFIXES = (".npz",)


class GpuRunError(LabError, ValueError):
    """--unpack was given something other than a folder this script packed."""


@dataclass(frozen=True)
class Part:
    """One part of the command: a process, its log and its time limit (seconds)."""

    name: str
    argv: list[str]
    log: str
    limit_s: float
    hidden_in_rehearsal: tuple[str, ...] = ABSENT_ON_DEVICE + NOT_FOR_TRAINING


@dataclass(frozen=True)
class Plan:
    """What the command trains: where, which tasks (None: each sampler's), on which samplers, and
    in which compute dtype ('auto': bfloat16 where this machine's dtype check said it trains the
    same, float32 otherwise)."""

    rehearse: bool
    runs: Path
    tasks: list[str] | None = None
    samplers: tuple[str, ...] = ("paper",)
    dtype: str = "float32"

    @property
    def dtype_check(self) -> Path:
        """The dtype check's runs, beside the protocol's run folders (not packed with them)."""
        return self.runs.parent / f"{self.runs.name}-dtypes"

    def training_dtype(self) -> str:
        if self.dtype != "auto":
            return self.dtype
        return "bfloat16" if paper_preset_dtypes.same_training(self.dtype_check) else "float32"


def parts(plan: Plan, training_minutes: float) -> list[Part]:
    """The tests, the benchmark, the dtype check and the training, as commands; the training's
    minutes are what is left when it starts: its ceiling (Part.limit_s), its own time limit
    FINISHING_S before."""
    python = sys.executable
    tests = [python, "-m", "pytest", "-q", "-m", "device", "-p", "no:cacheprovider", "tests/test_train_accelerator.py"]
    throughput = [python, "benchmarks/device_throughput.py", "--json", "THROUGHPUT_JSON"]
    dtypes = [python, "benchmarks/paper_preset_dtypes.py", "--out", str(plan.dtype_check)]
    training = [python, "experiments/paper_grid.py", "--pes", "ape", "--samplers", *plan.samplers]
    limit_minutes = max(training_minutes - FINISHING_S / 60, training_minutes / 2)
    training += ["--out", str(plan.runs), "--no-progress", "--time-limit-minutes", f"{limit_minutes:.3f}"]
    training += ["--dtype", plan.training_dtype()] if training_minutes > 0 else []
    tasks = plan.tasks
    if plan.rehearse:
        throughput += ["--preset", "rehearsal", "--stack-sizes", "1", "2", "--concurrent", "1", "2"]
        throughput += ["--concurrent-size", "2", "--steps", "2", "--rounds", "1"]
        dtypes += ["--preset", "protocol-rehearsal", "--steps", "12"]
        training += ["--preset", "protocol-rehearsal"]
        tasks = tasks or ["NLFirst", "NLLast", "UB"]  # one predicted not to generalize: its check runs
    else:
        # The rows that decide: a stack of ten (how the device scales) and four and eight stacks of
        # five (how the protocol packs it), in both dtypes, before Hugging Face's comparison.
        throughput += ["--stack-sizes", "10", "--concurrent", "4", "8", "--rounds", "3"]
    training += ["--tasks", *tasks] if tasks else []
    return [
        Part("tests", tests, "tests.log", 120.0),
        Part("throughput", throughput, "throughput.log", 210.0, ABSENT_ON_DEVICE),
        Part("dtypes", dtypes, "dtypes.log", 240.0),
        Part("training", training, "training.log", training_minutes * 60),
    ]


def rehearsal_environment(folder: Path, hidden: tuple[str, ...]) -> dict[str, str]:
    """The environment of a part when rehearsing: the accelerator's path on this CPU, and a
    sitecustomize (in `folder`, a folder of its own) that hides `hidden` from every process started."""
    (folder / "sitecustomize.py").write_text(
        textwrap.dedent(f"""\
            # Written by benchmarks/gpu_run.py --rehearse: what this part must run without.
            import sys

            class HiddenInRehearsal:
                def find_spec(self, name, path=None, target=None):
                    if name.partition(".")[0] in {hidden!r}:
                        raise ModuleNotFoundError(f"No module named {{name!r}} (hidden by gpu_run)", name=name)
                    return None

            sys.meta_path.insert(0, HiddenInRehearsal())
            """)
    )
    path = os.pathsep.join(filter(None, [str(folder), os.environ.get("PYTHONPATH")]))
    return {**os.environ, ACCELERATOR_PATH_ENV: REHEARSE, "PYTHONPATH": path}


def run_part(part: Part, out: Path, env: dict[str, str]) -> dict:
    """Run one part to its end or its limit; its output goes to out/part.log."""
    argv = [str(out / "throughput.json") if arg == "THROUGHPUT_JSON" else arg for arg in part.argv]
    start = time.monotonic()
    with open(out / part.log, "w") as log:
        log.write(f"$ {' '.join(argv)}\n")
        log.flush()
        process = subprocess.Popen(
            argv, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            status = process.wait(timeout=part.limit_s)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGTERM)  # the training resumes from what SIGTERM lets it keep
            try:
                status = process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                status = process.wait()
            status = f"stopped at its limit of {part.limit_s:.0f} s (exit {status})"
    print(f"{part.name}: {status} in {time.monotonic() - start:.0f} s", flush=True)
    return dict(part=part.name, command=" ".join(argv), status=status, wall_s=round(time.monotonic() - start, 1))


def finished_job_folders(run_dir: Path) -> list[Path]:
    """The run's finished jobs: <task>/seed<k> folders with a result.json, and nothing else."""
    return [folder.path for _, _, folder in job_folders(run_dir) if folder.is_done()]


def pack_runs(runs: Path, archive: Path) -> dict[str, list[str]]:
    """runs.tar.gz: each run folder's own files and its finished job folders, no checkpoints.
    Returns, per run folder, its finished jobs."""
    finished = {}
    with tarfile.open(archive, "w:gz") as tar:
        for run_dir in sorted(p for p in runs.iterdir() if p.is_dir()) if runs.is_dir() else []:
            jobs = finished_job_folders(run_dir)
            finished[run_dir.name] = [str(job.relative_to(run_dir)) for job in jobs]
            for path in sorted(run_dir.rglob("*")):
                in_job = next((job for job in jobs if path.is_relative_to(job)), None)
                own_file = path.parent == run_dir and path.is_file() and not path.name.startswith(".")  # no .lock
                if (own_file or in_job) and path.is_file() and path.suffix not in CHECKPOINT_SUFFIXES:
                    tar.add(path, arcname=str(path.relative_to(runs)))
    return finished


def summary_text(machine: dict, results: list[dict], finished: dict, out: Path, wall_s: float) -> str:
    lines = [
        "# gpu_run",
        "",
        f"{machine.get('device_kind')} ({machine.get('backend')}), jax {machine['packages'].get('jax')}, "
        f"flax {machine['packages'].get('flax')}, lab commit {machine.get('lab_commit')}; {wall_s / 60:.1f} min "
        "in all",
        "",
        "| part | status | wall |",
        "|---|---|---|",
        *(f"| {r['part']} | {r['status']} | {r['wall_s']:.0f} s |" for r in results),
        "",
    ]
    for name, log in (("tests", "tests.log"), ("throughput", "throughput.log"), ("dtypes", "dtypes.log")):
        if (out / log).exists():  # a skipped part has no log
            tail = (out / log).read_text().splitlines()[-40:]
            lines += [f"## {name} (the end of {log})", "", "```", *tail, "```", ""]
    lines += ["## training: finished jobs", ""]
    lines += [f"- {run}: {len(jobs)} finished ({', '.join(jobs) or 'none'})" for run, jobs in finished.items()]
    return "\n".join(lines) + "\n"


def device_description() -> dict:
    """What provenance records, and the GPU as nvidia-smi names it where there is one."""
    machine = provenance()
    if shutil.which("nvidia-smi"):
        query = ["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"]
        machine["nvidia_smi"] = subprocess.run(query, capture_output=True, text=True, timeout=30).stdout.strip()
    machine["cpu_count"] = os.cpu_count()
    return machine


def run_on_device(args: argparse.Namespace) -> None:
    start = time.monotonic()
    out = check_new_folder(args.out.resolve())  # its parts' files are written anew: none is replaced
    out.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="gpu-run-"))
    # A rehearsal's runs mean nothing: they go to the scratch folder, not beside the real ones.
    runs = (ROOT / args.runs).resolve() if args.runs else scratch / "runs" if args.rehearse else ROOT / DEVICE_RUNS
    machine = device_description()
    write_json(out / "machine.json", machine)
    print(f"machine: {machine.get('device_kind')}, lab commit {machine.get('lab_commit')}", flush=True)
    results = []

    plan = Plan(args.rehearse, runs, args.tasks, tuple(args.samplers), args.dtype)

    def planned(training_minutes: float) -> list[Part]:
        return parts(plan, training_minutes)

    for part in [part for part in planned(0.0) if part.name not in args.skip]:
        if part.name == "training":
            left_minutes = (args.minutes * 60 - (time.monotonic() - start) - PACK_RESERVE_S) / 60
            if left_minutes <= 0.1:
                results.append(dict(part=part.name, command="", status="no time left", wall_s=0.0))
                continue
            part = next(p for p in planned(left_minutes) if p.name == "training")
        hiding = scratch / part.name
        hiding.mkdir()
        env = rehearsal_environment(hiding, part.hidden_in_rehearsal) if args.rehearse else dict(os.environ)
        results.append(run_part(part, out, env))
    finished = pack_runs(runs, out / "runs.tar.gz")
    wall_s = time.monotonic() - start
    (out / "summary.md").write_text(summary_text(machine, results, finished, out, wall_s))
    shutil.rmtree(scratch, ignore_errors=True)
    print(f"packed into {out} in {wall_s / 60:.1f} min", flush=True)


def unpack(folder: Path, into: Path) -> None:
    """Add the finished jobs that came back to the local run folders and rebuild their reports
    (crasplab.cli.unpack: checked member by member, adding only, a kill leaving each job absent or whole)."""
    from crasplab.cli.unpack import unpack_runs

    archive = folder / "runs.tar.gz"
    if not archive.is_file():
        raise GpuRunError(f"{folder} holds no runs.tar.gz: give --unpack the folder gpu_run.py packed on the GPU")
    unpack_runs(archive, into)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    action = parser.add_mutually_exclusive_group()
    action.add_argument("--prepare", action="store_true", help="here, before the call: write lab-source.json")
    action.add_argument("--unpack", type=Path, metavar="FOLDER", help="here, after the call: the folder that came back")
    parser.add_argument("--out", type=Path, help="the folder the packed files go to (on the GPU machine: $OUT)")
    parser.add_argument("--into", type=Path, default=DEVICE_RUNS, help="with --unpack: the run folders")
    parser.add_argument(
        "--runs",
        type=Path,
        default=None,
        help=f"where training writes (default {DEVICE_RUNS}; rehearsing: scratch)",
    )
    parser.add_argument("--minutes", type=above_zero, default=8.5, help="the whole command's time (default 8.5)")
    parser.add_argument("--rehearse", action="store_true", help="all of it on this CPU, on tiny settings")
    parser.add_argument(
        "--skip", nargs="+", choices=("tests", "throughput", "dtypes"), default=(), help="parts to leave out"
    )
    parser.add_argument(
        "--dtype",
        choices=("float32", "bfloat16", "auto"),
        default="float32",
        help="the training's compute dtype (auto: bfloat16 where the dtype check, on this machine, said it trains "
        "the same by its rule, float32 otherwise); a run folder keeps the dtype it started with",
    )
    parser.add_argument(
        "--samplers",
        nargs="+",
        choices=("paper", "spread"),
        default=["paper"],
        help="the samplers the protocol trains on (spread: the four non-unique retrieval tasks, where 151-200 "
        "discriminates the Last tasks at the paper's lengths; on the paper's sampler no bin does)",
    )
    parser.add_argument(
        "--tasks",
        nargs="+",
        choices=TASK_CODES,
        default=None,
        help="the protocol's tasks to train, each a stack, all at once when they fit the concurrent stacks "
        "(default: the paper sampler's ten, longest first)",
    )
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    with command_boundary():
        if args.prepare:
            manifest = write_source_manifest()
            print(f"{ROOT / SOURCE_MANIFEST_FILE}: commit {manifest['commit']}, {len(manifest['files'])} files")
        elif args.unpack is not None:
            unpack(args.unpack, args.into)
        elif args.out is None:
            raise GpuRunError('give --out FOLDER (on the GPU machine: --out "$OUT"), --prepare or --unpack FOLDER')
        else:
            run_on_device(args)


if __name__ == "__main__":
    main()
