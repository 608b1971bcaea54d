"""dc-asgd: asgd with delay compensation (Zheng et al., "Asynchronous Stochastic Gradient Descent with
Delay Compensation", ICML 2017).

A gradient g computed on θ_read arrives when the server holds θ_now. Instead of applying it as it is,
the server applies the first-order Taylor correction of g towards θ_now, with the diagonal of the
Hessian approximated by λ·g⊙g (the outer product of the gradient, its cheapest unbiased estimate):

    g_dc = g + λ · g ⊙ g ⊙ (θ_now − θ_read)

then weight decay and momentum as asgd (λ constant: the paper's DC-ASGD-c, MXNet's ``DCASGD``
optimizer, whose λ is 0.04 by default). Δ = θ_now − θ_read is exact: the server keeps the last
``history`` published versions, and a worker whose version is older sends back what it read.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hpcbench.algorithms.api import register
from hpcbench.algorithms.ps import MAX_HISTORY, ParameterServer
from hpcbench.algorithms.rules import RulePart, Update
from hpcbench.ranges import bounded


@dataclass(frozen=True)
class DcOptions:
    lam: float = bounded(0.04, low=0, high=1e4)  # λ, the variance control of the compensation (0: asgd)
    # published versions kept for Δ (older ones are echoed by the worker)
    history: int = bounded(0, low=0, high=MAX_HISTORY, unit="versions", resolves="2·workers + 4")


class DelayCompensation(RulePart):
    """Adds λ·g⊙g⊙Δ to the step direction; records λ·|g|·|Δ| per element, averaged: the compensation's
    size relative to the gradient's (0: none, 1: as large)."""

    columns = ("compensation_mean",)
    needs_delta = True

    def __init__(self, lam: float) -> None:
        self.lam = np.float32(lam)

    def adjust(self, update: Update) -> None:
        assert update.delta is not None
        scaled = self.lam * update.grad * update.delta  # λ·g⊙Δ, then times g
        update.d_p += scaled * update.grad
        update.recorded["compensation_mean"] = float(np.abs(scaled).mean())


@register
class DelayCompensated(ParameterServer):
    name = "dc-asgd"
    summary = "asgd with each gradient corrected towards the current model by λ·g⊙g⊙Δ (Zheng et al. 2017)"
    Options = DcOptions

    def parts(self) -> tuple[RulePart, ...]:
        return (DelayCompensation(self.opts.lam),)
