"""EASGD's centre against its recurrence on a quadratic, running the real programs in the simulator.

Every worker's gradient is H·x (loss ½H‖x‖²), so the whole trajectory is a recurrence that can be
written out by hand: synchronous exchanges in lock step, and for asynchronous easgd an event list in
time order (each worker's step k ends at k × its compute time; reads and accumulates are instant).
"""
import numpy as np
import pytest

from hpcbench.config import RunConfig

from quadratic import X0, run_quadratic

H, LR, ALPHA, TAU, STEPS = 0.5, 0.1, 0.2, 3, 12
DOCUMENTED_TAU = 4  # docs/algorithms.md: "Defaults α = 0.9/n, τ = 4" (Zhang et al.'s β = 0.9, α = β/n)


def documented_alpha(workers: int) -> float:
    return 0.9 / workers


def run_easgd(name: str, workers: int, slow: dict[int, float], options: dict | None = None,
              momentum: float = 0.0):
    """``options`` default α = ALPHA, τ = TAU, ``{}`` for the algorithm's own defaults; evaluated after every step."""
    options = {"alpha": ALPHA, "tau": TAU} if options is None else options
    return run_quadratic(name, workers, STEPS, options, lr=LR, curvature=lambda rank: H, slow=slow,
                         momentum=momentum, evals=STEPS, x0=X0)


def lock_step(workers: int, x0: float, steps: int, alpha: float = ALPHA, tau: int = TAU,
              momentum: float = 0.0) -> list[float]:
    """Identical workers, local heavy-ball steps (PyTorch's: buf ← m·buf + g, x ← x − lr·buf), an
    exchange every τ steps and one after the last → the centre at the start, after each step, and
    at the end (after that last exchange)."""
    x, centre, buf = x0, x0, 0.0
    centres = [centre]

    def exchange() -> None:
        nonlocal x, centre
        diff = x - centre
        x -= alpha * diff
        centre += workers * alpha * diff

    for step in range(steps):
        buf = momentum * buf + H * x
        x -= LR * buf
        if (step + 1) % tau == 0:
            exchange()
        centres.append(centre)
    if steps % tau:
        exchange()
    return centres + [centre]


def event_driven(speeds: dict[int, float], steps: dict[int, int], x0: np.ndarray,
                 alpha: float = ALPHA, tau: int = TAU, history: list | None = None) -> np.ndarray:
    """Asynchronous easgd written out: every worker's step ends at k × its compute time; its exchange
    (every τ steps and after its last) reads the centre as it is then and adds α(x_i − x̃) to it.
    ``history``: filled with (time, centre) after each step."""
    events = sorted((k * speeds[w], w, k) for w in speeds for k in range(1, steps[w] + 1))
    x = {w: x0.astype(np.float64) for w in speeds}
    centre = x0.astype(np.float64)
    for t, w, k in events:
        x[w] = x[w] - LR * H * x[w]
        if k % tau == 0 or k == steps[w]:
            e = alpha * (x[w] - centre)
            x[w] = x[w] - e
            centre = centre + e
        if history is not None:  # a last exchange comes after the step's report, at the same instant
            history.append((t + (1e-3 if k == steps[w] and k % tau else 0.0), centre))
    return centre


def centre_at(history: list, t: float, x0: np.ndarray) -> np.ndarray:
    """The centre after every step that ended by time ``t`` (the simulator's step times carry a
    relative noise of 1e-6: the gamma of shape 1e12)."""
    done = [c for when, c in history if when <= t + 1e-4]
    return done[-1] if done else x0


@pytest.mark.parametrize("name, workers", [("easgd-sync", 1), ("easgd-sync", 4)])
def test_synchronous_centre_follows_the_lock_step_recurrence(name, workers):
    ran = run_easgd(name, workers, {})
    centre, steps = ran.last, ran.steps
    assert set(steps.values()) == {STEPS}
    expected = np.array([lock_step(workers, float(v), STEPS)[-1] for v in X0])
    np.testing.assert_allclose(centre, expected, rtol=1e-5)
    assert not np.allclose(centre, X0)  # the centre moved


@pytest.mark.parametrize("workers, momentum, tau", [(1, 0.0, 3), (4, 0.0, 3), (4, 0.9, 3), (3, 0.5, 5)])
def test_every_synchronous_snapshot_is_the_centre_after_its_step(workers, momentum, tau):
    """Evaluated after every step: each snapshot holds the replicated centre as of the step its
    samples count (the workers keep it beside their models), with or without momentum (EAMSGD); the
    last one holds it after the exchange that follows the last step (τ = 5 does not divide 12)."""
    snapshots = run_easgd("easgd-sync", workers, {}, {"alpha": ALPHA, "tau": tau}, momentum).snapshots
    expected = np.array([lock_step(workers, float(v), STEPS, ALPHA, tau, momentum) for v in X0]).T  # [step, element]
    per_step = workers * RunConfig().batch_size
    assert [samples for samples, _ in snapshots] == [k * per_step for k in range(STEPS + 1)] + [STEPS * per_step]
    for (_, centre), want in zip(snapshots, expected, strict=True):
        np.testing.assert_allclose(centre, want, rtol=1e-5, atol=1e-7)


# Speeds chosen so that no two exchanges fall at the same instant (their order would be arbitrary).
@pytest.mark.parametrize("slow", [{2: 2.7, 3: 1.37}, {1: 1.9, 2: 1.13, 3: 3.3}])
def test_asynchronous_centre_follows_the_event_driven_recurrence(slow):
    workers = 3
    ran = run_easgd("easgd", workers, slow)
    centre, steps = ran.last, ran.steps
    speeds = {w: slow.get(w, 1.0) for w in range(1, workers + 1)}
    expected = event_driven(speeds, steps, X0)
    np.testing.assert_allclose(centre, expected, rtol=1e-5)
    # The shared budget: faster workers took more steps, and together exactly the budget.
    assert sum(steps.values()) == STEPS * workers
    by_speed = sorted(speeds, key=speeds.get)
    assert [steps[w] for w in by_speed] == sorted(steps.values(), reverse=True)
    assert steps[by_speed[0]] > steps[by_speed[-1]] + 3


@pytest.mark.parametrize("workers, slow", [(2, {2: 1.37}), (4, {2: 2.7, 3: 1.37, 4: 1.9})])
def test_defaults_are_the_documented_alpha_and_tau(workers, slow):
    """Without options both variants run with α = 0.9/n and τ = 4, as docs/algorithms.md says."""
    alpha = documented_alpha(workers)
    centre = run_easgd("easgd-sync", workers, {}, options={}).last
    expected = [lock_step(workers, float(v), STEPS, alpha, DOCUMENTED_TAU)[-1] for v in X0]
    np.testing.assert_allclose(centre, expected, rtol=1e-5)
    ran = run_easgd("easgd", workers, slow, options={})
    centre, steps = ran.last, ran.steps
    speeds = {w: slow.get(w, 1.0) for w in range(1, workers + 1)}
    np.testing.assert_allclose(centre, event_driven(speeds, steps, X0, alpha, DOCUMENTED_TAU), rtol=1e-5)


def test_every_asynchronous_snapshot_is_rank0s_centre_at_the_time_it_noted():
    """easgd's centre lives on rank 0: a snapshot is rank 0's own copy of it at the time it notes it
    (when the reports reach a multiple of eval_every), never the workers' models."""
    slow = {2: 2.7, 3: 1.37}
    ran = run_easgd("easgd", 3, slow)
    speeds = {w: slow.get(w, 1.0) for w in (1, 2, 3)}
    history: list = []
    event_driven(speeds, ran.steps, X0, history=history)
    intermediate = ran.logs.snapshots[1:-1]
    assert len(intermediate) >= 6
    times = [t for t, _ in intermediate]
    assert times == sorted(times) and len(set(times)) == len(times)
    for t, op in intermediate:
        np.testing.assert_allclose(op.params, centre_at(history, t, X0), rtol=1e-5, err_msg=f"t={t}")
