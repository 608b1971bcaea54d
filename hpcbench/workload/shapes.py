"""The parameter shapes of each network in ``networks.py``, in the order torch lists them, from
arithmetic alone: a simulation with numerics off needs the model's size and layer boundaries but
never its values, so it need not import torch (a second of a command). Each network names its
function here where it is registered; a test holds each against the built network."""
from __future__ import annotations

from collections.abc import Callable

import numpy as np

from hpcbench.workload.compute import ComputeModel
from hpcbench.workload.datasets import Dataset

Shape = tuple[int, ...]
Shapes = Callable[[tuple[int, int, int], int], list[Shape]]


def linear(cin: int, cout: int) -> list[Shape]:
    return [(cout, cin), (cout,)]


def conv(cin: int, cout: int, k: int, bias: bool = True) -> list[Shape]:
    return [(cout, cin, k, k)] + ([(cout,)] if bias else [])


def batchnorm(channels: int) -> list[Shape]:
    return [(channels,), (channels,)]


def mlp(shape: tuple[int, int, int], classes: int) -> list[Shape]:
    c, h, w = shape
    return linear(c * h * w, 128) + linear(128, 128) + linear(128, classes)


def cnn(shape: tuple[int, int, int], classes: int) -> list[Shape]:
    c, h, w = shape
    return conv(c, 32, 3) + conv(32, 64, 3) + linear(64 * (h // 4) * (w // 4), 128) + linear(128, classes)


def resnet20(shape: tuple[int, int, int], classes: int) -> list[Shape]:
    out = conv(shape[0], 16, 3, bias=False) + batchnorm(16)
    cin = 16
    for cout, stride in ((16, 1), (32, 2), (64, 2)):
        for i in range(3):
            out += conv(cin, cout, 3, bias=False) + batchnorm(cout) + conv(cout, cout, 3, bias=False) + batchnorm(cout)
            if (stride if i == 0 else 1) != 1 or cin != cout:
                out += conv(cin, cout, 1, bias=False) + batchnorm(cout)
            cin = cout
    return out + linear(64, classes)


CNN_SMALL, CNN_TINY = (16, 32), (8, 16)  # the channels of the two conv stages of cnn-small and cnn-tiny


def two_conv(shape: tuple[int, int, int], classes: int, channels: tuple[int, int]) -> list[Shape]:
    c, h, w = shape
    c1, c2 = channels
    return conv(c, c1, 5) + conv(c1, c2, 5) + linear(c2 * (h // 4) * (w // 4), classes)


def cnn_small(shape: tuple[int, int, int], classes: int) -> list[Shape]:
    return two_conv(shape, classes, CNN_SMALL)


def cnn_tiny(shape: tuple[int, int, int], classes: int) -> list[Shape]:
    return two_conv(shape, classes, CNN_TINY)


class Sized:
    """A network's sizes and shapes without the network: the workload of a simulation with numerics
    off, where algorithms exchange a stand-in vector and the wire counts the real model's bytes."""

    compute: ComputeModel | None = None

    def __init__(self, shapes: Shapes, data: Dataset) -> None:
        self.data = data
        self.shapes = tuple(shapes(data.input_shape, data.classes))
        sizes = [int(np.prod(s)) for s in self.shapes]
        self.bounds = tuple(int(b) for b in np.cumsum([0] + sizes))
        self.size = self.bounds[-1]
        self.initial = np.zeros(0, np.float32)  # never trained: the algorithms get the stand-in

    @property
    def nbytes(self) -> int:
        return self.size * 4

    def batch(self, indices: np.ndarray) -> tuple[object, object]:
        raise self.untrained()

    def gradient(self, params: np.ndarray, x: object, y: object, buckets: tuple[tuple[int, int], ...] = (),
                 ready: object = None, out: object = None) -> tuple[np.ndarray, float, int]:
        raise self.untrained()

    def warm_up(self, indices: np.ndarray, steps: int) -> float:
        raise self.untrained()

    def evaluate(self, params: np.ndarray, test: int, val: int) -> tuple[float, float, float, float]:
        raise self.untrained()

    @staticmethod
    def untrained() -> RuntimeError:
        return RuntimeError("a sized model has no network: it serves simulations with numerics off")
