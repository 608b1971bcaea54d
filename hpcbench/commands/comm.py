"""hpcbench comm: the network's own sweep under MPI."""
from __future__ import annotations

import argparse
from typing import Any

from hpcbench.commands.values import at_least


def add(sub: Any) -> None:
    p = sub.add_parser("comm", help="the network's own sweep under MPI: latency and bandwidth of every operation "
                       "the algorithms use over message sizes, and an α–β fit per link class for simulate")
    p.add_argument("-b", "--minbytes", default="8", help="smallest message, bytes (K, M, G: powers of 1024; default 8)")
    p.add_argument("-e", "--maxbytes", default="16M", help="largest message (default 16M)")
    p.add_argument("-f", "--stepfactor", type=at_least(2), default=2, help="factor between sizes (default 2)")
    from hpcbench.comm.linkfit import OPS

    p.add_argument("--ops", default=",".join(OPS),
                   help=f"operations, comma-separated (default: all of {', '.join(OPS)})")
    p.add_argument("--iters", type=at_least(1), default=20, help="timed iterations per size (default 20)")
    p.add_argument("--warmup", type=at_least(0), default=5, help="untimed iterations first (default 5)")
    p.add_argument("--out", help="the HDF5 file (default results/comm-TIME.h5)")
    p.add_argument("--overwrite", action="store_true", help="replace --out if it exists")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from hpcbench.comm.linkfit import parse_bytes, parse_ops, sweep_sizes

    ops = parse_ops(args.ops)
    sizes = sweep_sizes(parse_bytes(args.minbytes, "-b"), parse_bytes(args.maxbytes, "-e"), args.stepfactor)
    from hpcbench.results.paths import utc_stamp
    from hpcbench.runtime.mpi.commsweep import comm_sweep

    out = args.out or f"results/comm-{utc_stamp()}.h5"
    return comm_sweep(ops, sizes, args.iters, args.warmup, out, args.overwrite)

