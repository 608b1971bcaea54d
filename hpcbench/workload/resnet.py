"""ResNet-20 for CIFAR (He et al. 2016): 3 stages of 3 basic blocks, 16/32/64 channels, BatchNorm (torch)."""
from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F


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
