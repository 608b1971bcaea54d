"""hpcbench calibrate: the simulator's models fitted to a real run."""
from __future__ import annotations

import argparse
from typing import Any


def add(sub: Any) -> None:
    p = sub.add_parser("calibrate", help="fit the simulator's compute and network models to a real run")
    p.add_argument("path", metavar="REAL.h5")
    p.add_argument("more", nargs="*", metavar="FAILED.h5",
                   help="more real runs that lost workers under ULFM (Open MPI's --with-ft ulfm), at other worker "
                        "counts: the failure costs (detection, the survivors' agreement and shrink) are fitted from "
                        "every run given that lost one, REAL.h5 included")
    p.add_argument("--noise", type=float, default=0.0, metavar="CV",
                   help="the links' noise to simulate with (coefficient of variation of a transfer's time, "
                        "as benchmarks/bare_exchange.py measures it; not fitted); default 0")
    p.add_argument("--network", metavar="COMM.h5", help="take the network from a sweep of it (hpcbench comm "
                   "--out COMM.h5) instead of fitting it from the run")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from hpcbench.results.commfile import measured_link
    from hpcbench.results.store import read_run
    from hpcbench.runtime.sim.calibrate import describe

    print(describe(read_run(args.path), args.noise, measured_link(args.network) if args.network else None,
                   [read_run(path) for path in args.more]))
    return 0

