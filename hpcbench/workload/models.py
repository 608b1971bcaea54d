"""Models by name, with what each is; torch is imported only to build one (``networks.py``)."""
from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from hpcbench.registry import Registry

if TYPE_CHECKING:
    from torch import nn

MODELS: Registry[str] = Registry("model")  # name → one line on what it is
for _name, _text in (
    ("mlp", "two hidden layers of 128 ReLU units"),
    ("cnn", "two 3x3 conv + max-pool stages (32, 64 channels) and a 128-unit dense layer"),
    ("resnet20", "ResNet-20 for CIFAR (3 stages of 3 basic blocks, 16/32/64 channels, BatchNorm)"),
    ("payload", "no network and no torch: real messages of payload.params float32 and modeled compute "
                "(--compute), for scale tests and message-size studies; accuracy is NaN"),
):
    MODELS.register(_name)(_text)


# torch initialises parameters from its one global generator: ranks that are threads of one process
# (the loopback cluster) build their models one at a time, or they would draw from each other's seed.
_BUILDING = threading.Lock()


def build_model(name: str, shape: tuple[int, int, int], classes: int, seed: int) -> nn.Module:
    """Same name, shape and seed → bit-identical initial parameters on every rank."""
    import torch

    from hpcbench.workload.networks import BUILDERS

    MODELS.get(name)
    with _BUILDING, torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return BUILDERS[name](shape, classes)
