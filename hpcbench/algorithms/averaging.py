"""What the two algorithms that average over the workers' communicator share (``allreduce``: the
gradient every step; ``local-sgd``: the models, or their pseudo-gradient, every ``period`` steps): the
compressions' options, rank 0 as a coordinator, the workers' windows, and each worker's compressor."""
from __future__ import annotations

from hpcbench.algorithms import compressors, decentral
from hpcbench.algorithms.api import Algorithm, Layout, Program
from hpcbench.algorithms.compressors import Compressor


class Averaging(Algorithm):
    """A synchronous method whose workers average through a compression (``Options`` derives from
    ``compressors.CompressOptions``)."""

    asynchronous = False

    def layout(self) -> Layout:
        return decentral.layout(self.ctx, until_budget=False)

    def server(self) -> Program:
        return decentral.coordinate(self.ctx, synchronous=True)

    def compressor(self, rank: int) -> Compressor:
        ctx = self.ctx
        return compressors.make(self.opts, rank, ctx.size, ctx.model_bounds, ctx.model_shapes, ctx.seed)
