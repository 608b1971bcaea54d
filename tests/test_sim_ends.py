"""Every simulation ends: on the inputs that used to spin forever, on values far outside the usual, and
over random algorithms, worlds, compute laws and networks (Hypothesis): each run ends within its
deadline with the whole budget trained or refuses in one line, the transfers between two ranks arrive
in the order they were sent, and the same seed writes the same file."""
import contextlib
import io
import math
from unittest import mock

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from hpcbench.algorithms import ALGORITHMS
from hpcbench.cli import main
from hpcbench.results.store import read_run
from hpcbench.runtime.sim.engine import Engine
from hpcbench.runtime.sim.links import Links


def simulate(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["simulate", "--numerics", "off", *args])
    return code, out.getvalue(), err.getvalue()


def test_a_transfer_whose_last_bytes_take_less_time_than_now_can_hold_ends():
    """Late in a run a float second holds ~16 digits: 1.65e-7 bytes at 1.25 GB/s take 1.3e-16 s, which
    added to t = 2.2956… is t again. The transfer must end, not be rescheduled at t without end."""
    heap: list = []

    def at(t, action, *args):
        heap.append((t, action, args))

    links = Links(2, 1.25e9, at)
    now = 2.2956318918427603
    ended = []
    links.start(0, 1, 1.65e-7, lambda: ended.append(True), now)
    for _ in range(10):
        if not heap:
            break
        heap.sort(key=lambda e: e[0])
        t, action, args = heap.pop(0)
        assert t == now
        action(*args)
    assert ended == [True] and not heap


@pytest.mark.parametrize("args", [
    ("--algo", "asgd", "--workers", "2", "--steps", "5", "--compute", "gamma:shape=100,mean=2"),
    ("--algo", "easgd", "--workers", "4", "--steps", "10", "--compute", "gamma:shape=100,mean=3"),
    ("--algo", "ga-asgd", "--workers", "3", "--steps", "20", "--compute", "gamma:shape=1,mean=100"),
])
@pytest.mark.parametrize("seed", ["0", "3"])
@pytest.mark.timeout(60)
def test_long_compute_steps_end_with_the_whole_budget(tmp_path, args, seed):
    code, _, err = simulate(*args, "--seed", seed, "--out", str(tmp_path / "r.h5"))
    assert code == 0, err
    rec = read_run(tmp_path / "r.h5")
    assert rec.attrs["status"] == "ok" and rec.summary["samples"] == rec.attrs["config"]["budget_samples"]


@pytest.mark.parametrize("args, setting", [
    (("--compute", "gamma:shape=100,mean=1e308"), "sim.compute_mean_s"),
    (("--compute", "gamma:shape=100,mean=inf"), "sim.compute_mean_s"),
    (("--pauses", "0.5:1e308"), "sim.pause_s"),
    (("--network", "alpha=1e308,bandwidth=1e9"), "sim.alpha_s"),
    (("--network", "alpha=1e-5,bandwidth=1e-300"), "sim.bandwidth"),
    (("--network", "alpha=1e-5,bandwidth=1e9,jitter=1e308"), "sim.jitter_s"),
    (("--set", "stragglers=0.5:1e308"), "stragglers"),
])
@pytest.mark.timeout(60)
def test_times_no_float_can_carry_are_refused_in_one_line_naming_the_setting(tmp_path, args, setting):
    code, _, err = simulate("--algo", "asgd", "--workers", "2", "--steps", "5", *args,
                            "--out", str(tmp_path / "r.h5"))
    assert code == 2 and len(err.strip().splitlines()) == 1 and setting in err, err
    assert not (tmp_path / "r.h5").exists()


@pytest.mark.timeout(60)
def test_a_simulation_past_its_deadline_ends_as_timeout_with_its_record(tmp_path):
    code, _, err = simulate("--algo", "asgd", "--workers", "64", "--steps", "100000", "--set",
                            "sim.deadline_s=1", "--out", str(tmp_path / "r.h5"))
    assert code == 1 and len(err.strip().splitlines()) == 1, err
    assert "sim.deadline_s=1" in err and str(tmp_path / "r.h5") in err
    rec = read_run(tmp_path / "r.h5")
    assert rec.attrs["status"] == "timeout"
    computed = (rec.timeline["op"] == rec.ops.index("Compute")).sum()  # what it simulated, kept
    assert 0 < computed < rec.attrs["config"]["budget_samples"] / rec.attrs["config"]["batch_size"]


@pytest.mark.parametrize("algo", ["sgp", "osgp", "gossip"])
@pytest.mark.timeout(120)
def test_jitter_keeps_each_pairs_messages_in_order(tmp_path, algo):
    """Jitter of 0.25 s on messages 10 ms apart: a later message between the same two ranks must still
    arrive after the earlier one (one connection carries them in order); sgp and osgp check the
    iteration of every message they get."""
    code, _, err = simulate("--algo", algo, "--workers", "4", "--steps", "30", "--compute",
                            "gamma:shape=100,mean=0.01", "--network", "alpha=1e-5,bandwidth=1e9,jitter=0.25",
                            "--out", str(tmp_path / "r.h5"))
    assert code == 0, err
    assert read_run(tmp_path / "r.h5").attrs["status"] == "ok"


@pytest.mark.timeout(60)
def test_jitter_is_not_charged_to_an_atomic(tmp_path):
    """The jitter is fitted on transfers of data; gossip's claims on the shared budget (an 8-byte
    fetch-and-add on rank 0) are answered in microseconds (α here), however large the jitter, while
    its pushes into the peers' mailboxes carry it."""
    code, _, err = simulate("--algo", "gossip", "--workers", "3", "--steps", "100", "--network",
                            "alpha=1e-5,bandwidth=1e9,jitter=0.1", "--out", str(tmp_path / "r.h5"))
    assert code == 0, err
    rec = read_run(tmp_path / "r.h5")
    tl = rec.timeline
    seconds = tl["t_end"] - tl["t_start"]
    atomic = tl["op"] == rec.ops.index("FetchAdd")
    data = np.isin(tl["op"], [rec.ops.index("Accumulate"), rec.ops.index("Read")]) & (tl["rank"] > 0)
    assert atomic.sum() >= 300 and data.any()
    assert seconds[atomic].max() < 1e-3
    assert seconds[data].mean() > 0.05


ALGOS = sorted(ALGORITHMS.names())


@contextlib.contextmanager
def order_checked():
    """Every transfer between two ranks arrives after the ones sent before it between them (atomics
    aside: the network answers them on its own)."""
    sent: dict = {}
    arrived: dict = {}
    original = Engine.transfer

    def transfer(self, src, dst, nbytes, t, done, *args, **kwargs):
        if kwargs.get("atomic"):
            return original(self, src, dst, nbytes, t, done, *args, **kwargs)
        pair = (src, dst)
        sent[pair] = seq = sent.get(pair, 0) + 1

        def landed():
            assert arrived.get(pair, 0) == seq - 1, f"transfer {seq} from {src} to {dst} overtook an earlier one"
            arrived[pair] = seq
            done()

        return original(self, src, dst, nbytes, t, landed, *args, **kwargs)

    with mock.patch.object(Engine, "transfer", transfer):
        yield


def contents(path) -> dict:
    rec = read_run(path)
    return {"summary": dict(rec.summary), **{f"timeline.{k}": np.asarray(v) for k, v in rec.timeline.items()}}


@pytest.mark.slow  # 40 simulations, each twice: 6 s
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(algo=st.sampled_from(ALGOS), workers=st.integers(1, 6), steps=st.integers(1, 12),
       mean=st.floats(-4, 2).map(lambda e: 10 ** e), shape=st.sampled_from([0.5, 1, 100]),
       alpha=st.floats(-7, -2).map(lambda e: 10 ** e), bandwidth=st.floats(5, 10).map(lambda e: 10 ** e),
       jitter=st.sampled_from([0.0, 1e-3, 0.2]), noise=st.sampled_from([0.0, 0.5]),
       params=st.integers(1, 50_000), seed=st.integers(0, 3))
def test_every_simulation_ends_in_order_with_its_budget_and_the_same_seed_gives_the_same_file(
        tmp_path_factory, algo, workers, steps, mean, shape, alpha, bandwidth, jitter, noise, params, seed):
    where = tmp_path_factory.mktemp("sim")
    args = ("--algo", algo, "--workers", str(workers), "--steps", str(steps), "--seed", str(seed),
            "--model", "payload", "--set", f"payload.params={params}",
            "--compute", f"gamma:shape={shape},mean={mean!r}",
            "--network", f"alpha={alpha!r},bandwidth={bandwidth!r},jitter={jitter},noise={noise}",
            "--set", "sim.deadline_s=20")
    with order_checked():
        code, _, err = simulate(*args, "--out", str(where / "a.h5"))
    event("refused" if code == 2 else "ran")
    if code == 2:  # refused (a world too small for the algorithm, a setting it does not take): one line
        assert len(err.strip().splitlines()) == 1 and err.startswith("hpcbench: error: "), err
        assert not (where / "a.h5").exists()
        return
    assert code == 0, err
    rec = read_run(where / "a.h5")
    assert rec.attrs["status"] == "ok"
    assert rec.summary["samples"] == rec.attrs["config"]["budget_samples"]
    assert math.isfinite(rec.summary["wall_s"]) and rec.summary["wall_s"] > 0
    code, _, err = simulate(*args, "--out", str(where / "b.h5"))
    assert code == 0, err
    np.testing.assert_equal(contents(where / "a.h5"), contents(where / "b.h5"))  # NaN equals NaN here
