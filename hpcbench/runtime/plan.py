"""From a command's configuration to a validated plan, in one pass (``prepare``), and from a plan to what an
algorithm sees: budget, schedule, context."""
from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from hpcbench.algorithms import ALGORITHMS, Algorithm, Context
from hpcbench.algorithms.compressors import COMPRESSORS, acts_only_with
from hpcbench.algorithms.schedule import Schedule, lr_scale
from hpcbench.config import Faults, RunConfig, Stragglers, asked_steps, validate_numbers
from hpcbench.errors import NoLauncher, UsageError
from hpcbench.options import TABLES, resolve
from hpcbench.options.sim import SimConfig
from hpcbench.results.paths import check_target
from hpcbench.runtime.threads import cpu_count
from hpcbench.workload.datasets import DATASETS
from hpcbench.workload.models import MODELS

MAX_SAMPLES = 2**53  # sample counts beyond this are no longer exact in the float64 columns of a result file
DEFAULT_TIME_LIMIT_S = 7 * 24 * 3600.0  # the longest a run may take outside Slurm, unless time_limit_s says


@dataclass(frozen=True)
class TimeLimit:
    """The longest a run may take, and where that limit comes from (``source``): ``seconds``, or what is
    left, when it starts, until ``end`` (a Slurm job's end, in seconds since the epoch)."""

    seconds: float
    source: str
    end: float | None = None

    def at(self, now: float) -> tuple[float, str]:
        """(seconds, source) for a run that starts at ``now``."""
        return (self.seconds if self.end is None else max(0.0, self.end - now)), self.source


@dataclass(frozen=True)
class Plan:
    """A command's validated configuration, made once by ``prepare`` and only read after: the algorithm
    chosen, every option table the run gives or uses (its algorithm's, its model's, its dataset's), the
    warnings its settings give, its time limit, and, where they are known before MPI starts, its workers
    and (``simulate``) its virtual cluster."""

    cfg: RunConfig
    algo: type[Algorithm]
    tables: Mapping[str, Any]
    warnings: tuple[str, ...] = ()  # settings that do nothing here, one line each (the run goes on)
    limit: TimeLimit = TimeLimit(DEFAULT_TIME_LIMIT_S, "the default time_limit_s of 7 days")
    workers: int | None = None  # checked against the algorithm (and, for run --dry-run, the world and cores)
    sim: SimConfig | None = None  # simulate's virtual cluster, checked with the run

    @property
    def options(self) -> Any:
        """The algorithm's options."""
        return self.tables[self.algo.name]

    def check_world(self, world_size: int, cores: int) -> None:
        """What the run checks once it knows its world and this machine (``run`` and its ``--dry-run`` both):
        every fault names a rank of the world, and the torch threads asked for fit in the cores."""
        beyond = [f for f in self.cfg.fault.items if f.rank >= world_size]
        if beyond:
            raise UsageError(f"fault {beyond[0]}: there is no rank {beyond[0].rank} (ranks 0..{world_size - 1})")
        self.check_threads(cores, "a rank")

    def check_threads(self, cores: int, who: str) -> None:
        """The torch threads asked for fit in the ``cores`` ``who`` may use here (more only take turns)."""
        if self.cfg.threads > cores:
            raise UsageError(f"threads = {self.cfg.threads} is more than the {cores} cores {who} here may use")

    def check_duration(self, steps: int, step_s: float, now: float) -> None:
        """Refuse a budget that cannot end in the time limit of a run that starts at ``now`` (below)."""
        check_duration(steps, step_s, self.limit.at(now))


# What a plan is made for: a configuration alone (a study's runs, tests), ``run`` under a launcher, ``run
# --dry-run``, or ``simulate``.
Mode = Literal["", "run", "dry-run", "simulate"]


def prepare(cfg: RunConfig, mode: Mode = "", sim: SimConfig | None = None, workers: int | None = None,
            size: int | None = None, cores: int = 0, environ: Mapping[str, str] = os.environ) -> Plan:
    """The one validation pass: every check of ``cfg`` that needs no MPI and no data, for ``mode``.

    ``sim``: simulate's virtual cluster, or the ``sim.*`` options a real run refuses; ``workers``: run
    ``--dry-run``'s ``--workers``; ``size``: the world size a launcher told (None: started by none);
    ``cores``: this machine's, which a dry run's torch threads must fit in."""
    dropped = refuse_sim_options(cfg, sim, workers) if sim is not None and mode != "simulate" else []
    plan = configured(cfg)
    warnings = dropped + idle_settings(plan)
    if mode == "run" and not cfg.warmup_steps and cfg.time_limit_s:
        warnings.append(f"warmup_steps = 0, so nothing measured how long a step takes: no estimate of the run "
                        f"against time_limit_s = {cfg.time_limit_s:g} s before it starts (the limit still ends the "
                        "run when it passes)")
    plan = dataclasses.replace(plan, warnings=tuple(warnings), limit=limit_of(cfg, environ))
    if mode in ("run", "dry-run"):
        workers = run_workers(cfg, mode == "dry-run", workers, size)
        if workers is not None:
            plan.check_world(workers + 1, cores)
    elif mode == "simulate":
        sim = sim if sim is not None else SimConfig()
        check_sim(plan, sim)
        plan.check_threads(cores or cpu_count(), "a simulation")
        workers = sim.workers
    if workers is not None:
        plan.algo.check(cfg, plan.options, workers)
    return dataclasses.replace(plan, workers=workers, sim=sim if mode == "simulate" else None)


def validate(cfg: RunConfig) -> Plan:
    """The plan of a configuration alone (a study's runs, tests): ``prepare`` without a command."""
    return prepare(cfg)


def configured(cfg: RunConfig) -> Plan:
    """The checks of the configuration itself: names, option tables, numbers, the output path."""
    if not cfg.algo:
        raise UsageError(f"choose an algorithm with --algo; valid: {', '.join(ALGORITHMS.names())}")
    algo = ALGORITHMS.get(cfg.algo)
    MODELS.get(cfg.model)
    DATASETS.get(cfg.dataset)
    tables = resolve(cfg)
    validate_numbers(cfg)
    if cfg.out:
        check_target(cfg.out, cfg.overwrite)
    return Plan(cfg, algo, tables)


def run_workers(cfg: RunConfig, dry_run: bool, workers: int | None, size: int | None) -> int | None:
    """``run``'s workers where they are known before MPI starts: ``--dry-run``'s (its ``--workers``, else
    the launcher's world size less rank 0); a real run's come with MPI."""
    if dry_run:
        if workers is None:
            if size is None:
                raise UsageError("--dry-run outside mpiexec needs --workers N (the world size is N + 1)")
            workers = size - 1
        return workers
    if workers is not None:
        raise UsageError("--workers goes with --dry-run; a run's workers are its world size minus 1")
    if size is None:  # started as one plain process, by no MPI launcher: the README's command
        ranks = max(5, ALGORITHMS.get(cfg.algo).min_workers + 1)
        raise NoLauncher(ranks, cfg.algo)  # the command line's own arguments are put in where it is known
    return None


def refuse_sim_options(cfg: RunConfig, sim: SimConfig, workers: int | None = None) -> list[str]:
    """Real runs take no ``sim.*`` options: they run on the machines, not on a virtual cluster. Fields a
    table of the run shares with the simulator are its own (``--model payload``'s compute model), and
    run's ``--workers`` is ``--dry-run``'s world, not the simulator's: ``sim.workers`` (from ``[sim]`` or
    ``--set``) other than that and the default is dropped, said in the warning returned."""
    own = {"workers", *(k for _, table in TABLES.items() if table.applies(cfg) for k in table.shares)}
    given = [f.name for f in dataclasses.fields(sim)
             if f.name not in own and getattr(sim, f.name) != getattr(SimConfig(), f.name)]
    if given:
        raise UsageError(f"{', '.join(f'sim.{k}' for k in given)}: simulate's options (its virtual cluster); "
                         "a real run takes none: remove them, or use simulate")
    if sim.workers in (SimConfig().workers, workers):
        return []
    return [f"sim.workers = {sim.workers}: simulate's virtual workers; a real run's are its world size minus 1 "
            "(mpiexec -n, or --dry-run's --workers), so it is dropped"]


def check_sim(plan: Plan, sim: SimConfig) -> None:
    """A simulation's own checks: its virtual cluster's ranges, its messages' size, the workers it kills."""
    sim.validate()
    compress = getattr(plan.options, "compress", "none")
    if sim.message_params and not COMPRESSORS.get(compress).whole_vectors:
        raise UsageError(f"sim.message_params counts whole-model messages at another size, and {plan.cfg.algo}"
                         f".compress = {compress} sends messages of the model's own making: leave out one or the other")
    simulated_deaths(plan.cfg.fault, sim.workers)


def simulated_deaths(faults: Faults, workers: int) -> dict[int, float]:
    """The workers a simulation kills, and when: ``kill`` faults on workers only (one line otherwise)."""
    for fault in faults.items:
        if fault.kind != "kill" or fault.phase:
            what = f"a {fault.kind} at {fault.phase}" if fault.phase else f"a {fault.kind}"
            raise UsageError(f"fault {fault}: a simulation kills workers at a time in training (kill:RANK@SECONDS); "
                             f"{what} needs the processes of a real run (hpcbench run): model slow workers in a "
                             "simulation with --stragglers or --pauses")
        if fault.rank == 0:
            raise UsageError(f"fault {fault}: rank 0 holds the model, and its failure ends a run; a simulation kills "
                             "workers (ranks 1..workers)")
        if fault.rank > workers:
            raise UsageError(f"fault {fault}: there is no rank {fault.rank} (workers are ranks 1..{workers})")
    return faults.kills()


# An algorithm's options that only act when another of its options is not at this value (the
# compressions' options say for themselves which compressions they act with).
ACTS_ONLY_WITHOUT = {("outer", "none"): ("outer_lr", "outer_momentum")}


def idle_settings(plan: Plan) -> list[str]:
    """Settings given that do nothing for this algorithm and its other settings, one line each (a run
    goes on with a warning: a sweep passes the same settings to several algorithms)."""
    cfg, algo = plan.cfg, plan.algo
    said = []
    if cfg.lr_scaling != "none" and algo.asynchronous:
        said.append(f"lr_scaling = {cfg.lr_scaling} does nothing for {algo.name}: an asynchronous method applies "
                    "each gradient at the single-worker rate")
    if cfg.nesterov and not cfg.momentum:
        said.append("nesterov = true does nothing with momentum 0: give --momentum too")
    given = cfg.options.get(algo.name, {})
    options = plan.options
    for (key, idle), needs in ACTS_ONLY_WITHOUT.items():
        unused = [k for k in needs if k in given]
        if unused and getattr(options, key, None) == idle:
            said.append(f"{algo.name}.{unused[0]} does nothing with {algo.name}.{key} = {idle}")
    if hasattr(options, "compress"):
        inert = [k for k, kinds in acts_only_with().items() if k in given and options.compress not in kinds]
        if inert:
            said.append(f"{algo.name}.{inert[0]} does nothing with {algo.name}.compress = {options.compress}")
    return said


def steps_per_worker(cfg: RunConfig, workers: int, train_size: int) -> int:
    """Each worker's equal share of the sample budget, in batches (at most ``max_steps``, when set)."""
    exact = asked_steps(cfg.steps, cfg.epochs, cfg.batch_size, workers, train_size)
    if not math.isfinite(exact):  # (a large finite budget is refused, with its numbers, by the budget check)
        raise UsageError(f"--epochs {cfg.epochs:g} over {train_size} samples is {exact:g} steps per worker, more "
                         "than can be counted exactly (2^53) or run; lower --epochs")
    steps = int(exact)
    return min(steps, cfg.max_steps) if cfg.max_steps else steps


def schedule_for(cfg: RunConfig, algo: type[Algorithm], workers: int, train_size: int) -> Schedule:
    """The same recipe for every algorithm: a warm-up from 1/n of the rate over ``warmup_epochs``.

    Synchronous methods step once per n gradients (a global batch of n·B), so ``lr_scaling`` may
    scale their rate with n (Goyal et al.: linear, warmed up from the single-worker rate).
    Asynchronous methods apply every gradient on its own, at the single-worker rate.
    """
    scaling = "none" if algo.asynchronous else cfg.lr_scaling
    lr = cfg.lr * lr_scale(scaling, workers)
    return Schedule(lr, lr / workers, train_size, cfg.warmup_epochs, tuple(cfg.lr_decay_epochs),
                    cfg.lr_decay_factor, scaling)


def make_context(validated: Plan, workers: int, params: np.ndarray, train_size: int,
                 bounds: tuple[int, ...] = (), shapes: tuple[tuple[int, ...], ...] = ()) -> Context:
    """What the plan's algorithm sees for ``workers`` workers: ``bounds``: the model's parameter
    boundaries in its flat vector; ``shapes``: each parameter's shape."""
    cfg, algo = validated.cfg, validated.algo
    steps = steps_per_worker(cfg, workers, train_size)
    budget = steps * workers * cfg.batch_size
    if budget > MAX_SAMPLES:
        raise UsageError(f"a budget of {budget:.3g} samples ({steps:.3g} steps per worker x {workers} workers x "
                         f"batch {cfg.batch_size}) cannot be counted exactly (at most 2^53) nor run; lower "
                         "--steps or --epochs")
    return Context(
        workers=workers, params=params, batch_size=cfg.batch_size, steps=steps, train_size=train_size,
        schedule=schedule_for(cfg, algo, workers, train_size), momentum=cfg.momentum, nesterov=cfg.nesterov,
        weight_decay=cfg.weight_decay, eval_every=max(1, budget // cfg.evals), seed=cfg.seed,
        options=validated.options, bounds=bounds, shapes=shapes,
    )


def straggler_ranks(stragglers: Stragglers, workers: int, seed: int) -> tuple[int, ...]:
    """The worker ranks slowed by ``--stragglers``: a seeded choice of round(fraction·n) of them, sorted."""
    if stragglers.fraction == 0:
        return ()
    count = round(stragglers.fraction * workers)
    chosen = np.random.default_rng([seed, 0x57A6]).permutation(workers)[:count]
    return tuple(sorted(int(i) + 1 for i in chosen))


def limit_of(cfg: RunConfig, environ: Mapping[str, str]) -> TimeLimit:
    """The longest this run may take, and where that limit comes from."""
    if cfg.time_limit_s:
        return TimeLimit(cfg.time_limit_s, "time_limit_s")
    end = environ.get("SLURM_JOB_END_TIME", "")
    if end.isdigit():
        return TimeLimit(0.0, f"the Slurm job's end (job {environ.get('SLURM_JOB_ID', '?')})", float(int(end)))
    return TimeLimit(DEFAULT_TIME_LIMIT_S, "the default time_limit_s of 7 days")


def check_duration(steps: int, step_s: float, limit: tuple[float, str]) -> None:
    """Refuse a budget that cannot end in time: ``steps`` per worker at ``step_s`` seconds each (the
    warm-up's gradient time, a lower bound of a step)."""
    seconds, source = limit
    estimate = steps * step_s
    if estimate > seconds:
        raise UsageError(f"{steps} steps per worker would take about {estimate / 3600:.3g} h at the "
                         f"{step_s * 1e3:.3g} ms per gradient the warm-up measured, more than {seconds / 3600:.3g} h "
                         f"allowed by {source}; lower --steps or --epochs, or raise --set time_limit_s=SECONDS")
