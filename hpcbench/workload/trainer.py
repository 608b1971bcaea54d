"""Gradients and evaluation of a model addressed as one flat float32 parameter vector.

Algorithms see only flat numpy vectors on the host; the trainer moves them to the device (through
pinned buffers on CUDA), runs forward/backward, and hands the flat gradient back on the host.
"""
from __future__ import annotations

import copy
import weakref
from functools import partial

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from hpcbench.workload.base import Ready, last_of
from hpcbench.workload.compute import ComputeModel
from hpcbench.workload.datasets import Dataset
from hpcbench.workload.networks import build_model

EVAL_CHUNK = 500
BN_RECALIBRATION_SAMPLES = 512


class Bucketing:
    """One backward pass's buckets: which are complete, and which have been handed to ``ready``
    (strictly in order: every worker must start the same collectives in the same order)."""

    def __init__(self, offsets: list[int], buckets: tuple[tuple[int, int], ...], ready: Ready) -> None:
        self.bucket_of = [next(k for k, (start, stop) in enumerate(buckets) if start <= o < stop) for o in offsets]
        self.missing = [0] * len(buckets)
        for k in self.bucket_of:
            self.missing[k] += 1
        self.ready, self.launched = ready, 0

    def complete(self, i: int) -> bool:
        k = self.bucket_of[i]
        self.missing[k] -= 1
        return self.missing[k] == 0

    def launch(self, vector: np.ndarray) -> None:
        while self.launched < len(self.missing) and self.missing[self.launched] == 0:
            self.ready(self.launched, vector)
            self.launched += 1


def channels_last_output(layer: nn.Module, inputs: tuple[torch.Tensor, ...], output: torch.Tensor) -> torch.Tensor:
    """A forward hook: the layer's output in the channels-last layout (a no-op where it is already)."""
    return output.contiguous(memory_format=torch.channels_last)


def _grad_ready(trainer: weakref.ref[Trainer], i: int, param: torch.Tensor) -> None:
    """A parameter's backward hook, holding its trainer weakly (``Trainer._grad_ready``)."""
    live = trainer()
    if live is not None:
        live._grad_ready(i, param)


class Trainer:
    """A model whose parameters are views into one flat tensor, plus its data."""

    def __init__(self, model_name: str, data: Dataset, seed: int, device: str = "cpu") -> None:
        self.data = data
        self.compute: ComputeModel | None = None  # gradients take as long as they take
        self.device = torch.device(device)
        self.model = build_model(model_name, data.input_shape, data.classes, seed).to(self.device)
        self.has_batchnorm = any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in self.model.modules())
        # On the CPU, evaluations of a convolutional network without buffers (BatchNorm's statistics) run on a
        # copy of its parameters in channels-last order: its forward pass takes 0.7 of the time here (cnn-tiny:
        # 30,000 against 21,000 samples a second, one thread). Training keeps the flat views.
        convolutional = any(isinstance(m, nn.Conv2d) for m in self.model.modules())
        plain = next(self.model.buffers(), None) is None
        self.scorer = copy.deepcopy(self.model) if convolutional and plain and self.device.type == "cpu" else None
        if self.scorer is not None:
            for p in self.scorer.parameters():
                p.requires_grad_(False)
                if p.dim() == 4:
                    p.data = p.data.contiguous(memory_format=torch.channels_last)
            # A convolution of one-channel images (digits, Fashion-MNIST) gives its output in the contiguous
            # layout (torch cannot tell the two layouts of one channel apart), and the pooling after it then
            # took as long as both convolutions: every convolution's output goes on channels-last (the same
            # values: cnn-tiny's 500 images 30 -> 23 ms here).
            for layer in self.scorer.modules():
                if isinstance(layer, nn.Conv2d):
                    layer.register_forward_hook(channels_last_output)
        params = list(self.model.parameters())
        self.size = sum(p.numel() for p in params)
        self.flat = torch.zeros(self.size, dtype=torch.float32, device=self.device)
        # The gradients too are views into one flat tensor, which backward adds into in place: zeroed
        # once a step, and on the CPU it is the host vector itself (no copy per parameter).
        self.flat_grad = torch.zeros(self.size, dtype=torch.float32, device=self.device)
        offset, offsets = 0, []
        for i, p in enumerate(params):
            n = p.numel()
            self.flat[offset:offset + n].copy_(p.data.view(-1))
            p.data = self.flat[offset:offset + n].view_as(p)
            p.grad = self.flat_grad[offset:offset + n].view_as(p)
            offsets.append(offset)
            offset += n
            # torch keeps a parameter's hooks where the collector cannot see them: one that held the trainer
            # would keep it, its model and its data set alive for the life of the process
            p.register_post_accumulate_grad_hook(partial(_grad_ready, weakref.ref(self), i))
        self._params = params
        self._offsets = offsets
        self.bounds = tuple(offsets) + (self.size,)
        self.shapes = tuple(tuple(p.shape) for p in params)
        self._bucketing: Bucketing | None = None  # while a bucketed gradient is computed
        self.initial = self.flat.cpu().numpy().copy()
        self.cuda = self.device.type == "cuda"
        self._host_grad = (torch.empty(self.size, dtype=torch.float32, pin_memory=True) if self.cuda
                           else self.flat_grad)
        self._host_params = torch.empty(self.size, dtype=torch.float32, pin_memory=True) if self.cuda else self.flat

    @property
    def nbytes(self) -> int:
        return self.size * 4

    def load(self, params: np.ndarray) -> None:
        """Copy a flat host vector into the model (on CUDA through a pinned buffer, on the CPU directly)."""
        self._host_params.numpy()[:] = params
        if self.cuda:
            self.flat.copy_(self._host_params, non_blocking=True)

    def batch(self, indices: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        x = torch.from_numpy(self.data.normalise(self.data.x_train[indices]))
        y = torch.from_numpy(self.data.y_train[indices])
        return x.to(self.device, non_blocking=True), y.to(self.device, non_blocking=True)

    def gradient(self, params: np.ndarray, x: torch.Tensor, y: torch.Tensor, buckets: tuple[tuple[int, int], ...] = (),
                 ready: Ready | None = None, out: np.ndarray | None = None) -> tuple[np.ndarray, float, int]:
        """(mean cross-entropy gradient at ``params`` as a host float32 vector, ``out`` or a new one,
        loss, correct).

        With ``ready``: each of ``buckets`` (flat ranges of whole parameters) is copied to the host as
        soon as the backward pass has finished all its parameters, and ``ready(k, vector)`` is called,
        in bucket order, while the backward pass goes on (DDP's overlap)."""
        self.load(params)
        if not self.model.training:  # train() visits every module (25 µs, 1% of a small model's gradient)
            self.model.train()
        self.flat_grad.zero_()
        logits = self.model(x)
        loss = F.cross_entropy(logits, y)
        host = self._host_grad
        if ready is not None:
            self._bucketing = Bucketing(self._offsets, buckets, ready)
            try:
                loss.backward()
            finally:
                state, self._bucketing = self._bucketing, None
            assert state.launched == len(buckets), "every parameter takes part in the loss"
        else:
            loss.backward()
            for i in range(len(self._params)):
                self._to_host(i)
            self._landed()
        correct = int((logits.detach().argmax(1) == y).sum())
        grad = np.empty(self.size, np.float32) if out is None else out
        np.copyto(grad, host.numpy())
        return grad, float(loss.detach()), correct

    def _to_host(self, i: int) -> None:
        if self.cuda:
            start, stop = self.bounds[i], self.bounds[i + 1]
            self._host_grad[start:stop].copy_(self.flat_grad[start:stop], non_blocking=True)

    def _landed(self) -> None:
        if self.cuda:
            # The copies to the host are asynchronous; MPI must not read the buffer before they land.
            torch.cuda.current_stream(self.device).synchronize()

    def _grad_ready(self, i: int, param: torch.Tensor) -> None:
        """Backward hook: parameter ``i``'s gradient is final (the suite's models use each parameter
        once). Copy it; launch the buckets now complete."""
        state = self._bucketing
        if state is None:
            return
        self._to_host(i)
        if state.complete(i):
            self._landed()
            state.launch(self._host_grad.numpy())

    def warm_up(self, indices: np.ndarray, steps: int) -> float:
        """``steps`` gradient computations at the initial parameters, applied nowhere: the first calls
        pay for allocation, kernel selection and cold caches, which the timed steps should not.
        → seconds the last of them took (NaN for none)."""
        x, y = self.batch(indices)
        return last_of(steps, lambda: self.gradient(self.initial, x, y))

    @torch.no_grad()
    def recalibrate_batchnorm(self) -> None:
        """BatchNorm statistics are not parameters; rebuild them for the evaluated parameters."""
        for m in self.model.modules():
            if isinstance(m, nn.modules.batchnorm._BatchNorm):
                m.reset_running_stats()
                m.momentum = None  # cumulative average over the recalibration batches
        order = np.random.default_rng(0).permutation(len(self.data.y_train))[:BN_RECALIBRATION_SAMPLES]
        self.model.train()
        for start in range(0, len(order), 128):
            x, _ = self.batch(order[start:start + 128])
            self.model(x)

    @torch.no_grad()
    def evaluate(self, params: np.ndarray, test: int, val: int) -> tuple[float, float, float, float]:
        """(loss, accuracy, validation loss, validation accuracy) of ``params`` on the first ``test`` samples
        of the test set and ``val`` of the validation split (NaN for a split that is empty or not scored)."""
        self.load(params)
        if self.has_batchnorm:
            self.recalibrate_batchnorm()
        model = self.model
        if self.scorer is not None:
            model = self.scorer
            for mine, p in zip(self.scorer.parameters(), self._params):
                mine.copy_(p)  # into its own layout
        model.eval()
        return (*self._score(model, self.data.x_test, self.data.y_test, test),
                *self._score(model, self.data.x_val, self.data.y_val, val))

    def _score(self, model: nn.Module, xs: np.ndarray, ys: np.ndarray, limit: int) -> tuple[float, float]:
        n = min(limit, len(ys))
        if n == 0:
            return float("nan"), float("nan")
        loss_sum, correct = 0.0, 0
        layout = torch.channels_last if model is self.scorer else torch.contiguous_format
        for start in range(0, n, EVAL_CHUNK):
            stop = min(start + EVAL_CHUNK, n)
            x = torch.from_numpy(self.data.normalise(xs[start:stop])).to(self.device).contiguous(memory_format=layout)
            y = torch.from_numpy(ys[start:stop]).to(self.device)
            out = model(x)
            loss_sum += float(F.cross_entropy(out, y, reduction="sum"))
            correct += int((out.argmax(1) == y).sum())
        return loss_sum / n, correct / n
