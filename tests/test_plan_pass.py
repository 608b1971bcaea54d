"""One validation pass (issue 56): ``run``, ``simulate``, ``sweep`` and ``tune`` turn their arguments into one
validated, immutable ``Plan`` in one place (``runtime/plan.prepare``), and everything after reads it.

The path is followed call by call with ``sys.settrace``. It starts where ``cli.dispatch`` hands the parsed
command line to the command (building the parser, which registers every command's flags, is no part of
it) and ends at the first call of the step that needs the data: ``runtime/assemble.assemble`` (``run
--dry-run`` and ``simulate``), or ``runtime/mpi/session.run_mpi`` for ``run`` under a launcher (MPI starts
there; here a stand-in ends the command). Each call into a module of the layers that carry the arguments
from one step to the next -- ``runtime/`` (and ``runtime/mpi``, ``runtime/sim``), ``launch/``, ``slurm/``,
``tuning/``, ``reproduce/``, ``commands/``, ``cli`` -- is a stop, consecutive calls within one module one
stop. What those modules call below them (``config``, ``options/``, ``algorithms/``, the registries) is part
of the stop that calls it: the layers below cannot call back up (``tests/test_imports.py``), and counted
call by call every return from a lookup would count as entering its caller again.

Along that path no module is entered more than twice. The path is traced twice and the second trace
counted, so that imports (module bodies, registrations) are not part of it.
"""
from __future__ import annotations

import collections
import contextlib
import io
import sys
from types import CodeType, FrameType
from typing import Any

import pytest

from hpcbench.cli import main

LAYERS = ("hpcbench.runtime", "hpcbench.launch", "hpcbench.slurm", "hpcbench.tuning", "hpcbench.reproduce",
          "hpcbench.commands", "hpcbench.cli")
SIZE_VARS = ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "MV2_COMM_WORLD_SIZE", "SLURM_NTASKS")


class Reached(Exception):
    """The traced path's end."""


def calls(argv: list[str], end: CodeType | None = None) -> list[tuple[str, str]]:
    """Every (module, function) of hpcbench called from ``cli.dispatch`` until ``end`` is called (or the
    command ends)."""
    seen: list[tuple[str, str]] = []
    on = False

    def trace(frame: FrameType, event: str, arg: Any) -> None:
        nonlocal on
        if event != "call":
            return
        if frame.f_code is end:
            raise Reached()
        module = frame.f_globals.get("__name__", "")
        on = on or (module, frame.f_code.co_name) == ("hpcbench.cli", "dispatch")
        if on and module.startswith("hpcbench"):
            seen.append((module, frame.f_code.co_name))

    before = sys.gettrace()
    sys.settrace(trace)
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            main(argv)
    except Reached:
        pass
    finally:
        sys.settrace(before)
    return seen


def stops(argv: list[str], end: CodeType) -> list[str]:
    """The modules of the path, in order, consecutive calls within one module as one stop."""
    calls(argv, end)  # every module imported: the second trace follows the arguments only
    path: list[str] = []
    for module, _ in calls(argv, end):
        if module.startswith(LAYERS) and (not path or path[-1] != module):
            path.append(module)
    return path


@pytest.fixture
def launched(monkeypatch: pytest.MonkeyPatch) -> CodeType:
    """``run`` as rank 0 of 3 under a launcher, with ``run_mpi`` stood in for: → the stand-in's code."""
    import hpcbench.runtime.mpi.session as session

    for var in SIZE_VARS:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("PMI_SIZE", "3")
    monkeypatch.setenv("PMI_RANK", "0")

    def run_mpi(plan: Any) -> int:
        return 0

    monkeypatch.setattr(session, "run_mpi", run_mpi)
    return run_mpi.__code__


def assemble_code() -> CodeType:
    from hpcbench.runtime.assemble import assemble

    return assemble.__code__


@pytest.mark.parametrize("argv", [
    ["run", "--dry-run", "--workers", "2", "--algo", "allreduce", "--steps", "3"],
    ["simulate", "--algo", "allreduce", "--workers", "2", "--steps", "3", "--numerics", "off", "--out", "OUT"],
    ["simulate", "--algo", "asgd", "--workers", "3", "--steps", "3", "--set", "lr_scaling=linear", "--out", "OUT"],
], ids=["run --dry-run", "simulate, numerics off", "simulate, a warning"])
def test_the_arguments_enter_no_module_more_than_twice_until_the_plan_is_made(argv, tmp_path):
    path = stops([str(tmp_path / "r.h5") if a == "OUT" else a for a in argv], assemble_code())
    entered = collections.Counter(path)
    assert "hpcbench.runtime.plan" in entered, path
    assert max(entered.values()) <= 2, " -> ".join(path)


def test_a_run_under_a_launcher_enters_no_module_more_than_twice_until_mpi_starts(launched):
    path = stops(["run", "--algo", "allreduce", "--steps", "3"], launched)
    entered = collections.Counter(path)
    assert entered["hpcbench.runtime.plan"] == 1, path
    assert max(entered.values()) <= 2, " -> ".join(path)


# What reads the plan once it is made: binding it to the data (steps, schedule, stragglers, the budget's
# check) and its options. Nothing after the plan checks the arguments again.
READS = {"options", "make_context", "steps_per_worker", "schedule_for", "straggler_ranks"}


@pytest.mark.slow  # a whole simulation, to its file (whose provenance asks uname)
def test_after_the_plan_nothing_checks_the_arguments_again(tmp_path):
    from hpcbench.runtime.sim.session import simulate

    argv = ["simulate", "--algo", "allreduce", "--workers", "2", "--steps", "3", "--numerics", "off",
            "--out", str(tmp_path / "r.h5")]
    seen = calls(argv)  # the whole command
    assert (tmp_path / "r.h5").exists()
    handed = seen.index((simulate.__module__, simulate.__name__))
    after = {f for m, f in seen[handed:] if m == "hpcbench.runtime.plan"}
    assert after <= READS, after
    assert ("hpcbench.options.sim", "validate") not in seen[handed:]
