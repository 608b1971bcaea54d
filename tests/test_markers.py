"""The tiers are markers (pytest.ini; tests/conftest.py marks the rest fast and guards them): a test that
launches MPI says so, a fast test starts no process, and the guard fails a test that does more than its
markers allow."""
from __future__ import annotations

import ast
import configparser
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

import conftest
from launch_guard.sitecustomize import launches_mpi

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
# What starts MPI ranks: the suite's helper, and launch/local.py's, which hpcbench itself launches with.
LAUNCH_HELPERS = {"mpirun", "mpi_command", "mpiexec_for_launch", "start_ranks", "run_ranks", "run_many"}
MARKS_OF = {"requires_mpi": "mpi", "requires_ulfm": "ulfm"}  # conftest's names for pytest.mark.mpi and .ulfm


def marks(node: ast.expr) -> set[str]:
    """The markers an expression names: ``pytest.mark.X``, ``pytest.mark.X(...)``, conftest's
    ``requires_mpi``, or a list of them."""
    if isinstance(node, (ast.List, ast.Tuple)):
        return set().union(*(marks(e) for e in node.elts))
    if isinstance(node, ast.Call):
        return marks(node.func)
    if isinstance(node, ast.Name):
        return {MARKS_OF[node.id]} if node.id in MARKS_OF else set()
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute) and node.value.attr == "mark":
        return {node.attr}
    return set()


def unmarked_launches(source: str) -> list[str]:
    """The tests of a test file that launch MPI (call a launch helper, themselves, through the file's own
    functions or through a fixture of the file they take) without the mpi marker (or ulfm, which implies
    it), on their own or on the file's ``pytestmark``."""
    tree = ast.parse(source)
    module_marks: set[str] = set()
    functions: dict[str, ast.FunctionDef] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "pytestmark" for t in node.targets):
            module_marks |= marks(node.value)
        elif isinstance(node, ast.FunctionDef):
            functions[node.name] = node

    def uses(function: ast.FunctionDef) -> set[str]:
        called = {n.func.id if isinstance(n.func, ast.Name) else n.func.attr for n in ast.walk(function)
                  if isinstance(n, ast.Call) and isinstance(n.func, (ast.Name, ast.Attribute))}
        return called | {a.arg for a in function.args.args}  # the fixtures it takes

    launching = {name for name, f in functions.items() if uses(f) & LAUNCH_HELPERS}
    while grown := {name for name, f in functions.items() if uses(f) & launching} - launching:
        launching |= grown
    return sorted(name for name in launching if name.startswith("test")
                  and not (module_marks | set().union(*(marks(d) for d in functions[name].decorator_list)))
                  & {"mpi", "ulfm"})


def test_every_test_that_uses_the_mpi_launch_helpers_is_marked_mpi():
    found = {path.name: unmarked_launches(path.read_text(encoding="utf-8")) for path in sorted(TESTS.glob("test_*.py"))}
    assert {name: tests for name, tests in found.items() if tests} == {}
    assert len(found) > 40


def test_the_static_check_sees_helpers_fixtures_and_the_files_marks():
    source = '''
import pytest
from conftest import mpirun, requires_mpi

def launch(n):
    return mpirun(n, "list")

@pytest.fixture
def ran():
    return launch(2)

def test_direct():
    mpirun(3, "list")

def test_through_a_helper():
    launch(3)

def test_through_a_fixture(ran):
    pass

@requires_mpi
def test_marked():
    launch(3)

@pytest.mark.ulfm
def test_marked_ulfm(ran):
    pass

def test_none():
    pass
'''
    assert unmarked_launches(source) == ["test_direct", "test_through_a_fixture", "test_through_a_helper"]
    assert unmarked_launches("import pytest\npytestmark = [pytest.mark.mpi, pytest.mark.timeout(9)]\n" + source) == []


def item(*names: str) -> SimpleNamespace:
    """A stand-in for a test carrying the markers ``names``."""
    return SimpleNamespace(nodeid="tests/test_x.py::test_y", get_closest_marker=lambda name: name in names or None)


@pytest.mark.parametrize("args, launches", [
    (["mpiexec", "-n", "3", "python"], True),
    (["/venv/bin/mpiexec.hydra", "-n", "3", "python"], True),
    (["/repo/jobs/local/mpiexec-emulated", "-n", "4", "python"], True),
    (["mpirun", "--with-ft", "ulfm", "-n", "3"], True),
    (["env", "A=1", "mpirun", "-n", "2"], True),
    (["bash", "-c", "cd /tmp && mpiexec -n 2 hpcbench run"], True),
    ("mpiexec -n 2 true", True),
    (["python", "-c", "print('mpiexec -n 2')"], False),  # a word of a Python program is no launch
    (["git", "-C", "/repo", "rev-parse", "HEAD"], False),
    (["/venv/bin/mpiexec", "--version"], False),  # which MPI it is (mpi_family)
    (["bash", "-n"], False),
    (["python", "-m", "hpcbench", "sweep", "--local"], False),  # its own launch is refused in the child
])
def test_what_launches_mpi(args, launches):
    assert launches_mpi(args) is launches


def test_the_guard_holds_each_tier_to_what_it_may_start():
    fast, slow, mpi = item("fast"), item("slow"), item("mpi", "slow")
    assert "a fast test starts no process" in conftest.tier_breach(fast, ["git", "status"])
    assert "a fast test starts no process" in conftest.tier_breach(fast, None)  # a fork
    assert "without the mpi marker" in conftest.tier_breach(fast, ["mpiexec", "-n", "2"])
    assert conftest.tier_breach(slow, [sys.executable, "-c", "pass"]) is None
    assert "without the mpi marker" in conftest.tier_breach(slow, ["bash", "-c", "mpirun -n 2 true"])
    assert conftest.tier_breach(mpi, ["mpiexec", "-n", "2"]) is None
    env = conftest.guarded_env(slow, {"PYTHONPATH": "tests"})
    assert env["PYTHONPATH"].endswith("launch_guard:tests") and env["HPCBENCH_TEST_LAUNCH_NOTES"]


def test_a_fast_test_that_starts_a_process_fails(request):
    """This test is fast: the guard refuses its process before it starts, and fails it."""
    assert request.node.get_closest_marker("fast")
    with pytest.raises(pytest.fail.Exception, match="a fast test starts no process"):
        subprocess.run(["true"])
    # Caught here, the guard would still fail this test once it ends (as one that ran the process from a
    # thread, or swallowed the failure): the breach it noted is taken back, since it was the point.
    assert conftest._broken.pop(request.node.nodeid)


@pytest.mark.slow  # it starts a Python
def test_a_python_a_test_not_marked_mpi_starts_refuses_to_launch_mpi_and_fails_the_test(request):
    code = ("import subprocess\ntry:\n    subprocess.run(['mpiexec', '-n', '2', 'true'])\n"
            "except RuntimeError as e:\n    print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "a test not marked mpi may not launch MPI: refused mpiexec -n 2 true"
    notes = conftest.notes_of(request.node)
    assert notes.read_text(encoding="utf-8") == "mpiexec -n 2 true\n"
    notes.unlink()  # what fails this test once it ends (as it would one that means it): the point here


def test_every_test_has_a_tier_and_the_fast_ones_are_what_the_mutation_check_runs(request):
    items = request.session.items
    assert all(any(i.get_closest_marker(m) for m in ("fast", "mpi", "slow", "root")) for i in items)
    assert not [i.nodeid for i in items if i.get_closest_marker("fast")
                and any(i.get_closest_marker(m) for m in conftest.TIERS_BESIDE_FAST)]
    ini = configparser.ConfigParser()
    ini.read(ROOT / "pytest.ini")
    registered = {line.split(":")[0] for line in ini["pytest"]["markers"].strip().splitlines()}
    assert {"fast", "mpi", "slow", "root", "both", "ulfm"} <= registered
    assert "--strict-markers" in ini["pytest"]["addopts"]
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    assert cfg["mutmut"]["pytest_add_cli_args_test_selection"].split() == ["-m", "fast", "tests/"]
