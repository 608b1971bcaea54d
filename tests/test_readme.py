"""Every example in the README, CONTRIBUTING.md and the pages of docs/ runs as a new user would type it,
in the order they appear (the README first), in one scratch directory.

Scaled down only as the README says a user may: ``HPCBENCH_MAX_STEPS`` caps every run's steps per
worker, and ``reproduce`` runs at ``--preset toy``. A shown ``$ command`` is run as it is and its
first line of output compared. What is not run is in NOT_RUN with the reason, and every entry there
must still name an example that exists (so an example cannot leave the suite by being edited).
CONTRIBUTING's benchmark commands run only with HPCBENCH_TEST_BENCHMARKS=1 (8 minutes on 2 cores).
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

import pytest

from hpcbench.algorithms import ALGORITHMS
from hpcbench.launch.local_study import DEMO_VARIANTS
from hpcbench.results.store import read_run

from conftest import have_ulfm, requires_mpi

pytestmark = [requires_mpi, pytest.mark.timeout(900)]

ROOT = Path(__file__).resolve().parents[1]
DOCUMENTS = ("README.md", "CONTRIBUTING.md", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md")))
MAX_STEPS = "2"

GATE = "test_gate runs the gate with real runs on a busy machine: a rerun passes, runs twice as slow fail"
EMULATED = "needs root and network namespaces (test_emulated runs the emulated cluster with HPCBENCH_TEST_NETNS=1)"
SLURM = "needs a Slurm cluster with GPUs and CIFAR-10 under /data (test_slurm_cluster runs run.sbatch and sweeps on " \
        "the local Slurm with digits)"
NOT_RUN = {
    "pip install": "installs the environment this suite runs in (.ci/run installs the same extras on a clean clone)",
    "python3 -m venv": "creates the environment this suite runs in",
    "python -m pytest": "this suite itself",
    "python -m mypy && ruff check . && python -m pytest": "what .ci/run runs: mypy and ruff first, then this suite",
    "HPCBENCH_TEST_SLURM=1 HPCBENCH_TEST_NETNS=1 python -m pytest": "this suite's root tier, as root",
    "hpcbench calibrate results/killed-n5.h5": "fits runs that lost a worker; capped at 2 steps, the runs above end "
                                               "before their kill at 0.5 s (test_ulfm calibrates killed runs)",
    "mutmut run": "the mutation check, run by hand: 10 minutes and more on 2 cores",
    "mutmut results": "reads what the mutation check left",
    "sbatch --nodes=8": SLURM,
    "hpcbench sweep --nodes 8,16": SLURM,
    "hpcbench status studies/resnet": SLURM,
    "hpcbench sweep --resubmit-failed studies/resnet": SLURM,
    "sudo jobs/local/emulated-cluster.sh": EMULATED,
    "jobs/local/emulated-cluster.sh status": EMULATED,
    "jobs/local/mpiexec-emulated": EMULATED,
    "hpcbench sweep --local --emulated": EMULATED,
    "mpiexec -n 129": "129 ranks: a minute on 2 cores (test_payload runs every algorithm at 17 ranks)",
    # Run elsewhere in the suite already, so CI keeps within its 30 minutes:
    "hpcbench reproduce gap-aware --preset toy": "test_reproduce runs gap-aware at toy size, and --mode mpi with sgp",
    "hpcbench reproduce jin": "test_reproduce runs jin at toy size",
    "hpcbench reproduce diloco": "test_reproduce runs diloco at toy size",
    "hpcbench findings": "test_findings runs it on the committed studies (--check) and on studies of its own",
    "mpiexec -n 5 python -m mpi4py -m hpcbench run --algo local-sgd": "the demo runs DiLoCo (test_readme's first run)",
    "mpiexec -n 5 python -m mpi4py -m hpcbench run --algo allreduce": "the demo runs PowerSGD (test_readme's first "
                                                                      "run)",
    "hpcbench sweep --local --ranks 3 --algos allreduce --repeats 3": GATE,
    "hpcbench check study/baseline --write-reference": GATE,
    "hpcbench diff study/baseline study/new --fail-above": GATE,
}
# Measurements run by hand: 8 minutes together on 2 cores even capped, so opt-in.
BENCHMARKS = ("python benchmarks/", "mpiexec -n 4 python benchmarks/")
if os.environ.get("HPCBENCH_TEST_BENCHMARKS") != "1":
    NOT_RUN.update({prefix: "a measurement, minutes on 2 cores: HPCBENCH_TEST_BENCHMARKS=1 runs it"
                    for prefix in BENCHMARKS})
GATES = ("--fail-above", "hpcbench check ")  # exit 1 is their answer, not a failure


def demo_made_every_run(scratch: Path, output: str) -> None:
    """The quick start's promise: every algorithm at 2 and 4 workers, and DiLoCo and PowerSGD beside
    them, each ok, all in the report (the variants as rows of their algorithm, kept apart)."""
    files = sorted(p.name for p in (scratch / "results" / "demo").glob("*.h5"))
    assert files == sorted(f"{name}-w{n}.h5" for name in [*ALGORITHMS.names(), *DEMO_VARIANTS] for n in (2, 4))
    assert all(read_run(scratch / "results" / "demo" / f).attrs["status"] == "ok" for f in files)
    diloco = read_run(scratch / "results" / "demo" / "diloco-w4.h5").attrs["config"]["options"]["local-sgd"]
    assert diloco["outer"] == "nesterov"
    report = output[output.index("Runs ("):]
    for name in ALGORITHMS.names():
        rows = sum(line.startswith(f"{name} ") for line in report.splitlines())
        assert rows >= (4 if name in ("local-sgd", "allreduce") else 2), name


def report_as_shown(scratch: Path, output: str) -> None:
    """The report has the tables of the README's sample, headed as there."""
    assert README_SAMPLE_HEADER in output and "Runs (" in output, output[:2000]


STUDIES = r"hpcbench (demo|sweep --local|tune|reproduce)\b"  # commands that run many runs
# What a command's output must show beyond its exit status, by a pattern of the command.
CHECKS = {r"hpcbench demo$": demo_made_every_run, r"hpcbench report results/demo\s+#": report_as_shown}


class Example(NamedTuple):
    document: str
    line: int
    kind: str  # "bash", "python", "file" (a TOML block named by its first comment: "# NAME[: COMMAND]"), "shown"
    text: str
    expected: str = ""  # a shown command's first line of output

    @property
    def id(self) -> str:
        return f"{self.document}:{self.line}"


def commands(block: str) -> list[tuple[int, str]]:
    """A bash block's commands, continuation lines joined, with their offsets in the block."""
    out, pending, start = [], "", 0
    for i, line in enumerate(block.splitlines()):
        if not pending:
            start = i
        pending += line.rstrip("\\").rstrip() + " " if line.endswith("\\") else line
        if not line.endswith("\\"):
            if pending.strip():
                out.append((start, pending.strip()))
            pending = ""
    return out


def examples() -> list[Example]:
    found = []
    for document in DOCUMENTS:
        text = (ROOT / document).read_text(encoding="utf-8")
        for match in re.finditer(r"^```(\w*)\n(.*?)^```", text, re.S | re.M):
            lang, block = match.group(1), match.group(2)
            first = text[:match.start()].count("\n") + 2
            lines = block.splitlines()
            if lang == "bash":
                found += [Example(document, first + i, "bash", cmd) for i, cmd in commands(block)]
            elif lang == "python":
                found.append(Example(document, first, "python", block))
            elif lang == "toml" and lines and lines[0].startswith("# "):
                found.append(Example(document, first, "file", block))
            elif lang == "":
                found += [Example(document, first + i, "shown", line[2:], lines[i + 1] if i + 1 < len(lines) else "")
                          for i, line in enumerate(lines) if line.startswith("$ ")]
    return found


EXAMPLES = examples()
# The README's sample report, as its first line: the scaling table's title.
README_SAMPLE_HEADER = next(line for line in (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
                            if line.startswith("Scaling ("))


ULFM_EXAMPLE = "mpirun --with-ft ulfm"  # Open MPI's launcher, with fault tolerance


def not_run(command: str) -> str | None:
    """Why a (scaled) command is not run, or None."""
    if not command:  # it only installed something
        return NOT_RUN["pip install"]
    if command.startswith(ULFM_EXAMPLE) and not have_ulfm():
        return "needs Open MPI with ULFM (the tests' pass under Open MPI, pytest -m both, runs it)"
    if re.match(r"hpcbench reproduce resilience .*--mode mpi", command) and not have_ulfm():
        return "kills workers of real runs: needs Open MPI with ULFM (test_resilience runs the study under it)"
    return next((why for prefix, why in NOT_RUN.items() if command.startswith(prefix)), None)


def scaled(command: str) -> str:
    """The command as the tests run it: set-up steps (pip) dropped, reproduce at --preset toy (with real
    runs, at its smaller size only: the larger is what ``--max-ranks`` skips)."""
    parts = [p.strip() for p in command.split("&&") if not p.strip().startswith("pip install")]
    command = " && ".join(parts)
    if command.startswith("hpcbench reproduce"):
        command = command.replace("--quick", "--preset toy") if "--quick" in command else \
            re.sub(r"(hpcbench reproduce \S+)", r"\1 --preset toy", command)
        if "--mode mpi" in command and "--max-ranks" not in command:
            command = command.replace("--mode mpi", "--mode mpi --max-ranks 3")
    return command


@pytest.fixture(scope="module")
def scratch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    where = tmp_path_factory.mktemp("new-user")
    (where / "benchmarks").symlink_to(ROOT / "benchmarks")  # CONTRIBUTING's commands run from a clone
    return where


def environment(capped: bool) -> dict[str, str]:
    """This environment, with what the README's ``export`` line asks of anyone calling mpiexec by hand."""
    env = dict(os.environ)
    for e in EXAMPLES:
        if e.text.startswith("export "):
            env.update(item.split("=", 1) for item in e.text.split()[1:] if "=" in item)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"  # hpcbench, python, mpiexec
    env["HPCBENCH_PROGRESS"] = "0"
    if capped:
        env["HPCBENCH_MAX_STEPS"] = MAX_STEPS
    else:
        env.pop("HPCBENCH_MAX_STEPS", None)
    return env


def test_every_example_is_run_or_says_why_not():
    assert len(EXAMPLES) > 20
    texts = [e.text for e in EXAMPLES if e.kind == "bash"] + [scaled(e.text) for e in EXAMPLES if e.kind == "bash"]
    for prefix in NOT_RUN:
        assert any(t.startswith(prefix) for t in texts), f"NOT_RUN names {prefix!r}, no longer an example"


@pytest.mark.parametrize("example", [pytest.param(e, marks=pytest.mark.both) if e.text.startswith(ULFM_EXAMPLE) else e
                                     for e in EXAMPLES], ids=[e.id for e in EXAMPLES])
def test_the_example_runs(example: Example, scratch: Path):
    if example.kind == "file":  # written where its name says; "# NAME: COMMAND" also runs the command
        name, _, use = example.text.splitlines()[0][2:].partition(":")
        (scratch / name.strip()).write_text(example.text)
        if not use.strip():
            return
        example = example._replace(kind="bash", text=use.strip())
    why = not_run(scaled(example.text)) if example.kind == "bash" else None
    if why is not None:
        pytest.skip(f"not run: {why}")
    if example.kind == "python":
        proc = subprocess.run([sys.executable, "-c", example.text], cwd=scratch, env=environment(True),
                              capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr
        return
    command = example.text if example.kind == "shown" else scaled(example.text)
    proc = subprocess.run(["bash", "-c", command], cwd=scratch, env=environment(example.kind != "shown"),
                          capture_output=True, text=True, timeout=600)
    output = proc.stdout + proc.stderr
    assert "Traceback" not in output, output
    if example.kind == "shown" and example.expected.startswith("hpcbench: "):  # a failure, shown as such
        said = [line for line in proc.stderr.splitlines() if not line.startswith(("hpcbench: warning:", "["))]
        assert proc.returncode != 0 and said[0] == example.expected, (proc.stderr, example.expected)
    elif example.kind == "shown":
        assert proc.returncode == 0, output
        assert proc.stdout.splitlines()[0] == example.expected, (proc.stdout, example.expected)
    elif any(gate in command for gate in GATES):
        assert proc.returncode in (0, 1), output
        if proc.returncode == 1:  # the gate's answer: a line per point out of bounds
            assert re.search(r"^(regression|miss): ", proc.stdout, re.M), output
    else:
        assert proc.returncode == 0, output[-3000:]
    for pattern, check in CHECKS.items():
        if re.match(pattern, command):
            check(scratch, proc.stdout)
    if re.match(STUDIES, command):  # what runs many runs prints in 120 columns (test_columns: each at toy size)
        assert not [line for line in output.splitlines() if len(line) > 120], output


def anchors(path: Path) -> set[str]:
    """GitHub's anchors for a Markdown file's headings."""
    out, fenced = set(), False
    for line in path.read_text(encoding="utf-8").splitlines():
        fenced ^= line.startswith("```")
        if line.startswith("#") and not fenced:
            title = line.lstrip("#").strip().lower()
            out.add(re.sub(r"[^\w\- ]", "", title).replace(" ", "-"))
    return out


def test_every_link_in_the_docs_leads_somewhere():
    pages = [ROOT / d for d in DOCUMENTS] + sorted((ROOT / "docs").rglob("*.md"))
    for page in pages:
        for target in re.findall(r"\]\(([^)\s]+)\)", page.read_text(encoding="utf-8")):
            if re.match(r"\w+://", target):
                continue
            file, _, anchor = target.partition("#")
            where = (page.parent / file).resolve() if file else page
            assert where.exists(), f"{page.relative_to(ROOT)}: {target} does not exist"
            if anchor:
                assert anchor in anchors(where), \
                    f"{page.relative_to(ROOT)}: no heading for #{anchor} in {file or page.name}"
