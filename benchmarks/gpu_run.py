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
     benchmarks/device_throughput.py (paper preset, float32 and each dtype choice, at one step
       per call and at --steps-per-call: a stack of ten, four stacks of five, one model against
       Hugging Face's)  at most 1.5 min + 1 min a row
     benchmarks/paper_preset_dtypes.py (NLFirst and NLLast, 3 seeds, 2000 steps in float32 and in
       each of --dtype-choices under the protocol's recipe, and a verdict on each by the rule it
       states)  at most 2 min a dtype: 8 min for all four, so a call that judges them trains little
     the APE protocol at the paper's scale (paper_grid.py --pes ape --samplers paper), every task's
       seeds as one stack, several stacks at once: what is left, less 0.5 min for packing; its
       own time limit 1.25 min before that, for the evaluations that end jobs to complete
   Each part runs in its own process under its own time limit; one that fails or runs out is
   reported and the next part runs. --dtype auto trains in the fastest dtype that the dtype check
   (this call's, or an earlier call's on a machine still warm) said trains the same, in float32
   where none did; a run folder keeps the dtype it started in (config.json, each job.json). Before
   the training starts, the call plans it (benchmarks/lease_plan.py): at the rate the benchmark
   measured for the training's dtype and --steps-per-call (or --step-rate), only the tasks whose
   next round finishes in --lease-minutes (default: this call's) start, tasks under way first; the
   summary lists the plan and what is left for the next lease. --skip tests throughput dtypes gives
   the training all of it, and
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

The next table per lease, prepared. A lease is 15 minutes of one GPU, a few of them spent starting
it: one call of --minutes 9.5 (timeout_s=600), after --prepare here, then --unpack here. Expected
times are the plan's at the kept float32 rate (443 model-steps/s summed, four stacks of five on the
H200) with each task's first round at the step cap where no kept run says better: 7.6 min a task
of five seeds (30,000 steps each, 5.6 min, plus 2 min of compile and final evaluation), so one task
per lease; 3.7 min a task at the 1,500 model-steps/s the issue asks for, two tasks per lease. A
task whose seeds stop early (the paper sampler's NLFirst stopped at 15,000-18,000 steps) finishes
sooner, and the same command then starts the next. --lease-minutes 12 plans over the lease, not the
call: where a call ends with its task under way (the summary's plan says so), the same command again
on the still-warm machine, with --lease-minutes what is left, finishes that task before anything
else. Each command is the same until its tasks are done:

  1. The spread sampler's APE round for the Last tasks and their controls at L = 50 (bins to 200;
     151-200 is the bin the discrimination check fixes): 4 leases in float32 (NLLast, NRLast,
     NLFirst, NRFirst, one each, 9.5 min a call)

       python3 benchmarks/gpu_run.py --out "$OUT" --minutes 9.5 --lease-minutes 12 --samplers spread \
           --tasks NLLast NRLast NLFirst NRFirst --skip tests throughput dtypes --dtype float32

  2. The copying tasks (on the paper's sampler until the counting issue's sampler lands; UF and
     UB's inputs stop at 150): 4 leases in float32, 9.5 min a call

       python3 benchmarks/gpu_run.py --out "$OUT" --minutes 9.5 --lease-minutes 12 --samplers paper \
           --tasks UF UB NF NB --skip tests throughput dtypes --dtype float32

  3. RoPE, then NoPE, on the spread sampler's four tasks, then on the paper sampler's ten (first
     rounds of 3 seeds: 5.4 min a task at the cap, one per lease: 4 leases and 10 for each encoding)

       python3 benchmarks/gpu_run.py --out "$OUT" --minutes 9.5 --lease-minutes 12 --pe rope \
           --samplers spread --skip tests throughput dtypes --dtype float32

  The measurements of the tensor-core choices and of several steps per call, in a lease of their
  own (nothing trains: --lease-minutes 0.5 leaves no task time to finish), two calls:

       python3 benchmarks/gpu_run.py --out "$OUT" --minutes 9.5 --skip dtypes --steps-per-call 10 \
           --dtype-choices tf32 bfloat16-mixed --lease-minutes 0.5        # tests, benchmark: ~9.5 min
       python3 benchmarks/gpu_run.py --out "$OUT" --minutes 7 --skip tests throughput \
           --dtype-choices tf32 bfloat16-mixed --dtype auto --lease-minutes 0.5   # dtype check: ~6 min

  The check's verdicts are in the second call's summary; where it picked a dtype other than
  float32, later tables pass it as --dtype (a fresh machine has no check to read; a run folder
  keeps the dtype it started in, so a table started in float32 is finished in float32).

--rehearse runs all of it on this CPU in about five minutes (more on a loaded one), on the
accelerator's code path (CRASPLAB_ACCELERATOR_PATH=rehearse) with gguf, rapidfuzz and Ray hidden as
on the GPU machine (tokenizers and safetensors too, from the parts that train from scratch, which
must not need them), the protocol-rehearsal preset and the benchmark's smallest settings: what CI
runs so that the command cannot first fail on the machine it was prepared for.
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

from crasp.position_encodings import IN_THE_PAPERS
from crasp.tasks import TASK_CODES
from crasplab.cli.arguments import above_zero, at_least
from crasplab.cli.length_gen import RunRequest
from crasplab.models.config import TRAINING_DTYPES
from crasplab.errors import LabError, command_boundary
from crasplab.records.files import write_json
from crasplab.records.job_folder import job_folders
from crasplab.records.run_folder import check_new_folder
from crasplab.train.device import ACCELERATOR_PATH_ENV, REHEARSE
from crasplab.train.provenance import SOURCE_MANIFEST_FILE, provenance, write_source_manifest

import lease_plan
import paper_preset_dtypes
from device_throughput import row_name

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
REHEARSAL_TASK_OVERHEAD_S = 10.0  # a rehearsal task's compile and evaluations on this CPU
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
    """What the command trains: where, which tasks (None: each sampler's), on which samplers, in
    which compute dtype ('auto': the fastest that this machine's dtype check said trains the same,
    float32 where none did), judging which dtype choices, with how many steps per device call, and
    at which summed step rate where this call measured none."""

    rehearse: bool
    runs: Path
    tasks: list[str] | None = None
    samplers: tuple[str, ...] = ("paper",)
    dtype: str = "float32"
    dtype_choices: tuple[str, ...] = paper_preset_dtypes.CHOICES
    steps_per_call: int = 1
    step_rate: float = lease_plan.KEPT_STEP_RATE
    lease_minutes: float | None = None  # the machine's time left when the call starts (None: this call's)
    pe: str = "ape"

    @property
    def dtype_check(self) -> Path:
        """The dtype check's runs, beside the protocol's run folders (not packed with them)."""
        return self.runs.parent / f"{self.runs.name}-dtypes"

    @property
    def preset(self) -> str:
        return "protocol-rehearsal" if self.rehearse else "protocol-paper"

    def training_dtype(self) -> str:
        if self.dtype != "auto":
            return self.dtype
        return paper_preset_dtypes.fastest_same_training(self.dtype_check)

    def work(self) -> list[tuple[str, lease_plan.TaskWork]]:
        """(sampler, its next round of one task) for every task the training may start, in order."""
        work = []
        for sampler in self.samplers:
            request = RunRequest(
                pe=self.pe,
                preset=self.preset,
                protocol=True,
                tasks=tuple(self.tasks or self.rehearsal_tasks()),
                sampler=None if sampler == "paper" else sampler,
            )
            # A rehearsal's steps are its tiny cap, not what the paper-scale runs needed.
            kept_name = f"protocol-paper-{self.pe}{'' if sampler == 'paper' else '-' + sampler}"
            kept = None if self.rehearse else ROOT / "evidence" / kept_name
            run_dir = self.runs / f"{self.pe}-{sampler}"
            work += [(sampler, item) for item in lease_plan.protocol_work(request, run_dir, kept)]
        return work

    def rehearsal_tasks(self) -> list[str]:
        return ["NLFirst", "NLLast", "UB"] if self.rehearse else []  # one predicted not to generalize: its check runs


def parts(plan: Plan, training_minutes: float, tasks: list[str] | None = None) -> list[Part]:
    """The tests, the benchmark, the dtype check and the training, as commands; the training's
    minutes are what is left when it starts: its ceiling (Part.limit_s), its own time limit
    FINISHING_S before; it trains `tasks` (None: the plan's)."""
    python = sys.executable
    tests = [python, "-m", "pytest", "-q", "-m", "device", "-p", "no:cacheprovider", "tests/test_train_accelerator.py"]
    throughput = [python, "benchmarks/device_throughput.py", "--json", "THROUGHPUT_JSON"]
    dtypes = [python, "benchmarks/paper_preset_dtypes.py", "--out", str(plan.dtype_check)]
    dtypes += ["--dtypes", *plan.dtype_choices]
    training = [python, "experiments/paper_grid.py", "--pes", plan.pe, "--samplers", *plan.samplers]
    limit_minutes = max(training_minutes - FINISHING_S / 60, training_minutes / 2)
    training += ["--out", str(plan.runs), "--no-progress", "--time-limit-minutes", f"{limit_minutes:.3f}"]
    training += ["--dtype", plan.training_dtype()] if training_minutes > 0 else []
    training += ["--steps-per-call", str(plan.steps_per_call)] if plan.steps_per_call > 1 else []
    # Every dtype the training may take, at the training's steps per call: the rate it is planned at.
    steps_per_call = sorted({1, plan.steps_per_call})
    dtype_rows = ["float32", *plan.dtype_choices]
    throughput += ["--dtypes", *dtype_rows, "--steps-per-call", *map(str, steps_per_call)]
    if plan.rehearse:
        # One row per dtype in each table, and the check on one task: each choice rehearsed in both.
        throughput += ["--preset", "rehearsal", "--stack-sizes", "2", "--concurrent", "1"]  # one compile a dtype
        throughput += ["--concurrent-size", "2", "--steps", "2", "--rounds", "1"]
        dtypes += ["--preset", "protocol-rehearsal", "--steps", "12", "--tasks", "NLLast", "--seeds", "0", "1"]
        training += ["--preset", "protocol-rehearsal"]
    else:
        # The rows that decide: a stack of ten (how the device scales) and four stacks of five (how
        # the protocol packs it), before Hugging Face's comparison.
        throughput += ["--stack-sizes", "10", "--concurrent", "4", "--rounds", "3"]
    tasks = tasks or plan.tasks or plan.rehearsal_tasks()
    training += ["--tasks", *tasks] if tasks else []
    # The dtype check trains float32 and each choice, each given the 2 minutes each of its first two
    # dtypes had; the benchmark compiles and times one row per dtype and steps per call.
    return [
        Part("tests", tests, "tests.log", 120.0),
        Part(
            "throughput",
            throughput,
            "throughput.log",
            90.0 + 60.0 * len(steps_per_call) * len(dtype_rows),
            ABSENT_ON_DEVICE,
        ),
        Part("dtypes", dtypes, "dtypes.log", 120.0 * (1 + len(plan.dtype_choices))),
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


def planned_tasks(plan: Plan, out: Path, minutes: float) -> tuple[list[str], str]:
    """(the tasks the training starts, the plan as text): those that can finish in the lease's
    `minutes` left (benchmarks/lease_plan.py; a task this call does not finish resumes in the
    next call on the same warm machine, first), at the rate this call's benchmark measured for
    the training's dtype and steps per call, or the plan's step rate where it measured none."""
    dtype = plan.training_dtype()
    measured = lease_plan.measured_rate(out / "throughput.json", row_name(dtype, plan.steps_per_call))
    rate_from = f"measured in this call, {row_name(dtype, plan.steps_per_call)}" if measured else "--step-rate"
    rate = measured or plan.step_rate
    work, seconds = plan.work(), minutes * 60 - FINISHING_S
    overhead_s = REHEARSAL_TASK_OVERHEAD_S if plan.rehearse else lease_plan.TASK_OVERHEAD_S
    started, left = lease_plan.choose([item for _, item in work], rate, seconds, overhead_s)
    text = lease_plan.plan_text(started, left, rate, rate_from, seconds, overhead_s)
    text += "\n\nLeft for the next lease: " + (
        ", ".join(
            f"{item.task} ({sampler}, seeds {', '.join(map(str, item.seeds))})"
            for sampler, item in work
            if item in left
        )
        or "nothing"
    )
    # One --tasks serves every sampler: a task left on one of them is started on none.
    left_tasks = {item.task for item in left}
    return [item.task for item in started if item.task not in left_tasks], text


def summary_text(machine: dict, results: list[dict], finished: dict, out: Path, wall_s: float, lease: str = "") -> str:
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
    lines += ["## training: the plan (only what can finish in this call starts)", "", lease or "no training", ""]
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

    plan = Plan(
        args.rehearse,
        runs,
        args.tasks,
        tuple(args.samplers),
        args.dtype,
        tuple(args.dtype_choices),
        args.steps_per_call,
        args.step_rate,
        args.lease_minutes,
        args.pe,
    )
    lease = ""
    for part in [part for part in parts(plan, 0.0) if part.name not in args.skip]:
        if part.name == "training":
            left_minutes = (args.minutes * 60 - (time.monotonic() - start) - PACK_RESERVE_S) / 60
            elapsed_minutes = (time.monotonic() - start) / 60
            lease_left = left_minutes if plan.lease_minutes is None else plan.lease_minutes - elapsed_minutes
            started, lease = planned_tasks(plan, out, lease_left)
            if left_minutes <= 0.1 or not started:
                status = "no time left" if left_minutes <= 0.1 else "no task can finish in the time left"
                results.append(dict(part=part.name, command="", status=status, wall_s=0.0))
                continue
            part = next(p for p in parts(plan, left_minutes, started) if p.name == "training")
        hiding = scratch / part.name
        hiding.mkdir()
        env = rehearsal_environment(hiding, part.hidden_in_rehearsal) if args.rehearse else dict(os.environ)
        results.append(run_part(part, out, env))
    finished = pack_runs(runs, out / "runs.tar.gz")
    wall_s = time.monotonic() - start
    (out / "summary.md").write_text(summary_text(machine, results, finished, out, wall_s, lease))
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
        choices=(*TRAINING_DTYPES, "auto"),
        default="float32",
        help="the training's compute dtype (auto: the fastest that the dtype check, on this machine, said trains "
        "the same by its rule, float32 where none did); a run folder keeps the dtype it started with",
    )
    parser.add_argument(
        "--dtype-choices",
        nargs="+",
        choices=paper_preset_dtypes.CHOICES,
        default=list(paper_preset_dtypes.CHOICES),
        help="the dtypes the dtype check judges against float32 and the benchmark times (default: all)",
    )
    parser.add_argument(
        "--steps-per-call",
        type=at_least(1),
        default=1,
        help="the training's steps per device call (TrainConfig.steps_per_call; default 1)",
    )
    parser.add_argument(
        "--pe", choices=IN_THE_PAPERS, default="ape", help="the position encoding the protocol trains (default ape)"
    )
    parser.add_argument(
        "--lease-minutes",
        type=above_zero,
        default=None,
        help="the machine's time left when this call starts, over this and later calls on it while it stays warm "
        "(default: this call's --minutes): training starts only the tasks that finish in it",
    )
    parser.add_argument(
        "--step-rate",
        type=above_zero,
        default=lease_plan.KEPT_STEP_RATE,
        help="summed model-steps/s the plan assumes where this call's benchmark measured none (default "
        f"{lease_plan.KEPT_STEP_RATE:.0f}: the H200's float32 protocol training, evidence/gpu-2026-12-04)",
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
