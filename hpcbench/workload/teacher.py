"""The teacher task: a classification problem generated from code, large enough for 128 workers.

Inputs are seeded standard-normal vectors of 64 features (shaped 1×8×8, so every model applies);
labels are the most likely class of a fixed random teacher network (64 → 16 tanh → 10), and a
fraction of them (``noise``) are then replaced by uniformly random classes. Nothing is downloaded.
The data depend only on the options, never on a run's ``--seed``: every run sees the same task.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hpcbench.ranges import bounded

FEATURES = 64  # input features, stored as 1×8×8 "images"
HIDDEN = 16  # the teacher's hidden tanh units
SHARPNESS = 1.5  # scale of the teacher's first layer: larger = more bends in the class boundaries
CLASSES = 10
DATA_SEED = 20261123
MAX_SAMPLES = 10_000_000


@dataclass(frozen=True)
class TeacherOptions:
    """``--set teacher.KEY=VALUE``: the size and label noise of the generated task."""

    samples: int = bounded(50_000, low=1, high=MAX_SAMPLES, unit="samples")  # training samples
    test_samples: int = bounded(10_000, low=1, high=MAX_SAMPLES, unit="samples")  # held-out samples
    noise: float = bounded(0.05, low=0, high=1)  # fraction of labels replaced by a uniformly random class


def teacher_weights() -> tuple[np.ndarray, np.ndarray]:
    """The fixed teacher: (64×16 first layer, 16×10 second layer)."""
    rng = np.random.default_rng([DATA_SEED, 0])
    w1 = rng.normal(size=(FEATURES, HIDDEN)) * (SHARPNESS / np.sqrt(FEATURES))
    w2 = rng.normal(size=(HIDDEN, CLASSES)) / np.sqrt(HIDDEN)
    return w1, w2


def teacher_labels(x: np.ndarray) -> np.ndarray:
    """The teacher's class for each row of ``x`` (N×64), before label noise."""
    w1, w2 = teacher_weights()
    return (np.tanh(x.astype(np.float64) @ w1) @ w2).argmax(1).astype(np.int64)


def generate(n: int, noise: float, stream: int) -> tuple[np.ndarray, np.ndarray]:
    """``n`` samples of stream ``stream`` (0: training, 1: test): (N×1×8×8 float32, N int64 labels)."""
    rng = np.random.default_rng([DATA_SEED, 1, stream])
    x = rng.standard_normal((n, FEATURES), dtype=np.float32)
    y = teacher_labels(x)
    flipped = rng.random(n) < noise
    y[flipped] = rng.integers(0, CLASSES, int(flipped.sum()))
    return x.reshape(n, 1, 8, 8), y
