"""``hpcbench comm``: the network's own sweep under MPI (every rank runs it), printed as nccl-tests and
OSU print theirs, written to one HDF5 file, and fitted per link class to the α–β model that
``simulate --network FILE`` and ``calibrate --network FILE`` take."""
from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from datetime import datetime, timezone

import numpy as np

from hpcbench import __version__
from hpcbench.comm.linkfit import COLLECTIVES, ELEMENT_BYTES, FIT_OPS, LinkFit, bandwidths, fit_link
from hpcbench.errors import UsageError
from hpcbench.results.commfile import CommFile, CommRow, write_comm


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
    table, warnings = text(data, len(set(hosts)))
    print(table)
    print(f"-> {path}", flush=True)
    for line in warnings:
        print(line, file=sys.stderr, flush=True)
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


# A fit is not one to trust where a size's median lies further than MISFIT (relative) from its line, or where a
# size's iterations spread (p10 to p90) by more than SPREAD of their median, the median over the sizes.
MISFIT, SPREAD = 0.5, 0.5


def doubts(fit: LinkFit, sizes: Sequence[int], times: Sequence[Sequence[float]]) -> list[str]:
    """Why ``fit`` (of these sizes' per-iteration seconds) is not one to trust; [] when it is."""
    x = np.asarray(sizes, dtype=np.float64)
    med = np.array([np.median(t) for t in times])
    line = fit.alpha_s + x / fit.bandwidth
    off = np.abs(med - line) / line
    worst = int(np.argmax(off))
    said = []
    if off[worst] > MISFIT:
        said.append(f"{sizes[worst]} B's median {off[worst]:.0%} off the line")
    spread = float(np.median([(np.percentile(t, 90) - np.percentile(t, 10)) / np.median(t) for t in times]))
    if spread > SPREAD:
        said.append(f"p10-p90 spread {spread:.0%} of p50")
    return said


# What each operation's time per iteration is (docs/comm.md, "What is measured").
TIMED = {"allreduce": "the slowest rank's", "allgather": "the slowest rank's", "sendrecv": "half the round trip",
         "fetch_add": "one 64-bit fetch-and-add and its flush"}


def rate(bytes_per_s: float) -> str:
    """A rate in the unit that keeps it readable (1 to 999 of it, three digits): ``49.7 GB/s``, ``4.10 MB/s``."""
    if not math.isfinite(bytes_per_s) or bytes_per_s <= 0:
        return "- -"
    for unit, scale in (("GB/s", 1e9), ("MB/s", 1e6), ("KB/s", 1e3), ("B/s", 1.0)):
        if bytes_per_s >= 0.9995 * scale or unit == "B/s":  # (what would round to 1000 goes up a unit)
            value = bytes_per_s / scale
            return f"{value:.{0 if value >= 99.95 else 1 if value >= 9.995 else 2}f} {unit}"
    raise AssertionError("unreachable")


def block(rows: Sequence[tuple[CommRow, np.ndarray]], ranks: int) -> list[str]:
    """One operation's sizes on one link, as OSU and nccl-tests print theirs: a ``#`` header with the units,
    a row per size (its percentiles over the iterations; the bandwidths from the median)."""
    cells = []
    for r, seconds in rows:
        p50, p90 = (float(np.percentile(seconds, q)) if seconds.size else math.nan for q in (50, 90))
        algbw, busbw = bandwidths(r.op, r.bytes, p50, ranks)
        count = 1 if r.op == "fetch_add" else r.bytes // ELEMENT_BYTES
        cells.append([str(r.bytes), str(count), f"{p50 * 1e6:.2f}", f"{p90 * 1e6:.2f}", f"{r.min_s * 1e6:.2f}",
                      rate(algbw), rate(busbw)])
    head = ["size (B)", "count (elements)", "p50 (µs)", "p90 (µs)", "min (µs)", "algbw", "busbw"]
    widths = [max(len(h), *(len(c[i]) for c in cells)) + 2 for i, h in enumerate(head)]
    first = rows[0][0]
    who = "all ranks" if first.peer < 0 else f"{first.link}, rank 0 and rank {first.peer}"
    return [f"# {first.op}, {who}; time: {TIMED.get(first.op, 'one operation and its flush')}",
            "#" + "".join(h.rjust(w) for h, w in zip(head, widths))[1:],
            *("".join(c.rjust(w) for c, w in zip(cell, widths)) for cell in cells)]


def text(data: CommFile, nodes: int) -> tuple[str, list[str]]:
    """The table (a block per operation and link, a row per size) and the fit lines; → (it, warning lines: a
    fit not to be trusted, said instead of its ``--network`` value)."""
    ranks = int(data.attrs["world_size"])
    lines = [f"# hpcbench comm: {ranks} ranks on {nodes} node(s), {data.attrs['iters']} iterations after "
             f"{data.attrs['warmup']} warm-up ones; {data.attrs['mpi_library_version']}",
             "# p50, p90: percentiles over the iterations; p50 (the median) is what the fit uses, and algbw is the",
             "# size over it (GB/s: 10^9 bytes/s); busbw = algbw x 2(n-1)/n for allreduce, x (n-1) for allgather"]
    blocks: dict[tuple[str, str, int], list[tuple[CommRow, np.ndarray]]] = {}
    for r, seconds in zip(data.rows, data.seconds):
        blocks.setdefault((r.op, r.link, r.peer), []).append((r, np.asarray(seconds, dtype=np.float64)))
    for rows in blocks.values():
        lines += ["", *block(rows, ranks)]
    warnings = []
    for fit in data.fits:
        mine = [(r.bytes, seconds) for r, seconds in zip(data.rows, data.seconds)
                if (r.op, r.link) == (fit.op, fit.link)]
        doubted = doubts(fit, [n for n, _ in mine], [t for _, t in mine])
        said = (f"{fit.link} links ({fit.op}, {fit.sizes} sizes): α {fit.alpha_s * 1e6:.2f} µs, "
                f"{rate(fit.bandwidth)}, noise {fit.noise:.3f}")
        if doubted:
            lines.append(f"\n{said}")
            warnings.append(f"hpcbench: warning: the {fit.link} fit is doubtful ({'; '.join(doubted)}): sweep "
                            "again, more --iters")
        else:
            lines.append(f"\n{said} → simulate --network {fit.network()}")
    return "\n".join(lines), warnings
