"""Models by name: what each is, and how a rank makes the workload it computes with. Every network
registered in ``networks.py`` is a model, and the payload, which has none. torch is imported only to
build a network (``networks.py``, ``trainer.py``); ``shapes.py`` knows each network's shapes without it."""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from hpcbench.registry import Registry
from hpcbench.workload.base import Workload
from hpcbench.workload.datasets import Dataset
from hpcbench.workload.networks import NETWORKS, Network
from hpcbench.workload.shapes import Sized


@dataclass(frozen=True)
class Needs:
    """What a workload is made from: the data, the seed, the device, the worker count and the run's
    option tables (``payload`` for the payload)."""

    model: str
    data: Dataset
    seed: int
    device: str
    workers: int
    tables: Mapping[str, Any]


@dataclass(frozen=True)
class ModelSpec:
    """A model a run can name. ``network``: the torch network that learns from the data; the payload has
    none (no torch, no data read, modeled compute, NaN accuracy)."""

    text: str
    build: Callable[[Needs], Workload]
    network: Network | None = None
    # Its sizes and shapes without its values (a simulation with numerics off, a dry run); None: ``build``.
    sized: Callable[[Needs], Workload] | None = None

    @property
    def trains(self) -> bool:
        return self.network is not None


def trainer(needs: Needs) -> Workload:
    from hpcbench.workload.trainer import Trainer

    return Trainer(needs.model, needs.data, needs.seed, needs.device)


def sized(needs: Needs) -> Workload:
    return Sized(NETWORKS.get(needs.model).shapes, needs.data)


def payload(needs: Needs) -> Workload:
    from hpcbench.workload.payload import Payload

    return Payload(needs.tables["payload"], needs.data, needs.workers, needs.seed)


def payload_sized(needs: Needs) -> Workload:
    from hpcbench.workload.payload import Payload

    return Payload(needs.tables["payload"], needs.data, needs.workers, needs.seed, values=False)


MODELS: Registry[ModelSpec] = Registry("model")
for _name, _network in NETWORKS.items():
    MODELS.register(_name)(ModelSpec(_network.text, trainer, _network, sized=sized))
MODELS.register("payload")(ModelSpec(
    "no network and no torch: real messages of payload.params float32 and modeled compute (--compute), for "
    "scale tests and message-size studies; accuracy is NaN", payload, sized=payload_sized))
