"""The networks behind the model names (torch): mlp, cnn and resnet20 (He et al. 2016, CIFAR variant)."""
from __future__ import annotations

import threading
from collections.abc import Callable

import torch
from torch import nn
from torch.nn import functional as F

from hpcbench.errors import one_of

Builder = Callable[[tuple[int, int, int], int], nn.Module]


def mlp(shape: tuple[int, int, int], classes: int) -> nn.Module:
    c, h, w = shape
    return nn.Sequential(
        nn.Flatten(), nn.Linear(c * h * w, 128), nn.ReLU(), nn.Linear(128, 128), nn.ReLU(),
        nn.Linear(128, classes),
    )


def cnn(shape: tuple[int, int, int], classes: int) -> nn.Module:
    c, h, w = shape
    return nn.Sequential(
        nn.Conv2d(c, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(64 * (h // 4) * (w // 4), 128), nn.ReLU(), nn.Linear(128, classes),
    )


class BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + self.shortcut(x))


class ResNet20(nn.Module):
    def __init__(self, shape: tuple[int, int, int], classes: int) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(shape[0], 16, 3, 1, 1, bias=False), nn.BatchNorm2d(16), nn.ReLU())
        layers: list[nn.Module] = []
        cin = 16
        for cout, stride in ((16, 1), (32, 2), (64, 2)):
            for i in range(3):
                layers.append(BasicBlock(cin, cout, stride if i == 0 else 1))
                cin = cout
        self.stages = nn.Sequential(*layers)
        self.head = nn.Linear(64, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.stages(self.stem(x))
        return self.head(torch.flatten(F.adaptive_avg_pool2d(out, 1), 1))


def resnet20(shape: tuple[int, int, int], classes: int) -> nn.Module:
    return ResNet20(shape, classes)


BUILDERS: dict[str, Builder] = {"mlp": mlp, "cnn": cnn, "resnet20": resnet20}

# torch initialises parameters from its one global generator: ranks that are threads of one process
# (the loopback cluster) build their models one at a time, or they would draw from each other's seed.
_BUILDING = threading.Lock()


def build_model(name: str, shape: tuple[int, int, int], classes: int, seed: int) -> nn.Module:
    """Same name, shape and seed → bit-identical initial parameters on every rank."""
    if name not in BUILDERS:
        raise one_of("model", name, list(BUILDERS))
    with _BUILDING, torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return BUILDERS[name](shape, classes)
