"""Push-sum (sgp, osgp, push gossip) through the real programs: bounded delay, finiteness, conservation.

The osgp programs are driven by a hand-written harness whose in-peers are as slow as possible (a
message is there only when the worker blocks for it), so the worker's waits show exactly which
messages its bound forces it to absorb. The others run in the simulator and are checked against
conservation laws and exact averaging, from distinct starting models.
"""
import contextlib
import io

import numpy as np
import pytest

from hpcbench.algorithms import ALGORITHMS, decentral
from hpcbench.algorithms.ops import Compute, FetchAdd, Gradient, Op, Poll, Publish, Recv, Send
from hpcbench.algorithms.topology import exponential_hops, exponential_in_peer
from hpcbench.cli import main
from hpcbench.config import RunConfig
from hpcbench.results.store import read_run
from hpcbench.runtime import plan

from lockstep import drive

N, ME, STOP_AFTER = 8, 3, 20  # workers, the driven worker's rank, its iterations before the budget runs out


def osgp_context(tau: int, algo: str = "osgp"):
    options = {"tau": tau} if algo == "osgp" else {}
    cfg = RunConfig(algo=algo, steps=STOP_AFTER, lr=0.0, warmup_epochs=0.0, options={algo: options})
    algo_cls = ALGORITHMS.get(algo)
    return algo_cls(plan.make_context(plan.validate(cfg), N, np.zeros(4, np.float32), train_size=10**6))


def drive_with_slow_in_peers(tau: int, algo: str = "osgp"):
    """Run worker ME; → (messages absorbed before each compute, all absorbed, stop messages sent)."""
    program_owner = osgp_context(tau, algo)
    msg = program_owner.message
    i = ME - 1
    # Every in-peer sends to us at each iteration m whose in-peer it is, and stops after STOP_AFTER.
    queued = {}
    for m in range(STOP_AFTER):
        queued.setdefault(exponential_in_peer(i, m, N) + 1, []).append(m)
    absorbed, before_compute, markers = [], [], []
    computes = 0

    def answer(op: Op) -> object:
        nonlocal computes
        if isinstance(op, Compute):
            before_compute.append(set(absorbed))
            computes += 1
            return Gradient(np.zeros(4, np.float32), 0.0, 1, 0)
        if isinstance(op, FetchAdd):  # the shared budget runs out after STOP_AFTER of our steps
            return 0 if computes < STOP_AFTER else program_owner.ctx.budget
        if isinstance(op, (Poll, Recv)) and op.channel == "evaluate":
            return coordinator(op)
        if isinstance(op, Recv):
            assert op.channel == "push"
            if op.timeout == 0:
                return None  # slow in-peers: nothing is ever there before the worker waits for it
            if queued.get(op.src):
                m = queued[op.src].pop(0)
                absorbed.append(m)
                return (op.src, msg.pack(iteration=m, last=0, w=0.5, z=np.ones(4, np.float32)))
            return (op.src, msg.pack(last=1))
        if isinstance(op, Send) and op.channel == "push" and msg.integer(op.data, "last"):
            markers.append(op.dest)
        else:
            assert isinstance(op, (Send, Publish))
        return None

    drive(program_owner.worker(ME), answer)
    return before_compute, absorbed, markers


def coordinator(op: Poll | Recv) -> object:
    """Rank 0's side of the "evaluate" channel: no snapshot is asked for; a done worker hears that none
    is coming."""
    return [] if isinstance(op, Poll) else (0, decentral.EVALUATE.pack(k=decentral.NO_MORE))


@pytest.mark.parametrize("tau", [0, 1, 2, 3])
def test_osgp_absorbs_every_message_older_than_tau_before_computing_and_no_newer_one(tau):
    before_compute, absorbed, markers = drive_with_slow_in_peers(tau)
    assert len(before_compute) == STOP_AFTER
    for k, have in enumerate(before_compute):
        assert have == set(range(max(0, k - tau))), f"iteration {k}"  # exactly the messages sent at <= k-tau-1
    assert sorted(absorbed) == list(range(STOP_AFTER))  # every message sent to it, each once
    assert sorted(markers) == sorted((ME - 1 + 2**h) % N + 1 for h in range(exponential_hops(N)))


def test_a_message_that_lands_between_two_probes_is_still_taken_in_order():
    """An in-peer's messages arrive in order, and one that was not there at one probe can be there at
    the next: the worker must not then take it in place of a later one (it did, and a real 3-rank
    osgp run on a loaded machine failed with "rank 2 sent iteration 1 where 2 was due")."""
    n, me, peer, stop = 2, 1, 2, 12  # two workers: every message comes from the same in-peer
    cfg = RunConfig(algo="osgp", steps=stop, lr=0.0, warmup_epochs=0.0, options={"osgp": {"tau": 3}})
    cls = ALGORITHMS.get("osgp")
    owner = cls(plan.make_context(plan.validate(cfg), n, np.zeros(4, np.float32), train_size=10**6))
    msg = owner.message
    on_the_way: list[int] = []  # iterations the in-peer has sent (one behind us), not yet received
    absorbed, computes, probes_since_compute = [], 0, 0

    def answer(op: Op) -> object:
        nonlocal computes, probes_since_compute
        if isinstance(op, Compute):
            if computes:
                on_the_way.append(computes - 1)
            computes, probes_since_compute = computes + 1, 0
            return Gradient(np.zeros(4, np.float32), 0.0, 1, 0)
        if isinstance(op, FetchAdd):
            if computes == stop and stop - 1 not in on_the_way + absorbed:
                on_the_way.append(stop - 1)  # the in-peer's last one
            return 0 if computes < stop else owner.ctx.budget
        if isinstance(op, (Poll, Recv)) and op.channel == "evaluate":
            return coordinator(op)
        if isinstance(op, Recv):
            probes_since_compute += 1
            if op.timeout == 0 and probes_since_compute == 1:
                return None  # not there yet: it lands just after this probe
            if on_the_way:
                absorbed.append(on_the_way.pop(0))
                return (peer, msg.pack(iteration=absorbed[-1], last=0, w=0.5, z=np.ones(4, np.float32)))
            if op.timeout is None:
                return (peer, msg.pack(last=1))
            return None
        assert isinstance(op, (Send, Publish))
        return None

    drive(owner.worker(me), answer)
    assert absorbed == list(range(stop))


def test_sgp_is_osgp_with_tau_zero():
    assert drive_with_slow_in_peers(0, "sgp")[0] == drive_with_slow_in_peers(0, "osgp")[0]


def test_mix_survives_a_weight_that_underflows():
    z, w = np.array([1.5, -2.0]), 1.0
    for _ in range(3000):  # gives half away every step and receives nothing: w becomes exactly 0
        w *= 0.5
    assert w == 0.0 and np.isfinite(z).all()
    assert decentral.mix(z, w, np.array([9.0, 9.0]), 0.0) == 0.0  # an empty mailbox: nothing to mix, no 0/0
    np.testing.assert_array_equal(z, [1.5, -2.0])
    w = decentral.mix(z, w, np.array([3.0, 4.0]), 0.25)  # then receives: takes the sender's model
    np.testing.assert_array_equal(z, [3.0, 4.0])
    assert w == 0.25
    w = decentral.mix(z, w, np.array([1.0, 0.0]), 0.75)  # a weighted average, weights 1:3
    np.testing.assert_allclose(z, [1.5, 1.0])
    assert w == 1.0


def simulate(*args: str):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["simulate", *args]) == 0
    return read_run(args[args.index("--out") + 1])


def start_mass(algo: str, workers: int, spread: float) -> float:
    """Σ_i Σ z_i(0) of the workers' distinct starting models (weights start at 1)."""
    from hpcbench.workload.datasets import load_dataset
    from hpcbench.workload.trainer import Trainer

    cfg = RunConfig(algo=algo)
    ctx = plan.make_context(plan.validate(cfg), workers, Trainer("mlp", load_dataset("digits"), 0).initial, 1437)
    return sum(float(decentral.starting_point(ctx, r, spread, np.float64).sum()) for r in range(1, workers + 1))


@pytest.mark.parametrize("algo, options", [("gossip", ["gossip.variant=push"]), ("sgp", []), ("osgp", ["osgp.tau=2"])])
def test_push_sum_with_a_straggler_stays_finite_and_conserves_weight_and_mass(tmp_path, algo, options):
    # (a weight halved until it underflows: test_mix_survives_a_weight_that_underflows)
    sets = [arg for option in options + [f"{algo}.init_spread=0.05"] for arg in ("--set", option)]
    rec = simulate("--algo", algo, *sets, "--workers", "5", "--steps", "300", "--lr", "0",
                   "--stragglers", "0.2:4", "--numerics", "on", "--set", "evals=4", "--out", str(tmp_path / "push.h5"))
    final = rec.tables["final_models"]
    assert np.isfinite(rec.final_params).all() and np.isfinite(rec.evals["consensus"][1:]).all()
    assert np.isfinite(final["mass"]).all() and (final["weight"] > 0).all()
    assert final["weight"].sum() == pytest.approx(5.0, rel=1e-12)
    # gossip's mailbox adds in float64; sgp's messages carry z in float32, as the reference implementation's tensors
    assert final["mass"].sum() == pytest.approx(start_mass(algo, 5, 0.05), rel=1e-12 if algo == "gossip" else 1e-6)
    if algo == "gossip":  # sgp and osgp wait for their in-peers, so the straggler holds everyone back
        assert final["samples"].min() < final["samples"].max() / 2  # the straggler really was slower


@pytest.mark.parametrize("workers", [4, 8])
def test_sgp_averages_distinct_models_exactly_in_log2_n_rounds(tmp_path, workers):
    rounds = int(np.log2(workers))
    rec = simulate("--algo", "sgp", "--set", "sgp.init_spread=0.1", "--workers", str(workers),
                   "--steps", str(rounds), "--lr", "0", "--set", "evals=1", "--out", str(tmp_path / "sgp.h5"))
    assert rec.evals["consensus"][-1] < 1e-6  # every worker holds the same model ...
    spread_start = 0.1 * np.sqrt(rec.final_params.size)
    assert rec.evals["consensus"][-1] < 1e-5 * spread_start
    mass = start_mass("sgp", workers, 0.1)
    final = rec.tables["final_models"]
    assert (final["weight"] == 1.0).all()  # ... with all weight back where it started
    assert float(rec.final_params.sum(dtype=np.float64)) == pytest.approx(mass / workers, rel=1e-6)  # the mean
