"""``hpcbench comm``: the network's own sweep under MPI (every rank runs it), printed as nccl-tests and
OSU print theirs, written to one HDF5 file, and fitted per link class to the α–β model that
``simulate --network FILE`` and ``calibrate --network FILE`` take."""
from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from datetime import datetime, timezone

import numpy as np
from tabulate import tabulate

from hpcbench import __version__
from hpcbench.comm.linkfit import COLLECTIVES, FIT_OPS, LinkFit, bandwidths, fit_link
from hpcbench.errors import UsageError
from hpcbench.results.commfile import CommFile, CommRow, write_comm

GB = 1e9  # nccl-tests' GB/s


def comm_sweep(ops: Sequence[str], sizes: Sequence[int], iters: int, warmup: int, out: str,
               overwrite: bool) -> int:
    from pathlib import Path

    from hpcbench.comm import microbench

    rank, ranks, hosts = microbench.world()
    alone = [op for op in ops if op not in COLLECTIVES]
    if ranks < 2 and alone:
        raise UsageError(f"{alone[0]} needs 2 ranks or more, this world has 1: launch it with mpiexec -n N "
                         f"hpcbench comm (one rank alone runs --ops {','.join(COLLECTIVES)} only)")
    taken = microbench.from_rank0(Path(out).exists() and not overwrite)
    if taken:
        raise UsageError(f"{out} exists; choose another --out or add --overwrite")
    measured = microbench.sweep(ops, sizes, iters, warmup)
    if measured is None:  # not rank 0
        return 0
    rows, fits = tabulated(measured, ranks)
    data = CommFile({"hpcbench_version": __version__, "world_size": ranks, "hosts": ",".join(hosts),
                     "mpi_library_version": microbench.library(), "iters": iters, "warmup": warmup,
                     "created": datetime.now(timezone.utc).isoformat(timespec="seconds")},
                    rows, np.array([m.seconds for m in measured], dtype=np.float64), fits)
    path = write_comm(out, data, overwrite)
    print(text(data, len(set(hosts))))
    print(f"-> {path}", flush=True)
    if not fits:
        print("hpcbench: no link fitted (it takes two sizes or more of sendrecv, get or put)", file=sys.stderr)
    return 0


def tabulated(measured: Sequence, ranks: int) -> tuple[list[CommRow], list[LinkFit]]:
    """The rows of the file (means over the iterations, with nccl-tests' bandwidths), and a fit per link
    class: from sendrecv where it ran, else get, else put."""
    rows = []
    for m in measured:
        seconds = np.asarray(m.seconds, dtype=np.float64)
        mean = float(seconds.mean()) if seconds.size else math.nan
        algbw, busbw = bandwidths(m.op, m.nbytes, mean, ranks)
        rows.append(CommRow(m.op, m.link, m.peer, m.nbytes, mean, float(seconds.min(initial=math.inf)),
                            float(seconds.max(initial=-math.inf)), algbw, busbw))
    fits = []
    for link in dict.fromkeys(m.link for m in measured if m.peer >= 0):
        for op in FIT_OPS:
            mine = [m for m in measured if m.op == op and m.link == link]
            fit = fit_link(link, op, [m.nbytes for m in mine], [m.seconds for m in mine])
            if fit is not None:
                fits.append(fit)
                break
    return rows, fits


def text(data: CommFile, nodes: int) -> str:
    """The table (one row per operation, peer and size) and the fit lines."""
    table = [[r.op, r.link, "all" if r.peer < 0 else r.peer, r.bytes, r.bytes // 4, f"{r.time_s * 1e6:.2f}",
              f"{r.min_s * 1e6:.2f}", f"{r.algbw / GB:.3f}", f"{r.busbw / GB:.3f}"] for r in data.rows]
    head = (f"hpcbench comm: {data.attrs['world_size']} ranks on {nodes} node(s), {data.attrs['iters']} iterations "
            f"after {data.attrs['warmup']} warm-up ones; {data.attrs['mpi_library_version']}")
    lines = [head, "", tabulate(table, headers=["op", "link", "peer", "size (B)", "count (float)", "time (us)",
                                              "min (us)", "algbw (GB/s)", "busbw (GB/s)"],
                                disable_numparse=True, stralign="right")]
    for fit in data.fits:
        lines.append(f"\n{fit.link} links ({fit.op}, {fit.sizes} sizes): α {fit.alpha_s * 1e6:.2f} us, "
                     f"{fit.bandwidth / GB:.3f} GB/s, noise {fit.noise:.3f} → simulate --network {fit.network()}")
    return "\n".join(lines)
