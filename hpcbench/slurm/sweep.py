"""``hpcbench sweep``: a scaling study as Slurm jobs (one per scale point and algorithm) or locally."""
from __future__ import annotations

import dataclasses
import os
import shlex
import shutil
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hpcbench.comm.probe import srun_mpi_flag
from hpcbench.errors import UsageError
from hpcbench.results.paths import make_dirs
from hpcbench.results.study_dir import JOBS, read_manifest, record_jobs, write_manifest
from hpcbench.slurm.jobs import Resources, log_file, report_job, run_job, submit_script


@dataclass(frozen=True)
class Point:
    algo: str
    nodes: int
    repeat: int  # 1-based; 0 when the study has no repeats

    @property
    def stem(self) -> str:
        return f"{self.algo}-n{self.nodes}" + (f"-r{self.repeat}" if self.repeat else "")


def parse_counts(text: str, flag: str, minimum: int) -> list[int]:
    try:
        counts = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise UsageError(f"{flag} {text!r} is not a comma-separated list of integers") from None
    if not counts:
        raise UsageError(f"{flag} is empty: give counts such as 8,16,32")
    bad = [c for c in counts if c < minimum]
    if bad:
        raise UsageError(f"{flag}: every count must be >= {minimum}, got {bad[0]}")
    return counts


def parse_algos(text: str) -> list[str]:
    from hpcbench.algorithms import ALGORITHMS

    algos = [a.strip() for a in text.split(",") if a.strip()]
    if not algos:
        raise UsageError(f"--algos is empty; valid: {', '.join(ALGORITHMS.names())}")
    for a in algos:
        ALGORITHMS.get(a)
    return algos


def check_worlds(algos: list[str], nodes: list[int], res: Resources) -> None:
    from hpcbench.algorithms import ALGORITHMS

    for a in algos:
        need = ALGORITHMS.get(a).min_workers + 1
        small = [n for n in nodes if res.ranks(n) < need]
        if small:
            extra = " + rank 0" if res.rank0 == "extra" else ""
            raise UsageError(f"{a} needs {need}+ ranks but {small[0]} node(s) × {res.tasks_per_node} task(s){extra} "
                             f"give {res.ranks(small[0])}: raise --tasks-per-node or the node counts")


def plan_points(algos: list[str], nodes: list[int], repeats: int) -> list[Point]:
    reps = range(1, repeats + 1) if repeats > 1 else [0]
    return [Point(a, n, r) for n in nodes for a in algos for r in reps]


def default_setup() -> tuple[str, ...]:
    """Jobs use this Python environment: activate its virtual environment when there is one."""
    if sys.prefix != sys.base_prefix:
        return (f"source {shlex.quote(os.path.join(sys.prefix, 'bin', 'activate'))}",)
    return ()


def resources(tasks_per_node: int, cpus_per_task: int, gpus_per_task: int, time: str, partition: str | None,
              account: str | None, mpi: str | None, setup: list[str] | None, shared: bool = False,
              mem: str | None = None, constraint: str | None = None,
              sbatch_args: list[str] | None = None, rank0: str | None = None) -> Resources:
    """A study's per-job resources; the srun plugin, unless given, is the one this machine's MPI needs;
    rank 0, unless given, is an extra task on GPU jobs (every GPU trains) and takes a slot otherwise."""
    if not mpi:
        from hpcbench.comm.probe import mpi_library

        mpi = srun_mpi_flag(mpi_library()["mpi_vendor"])
    return Resources(tasks_per_node=tasks_per_node, cpus_per_task=cpus_per_task, gpus_per_task=gpus_per_task,
                     time=time, partition=partition or "", account=account or "", mpi=mpi,
                     setup=tuple(setup) if setup else default_setup(), exclusive=not shared, mem=mem or "",
                     constraint=constraint or "", sbatch_args=tuple(sbatch_args or ()),
                     rank0=rank0 or ("extra" if gpus_per_task else "slot"))


BaseArgs = Mapping[str, list[str]]  # each algorithm's run options (its own option table, not the others')


def run_args(point: Point, base_args: BaseArgs, out: Path) -> list[str]:
    """The point's ``hpcbench run`` arguments; a failed or unreadable earlier result at ``out`` is replaced."""
    args = ["run", "--algo", point.algo, *base_args[point.algo]]
    if point.repeat:
        args += ["--set", f"seed={point.repeat - 1}"]
    return args + ["--out", str(out)] + (["--overwrite"] if out.exists() else [])


def write_study(out_dir: Path, points: list[Point], res: Resources, base_args: BaseArgs) -> tuple[list[Path], Path]:
    """Write runs/*.sbatch, report.sbatch and submit.sh for the points without an ``ok`` result
    (those keep theirs); returns (run scripts, report script)."""
    from hpcbench.results.store import result_status

    report_log = log_file(str(out_dir), "report")  # (refuses a directory Slurm cannot name, before making it)
    make_dirs(out_dir / "runs", out_dir / "logs")
    scripts = []
    for p in points:
        out = out_dir / f"{p.stem}.h5"
        if result_status(out) == "ok":
            continue
        script = out_dir / "runs" / f"{p.stem}.sbatch"
        log = log_file(str(out_dir), p.stem)
        script.write_text(run_job(f"hpcbench-{p.stem}", p.nodes, res, run_args(p, base_args, out), log))
        scripts.append(script)
    report = out_dir / "report.sbatch"
    report.write_text(report_job("hpcbench-report", str(out_dir), res, report_log))
    submit = out_dir / "submit.sh"
    submit.write_text(submit_script([str(s) for s in scripts], str(report), str(out_dir / JOBS)))
    submit.chmod(0o755)
    write_manifest(out_dir, [{"stem": p.stem, **dataclasses.asdict(p)} for p in points],
                   {"base_args": base_args, "resources": dataclasses.asdict(res)})
    return scripts, report


def study_again(out_dir: Path) -> tuple[list[Point], Resources, BaseArgs]:
    """A study's points, resources and run arguments as its manifest recorded them."""
    manifest = read_manifest(out_dir)
    if manifest.get("local"):
        raise UsageError(f"{out_dir} ran here (sweep --local), not under Slurm: run the same sweep --local "
                         "command again with --resume; it keeps the ok points and runs the others")
    where = out_dir / "study.json"
    recorded = manifest.get("resources")
    known = {f.name for f in dataclasses.fields(Resources)}
    if not isinstance(recorded, dict) or not set(recorded) <= known:
        raise UsageError(f"{where}: resources {recorded!r} is not an object of {', '.join(sorted(known))}")
    fields: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v for k, v in recorded.items()}
    res = Resources(**fields)
    points = [recorded_point(p, where) for p in manifest["points"]]
    recorded_args = manifest.get("base_args")  # one list for every algorithm in studies written before 0.3
    base_args = {}
    for p in points:
        args = recorded_args.get(p.algo) if isinstance(recorded_args, dict) else recorded_args
        if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
            raise UsageError(f"{where}: base_args holds no list of run options for {p.algo}")
        base_args[p.algo] = list(args)
    return points, res, base_args


def whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def recorded_point(point: dict[str, Any], where: Path) -> Point:
    """A point of a Slurm study's record: an algorithm of this hpcbench, whole counts, and the stem they give."""
    from hpcbench.algorithms import ALGORITHMS

    ALGORITHMS.get(point["algo"])  # one line naming the valid algorithms
    nodes: Any = point.get("nodes")
    repeat: Any = point.get("repeat")
    if not (whole(nodes) and whole(repeat) and nodes >= 1 and repeat >= 0):
        raise UsageError(f"{where}: point {point['stem']!r} has nodes {nodes!r} and repeat {repeat!r}, "
                         "not whole numbers >= 1 and >= 0")
    p = Point(point["algo"], nodes, repeat)
    if p.stem != point["stem"]:
        raise UsageError(f"{where}: point {point['stem']!r} is named {p.stem!r} by its algorithm, nodes and repeat")
    return p


def sbatch(args: list[str]) -> str:
    if shutil.which("sbatch") is None:
        raise UsageError("sbatch not found: submit from a Slurm login node, or run the study here with --local")
    proc = subprocess.run(["sbatch", "--parsable", *args], capture_output=True, text=True, timeout=60)
    if proc.returncode != 0:
        raise UsageError(f"sbatch {' '.join(args)} failed: {proc.stderr.strip()}")
    return proc.stdout.strip().split(";")[0]


def submit(scripts: list[Path], report: Path) -> tuple[list[str], str]:
    """Submit the runs, then the report after all of them end, whatever their outcome (it lists the
    points without an ok result); the ids go to the study's jobs.tsv."""
    ids = [sbatch([str(s)]) for s in scripts]
    after = [f"--dependency=afterany:{':'.join(ids)}"] if ids else []  # --resume may leave nothing to run
    report_id = sbatch([*after, str(report)])
    record_jobs(report.parent, {**{s.stem: i for s, i in zip(scripts, ids)}, "report": report_id})
    return ids, report_id
