"""The studies ``hpcbench reproduce`` runs: what each claims, its sizes, schedule and arms (pure).

Every study runs under the protocol of ``reproduce.protocol``: a single-worker recipe tuned on the
validation split, the papers' schedule (linear warm-up, ×0.1 decays at half and three quarters of the
budget), arms that vary the contestable choices. Sizes come in presets, each with its task (data set,
model, evaluations): ``full`` (the study as stated, on Fashion-MNIST with cnn-tiny), ``quick`` (the same
task, fewer sizes and grid points, a shorter budget), ``teacher`` and ``teacher-quick`` (the synthetic
teacher task with the mlp: the studies as first run, checks of the machinery, not findings) and ``toy``
(seconds, for tests).
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from hpcbench.errors import one_of
from hpcbench.reproduce.protocol import DECAY_ARM, MOMENTUM_ARM, OWN_LR, SCALING_ARMS, SEQUENTIAL, SHARED
from hpcbench.tuning.grid import MAX_EXTENSIONS

PRESETS = ("full", "quick", "teacher", "teacher-quick", "toy")
RESNET50_PARAMS = 25_557_032  # torchvision's ResNet-50: the message size of the sgp study


@dataclass(frozen=True)
class Network:
    """A modeled interconnect: its name in tables, latency and bandwidth (bytes per second)."""

    name: str
    alpha_s: float
    bandwidth: float

    def flag(self) -> str:
        return f"alpha={self.alpha_s:g},bandwidth={self.bandwidth:g}"


ETHERNET_1G = Network("1 GbE", 50e-6, 0.125e9)
ETHERNET_10G = Network("10 GbE", 30e-6, 1.25e9)
INFINIBAND_100G = Network("100 Gb/s InfiniBand", 1.5e-6, 12.5e9)


@dataclass(frozen=True)
class Task:
    """What a study's runs learn and how they are scored: the data set and model, the evaluations of the
    global model over the budget (each on at most ``eval_samples`` of the test set and ``val_eval_samples``
    of the validation split, the last on all of both), and what a sample costs on one core here (for the
    running time stated up front; measured, a simulated run's training and its evaluations)."""

    name: str  # in words, for reports
    dataset: str
    model: str
    train_samples: int  # the training set, before a tenth is held out as the validation split
    test_samples: int
    evals: int
    eval_samples: int
    seconds_per_sample: float  # a training sample's gradient, simulated, one core
    seconds_per_eval_sample: float  # a sample scored (a forward pass)
    options: tuple[str, ...] = ()  # the data set's own (teacher.samples)
    sequential_factor: float = 1.0  # a single worker's sample over a simulated worker's (where many are batched)
    # the validation split during training (None: as the test set; 0: only at the last evaluation, which the
    # recipe's choice reads)
    val_eval_samples: int | None = None

    def args(self) -> tuple[str, ...]:
        val = () if self.val_eval_samples is None else ("--set", f"val_eval_samples={self.val_eval_samples}")
        return ("--dataset", self.dataset, "--model", self.model, *self.options, "--set", f"evals={self.evals}",
                "--set", f"eval_samples={self.eval_samples}", *val)

    def text(self) -> str:
        return (f"{self.name}: {self.train_samples:,} training samples of which {VAL_FRACTION:.0%} are held out as "
                f"the validation split, model {self.model}; accuracy on the whole test set ({self.test_samples:,} "
                f"samples), {self.evals} evaluations over the budget")

    def run_seconds(self, epochs: float, sequential: bool = False) -> float:
        """A run's compute on one core: its training samples and its evaluations (``sequential``: a single
        worker's)."""
        train = epochs * self.train_samples * (1 - VAL_FRACTION) * (self.sequential_factor if sequential else 1.0)
        val = round(VAL_FRACTION * self.train_samples)
        during = min(self.eval_samples if self.val_eval_samples is None else self.val_eval_samples, val)
        scored = (self.evals - 1) * (min(self.eval_samples, self.test_samples) + during) + self.test_samples + val
        return train * self.seconds_per_sample + scored * self.seconds_per_eval_sample


def teacher_task(samples: int) -> Task:
    """The synthetic teacher task (64 features, a fixed random teacher network) with the mlp, ``samples``
    training samples; every evaluation on the whole test set and validation split."""
    return Task("the teacher task (synthetic)", "teacher", "mlp", samples, 10_000, 25, 10_000, 0.6e-3 / 32, 2e-6,
                ("--set", f"teacher.samples={samples}"), sequential_factor=1.6 / 0.6)


# Fashion-MNIST with cnn-tiny, one thread here: 6,000 training and 17,000 scored samples a CPU-second
# (a study's runs share the machine's two cores: measured 1/3,300 s a sample at 2 jobs).
# 20 evaluations: a time to target is known to one evaluation interval (a twentieth of the budget); the
# validation split is scored at the last only (the recipe's choice reads it there): 2,000 test samples each
# evaluation keep the evaluations under a tenth of a run.
FASHION = Task("Fashion-MNIST (Zalando's 28x28 images of clothing, 10 classes)", "fashion-mnist", "cnn-tiny",
               60_000, 10_000, 20, 2_000, 1 / 4_000, 1 / 12_000, val_eval_samples=0)


@dataclass(frozen=True)
class Size:
    """How big a preset makes a study, its task, and the grids its protocol searches."""

    workers: tuple[int, ...]
    seeds: tuple[int, ...]
    epochs: float
    task: Task
    target: float  # accuracy for time to target: one the sequential recipe reaches with margin at this budget
    warmup_epochs: float  # linear warm-up from 1/n of the rate; then ×0.1 at DECAY_FRACTIONS of the budget
    recipe_lrs: tuple[float, ...]  # the single-worker grid
    recipe_momenta: tuple[float, ...]
    lr_factors: tuple[float, ...]  # the "own lr" arm: multiples of the recipe's rate
    extensions: int = MAX_EXTENSIONS  # log steps a grid may grow past an edge

    @property
    def test_seeds(self) -> tuple[int, ...]:
        """Fresh seeds for the cells of an arm where some cell chose its setting on validation: their numbers
        come from their setting run again on these, never from the seeds that chose it."""
        return tuple(FRESH + s for s in self.seeds)

    @property
    def decay_epochs(self) -> tuple[float, ...]:
        return tuple(round(f * self.epochs, 6) for f in DECAY_FRACTIONS)


FRESH = 1000  # a cell's test seeds: its tuning seeds plus this (disjoint from any preset's tuning seeds)
DECAY_FRACTIONS = (0.5, 0.75)  # ×0.1 step decays at these fractions of the budget (the papers' schedule)
VAL_FRACTION = 0.1


@dataclass(frozen=True)
class Contender:
    """A name in a study's tables: an algorithm with options of its own (``diloco-h50``: local-sgd with
    a period of 50 and DiLoCo's outer step)."""

    name: str
    algo: str
    flags: tuple[str, ...] = ()
    outer_lrs: tuple[float, ...] = ()  # outer rates its cells choose among on validation (DiLoCo's)


@dataclass(frozen=True)
class Study:
    name: str
    title: str
    source: str
    claim: str
    algos: tuple[str, ...]
    sizes: dict[str, Size]
    common: tuple[str, ...]  # run options every run shares (the task's come from the preset)
    arms: tuple[str, ...]  # the protocol's arms (reproduce.protocol)
    scales: bool = False  # all-reduce's rate scaling is one of the study's choices (jin)
    networks: tuple[Network, ...] = ()  # sgp: one set of runs per network (the simulator's)
    message_params: int = 0  # sgp: messages as large as this many parameters
    setup: str = ""  # the model of the cluster, in words
    contenders: tuple[Contender, ...] = ()  # the names in algos that are not plain algorithms
    target: float = math.nan  # the accuracy of time to target: its preset's (``at``)

    def at(self, preset: str) -> Study:
        """The study as preset ``preset`` runs it (its target accuracy)."""
        return replace(self, target=self.sizes[preset].target)

    def contender(self, name: str) -> Contender:
        """What a name in ``algos`` runs: its contender, or the algorithm of that name."""
        return next((c for c in self.contenders if c.name == name), Contender(name, name))

    def algorithms(self) -> tuple[str, ...]:
        """The registry names its runs use: the recipe's single worker's, then each contender's."""
        return tuple(dict.fromkeys((SEQUENTIAL[0], *(self.contender(n).algo for n in self.algos))))

    def variants(self) -> list[tuple[str, tuple[str, ...]]]:
        """(name, run flags) of each network the study models; one unnamed variant without networks."""
        return [(n.name, ("--network", n.flag())) for n in self.networks] or [("", ())]

    def run_args(self, preset: str, steps: int = 0) -> list[str]:
        """The options every run shares; ``steps``: that many steps per worker instead of the epochs."""
        size = self.sizes[preset]
        budget = ["--steps", str(steps)] if steps else ["--epochs", f"{size.epochs:g}"]
        decays = ",".join(f"{e:g}" for e in size.decay_epochs)
        return [*size.task.args(), *self.common, *budget, "--set", f"target_accuracy={size.target:g}",
                "--set", f"warmup_epochs={size.warmup_epochs:g}", "--set", f"lr_decay_epochs=[{decays}]"]


RECIPE_LRS = (0.005, 0.01, 0.02, 0.05, 0.1)
# The findings: Fashion-MNIST with cnn-tiny, 3 epochs (sequential SGD ends near 89%; 85% is its target).
FULL = Size((8, 16, 32, 64, 128), (0, 1, 2), 3, FASHION, 0.85, 0.5, RECIPE_LRS, (0.0, 0.9), (0.25, 1, 4))
# quick: 8 and 16 workers for one epoch (at half an epoch neither all-reduce at 8 workers nor any asynchronous
# method came within 5 points of the sequential recipe, so every row was not meaningful)
QUICK = Size((8, 16), (0, 1, 2), 1, replace(FASHION, evals=6), 0.8, 0.2, (0.01, 0.03, 0.1), (0.0, 0.9),
             (0.25, 1, 4))
# The studies as first run, on the synthetic teacher task: a check of the machinery, not a finding.
TEACHER_NOTE = "the synthetic teacher task, where every method's best runs end at 71-72%"
TEACHER = Size((8, 16, 32, 64, 128), (0, 1, 2), 20, teacher_task(25_000), 0.7, 5, RECIPE_LRS, (0.0, 0.9),
               (0.25, 1, 4, 16, 64))
TEACHER_QUICK = Size((8, 128), (0, 1, 2), 8, teacher_task(25_000), 0.7, 2, (0.01, 0.03, 0.1), (0.0, 0.9), (0.25, 1, 4))
TOY = Size((2, 4), (0,), 1, teacher_task(1_000), 0.7, 0, (0.05,), (0.0, 0.9), (0.5, 1), extensions=0)  # tests


def presets(full: Size = FULL, quick: Size = QUICK, teacher: Size = TEACHER, teacher_quick: Size = TEACHER_QUICK,
            toy: Size = TOY) -> dict[str, Size]:
    return {"full": full, "quick": quick, "teacher": teacher, "teacher-quick": teacher_quick, "toy": toy}


# Every study's runs: batches of 32, a tenth of the training set held out for validation.
COMMON = ("--batch-size", "32", "--set", f"val_fraction={VAL_FRACTION:g}")

GAP_AWARE = Study(
    name="gap-aware",
    title="Gap-Aware staleness penalties (Barkai, Hakimi, Schuster, ICLR 2020, arXiv 1909.10802)",
    source="Barkai et al., ICLR 2020",
    claim="With momentum, asynchronous SGD that divides each gradient by its gap (GA) ends more accurate than "
          "dividing by its staleness (SA) and than plain ASGD, by a margin that grows with the number of workers; "
          "DANA-GA (GA on a look-ahead with per-worker momentum) is the strongest.",
    algos=("asgd", "sa-asgd", "ga-asgd", "dana-ga"),
    # full: 8-64 (at 3 epochs a worker of 128 takes 40 steps, too few for any method to train)
    sizes=presets(replace(FULL, workers=(8, 16, 32, 64))),
    common=COMMON + ("--compute", "gamma:shape=100,mean=0.05"),
    arms=(SHARED, OWN_LR, MOMENTUM_ARM.format(0), MOMENTUM_ARM.format(0.9), DECAY_ARM),
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
    sizes=presets(),
    common=COMMON,
    arms=(SHARED, *SCALING_ARMS, OWN_LR),
    scales=True,
    setup="Compute calibrated from a real all-reduce run on this machine; links of the stated cluster: "
          "10 GbE (30 µs, 1.25 GB/s); a ring all-reduce. All-reduce's global batch is n·32: its rate scaling "
          "(none, √n, n) is an arm of its own and, in the shared arm, chosen on validation at each size.",
)

SGP = Study(
    name="sgp",
    title="Stochastic Gradient Push (Assran, Loizou, Ballas, Rabbat, ICML 2019, arXiv 1811.10792)",
    source="Assran et al., ICML 2019",
    claim="On 32 nodes over 10 GbE with a ResNet-50-sized model, SGP trains about 3x faster than all-reduce SGD "
          "with final accuracy within about one point; over a fast interconnect the gap shrinks.",
    algos=("allreduce", "sgp", "osgp"),
    sizes=presets(*(replace(size, workers=(16, 32)) for size in (FULL, QUICK, TEACHER, TEACHER_QUICK))),
    common=COMMON + ("--compute", "gamma:shape=100,mean=0.05"),
    arms=(SHARED, OWN_LR),
    networks=(ETHERNET_10G, INFINIBAND_100G),
    message_params=RESNET50_PARAMS,
    setup="The task's numerics (the preset's data set and model); every message and every per-parameter cost "
          f"counted at ResNet-50's {RESNET50_PARAMS:,} parameters; a batch computes in 50 ms (a GPU's ResNet-50 "
          "batch of 32); links of 10 GbE (30 µs, 1.25 GB/s) or 100 Gb/s InfiniBand (1.5 µs, 12.5 GB/s); a ring "
          "all-reduce (NCCL's, the paper's baseline). The model's parameters make one all-reduce bucket, so "
          "all-reduce starts after the backward pass (DDP's overlap of ResNet-50's buckets, which would hide part "
          "of it, is not modeled); SGP's message is received before the next forward pass, OSGP's may be one "
          "iteration late.",
)

DILOCO_PERIODS = (5, 15)  # H: inner steps between outer steps (each setting gets ≥ 10 outer rounds)
DILOCO_OUTER_LRS = (0.3, 0.7, 1.0)  # the outer rate, chosen on validation in each cell (OpenDiLoCo's is 0.7)
# DiLoCo as the paper runs it: AdamW inner steps (with its weight decay, 0.1), an outer Nesterov step with
# momentum 0.9 (written out, so the study says it whatever the defaults become).
DILOCO_INNER = ("--set", "local-sgd.inner=adamw", "--set", "weight_decay=0.1")
DILOCO_OUTER = ("--set", "local-sgd.outer=nesterov", "--set", "local-sgd.outer_momentum=0.9")

DILOCO = Study(
    name="diloco",
    title="DiLoCo: local SGD with an outer Nesterov step (Douillard et al. 2023, arXiv 2311.08105)",
    source="Douillard et al. 2023",
    claim="DiLoCo (H local steps, then an outer Nesterov step on the workers' averaged pseudo-gradient) matches "
          "synchronous all-reduce SGD's final accuracy with H times less communication, and so finishes the same "
          "budget sooner where the network is slow.",
    algos=("allreduce", "allreduce-adamw", f"local-sgd-h{DILOCO_PERIODS[-1]}",
           *(f"diloco-h{h}" for h in DILOCO_PERIODS)),
    # DiLoCo's claims are at 8 workers; the sizes beyond keep at least 10 outer rounds at the longest period.
    # full: 8 and 16 (32, beyond the paper's setting like 16, would add an hour on 2 cores and decide nothing)
    sizes=presets(replace(FULL, workers=(8, 16)), replace(QUICK, workers=(8,)),
                  replace(TEACHER, workers=(8, 16, 32, 64)), replace(TEACHER_QUICK, workers=(8, 32))),
    common=COMMON + ("--compute", "gamma:shape=100,mean=0.05"),
    arms=(SHARED, OWN_LR),
    scales=True,
    networks=(ETHERNET_1G,),
    message_params=RESNET50_PARAMS,
    contenders=(Contender("allreduce-adamw", "allreduce", ("--set", "allreduce.optimizer=adamw", "--set",
                                                           "weight_decay=0.1")),
                Contender(f"local-sgd-h{DILOCO_PERIODS[-1]}", "local-sgd",
                          ("--set", f"local-sgd.period={DILOCO_PERIODS[-1]}", *DILOCO_INNER)),
                *(Contender(f"diloco-h{h}", "local-sgd", ("--set", f"local-sgd.period={h}", *DILOCO_INNER,
                                                          *DILOCO_OUTER), DILOCO_OUTER_LRS)
                  for h in DILOCO_PERIODS)),
    setup="The task's numerics (the preset's data set and model); every message and per-parameter cost counted at "
          f"ResNet-50's {RESNET50_PARAMS:,} parameters; a batch computes in 50 ms; links of 1 GbE (50 µs, 125 MB/s), "
          f"slow as DiLoCo's setting is; a ring all-reduce. The inner optimizer is AdamW (weight decay 0.1), as the "
          f"paper's; the outer step Nesterov with momentum 0.9 at a rate chosen on validation in each cell from "
          f"{', '.join(map(str, DILOCO_OUTER_LRS))}; H = {' and '.join(map(str, DILOCO_PERIODS))}, so every size "
          f"has at least 10 outer rounds. local-sgd-h{DILOCO_PERIODS[-1]} is plain model averaging every "
          f"{DILOCO_PERIODS[-1]} steps with the same AdamW inner steps (the same communication as "
          f"diloco-h{DILOCO_PERIODS[-1]}, without the outer step). All-reduce is the suite's synchronous SGD with "
          "the recipe's momentum, its global batch n·32 and its rate scaling (none, √n, n) chosen on validation at "
          "each size, in every arm; allreduce-adamw is the paper's baseline, all-reduce with AdamW (weight decay 0.1) "
          "on the mean gradient, its rate not scaled. AdamW's rates (inner and baseline) are the SGD recipe's in the "
          "shared arm, so an AdamW cell that did not train there says nothing of AdamW; the own-lr arm searches "
          "multiples of it and grows past the grid's edge.",
)


def outer_rounds(size: Size, workers: int, period: int, batch: int = 32) -> float:
    """Outer rounds a DiLoCo run of ``size`` at ``workers`` takes: steps per worker over H."""
    return size.epochs * size.task.train_samples * (1 - VAL_FRACTION) / (batch * workers) / period


RESILIENCE = Study(
    name="resilience",
    title="What losing workers costs: asynchronous and decentralised methods against a shrinking all-reduce",
    source="the papers of the asynchronous methods (Dean et al. 2012; Zhang et al. 2015; Jin et al. 2016) and torchft",
    claim="Asynchronous and decentralised methods lose less to failing workers than synchronous all-reduce SGD, "
          "which must detect the failure, agree and shrink at a collective: beyond the capacity the failures "
          "remove (the same for every method), they lose less time, and they lose no more final accuracy.",
    algos=("allreduce", "ga-asgd", "easgd", "gossip"),
    # toy: a budget that lasts a few hundred ms in real runs here, so a failure lands before the end
    sizes=presets(replace(FULL, workers=(8, 16, 32, 64)),
                  teacher_quick=replace(TEACHER_QUICK, workers=(8, 32, 128)),
                  toy=replace(TOY, task=teacher_task(4_000))),
    common=COMMON + ("--compute", "gamma:shape=100,mean=0.05"),
    arms=(SHARED,),
    setup="Simulated workers that fail as ULFM lets the others go on (each run's failures drawn from a scenario: a "
          "node MTBF, one early failure, a quarter of the workers at once; the survivors learn of a failure 15 ms "
          "later); worker compute gamma-distributed with shape 100, 10 Gb/s links.",
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


STUDIES = {s.name: s for s in (GAP_AWARE, JIN, SGP, DILOCO, RESILIENCE)}


def study(name: str) -> Study:
    if name not in STUDIES:
        raise one_of("study", name, list(STUDIES))
    return STUDIES[name]
