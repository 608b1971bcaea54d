"""Slurm batch scripts for studies (pure text rendering; nothing here talks to Slurm)."""
from __future__ import annotations

import shlex
import unicodedata
from dataclasses import dataclass, field

from hpcbench.errors import UsageError, is_unseen

# The option each field comes from, for the one line that refuses its value.
FLAGS = {"tasks_per_node": "--tasks-per-node", "cpus_per_task": "--cpus-per-task", "gpus_per_task": "--gpus-per-task",
         "time": "--time", "partition": "--partition", "account": "--account", "mpi": "--mpi", "setup": "--setup",
         "exclusive": "--shared", "mem": "--mem", "constraint": "--constraint", "sbatch_args": "--sbatch-arg",
         "rank0": "--rank0"}
# Fields written as one word after "#SBATCH --option=": a space would end the value there.
ONE_WORD = ("time", "partition", "account", "mpi", "mem", "constraint")
# The longest field of a job script: Linux's longest path (PATH_MAX); no Slurm name or option needs more.
LONGEST = 4096


def plain(flag: str, value: object, longest: int | None = LONGEST) -> str:
    """``value`` when it is text that stays on its line in a script and reads as it runs (and, unless
    ``longest`` is None, is at most that many characters); otherwise one line naming ``flag``, without all
    of a long value. Refused: control characters (a newline would start a command) and format characters
    (bidi overrides and isolates such as U+202E and U+2066, zero-width spaces), which reorder or hide the
    text around them, so that a script would not read as what it runs."""
    if not isinstance(value, str):
        raise UsageError(f"{flag} {value!r} is not text")
    if longest is not None and len(value) > longest:
        raise UsageError(f"{flag} {value[:40]!r}... is {len(value):,} characters long; a job script takes at most "
                         f"{longest:,}")
    bad = next((c for c in value if is_unseen(c)), "")
    if bad:
        kind = "format" if unicodedata.category(bad) == "Cf" else "control"
        raise UsageError(f"{flag} {value!r} holds the {kind} character {bad!r}: a job script line cannot carry it")
    return value


def log_file(out_dir: str, stem: str) -> str:
    """The ``#SBATCH --output`` pattern of ``stem``'s log in the study ``out_dir``, ``%j`` its job id: a ``%``
    of the directory doubled, so Slurm takes it as itself, not as one of its own (``%j``, ``%x``...). A
    backslash is refused: Slurm would drop it, and with it every pattern of the name, ``%j`` too."""
    if "\\" in out_dir:
        raise UsageError(f"--out-dir {out_dir!r} holds a backslash, which Slurm removes from a log's name "
                         "(and then leaves its %j unexpanded): choose a directory without one")
    return f"{out_dir.replace('%', '%%')}/logs/{stem}-%j.out"


@dataclass(frozen=True)
class Resources:
    """What every run job of a study asks Slurm for, per node and per task."""

    tasks_per_node: int = 1
    cpus_per_task: int = 1
    gpus_per_task: int = 0
    time: str = "01:00:00"
    partition: str = ""
    account: str = ""
    mpi: str = "pmi2"  # srun's PMI plugin: pmi2 for MPICH-family MPIs, pmix for Open MPI
    setup: tuple[str, ...] = field(default_factory=tuple)  # shell lines run first, e.g. activating a venv
    exclusive: bool = True  # whole nodes: another job on the node would distort every timing
    mem: str = ""  # --mem, e.g. 64G
    constraint: str = ""  # --constraint, e.g. a node feature
    sbatch_args: tuple[str, ...] = field(default_factory=tuple)  # any other sbatch option, e.g. --qos=high
    # "slot": rank 0 takes one of the tasks_per_node slots (and its GPU); "extra": rank 0 is one task more,
    # on the first node, and every slot is a worker (N nodes × T GPUs give N·T workers)
    rank0: str = "slot"

    def __post_init__(self) -> None:
        """Every field checked, whether it came from the command line or from a study's ``study.json``:
        no value reaches a job script that could end its line or change what the line runs."""
        for name, least in (("tasks_per_node", 1), ("cpus_per_task", 1), ("gpus_per_task", 0)):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < least:
                raise UsageError(f"{FLAGS[name]} {value!r} is not a whole number >= {least}")
        for name in ONE_WORD:
            value = plain(FLAGS[name], getattr(self, name))
            if any(c.isspace() or c in "\"'" for c in value):
                raise UsageError(f"{FLAGS[name]} {value!r} holds a space or a quote: Slurm takes it as one word")
        for name in ("setup", "sbatch_args"):
            lines = getattr(self, name)
            if not isinstance(lines, tuple):
                raise UsageError(f"{FLAGS[name]} {lines!r} is not a list of lines")
            for line in lines:
                plain(FLAGS[name], line)
        bad = [a for a in self.sbatch_args if not a.startswith("--")]
        if bad:
            raise UsageError(f"--sbatch-arg {bad[0]!r} is not an sbatch option: write it as --sbatch-arg=--qos=high")
        if not isinstance(self.exclusive, bool):
            raise UsageError(f"exclusive {self.exclusive!r} is not true or false")
        if self.rank0 not in ("slot", "extra"):
            raise UsageError(f"--rank0 {self.rank0!r} is not one of slot, extra")

    def ranks(self, nodes: int) -> int:
        """The world size of a job on ``nodes`` nodes."""
        return nodes * self.tasks_per_node + (self.rank0 == "extra")


def layout(nodes: int, res: Resources) -> list[str]:
    """The task and GPU lines. "extra": N·T+1 tasks, which Slurm's block distribution places T+1 on the
    first node and T on the others; the GPUs go per node, each rank sees its node's, and each worker takes
    its own by its index among the node's workers (rank 0 evaluates on the first, beside worker 1)."""
    if res.rank0 == "extra":
        lines = [f"#SBATCH --ntasks={res.ranks(nodes)}", f"#SBATCH --cpus-per-task={res.cpus_per_task}"]
        if res.gpus_per_task:
            lines.append(f"#SBATCH --gpus-per-node={res.gpus_per_task * res.tasks_per_node}")
        return lines
    lines = [f"#SBATCH --ntasks-per-node={res.tasks_per_node}", f"#SBATCH --cpus-per-task={res.cpus_per_task}"]
    if res.gpus_per_task:
        lines.append(f"#SBATCH --gpus-per-task={res.gpus_per_task}")
    return lines


def path_value(flag: str, path: str) -> str:
    """A path for an "#SBATCH --option=" line: in double quotes (which sbatch strips) when it holds a space."""
    plain(flag, path)
    if '"' in path:
        raise UsageError(f"{flag} {path!r} holds a double quote, which a #SBATCH line cannot carry")
    return f'"{path}"' if any(c.isspace() for c in path) else path


def header(name: str, nodes: int, res: Resources, log: str) -> list[str]:
    name = plain("the job name", name)
    log = path_value("--out-dir", log)
    lines = [
        "#!/bin/bash",
        f"#SBATCH --job-name={name}",
        f"#SBATCH --nodes={nodes}",
        *layout(nodes, res),
    ]
    # A warning before the time limit: rank 0 keeps the run's record as "aborted" (SIGTERM also works).
    lines += [f"#SBATCH --time={res.time}", "#SBATCH --signal=USR1@60", f"#SBATCH --output={log}"]
    if res.partition:
        lines.append(f"#SBATCH --partition={res.partition}")
    if res.account:
        lines.append(f"#SBATCH --account={res.account}")
    if res.exclusive:
        lines.append("#SBATCH --exclusive")
    if res.mem:
        lines.append(f"#SBATCH --mem={res.mem}")
    if res.constraint:
        lines.append(f"#SBATCH --constraint={res.constraint}")
    lines += [f"#SBATCH {arg}" for arg in res.sbatch_args]
    return lines


def run_job(name: str, nodes: int, res: Resources, run_args: list[str], log: str) -> str:
    """One hpcbench run on ``nodes`` nodes: rank 0 serves or coordinates, every other task is a worker.
    A run that kills ranks on purpose under Open MPI starts with Open MPI's own launcher and its fault
    tolerance (``mpirun --with-ft ulfm``, placing the ranks in the job's slots as srun would), so the
    workers outlive a failed one; srun starts every other run."""
    from hpcbench.launch.local import kills

    lines = header(name, nodes, res, log)
    for arg in run_args:
        plain("a run option", arg, longest=None)  # (the run checks its own values)
    program = "python -m mpi4py -m hpcbench " + " ".join(map(shlex.quote, run_args))
    if res.mpi == "pmix" and kills(run_args):
        launch = f'mpirun --with-ft ulfm --pmixmca plog \'^stdfd\' -n "$SLURM_NTASKS" --map-by slot {program}'
    else:
        # "slot": one GPU per task, Slurm sets each task's CUDA_VISIBLE_DEVICES, so every rank sees cuda:0.
        distribution = " --distribution=block" if res.rank0 == "extra" else ""
        launch = f"srun --mpi={res.mpi}{distribution} {program}"
    lines += [
        "set -euo pipefail",
        *res.setup,
        'export OMP_NUM_THREADS="${SLURM_CPUS_PER_TASK:-1}"',
        launch,
    ]
    return "\n".join(lines) + "\n"


def report_job(name: str, out_dir: str, res: Resources, log: str) -> str:
    """Runs after every run job ended, whatever its outcome: the study's tables (listing the points
    without an ok result), and plots when matplotlib is there."""
    one_task = Resources(time="00:20:00", partition=res.partition, account=res.account, setup=res.setup,
                         exclusive=False, sbatch_args=res.sbatch_args)
    d = shlex.quote(out_dir)
    lines = header(name, 1, one_task, log) + [
        "set -euo pipefail",
        *res.setup,
        f"hpcbench report {d} --format md > {d}/report.md",
        f"hpcbench report {d} --plot {d}/plots > /dev/null || echo 'plots skipped (pip install matplotlib)'",
        f"cat {d}/report.md",
    ]
    return "\n".join(lines) + "\n"


def submit_script(run_scripts: list[str], report_script: str, jobs_file: str) -> str:
    """Submit every run, then the report with an afterany dependency on all of them; each job id is
    appended to ``jobs_file`` as "point<TAB>id" (what ``hpcbench status`` reads)."""
    runs = " ".join(shlex.quote(s) for s in run_scripts)
    jobs = shlex.quote(jobs_file)
    return "\n".join([
        "#!/bin/bash",
        "# Submit this study: every run job, then a report job that starts when all of them have ended.",
        "set -euo pipefail",
        "ids=()",
        f"for job in {runs}; do",
        '    id=$(sbatch --parsable "$job" | cut -d";" -f1)',
        '    ids+=("$id")',
        f'    printf "%s\\t%s\\n" "$(basename "$job" .sbatch)" "$id" >> {jobs}',
        "done",
        "dep=()",
        'if [ ${#ids[@]} -gt 0 ]; then dep=(--dependency=afterany:"$(IFS=:; echo "${ids[*]}")"); fi',
        f'report=$(sbatch --parsable "${{dep[@]}}" {shlex.quote(report_script)} | cut -d";" -f1)',
        f'printf "report\\t%s\\n" "$report" >> {jobs}',
        'echo "runs: ${ids[*]}"',
        'echo "report: $report"',
    ]) + "\n"
