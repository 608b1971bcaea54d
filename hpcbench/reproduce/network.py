"""``reproduce sgp --mode mpi --emulated``: the study's algorithms for real across emulated nodes at two
link rates, with messages large enough that the network matters, beside the simulator's prediction of
the same runs. The ratios to all-reduce are the study's claim in miniature; whether the simulator gets
them right is what lets its findings at 32 nodes stand."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from tabulate import tabulate

from hpcbench.reproduce.studies import Study
from hpcbench.terminal import wrapped

RATES = ("1gbit", "100mbit")
FLOATS = 1_000_000  # 4 MB messages: 32 ms over 1 Gbit/s, 320 ms over 100 Mbit/s, against 50 ms of compute
COMPUTE = "gamma:shape=100,mean=0.05"  # the study's batch compute, as in its simulations
WORKERS = 4  # one per node, rank 0 on a node of its own
STEPS = {"full": 20, "quick": 20, "teacher": 20, "teacher-quick": 20, "toy": 5}  # every preset
AGREE = 0.15  # the simulator agrees when its ratio is within 15% of the real one


@dataclass(frozen=True)
class Point:
    rate: str
    algo: str
    real: float  # samples/s; NaN when the run failed
    simulated: float
    failure: str = ""


OWNER = "reproduce"  # the cluster's --owner: one brought up by anyone else is neither reshaped nor taken down


def run(s: Study, out: Path, preset: str, timeout: float) -> list[Point]:
    """Every algorithm of ``s`` at each rate; the cluster is brought up for it and taken down after (one
    someone else brought up is left as it is, and the study says so in one line)."""
    from hpcbench.launch.emulated import bring_up, launching_as, take_down
    from hpcbench.runtime.sim.costs import link_bandwidth

    # One evaluation: a payload has no accuracy, and each evaluation reads every worker's 4 MB model
    # across the links after training (1.3 s an evaluation at 100 Mbit/s, none of it in samples/s).
    args = ["--model", "payload", "--set", f"payload.params={FLOATS}", "--compute", COMPUTE,
            "--steps", str(STEPS[preset]), "--set", "evals=1"]
    points = []
    (out / "emulated").mkdir(parents=True, exist_ok=True)
    with launching_as(OWNER):
        try:
            for rate in RATES:
                bring_up(OWNER, WORKERS + 1, rate)
                bandwidth = link_bandwidth(f"rate={rate}")
                assert bandwidth is not None
                for algo in s.algos:
                    points.append(point(algo, rate, args, bandwidth, out / "emulated" / f"{algo}-{rate}", timeout))
                    print(wrapped(f"emulated {rate}, {algo}: real {points[-1].real:.0f} samples/s, simulated "
                                  f"{points[-1].simulated:.0f}"
                                  f"{' (' + points[-1].failure + ')' if points[-1].failure else ''}"), flush=True)
        finally:
            take_down(OWNER)
    return points


def point(algo: str, rate: str, args: Sequence[str], bandwidth: float, out: Path, timeout: float) -> Point:
    """``algo`` for real across the cluster that is up and simulated beside it: both runs' samples/s."""
    from hpcbench.launch.emulated import real_and_simulated
    from hpcbench.results.store import read_run

    pair = real_and_simulated(algo, WORKERS + 1, args, bandwidth, out, timeout)
    if pair.failure:
        return Point(rate, algo, float("nan"), float("nan"), pair.failure)
    return Point(rate, algo, float(read_run(pair.real).summary["samples_per_s"]),
                 float(read_run(pair.simulated).summary["samples_per_s"]))


def section(points: Sequence[Point]) -> list[str]:
    """The report's section: per rate and algorithm, real and simulated samples/s and each one's ratio
    to all-reduce, and whether the simulator's ratios agree with the real ones."""
    base = {(p.rate, "real"): p.real for p in points if p.algo == "allreduce"}
    base.update({(p.rate, "sim"): p.simulated for p in points if p.algo == "allreduce"})
    rows, verdicts = [], []
    for p in points:
        real_ratio = p.real / base.get((p.rate, "real"), float("nan"))
        sim_ratio = p.simulated / base.get((p.rate, "sim"), float("nan"))
        rows.append([p.rate, p.algo, f"{p.real:.0f}", f"{p.simulated:.0f}", f"{p.simulated / p.real:.2f}",
                     f"{real_ratio:.2f}x", f"{sim_ratio:.2f}x"] if not p.failure else
                    [p.rate, p.algo, "FAILED: " + p.failure, "-", "-", "-", "-"])
        if p.algo != "allreduce" and not p.failure:
            agree = abs(sim_ratio / real_ratio - 1) <= AGREE
            verdicts.append(f"- {p.rate}, {p.algo}: real {real_ratio:.2f}x all-reduce's rate, simulated "
                            f"{sim_ratio:.2f}x: {'agrees' if agree else 'does not agree'} within {AGREE:.0%}")
    headers = ["link", "algorithm", "real samples/s", "simulated", "simulated / real", "real / all-reduce",
               "simulated / all-reduce"]
    return ["## Real runs across emulated nodes", "",
            f"{WORKERS} workers, one per emulated node and rank 0 on a fifth, links shaped to each rate both ways; "
            f"payload of {FLOATS:,} float32 per message, compute {COMPUTE} per batch; the simulator ran the same "
            "arguments over links of the same rate (MPICH's all-reduce).", "",
            tabulate(rows, headers=headers, tablefmt="github"), "", *verdicts, ""]


def as_json(points: Sequence[Point]) -> list[dict[str, Any]]:
    return [asdict(p) for p in points]
