"""The checks ``run --dry-run`` makes, made by the commands that launch runs on this machine (``sweep
--local``, ``demo``, ``tune --mode mpi``, ``reproduce --mode mpi``) before they start any: once per
distinct configuration and world, with every rank of a world on this machine (its memory holds all their
copies of the model), from the model's sizes alone. A world that cannot run is one line naming the run
and the limit, before any ``mpiexec`` starts and before the output directory is made."""
from __future__ import annotations

from collections.abc import Iterable

from hpcbench.config import RunConfig
from hpcbench.errors import UsageError
from hpcbench.memory import check_memory
from hpcbench.runtime.assemble import assemble
from hpcbench.runtime.plan import prepare
from hpcbench.runtime.threads import cpu_count
from hpcbench.workload.datasets import Dataset, load_dataset

# A run to launch: its configuration and its world size (rank 0 and the workers).
Launch = tuple[RunConfig, int]
# What a rank takes before its model and data: a Python process with torch, numpy, h5py and mpi4py loaded
# (measured here: 160-230 MiB resident a rank; the shared libraries' pages are counted once, hence the floor).
RANK_BYTES = 150 << 20


def check_launches(launches: Iterable[Launch]) -> None:
    """Refuse, in one line starting with "ALGO on N ranks: ", the first launch that ``run --dry-run`` would
    refuse for its world with every rank on this machine."""
    checked: set[tuple[tuple[str, ...], int]] = set()
    loaded: dict[tuple[object, ...], Dataset] = {}
    cores = cpu_count()
    for cfg, world in launches:
        label = f"{cfg.algo} on {world} ranks"
        # What tells the runs of a study apart and no check reads: their files and seeds.
        cfg = cfg.with_updates(out="", overwrite=False, seed=0)
        key = (tuple(cfg.to_argv()), world)
        if key in checked:
            continue
        checked.add(key)
        try:
            plan = prepare(cfg, "dry-run", workers=world - 1, cores=cores)
            source = (cfg.dataset, cfg.data_dir, repr(plan.tables.get(cfg.dataset)), cfg.val_fraction)
            if source not in loaded:
                loaded[source] = load_dataset(cfg.dataset, cfg.data_dir, plan.tables.get(cfg.dataset),
                                              cfg.val_fraction)
            assemble(plan, world - 1, sharing=world, values=False, data=loaded[source])
            check_memory(world * RANK_BYTES, f"{world} ranks here, each a Python process with torch loaded (about "
                         f"{RANK_BYTES >> 20} MiB before its model and data),", "fewer ranks on this machine")
        except UsageError as exc:
            raise UsageError(f"{label}: {exc}") from None
