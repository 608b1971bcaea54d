"""The three studies ``hpcbench reproduce`` runs: what each claims, and the runs that test it (pure).

Every study runs on the teacher task (``--dataset teacher``, the mlp) with one learning-rate recipe
for all its algorithms; a study's runs differ only in algorithm, worker count, seed and, for sgp,
the modeled network. Sizes come in three presets: ``full`` (the study as stated), ``quick`` (fewer
sizes, one seed, a shorter budget) and ``toy`` (seconds, for tests).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from hpcbench.errors import one_of

PRESETS = ("full", "quick", "toy")
RESNET50_PARAMS = 25_557_032  # torchvision's ResNet-50: the message size of the sgp study


@dataclass(frozen=True)
class Network:
    """A modeled interconnect: its name in tables, latency and bandwidth (bytes per second)."""

    name: str
    alpha_s: float
    bandwidth: float

    def flag(self) -> str:
        return f"alpha={self.alpha_s:g},bandwidth={self.bandwidth:g}"


ETHERNET_10G = Network("10 GbE", 30e-6, 1.25e9)
INFINIBAND_100G = Network("100 Gb/s InfiniBand", 1.5e-6, 12.5e9)


@dataclass(frozen=True)
class Size:
    """How big a preset makes a study."""

    workers: tuple[int, ...]
    seeds: tuple[int, ...]
    epochs: float
    samples: int  # teacher training samples


@dataclass(frozen=True)
class Point:
    """One run of a study."""

    algo: str
    workers: int
    seed: int
    variant: str = ""  # the sgp study's network; "" elsewhere
    args: tuple[str, ...] = ()  # run options beyond the study's common ones

    @property
    def stem(self) -> str:
        variant = "-" + "".join(c for c in self.variant.lower() if c.isalnum()) if self.variant else ""
        return f"{self.algo}-n{self.workers}-s{self.seed}{variant}"


@dataclass(frozen=True)
class Study:
    name: str
    title: str
    source: str
    claim: str
    algos: tuple[str, ...]
    sizes: dict[str, Size]
    common: tuple[str, ...]  # run options every point shares
    target: float  # accuracy for time to target
    networks: tuple[Network, ...] = ()  # sgp: one set of runs per network (the simulator's)
    message_params: int = 0  # sgp: messages as large as this many parameters
    setup: str = ""  # the model of the cluster, in words

    def points(self, preset: str) -> list[Point]:
        size = self.sizes[preset]
        variants: list[tuple[str, tuple[str, ...]]] = [(n.name, ("--network", n.flag())) for n in self.networks]
        return [Point(a, w, s, v, flags)
                for v, flags in variants or [("", ())] for w in size.workers for a in self.algos for s in size.seeds]

    def run_args(self, preset: str, steps: int = 0) -> list[str]:
        """The options every point shares; ``steps``: that many steps per worker instead of the epochs."""
        size = self.sizes[preset]
        budget = ["--steps", str(steps)] if steps else ["--epochs", f"{size.epochs:g}"]
        return [*self.common, *budget, "--set", f"teacher.samples={size.samples}",
                "--set", f"target_accuracy={self.target:g}"]


TOY = Size((2, 4), (0,), 1, 1_000)  # every study's toy size: seconds, for tests

# One recipe for every study: the mlp on the teacher task, single-worker rate 0.05, momentum 0.9, a
# warm-up of one epoch from 1/n of the rate, 25 evaluations of the global model over the budget.
COMMON = ("--dataset", "teacher", "--model", "mlp", "--batch-size", "32", "--lr", "0.05", "--momentum", "0.9",
          "--set", "warmup_epochs=1", "--set", "evals=25")

GAP_AWARE = Study(
    name="gap-aware",
    title="Gap-Aware staleness penalties (Barkai, Hakimi, Schuster, ICLR 2020, arXiv 1909.10802)",
    source="Barkai et al., ICLR 2020",
    claim="With momentum, asynchronous SGD that divides each gradient by its gap (GA) ends more accurate than "
          "dividing by its staleness (SA) and than plain ASGD, by a margin that grows with the number of workers; "
          "DANA-GA (GA on a look-ahead with per-worker momentum) is the strongest.",
    algos=("asgd", "sa-asgd", "ga-asgd", "dana-ga"),
    sizes={"full": Size((8, 16, 32, 64, 128), (0, 1, 2), 10, 50_000),
           "quick": Size((8, 32, 128), (0,), 4, 50_000),
           "toy": TOY},
    common=COMMON,
    target=0.7,
    setup="Simulated parameter server; worker compute gamma-distributed with shape 100 (coefficient of "
          "variation 0.1), 10 Gb/s links.",
)

JIN = Study(
    name="jin",
    title="Synchronous all-reduce against asynchronous averaging (Jin, Yuan, Iandola, Keutzer 2016, arXiv 1611.04581)",
    source="Jin et al. 2016",
    claim="Asynchronous methods (elastic averaging, gossip) reach the target accuracy sooner than synchronous "
          "all-reduce SGD up to about 32 nodes; all-reduce scales better toward about 100 nodes.",
    algos=("allreduce", "easgd", "gossip"),
    sizes={"full": Size((8, 16, 32, 64, 128), (0,), 10, 50_000),
           "quick": Size((8, 32, 128), (0,), 4, 50_000),
           "toy": TOY},
    common=COMMON + ("--set", "lr_scaling=sqrt"),
    target=0.7,
    setup="Compute calibrated from a real all-reduce run on this machine; links of the stated cluster: "
          "10 GbE (30 µs, 1.25 GB/s). All-reduce scales its rate by √n (its global batch is n·32).",
)

SGP = Study(
    name="sgp",
    title="Stochastic Gradient Push (Assran, Loizou, Ballas, Rabbat, ICML 2019, arXiv 1811.10792)",
    source="Assran et al., ICML 2019",
    claim="On 32 nodes over 10 GbE with a ResNet-50-sized model, SGP trains about 3x faster than all-reduce SGD "
          "with final accuracy within about one point; over a fast interconnect the gap shrinks.",
    algos=("allreduce", "sgp", "osgp"),
    sizes={"full": Size((16, 32), (0,), 10, 50_000),
           "quick": Size((16, 32), (0,), 3, 50_000),
           "toy": TOY},
    common=COMMON + ("--compute", "gamma:shape=100,mean=0.05"),
    target=0.7,
    networks=(ETHERNET_10G, INFINIBAND_100G),
    message_params=RESNET50_PARAMS,
    setup="Numerics of the mlp on the teacher task; every message and every per-parameter cost counted at "
          f"ResNet-50's {RESNET50_PARAMS:,} parameters; a batch computes in 50 ms (a GPU's ResNet-50 batch of 32); "
          "links of 10 GbE (30 µs, 1.25 GB/s) or 100 Gb/s InfiniBand (1.5 µs, 12.5 GB/s). The mlp's "
          "parameters make one all-reduce bucket, so all-reduce starts after the backward pass (DDP's overlap "
          "of ResNet-50's buckets, which would hide part of it, is not modeled); SGP's message is received "
          "before the next forward pass, OSGP's may be one iteration late.",
)

def mpi_args(args: Sequence[str]) -> list[str]:
    """A simulation's options for a real run: the modeled network and compute go (this machine's are real)."""
    out, items = [], iter(args)
    for a in items:
        if a in ("--network", "--compute"):
            next(items)
        else:
            out.append(a)
    return out


STUDIES = {s.name: s for s in (GAP_AWARE, JIN, SGP)}


def study(name: str) -> Study:
    if name not in STUDIES:
        raise one_of("study", name, list(STUDIES))
    return STUDIES[name]
