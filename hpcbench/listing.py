"""``hpcbench list`` (what can be run, with defaults) and ``hpcbench info`` (this environment)."""
from __future__ import annotations

import dataclasses
import os
import platform
import socket
import textwrap
from importlib import metadata

from tabulate import tabulate

from hpcbench import __version__
from hpcbench.algorithms import ALGORITHMS
from hpcbench.algorithms.compressors import COMPRESSORS
from hpcbench.config import GROUPS, toml_literal
from hpcbench.options import TABLES, option_tables
from hpcbench.ranges import choices_of, range_of
from hpcbench.workload.datasets import DATASETS
from hpcbench.workload.models import MODELS


def recipe() -> str:
    """The learning-rate recipe, naming the synchronous algorithms as the registry has them."""
    synchronous = ", ".join(name for name, cls in ALGORITHMS.items() if not cls.asynchronous)
    return textwrap.fill(
        "lr is the single-worker rate. Asynchronous algorithms apply every gradient at lr; synchronous ones "
        f"({synchronous}) scale it by lr_scaling: none (lr), linear (n·lr, as Goyal et al.) or sqrt (√n·lr). "
        "Every algorithm warms up linearly from 1/n of its rate over warmup_epochs, then decays by "
        "lr_decay_factor at lr_decay_epochs. The run line and the result file record what was applied.", 104)


GROUP_TITLES = {"Experiment": "the experiment", "Operations": "operations", "FaultInjection": "fault injection"}


def shown(f: dataclasses.Field) -> str:
    """A field's default as a user would write it (``--set`` and TOML), or the rule a placeholder
    default stands for."""
    if "resolves" in f.metadata:
        return str(f.metadata["resolves"])
    value = f.default if f.default is not dataclasses.MISSING else f.default_factory()  # type: ignore[misc,operator]
    return value if isinstance(value, str) else toml_literal(value)  # strings bare, as --set takes them


def valid(f: dataclasses.Field) -> str:
    """What a field takes, in words: a number's declared range (``>= 1 local steps``), a text's choices
    (``none | fp16 | bf16``), a switch's ``true | false``."""
    limits, choices = range_of(f), choices_of(f)
    if choices is not None:
        return " | ".join(choices)
    if f.type in (bool, "bool"):
        return "true | false"
    return limits.text() if limits is not None else ""


def rows(owner: str, options: type, skip: tuple[str, ...] = ()) -> list[list[str]]:
    return [[f"{owner}{f.name}", shown(f), valid(f)] for f in dataclasses.fields(options) if f.name not in skip]


def listing() -> str:
    algos = [[name, cls.family, cls.min_workers + 1, cls.summary] for name, cls in ALGORITHMS.items()]
    tables = option_tables()
    options = [row for name, table in tables.items() if not table.by_command for row in rows(f"{name}.", table.options)]
    others = [name for name, table in TABLES.items() if not table.by_command]
    parts = [
        "Algorithms",
        tabulate(algos, headers=["name", "family", "min ranks", "what it does"]),
        f"Algorithm, {' and '.join(others)} options (--set NAME.OPTION=VALUE, or a [NAME] table in --config)",
        tabulate(options, headers=["option", "default", "valid"]),
        "Simulator options (simulate: --set sim.OPTION=VALUE, or a [sim] table in --config; --workers,\n"
        "--numerics, --compute, --network, --pauses and --heterogeneity set the same fields)",
        tabulate(rows("sim.", tables["sim"].options), headers=["option", "default", "valid"]),
        "Models",
        tabulate(sorted((name, model.text) for name, model in MODELS.items()), headers=["name", "what it is"]),
        "Datasets",
        tabulate(sorted((name, spec.text, spec.source()) for name, spec in DATASETS.items()),
                 headers=["name", "what it is", "read from"]),
        "Compressions (allreduce.compress, local-sgd.compress; their options above)",
        tabulate([(name, cls.summary) for name, cls in COMPRESSORS.items()], headers=["name", "what it sends"]),
        *(part for group in GROUPS for part in (
            f"Run options, {GROUP_TITLES[group.__name__]} (flags, --set KEY=VALUE, or top-level keys in --config)",
            tabulate(rows("", group, skip=("options",)), headers=["key", "default", "valid"]))),
        "Learning-rate recipe (the same for every algorithm)",
        recipe(),
    ]
    return "\n\n".join(parts)


def environment() -> str:
    import torch

    from hpcbench.launch.local import fault_tolerance, mpi_family, mpiexec_path
    from hpcbench.runtime.provenance import SLURM_IDS, git_state, progress_mode
    from hpcbench.runtime.threads import cpu_count

    rows = [
        ["hpcbench", __version__],
        ["python", f"{platform.python_version()} ({platform.platform()})"],
        ["host", f"{socket.gethostname()}, {cpu_count()} usable cores"],
        ["torch", torch.__version__],
    ]
    if torch.cuda.is_available():
        names = ", ".join(torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count()))
        rows.append(["cuda", f"{torch.version.cuda}: {torch.cuda.device_count()} device(s): {names}"])
    else:
        rows.append(["cuda", "not available (workers train on the CPU)"])
    try:
        from hpcbench.comm.probe import mpi_library

        lib = mpi_library()
        rows += [["mpi4py", lib["mpi4py_version"]], ["mpi vendor", lib["mpi_vendor"]],
                 ["mpi library", lib["mpi_library_version"].splitlines()[0]],
                 ["mpi standard", lib["mpi_standard"]]]
    except Exception as exc:  # an MPI that cannot load is exactly what info must report
        rows.append(["mpi", f"cannot load: {exc}"])
    try:
        mpiexec = mpiexec_path()
        rows += [["mpiexec", f"{mpiexec} ({mpi_family(mpiexec)})"], ["fault tolerance", fault_tolerance(mpiexec)]]
    except Exception as exc:
        rows.append(["mpiexec", str(exc)])
    rows.append(["rma progress", progress_mode()])
    for pkg in ("h5py", "numpy", "tabulate"):
        try:
            rows.append([pkg, metadata.version(pkg)])
        except metadata.PackageNotFoundError:
            rows.append([pkg, "not installed"])
    commit, dirty = git_state()
    rows.append(["git", f"{commit}{' (dirty)' if dirty else ''}"])
    slurm = {k: os.environ[k] for k in SLURM_IDS if k in os.environ}
    rows.append(["slurm", ", ".join(f"{k}={v}" for k, v in slurm.items()) or "not inside a Slurm job"])
    return tabulate(rows, tablefmt="plain")
