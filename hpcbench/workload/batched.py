"""Many workers' gradients in one pass: the simulator's batched numerics.

Virtual workers whose computations overlap in virtual time do not depend on each other, so their
gradients can be computed together: their parameter vectors are stacked and one forward and
backward pass runs over all of them (``torch.func.vmap`` of the per-worker loss gradient). Each
result equals, to float rounding, what ``Trainer.gradient`` returns for that worker alone.
"""
from __future__ import annotations

import numpy as np
import torch
from torch.func import functional_call, grad_and_value, vmap
from torch.nn import functional as F

from hpcbench.workload.trainer import Trainer


def batchable(trainer: Trainer) -> bool:
    """BatchNorm keeps running statistics per module, which a vmapped pass cannot update per worker."""
    return not trainer.has_batchnorm


def pays(trainer: Trainer) -> bool:
    """Whether a batched pass is faster than one worker at a time: not for a convolution on the CPU,
    which vmap turns into a grouped convolution (cnn-small on Fashion-MNIST, one thread, batch 32:
    batched 0.55x and 0.35x a plain torch loop's samples per second at 16 and 64 workers, one at a time
    0.9-1x; benchmarks/sim_cnn_speed.py). Dense layers gain (the teacher task's mlp: 1.6x at 8 workers)."""
    from torch import nn

    return trainer.cuda or not any(isinstance(m, nn.modules.conv._ConvNd) for m in trainer.model.modules())


class BatchedGradients:
    """Gradients of one model at many parameter vectors, each on its own batch."""

    def __init__(self, trainer: Trainer) -> None:
        if not batchable(trainer):
            raise ValueError("a model with BatchNorm cannot be batched over workers")
        self.trainer = trainer
        model = trainer.model
        named = list(model.named_parameters())
        self.names = [name for name, _ in named]
        self.shapes = [tuple(p.shape) for _, p in named]
        self.bounds = trainer.bounds

        def loss(params: dict[str, torch.Tensor], x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor,
                                                                                             torch.Tensor]:
            out = functional_call(model, params, (x,))
            return F.cross_entropy(out, y), (out.argmax(1) == y).sum()

        self.fn = vmap(grad_and_value(loss, has_aux=True))
        # The first vmapped gradient imports and sets up torch's function transforms (a second here): on
        # one sample now, with torch's random state put back, so a simulation's time is its own.
        with torch.random.fork_rng(devices=[]):
            self.gradients([np.zeros(trainer.size, np.float32)], [np.zeros(1, np.int64)])

    def gradients(self, params: list[np.ndarray], batches: list[np.ndarray]) -> list[tuple[np.ndarray, float, int]]:
        """(gradient, loss, correct) at ``params[i]`` on the training samples ``batches[i]``, for each i."""
        trainer, count = self.trainer, len(params)
        stack = torch.from_numpy(np.stack(params)).to(trainer.device)
        tensors = {name: stack[:, start:stop].view(count, *shape)
                   for name, shape, start, stop in zip(self.names, self.shapes, self.bounds, self.bounds[1:])}
        pairs = [trainer.batch(b) for b in batches]
        x = torch.stack([p[0] for p in pairs])
        y = torch.stack([p[1] for p in pairs])
        trainer.model.train()
        grads, (losses, correct) = self.fn(tensors, x, y)
        flat = torch.cat([grads[name].reshape(count, -1) for name in self.names], dim=1).cpu().numpy()
        losses_list, correct_list = losses.tolist(), correct.tolist()
        return [(flat[i], float(losses_list[i]), int(correct_list[i])) for i in range(count)]
