"""hpcbench simulate: the same algorithms on the simulator's virtual cluster."""
from __future__ import annotations

import argparse
from typing import Any

from hpcbench.commands.shared import warned
from hpcbench.launch.arguments import add_run_options, add_sim_flags, configs_from_args
from hpcbench.launch.local import env_rank


def add(sub: Any) -> None:
    p = sub.add_parser("simulate", help="the same algorithms on a virtual cluster of 1 to 4096 workers")
    add_run_options(p)
    add_sim_flags(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from hpcbench.runtime.plan import prepare
    from hpcbench.runtime.sim.session import simulate

    cfg, sim = configs_from_args(args)
    return simulate(warned(prepare(cfg, "simulate", sim), env_rank()))

