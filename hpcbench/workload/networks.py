"""The networks behind the model names, each registered once by ``@network``: its line for ``hpcbench
list``, its torch builder and its parameter shapes computed without torch (``shapes.py``). Each
builder imports torch when it builds, so this module, ``hpcbench list`` and a simulation with numerics
off never do; ``tests/test_workload.py`` holds every registered network's shapes against its build."""
from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from hpcbench.registry import Registry
from hpcbench.workload import shapes

if TYPE_CHECKING:
    from torch import nn

Builder = Callable[[tuple[int, int, int], int], "nn.Module"]


@dataclass(frozen=True)
class Network:
    """``build(input shape C×H×W, classes)`` makes the module from torch's global generator;
    ``shapes`` (same arguments) lists its parameters' shapes in torch's order, without torch."""

    text: str
    build: Builder
    shapes: shapes.Shapes


NETWORKS: Registry[Network] = Registry("model")


def network(name: str, text: str, sizes: shapes.Shapes) -> Callable[[Builder], Builder]:
    """Register the decorated builder as model ``name``, with its line for ``hpcbench list`` and its shapes."""
    def add(build: Builder) -> Builder:
        NETWORKS.register(name)(Network(text, build, sizes))
        return build

    return add


@network("mlp", "two hidden layers of 128 ReLU units", shapes.mlp)
def mlp(shape: tuple[int, int, int], classes: int) -> nn.Module:
    from torch import nn

    c, h, w = shape
    return nn.Sequential(
        nn.Flatten(), nn.Linear(c * h * w, 128), nn.ReLU(), nn.Linear(128, 128), nn.ReLU(),
        nn.Linear(128, classes),
    )


@network("cnn", "two 3x3 conv + max-pool stages (32, 64 channels) and a 128-unit dense layer", shapes.cnn)
def cnn(shape: tuple[int, int, int], classes: int) -> nn.Module:
    from torch import nn

    c, h, w = shape
    return nn.Sequential(
        nn.Conv2d(c, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(64 * (h // 4) * (w // 4), 128), nn.ReLU(), nn.Linear(128, classes),
    )


@network("resnet20", "ResNet-20 for CIFAR (3 stages of 3 basic blocks, 16/32/64 channels, BatchNorm)", shapes.resnet20)
def resnet20(shape: tuple[int, int, int], classes: int) -> nn.Module:
    from hpcbench.workload.resnet import ResNet20

    return ResNet20(shape, classes)


def two_conv(shape: tuple[int, int, int], classes: int, channels: tuple[int, int]) -> nn.Module:
    """Two 5x5 conv + ReLU + 2x2 max-pool stages of ``channels`` and a linear head (no BatchNorm)."""
    from torch import nn

    c, h, w = shape
    c1, c2 = channels
    return nn.Sequential(
        nn.Conv2d(c, c1, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(c1, c2, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(c2 * (h // 4) * (w // 4), classes),
    )


@network("cnn-small", "two 5x5 conv + max-pool stages (16, 32 channels) and a linear head, no BatchNorm: 29k "
                      "parameters on 28x28 (Fashion-MNIST), 35k on 32x32x3", shapes.cnn_small)
def cnn_small(shape: tuple[int, int, int], classes: int) -> nn.Module:
    return two_conv(shape, classes, shapes.CNN_SMALL)


@network("cnn-tiny", "cnn-small at half its width (8, 16 channels): 11k parameters on 28x28, 1.7x its training "
                     "and 2.9x its evaluation speed on a CPU; the studies' model", shapes.cnn_tiny)
def cnn_tiny(shape: tuple[int, int, int], classes: int) -> nn.Module:
    return two_conv(shape, classes, shapes.CNN_TINY)


# torch initialises parameters from its one global generator: ranks that are threads of one process
# (the loopback cluster) build their models one at a time, or they would draw from each other's seed.
_BUILDING = threading.Lock()


def build_model(name: str, shape: tuple[int, int, int], classes: int, seed: int) -> nn.Module:
    """Same name, shape and seed → bit-identical initial parameters on every rank."""
    import torch

    build = NETWORKS.get(name).build
    with _BUILDING, torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return build(shape, classes)
