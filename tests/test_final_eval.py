"""The final evaluation reads the whole test set and validation split; ``eval_samples`` bounds only the
evaluations during training (they trace the curve; the final accuracy is the run's verdict)."""
from __future__ import annotations

import numpy as np
import pytest

from hpcbench.config import RunConfig
from hpcbench.options.sim import SimConfig
from hpcbench.results.store import read_run, write_run
from hpcbench.runtime.plan import validate
from hpcbench.runtime.sim.session import simulated_record
from hpcbench.workload.datasets import load_dataset

pytestmark = pytest.mark.fast


def whole(fraction: float, count: int) -> bool:
    """``fraction`` is some k/count."""
    return abs(fraction * count - round(fraction * count)) < 1e-9


@pytest.mark.timeout(120)
def test_the_final_accuracy_counts_every_test_and_validation_sample():
    data = load_dataset("digits", val_fraction=0.2)
    test, val = len(data.y_test), len(data.y_val)  # 360 and 287: neither a multiple of 7
    cfg = RunConfig(algo="asgd", dataset="digits", model="mlp", steps=30, batch_size=16, evals=4,
                    eval_samples=7, val_fraction=0.2, lr=0.05)
    rec, _ = simulated_record(validate(cfg), SimConfig(workers=2), show_progress=False)
    acc, val_acc = rec.evals["accuracy"], rec.evals["val_accuracy"]
    assert len(acc) >= 3
    assert all(whole(a, 7) for a in acc[:-1]) and all(whole(a, 7) for a in val_acc[:-1])
    # the last one: a fraction of the whole splits, and not one of 7 (no k/7 equals these to 1e-9)
    assert whole(acc[-1], test) and whole(val_acc[-1], val)
    assert not (whole(acc[-1], 7) and whole(val_acc[-1], 7))
    assert rec.summary["final_accuracy"] == pytest.approx(acc[-1])
    assert np.isfinite(rec.evals["loss"]).all()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("val_samples", [0, 5])
def test_the_validation_split_during_training_is_scored_on_its_own_count(val_samples, tmp_path):
    """``val_eval_samples`` bounds the validation split's evaluations during training on its own (0: only
    the last, where a choice reads it); the test set's keep ``eval_samples``, the last reads both whole."""
    data = load_dataset("digits", val_fraction=0.2)
    cfg = RunConfig(algo="asgd", dataset="digits", model="mlp", steps=30, batch_size=16, evals=4,
                    eval_samples=7, val_eval_samples=val_samples, val_fraction=0.2, lr=0.05)
    rec, _ = simulated_record(validate(cfg), SimConfig(workers=2), show_progress=False)
    acc, val_acc, val_loss = rec.evals["accuracy"], rec.evals["val_accuracy"], rec.evals["val_loss"]
    assert len(acc) >= 3 and all(whole(a, 7) for a in acc[:-1])
    if val_samples:
        assert all(whole(a, val_samples) for a in val_acc[:-1]) and np.isfinite(val_loss).all()
    else:
        assert np.isnan(val_acc[:-1]).all() and np.isnan(val_loss[:-1]).all()
    assert whole(val_acc[-1], len(data.y_val)) and whole(acc[-1], len(data.y_test))
    assert rec.summary["final_val_accuracy"] == pytest.approx(val_acc[-1])
    write_run(tmp_path / "run.h5", rec)
    np.testing.assert_array_equal(read_run(tmp_path / "run.h5").evals["val_accuracy"], val_acc)  # a valid file
