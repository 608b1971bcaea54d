"""hpcbench tune: a grid of learning-rate recipes, chosen on the validation split."""
from __future__ import annotations

import argparse
from typing import Any

from hpcbench.commands.values import at_least, seconds
from hpcbench.config import RunConfig
from hpcbench.launch.arguments import add_run_flags, configs_from_args
from hpcbench.tuning.grid import MAX_EXTENSIONS


def add(sub: Any) -> None:
    p = sub.add_parser("tune", help="a grid of learning-rate recipes, chosen on the validation split "
                       "(table, plot, TOML for --config)")
    p.add_argument("--algo", required=True, help="algorithm(s), comma-separated")
    p.add_argument("--workers", required=True, help="worker counts, comma-separated, e.g. 1,8,32")
    p.add_argument("--lr", required=True, help="rates to try, comma-separated, e.g. 0.01,0.02,0.05,0.1")
    p.add_argument("--momentum", help="momenta to try, comma-separated (default: the run options' momentum)")
    p.add_argument("--warmup-epochs", help="warm-ups to try, comma-separated (default: the run options')")
    p.add_argument("--lr-decay-epochs", help="decay schedules to try, ';'-separated, each epochs or none, "
                   "e.g. 'none;10,15'")
    p.add_argument("--lr-scaling", help="synchronous rate scalings to try: none,sqrt,linear")
    p.add_argument("--extend", type=at_least(0), default=MAX_EXTENSIONS, help="log steps the rate grid may grow "
                   f"past an edge when the choice sits on one (default {MAX_EXTENSIONS}; 0: the grid as given)")
    p.add_argument("--seeds", default="0,1,2", help="seeds per setting, comma-separated (default 0,1,2)")
    p.add_argument("--mode", default="sim", choices=("sim", "mpi"), help="simulator (default) or real MPI runs here")
    p.add_argument("--jobs", type=int, default=0, help="simulated runs at a time (default: the cores here)")
    p.add_argument("--timeout", type=seconds, default=1800.0, help="seconds allowed per run")
    p.add_argument("--out-dir", required=True, help="where runs/, tune.md, tune.png, tune.json and best/*.toml go")
    p.add_argument("--config", help="TOML file of run options for every run")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="run option for every run "
                   "(val_fraction defaults to 0.1 here)")
    add_run_flags(p, prefix="every run: ", grid=True)
    p.add_argument("--network", help="with --mode sim: alpha=SECONDS,bandwidth=BYTES_PER_S")
    p.add_argument("--heterogeneity", type=float, help="with --mode sim: per-worker speed variation")
    p.add_argument("--pauses", help="with --mode sim: PROB:SECONDS transient pauses per step")
    p.set_defaults(func=run, numerics=None)


def run(args: argparse.Namespace) -> int:
    import dataclasses

    from hpcbench.commands.shared import refuse_own_options
    from hpcbench.config import RUN_KEYS, table_argv
    from hpcbench.launch.preflight import check_launches
    from hpcbench.options.sim import SimConfig
    from hpcbench.runtime.plan import prepare
    from hpcbench.slurm.sweep import parse_algos
    from hpcbench.tuning.execute import jobs_or_cores
    from hpcbench.tuning.grid import expand, parse_decays, parse_floats, parse_ints
    from hpcbench.tuning.tune import Grid, tune

    algos = parse_algos(args.algo or "")
    workers = parse_ints(args.workers, "--workers", 1)
    seeds = parse_ints(args.seeds, "--seeds", 0)
    jobs = jobs_or_cores(args.jobs)
    settings = expand(parse_floats(args.lr, "--lr"),
                      parse_floats(args.momentum, "--momentum") if args.momentum else (),
                      parse_floats(args.warmup_epochs, "--warmup-epochs") if args.warmup_epochs else (),
                      parse_decays(args.lr_decay_epochs) if args.lr_decay_epochs else (),
                      [x for x in args.lr_scaling.split(",") if x] if args.lr_scaling else ())
    # The shared options as ``simulate`` or ``run`` would read them (the grid's own flags left out).
    shared = argparse.Namespace(**{**vars(args), "lr": None, "momentum": None, "seed": None, "algo": None,
                                   "out": None, "overwrite": None, "workers": None,
                                   "command": "simulate" if args.mode == "sim" else "run"})
    cfg, sim = configs_from_args(shared)
    refuse_own_options(cfg, "a tune's", "each run writes its own file under --out-dir/runs (and one whose file "
                       "says ok is kept)")
    held_out = cfg.val_fraction == 0  # tune chooses on the validation split: hold one out unless given
    if held_out:
        cfg = cfg.with_updates(val_fraction=0.1)
    launches = []
    for a in algos:  # refuse a bad grid before running anything: each of its runs' plans
        for st in settings:
            one = cfg.for_algo(a).with_updates(**{k: tuple(v) if isinstance(v, list) else v
                                                  for k, v in st.values().items()})
            if args.mode == "sim":
                for n in workers:
                    prepare(one, "simulate", dataclasses.replace(sim, workers=n))
            else:
                prepare(one)
                if st is settings[0]:  # (the settings differ in the recipe alone, which no world check reads)
                    launches += [(one, n + 1) for n in workers]
    check_launches(launches)  # real runs: run --dry-run's checks of each world, before any starts
    defaults = RunConfig().to_dict()
    base = {k: v for k, v in cfg.to_dict().items()
            if k in RUN_KEYS and k not in ("algo", "seed", "out", "overwrite") and v != defaults[k]}
    sim_values = {k: v for k, v in dataclasses.asdict(sim).items()
                  if k != "workers" and v != getattr(SimConfig(), k)}
    if held_out:
        print("tune: holding out 10% of the training set as the validation split (val_fraction=0.1)")
    grid = Grid(tuple(algos), tuple(workers), tuple(settings), tuple(seeds))
    run_args = cfg.to_argv() + table_argv("sim", sim, SimConfig(workers=sim.workers))
    return tune(grid, run_args, base, cfg.options, sim_values, args.out_dir, args.mode, jobs, args.timeout,
                args.extend)

