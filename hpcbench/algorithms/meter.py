"""Moving averages of the workers' training loss and accuracy, for rank 0's Progress operations."""
from __future__ import annotations

from hpcbench.algorithms.ops import Progress


class TrainingMeter:
    def __init__(self, weight: float = 0.1) -> None:
        self.weight = weight
        self.loss = float("nan")
        self.accuracy = float("nan")

    def add(self, loss_sum: float, correct: int, samples: int) -> None:
        """Fold in ``samples`` training samples with these summed losses and right answers."""
        if samples <= 0:
            return
        loss, accuracy = loss_sum / samples, correct / samples
        if self.loss != self.loss:  # first report: start from it, not from NaN
            self.loss, self.accuracy = loss, accuracy
        else:
            self.loss += self.weight * (loss - self.loss)
            self.accuracy += self.weight * (accuracy - self.accuracy)

    def progress(self, samples: int) -> Progress:
        return Progress(samples, self.loss, self.accuracy)
