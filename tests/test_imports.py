"""The layering rules, read from the source: who may import what (lazy imports inside functions
count), and that the CLI starts without torch, mpi4py or h5py."""
import ast
import re
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
    imports resolved against `module`); ``from P import x`` names P and P.x, either of which may be
    a module."""
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


DESIGN = PACKAGE.parent / "docs" / "design.md"


def design_layers(text: str) -> tuple[tuple[str, ...], ...]:
    """The layers as docs/design.md lists them, lowest first: each line of its Layers block that names
    parts of the package (``algorithms/``, ``errors.py, memory.py``) is one layer, in that order."""
    block = text.split("## Layers", 1)[1].split("```", 2)[1]
    layers = []
    for line in block.splitlines():
        names = re.match(r"^  ([a-z0-9_/.]+(?:, [a-z0-9_/.]+)*)(?:\s{2,}|$)", line)
        if names:
            layers.append(tuple(module_of_entry(entry) for entry in names.group(1).split(", ")))
    return tuple(layers)


def module_of_entry(entry: str) -> str:
    """``algorithms/`` → hpcbench.algorithms, ``results/schema.py`` → hpcbench.results.schema,
    ``__init__.py`` → hpcbench (the package's own module, and only it)."""
    name = entry.rstrip("/").removesuffix(".py").replace("/", ".")
    return "hpcbench" if name == "__init__" else f"hpcbench.{name}"


LAYERS = design_layers(DESIGN.read_text(encoding="utf-8"))
SIBLINGS = ("hpcbench.runtime.mpi", "hpcbench.runtime.sim")  # the two drivers share only the core


def part_of(module: str, layers: tuple[tuple[str, ...], ...] = LAYERS) -> str:
    """The layer entry a module belongs to: the longest one it is within ("" for none)."""
    return max((p for layer in layers for p in layer if within(module, p) and (p != "hpcbench" or module == p)),
               key=len, default="")


def layer_of(module: str) -> int:
    part = part_of(module)
    return next(i for i, layer in enumerate(LAYERS) if part in layer)


def module_edges(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """Module → the package modules it imports: ``from P import x`` counts as importing P.x when that
    is a module, else P; a module's own parent packages (loaded first by Python whatever it imports)
    are left out."""
    edges = {}
    for module, names in graph.items():
        found = set()
        for name in names:
            while name and name not in graph:
                name = name.rpartition(".")[0]
            if name and name != module and not within(module, name):
                found.add(name)
        edges[module] = {n for n in found if not any(within(m, n) and m != n for m in found)
                         or n == "hpcbench"}
    return edges


def layering(graph: dict[str, set[str]]) -> list[str]:
    """Imports up the layers and between the two drivers, one line each."""
    out = []
    for module, names in sorted(module_edges(graph).items()):
        for name in sorted(names):
            if layer_of(name) > layer_of(module):
                out.append(f"{module} imports {name}: up the layers ({part_of(module)} is below {part_of(name)})")
            elif {part_of(module), part_of(name)} == set(SIBLINGS):
                out.append(f"{module} imports {name}: the MPI session and the simulator share only the core")
    return out


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Sets of modules that import each other, directly or through others."""
    return components(module_edges(graph))


def part_node(module: str) -> str:
    """A module's node in the package-level graph: its top-level subpackage, its modules taken together
    (``hpcbench.runtime.mpi.driver`` → ``hpcbench.runtime``), or the top-level module itself
    (``hpcbench.config``; ``hpcbench``, the package's own ``__init__``)."""
    return ".".join(module.split(".")[:2])


def part_edges(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """Part → the other parts its modules import (``part_node``)."""
    edges: dict[str, set[str]] = {}
    for module, names in module_edges(graph).items():
        here = part_node(module)
        edges.setdefault(here, set()).update(part_node(n) for n in names if part_node(n) != here)
    return edges


def part_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Sets of parts (subpackages, top-level modules) that import each other, directly or through others:
    a cycle the module-level check misses when it goes through different modules of one part."""
    return components(part_edges(graph))


def components(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan's), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def test_the_package_keeps_its_import_rules():
    graph = package_graph()
    assert len(graph) > 40 and "hpcbench.algorithms.ps" in graph
    assert violations(graph) == []


def test_every_module_has_a_layer_and_no_import_goes_up_or_round():
    graph = package_graph()
    assert unlayered(graph) == []
    assert layering(graph) == []
    assert cycles(graph) == []


def test_no_parts_of_the_package_import_each_other_in_a_cycle():
    graph = package_graph()
    edges = part_edges(graph)
    assert {"hpcbench", "hpcbench.algorithms", "hpcbench.comm", "hpcbench.config", "hpcbench.runtime"} <= set(edges)
    assert "hpcbench.runtime.mpi" not in edges and "hpcbench.algorithms" not in edges["hpcbench.comm"]
    assert part_cycles(graph) == []


def unlayered(graph: dict[str, set[str]]) -> list[str]:
    return sorted(m for m in graph if not part_of(m))


def test_a_module_of_a_part_the_design_does_not_list_has_no_layer():
    """The package's own module is a layer entry of its own, not a fallback for every module."""
    graph = {"hpcbench": set(), "hpcbench.errors": set(), "hpcbench.plugins.loader": set(),
             "hpcbench.results.schema": set(), "hpcbench.results.store": set()}
    assert unlayered(graph) == ["hpcbench.plugins.loader"]
    assert part_of("hpcbench.results.schema") == "hpcbench.results.schema"  # its own, lower layer
    assert part_of("hpcbench.results.store") == "hpcbench.results"


def test_the_layers_are_the_lines_of_the_design_in_their_order():
    text = ("## Layers\n\n```\nhpcbench/\n  __init__.py, errors.py\n                    the version\n"
            "  results/schema.py\n                    the contract\n  algorithms/       pure programs: ops,\n"
            "                    frames, rules\n  tuning/, reproduce/   studies\njobs/slurm/         run.sbatch\n```\n")
    assert design_layers(text) == (("hpcbench", "hpcbench.errors"), ("hpcbench.results.schema",),
                                   ("hpcbench.algorithms",), ("hpcbench.tuning", "hpcbench.reproduce"))
    assert LAYERS[0][:2] == ("hpcbench", "hpcbench.errors") and "hpcbench.cli" in LAYERS[-1]
    assert LAYERS.index(("hpcbench.algorithms",)) < LAYERS.index(("hpcbench.results",))  # the design's order


def test_an_import_up_the_layers_or_between_the_drivers_is_found():
    graph = {
        "hpcbench.runtime.plan": imports_of("from hpcbench.runtime.sim.costs import SimConfig",
                                            "hpcbench.runtime.plan"),
        "hpcbench.runtime.sim.costs": set(),
        "hpcbench.runtime.sim.session": imports_of("from ..mpi import session", "hpcbench.runtime.sim.session"),
        "hpcbench.runtime.mpi.session": set(),
        "hpcbench.runtime.mpi": set(),
        "hpcbench.runtime": set(),
    }
    assert layering(graph) == [
        "hpcbench.runtime.plan imports hpcbench.runtime.sim.costs: up the layers (hpcbench.runtime is below "
        "hpcbench.runtime.sim)",
        "hpcbench.runtime.sim.session imports hpcbench.runtime.mpi.session: the MPI session and the simulator "
        "share only the core",
    ]


def test_a_cycle_is_found_but_a_package_importing_its_own_modules_is_not_one():
    graph = {
        "hpcbench.cli": imports_of("from hpcbench.tuning import execute", "hpcbench.cli"),
        "hpcbench.tuning": set(),
        "hpcbench.tuning.execute": imports_of("def f():\n    from hpcbench.cli import main\n",
                                              "hpcbench.tuning.execute"),
        "hpcbench.algorithms": imports_of("from hpcbench.algorithms import ps", "hpcbench.algorithms"),
        "hpcbench.algorithms.ps": imports_of("from hpcbench.algorithms import decentral", "hpcbench.algorithms.ps"),
        "hpcbench.algorithms.decentral": set(),
    }
    assert cycles(graph) == [["hpcbench.cli", "hpcbench.tuning.execute"]]


def test_a_cycle_through_different_modules_of_each_part_is_found_at_the_package_level():
    """algorithms → results → comm → algorithms, as when comm/ took ``Lost`` from algorithms/ops.py: no
    module imports itself through the others, yet the parts do; modules of one part importing each
    other, or a top-level module importing another, are no cycle."""
    def graph_of(sources: dict[str, str]) -> dict[str, set[str]]:
        return {module: imports_of(source, module) for module, source in sources.items()}

    graph = graph_of({
        "hpcbench.algorithms": "",
        "hpcbench.algorithms.ops": "",
        "hpcbench.algorithms.ps": "from hpcbench.results.schema import Table\nfrom .ops import Recv",
        "hpcbench.results": "",
        "hpcbench.results.schema": "",
        "hpcbench.results.commfile": "from hpcbench.comm.linkfit import LinkFit",
        "hpcbench.comm": "",
        "hpcbench.comm.linkfit": "",
        "hpcbench.comm.transport": "from hpcbench.algorithms.ops import Lost",
        "hpcbench.config": "from hpcbench import errors",
        "hpcbench.errors": "",
    })
    assert cycles(graph) == []
    assert part_edges(graph)["hpcbench.config"] == {"hpcbench.errors"}
    assert part_cycles(graph) == [["hpcbench.algorithms", "hpcbench.comm", "hpcbench.results"]]
    graph["hpcbench.comm.transport"] = imports_of("from hpcbench.lost import Lost", "hpcbench.comm.transport")
    graph["hpcbench.lost"] = set()
    assert part_cycles(graph) == []


@pytest.mark.parametrize("module, source, rule", [
    ("hpcbench.algorithms.ps", "import torch", "algorithms stay pure"),
    ("hpcbench.algorithms.ps", "def f():\n    import time\n", "algorithms stay pure"),
    ("hpcbench.algorithms.ps", "from random import random", "algorithms stay pure"),
    ("hpcbench.runtime.mpi.session", "from mpi4py import MPI", "only comm/ touches mpi4py"),
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


@pytest.mark.slow  # a fresh Python
def test_the_cli_starts_without_torch_mpi4py_or_h5py():
    code = ("import sys, hpcbench.cli\n"
            "print(sorted(m for m in ('torch', 'mpi4py', 'h5py') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         cwd=PACKAGE.parent)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


@pytest.mark.slow  # a fresh Python
def test_a_timing_only_simulation_of_a_network_never_imports_torch(tmp_path):
    code = ("import sys\nfrom hpcbench.cli import main\n"
            f"code = main(['simulate', '--algo', 'asgd', '--model', 'cnn', '--workers', '3', '--steps', '2', "
            f"'--numerics', 'off', '--out', {str(tmp_path / 'sim.h5')!r}])\n"
            "print(code, 'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         cwd=PACKAGE.parent)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "0 False"


@pytest.mark.slow  # a fresh Python
def test_list_and_a_timing_only_simulation_of_every_network_never_import_torch(tmp_path):
    code = ("import sys\nfrom hpcbench.cli import main\nfrom hpcbench.workload.networks import NETWORKS\n"
            "codes = [main(['list'])] + [main(['simulate', '--algo', 'allreduce', '--model', name, '--workers', '2', "
            f"'--steps', '1', '--numerics', 'off', '--out', {str(tmp_path)!r} + f'/{{name}}.h5']) "
            "for name in NETWORKS.names()]\n"
            "print(codes, 'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         cwd=PACKAGE.parent)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1].endswith("] False") and "[0, 0, 0" in out.stdout.splitlines()[-1]


def test_the_package_says_it_is_typed():
    assert (PACKAGE / "py.typed").exists()
