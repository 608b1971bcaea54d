"""The arithmetic the benchmarks judge by, against cases worked by hand and a simulation of its meaning."""
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
from common import residual_wait  # noqa: E402


def test_the_residual_wait_of_even_events_is_half_their_gap_and_bunching_lengthens_it():
    assert residual_wait(np.arange(10.0), 100.0) == pytest.approx(0.5)
    # gaps 1, 0.1, 1, 0.1: a moment falls in a long gap 10 times in 11, and waits half of it there
    assert residual_wait(np.array([0.0, 1.0, 1.1, 2.1, 2.2]), 100.0) == pytest.approx(2.02 / 4.4)
    assert residual_wait(np.array([3.0, 0.0, 1.0, 50.0]), 2.0) == pytest.approx(0.5)  # only events before 2 s
    assert np.isnan(residual_wait(np.array([1.0]), 5.0)) and np.isnan(residual_wait(np.array([1.0, 1.0]), 5.0))


def test_the_residual_wait_is_what_moments_drawn_at_random_wait():
    rng = np.random.default_rng(0)
    events = np.cumsum(rng.exponential(1.0, 2000) * rng.choice([0.2, 3.0], 2000))
    moments = rng.uniform(events[0], events[-1], 20000)
    waited = events[np.searchsorted(events, moments)] - moments
    assert residual_wait(events, events[-1] + 1) == pytest.approx(waited.mean(), rel=0.05)


def test_a_kill_is_placed_in_the_other_run_by_rounds_not_seconds():
    from failure_costs import moment, place

    real = np.array([0.0, 10.0, 20.0, 35.0])  # the survivor's rounds: the one the death falls in drawn out
    assert place(real, 25.0) == (2, 0.5)  # half the round before it (10 s) after mark 2
    simulated = np.array([0.0, 8.0, 16.0, 24.0])
    assert moment(simulated, place(real, 25.0)) == pytest.approx(20.0)  # half a simulated round after mark 2
    rng = np.random.default_rng(1)
    marks = np.cumsum(rng.uniform(0.5, 2.0, 50))
    for t in rng.uniform(marks[1], marks[-1] + 5.0, 100):
        assert moment(marks, place(marks, t)) == pytest.approx(t)
    for outside in (marks[0] - 1.0, marks[1] - 1e-9):
        with pytest.raises(SystemExit, match="falls outside the survivor's rounds"):
            place(marks, outside)


def test_the_failure_gate_fires_where_the_kills_show_a_ratio_beyond_it_not_where_their_noise_allows_one():
    from failure_costs import GATE, beyond_gate

    rng = np.random.default_rng(3)

    def fired(ratio: float, kills: int, phase: bool) -> float:
        """How often the gate fires over 2,000 benchmarks whose simulation is ``ratio`` times the real runs."""
        times = 0
        for _ in range(2000):
            if phase:  # where the kill fell in the survivors' cadence: real and simulated draws apart
                real, sim = rng.uniform(0.1, 1.8, kills), ratio * rng.uniform(0.1, 1.8, kills)
            else:  # a failure cost of 50 ms give or take a few, the simulation tracking each kill
                real = rng.normal(0.05, 0.004, kills)
                sim = ratio * real + rng.normal(0, 0.002, kills)
            times += beyond_gate(list(real), list(sim))
        return times / 2000

    # a simulation 1.3x the real phase (asgd at 3 workers came out 1.21 over 18 kills) fails CI seldom;
    # 'outside 1.5x and the means two errors apart' fired 0.19 of the time here, 0.13 after the 4-kill screen
    # CI applies first (it failed a CI run: asgd 0.64 real, 1.04 simulated over 12 kills)
    assert fired(1.3, 12, phase=True) < 0.03
    assert fired(1 / 1.3, 12, phase=True) < 0.03
    assert fired(3.0, 12, phase=True) > 0.75 and fired(1 / 3.0, 12, phase=True) > 0.75  # 0.84 here
    assert fired(1.0, 4, phase=False) < 0.03
    assert fired(GATE * 1.15, 4, phase=False) > 0.9 and fired(1 / (GATE * 1.15), 4, phase=False) > 0.9
