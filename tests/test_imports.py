"""The layering rules, read from the source: who may import what (lazy imports inside functions
count), and that the CLI starts without torch, mpi4py or h5py."""
import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "hpcbench"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(source: str, module: str) -> set[str]:
    """Every module named by an import statement anywhere in `source` (absolute names; relative
    imports resolved against `module`)."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                package = module if module_is_package(module) else module.rpartition(".")[0]
                parts = package.split(".")
                prefix = ".".join(parts[: len(parts) - node.level + 1])
                name = f"{prefix}.{node.module}" if node.module else prefix
            else:
                name = node.module or ""
            found.add(name)
            found.update(f"{name}.{alias.name}" for alias in node.names)
    return found


def module_is_package(module: str) -> bool:
    return (PACKAGE.parent / module.replace(".", "/") / "__init__.py").exists()


def within(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def violations(graph: dict[str, set[str]]) -> list[str]:
    """The import rules (docs/design.md's Layers), one line per broken rule."""
    out = []
    for module, names in sorted(graph.items()):
        for name in sorted(names):
            top = name.split(".")[0]
            if within(module, "hpcbench.algorithms") and top in ("mpi4py", "h5py", "torch", "time",
                                                                  "random"):
                out.append(f"{module} imports {name}: algorithms stay pure")
            if top == "mpi4py" and not within(module, "hpcbench.comm"):
                out.append(f"{module} imports {name}: only comm/ touches mpi4py")
            if top == "h5py" and not within(module, "hpcbench.results"):
                out.append(f"{module} imports {name}: only results/ touches h5py")
            if within(module, "hpcbench.report") and (within(name, "hpcbench.runtime")
                                                      or within(name, "hpcbench.comm")):
                out.append(f"{module} imports {name}: report/ reads files, never runs")
    return out


def package_graph() -> dict[str, set[str]]:
    return {module_name(p): imports_of(p.read_text(), module_name(p))
            for p in PACKAGE.rglob("*.py")}


def test_the_package_keeps_its_import_rules():
    graph = package_graph()
    assert len(graph) > 40 and "hpcbench.algorithms.ps" in graph
    assert violations(graph) == []


@pytest.mark.parametrize("module, source, rule", [
    ("hpcbench.algorithms.ps", "import torch", "algorithms stay pure"),
    ("hpcbench.algorithms.ps", "def f():\n    import time\n", "algorithms stay pure"),
    ("hpcbench.algorithms.ps", "from random import random", "algorithms stay pure"),
    ("hpcbench.runtime.session", "from mpi4py import MPI", "only comm/ touches mpi4py"),
    ("hpcbench.report.tables", "import h5py", "only results/ touches h5py"),
    ("hpcbench.report.tables", "from ..runtime import study", "report/ reads files"),
    ("hpcbench.report.tables", "from hpcbench.comm.mpi import MpiComm", "report/ reads files"),
])
def test_a_broken_rule_is_found(module, source, rule):
    found = violations({module: imports_of(source, module)})
    assert len(found) >= 1 and rule in found[0]


def test_allowed_imports_pass():
    graph = {
        "hpcbench.comm.mpi": imports_of("from mpi4py import MPI", "hpcbench.comm.mpi"),
        "hpcbench.results.store": imports_of("import h5py", "hpcbench.results.store"),
        "hpcbench.report.tables": imports_of("from ..results import store", "hpcbench.report.tables"),
        "hpcbench.algorithms.ps": imports_of("import numpy as np\nfrom .ops import Pull",
                                             "hpcbench.algorithms.ps"),
    }
    assert violations(graph) == []
    assert "hpcbench.results.store" in graph["hpcbench.report.tables"]


def test_relative_imports_resolve_from_packages_and_modules():
    assert "hpcbench.runtime.study" in imports_of("from ..runtime import study",
                                                  "hpcbench.report.tables")
    assert "hpcbench.report.tables" in imports_of("from .tables import x", "hpcbench.report")
    assert "hpcbench.runtime.sim.engine" in imports_of("from .engine import Engine",
                                                       "hpcbench.runtime.sim.session")


def test_the_cli_starts_without_torch_mpi4py_or_h5py():
    code = ("import sys, hpcbench.cli\n"
            "print(sorted(m for m in ('torch', 'mpi4py', 'h5py') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         cwd=PACKAGE.parent)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_the_package_says_it_is_typed():
    assert (PACKAGE / "py.typed").exists()
