"""The MPI driver without MPI: every rank a thread of this process, talking over the loopback transport.

The same set-up as ``hpcbench run`` (plan → assemble → open the layout → a driver per rank), so a
driver bug shows here in seconds, with a plain traceback, before it shows under mpiexec.
"""
from __future__ import annotations

import dataclasses
import re
import time
from typing import get_args

import numpy as np
import pytest

from hpcbench.algorithms import ALGORITHMS
from hpcbench.algorithms.ops import (
    ALL_OPS,
    COLLECTIVES,
    TIMED_OPS,
    Accumulate,
    Drain,
    FetchAdd,
    Gradient,
    Op,
    Publish,
    Read,
    Recv,
    handler_name,
)
from hpcbench.comm.collectives import COMBINE
from hpcbench.comm.loopback import Loopback
from hpcbench.config import RunConfig
from hpcbench.errors import RuntimeFailure
from hpcbench.options.sim import SimConfig
from hpcbench.runtime.assemble import assemble
from hpcbench.runtime.logs import RunLogs
from hpcbench.runtime.mpi.driver import MpiDriver
from hpcbench.runtime.mpi.session import open_layout
from hpcbench.runtime.plan import make_context, validate
from hpcbench.runtime.sim.costs import COLLECTIVE_COSTS
from hpcbench.runtime.sim.engine import Engine, Parts
from hpcbench.runtime.sim.session import simulated_record
from hpcbench.telemetry.timeline import OP_CODE, OPS, Timeline
from hpcbench.workload.compute import ComputeModel

from lockstep import as_threads
from reference import union_batch_sgd

COMMON = dict(model="mlp", dataset="digits", batch_size=16, lr=0.05, momentum=0.9, weight_decay=0.001, evals=4,
              warmup_epochs=0.0)


def run_threads(cfg: RunConfig, workers: int, timeout: float = 60.0):
    """Run ``cfg`` with rank 0 and ``workers`` worker threads; → (rank 0's logs, timelines, errors)."""
    plan = validate(cfg)
    hub = Loopback(workers + 1)
    runs = [assemble(plan, workers) for _ in range(workers + 1)]  # each rank its own model and data
    ends = [hub.endpoint(rank) for rank in range(workers + 1)]
    for rank, end in enumerate(ends):
        open_layout(end, runs[rank].layout, workers)
    logs = runs[0].logs()
    timelines = [Timeline(rank) for rank in range(workers + 1)]
    drivers = [MpiDriver(ends[r], timelines[r], timeout, runs[r].workload, runs[r].stream(r) if r else None,
                         logs=logs if r == 0 else None) for r in range(workers + 1)]

    def rank_main(rank: int) -> None:
        algo = runs[rank].algo
        drivers[rank].run(algo.server() if rank == 0 else algo.worker(rank))

    ended = as_threads(rank_main, workers + 1, timeout + 30)
    return logs, timelines, {r: e for r, e in ended.items() if isinstance(e, BaseException)}


def test_every_operation_has_a_handler_in_both_drivers_and_a_timeline_code():
    assert set(get_args(Op)) == set(ALL_OPS)
    for op in ALL_OPS:
        handler = "collective" if op in COLLECTIVES else handler_name(op)
        assert callable(getattr(MpiDriver, handler, None)), op
        assert callable(getattr(Engine, handler, None)), op
    for op in COLLECTIVES:  # carried out by name: each combines its parts and has a cost
        assert op.__name__ in COMBINE and op.__name__ in COLLECTIVE_COSTS, op
    # every timed operation has its code, and the rows no operation yields ("Shrink") come after them, so a
    # file written before them reads with the same codes
    timed = 1 + len(TIMED_OPS)
    assert list(OPS[1:timed]) == [op.__name__ for op in TIMED_OPS] and OPS[timed:] == ("Shrink",)
    assert handler_name(Recv) == "recv" and handler_name(type("FetchAdd", (), {})) == "fetch_add"


@pytest.mark.timeout(120)
def test_allreduce_over_loopback_equals_union_batch_sgd():
    logs, timelines, errors = run_threads(RunConfig(algo="allreduce", steps=10, **COMMON), workers=3)
    assert errors == {}
    expected = union_batch_sgd("mlp", "digits", 3, steps=10, batch=16, lr=0.05, momentum=0.9, wd=0.001, seed=0)
    np.testing.assert_allclose(logs.last_params, expected, rtol=1e-4, atol=2e-5)
    assert logs.snapshots[-1][1].samples == 10 * 3 * 16
    for rank in (1, 2, 3):  # each worker: 10 computes and 10 all-reduces, in its own timeline
        ops = timelines[rank].columns()["op"]
        assert (ops == OPS.index("Compute")).sum() == 2 * 10  # data + compute rows
        assert (ops == OPS.index("Allreduce")).sum() == 10


@pytest.mark.timeout(120)
def test_asgd_over_loopback_applies_exactly_the_budget_and_one_worker_is_sequential_sgd():
    logs, _, errors = run_threads(RunConfig(algo="asgd", steps=12, **COMMON), workers=1)
    assert errors == {}
    expected = union_batch_sgd("mlp", "digits", 1, steps=12, batch=16, lr=0.05, momentum=0.9, wd=0.001, seed=0)
    np.testing.assert_allclose(logs.last_params, expected, rtol=1e-5, atol=1e-6)

    logs, _, errors = run_threads(RunConfig(algo="asgd", steps=12, **COMMON), workers=3)
    assert errors == {}
    updates = logs.table_columns_of("updates")
    assert len(updates["worker"]) == 12 * 3  # the budget, whoever ran faster
    assert (np.diff(updates["version_applied"]) == 1).all() and (updates["staleness"] >= 0).all()
    assert len(logs.tables["late"]) == 3 - 1  # every other worker learns of the end from one late gradient


@pytest.mark.timeout(120)
@pytest.mark.parametrize("algo", ["easgd-sync", "sgp"])
def test_synchronous_decentralised_runs_match_the_simulator_bit_for_bit(algo):
    """Synchronous workers do not depend on timing: the two drivers' final models must agree exactly
    (rank 0's evaluations during the run read whatever the workers have reached, so only the last
    one is compared)."""
    cfg = RunConfig(algo=algo, steps=8, **COMMON)
    logs, _, errors = run_threads(cfg, workers=3)
    assert errors == {}
    rec, _ = simulated_record(validate(cfg), SimConfig(workers=3), show_progress=False)
    np.testing.assert_array_equal(logs.last_params, rec.final_params)
    assert logs.snapshots[-1][1].samples == rec.evals["samples"][-1] == 8 * 3 * 16


@pytest.mark.timeout(60)
def test_a_message_that_never_comes_fails_with_its_name_and_deadline():
    hub = Loopback(2)
    end = hub.endpoint(0)
    end.open_channel("grad", 8, (1,))
    driver = MpiDriver(end, Timeline(0), timeout=0.2)

    def program():
        yield Recv("grad")

    with pytest.raises(RuntimeFailure, match=r"timed out after 0.2 s waiting for a 'grad' message from any rank"):
        driver.run(program())


@pytest.mark.timeout(120)
@pytest.mark.parametrize("algo, options", [("gossip", {"variant": "push"}), ("easgd", {})])
def test_asynchronous_decentralised_runs_train_exactly_the_shared_budget(algo, options):
    """Workers claim batches with FetchAdd on rank 0's counter: together they train the budget,
    no more and no less, however the threads interleave; push-sum keeps Σ w = n."""
    cfg = RunConfig(algo=algo, steps=10, options={algo: options}, **COMMON)
    logs, _, errors = run_threads(cfg, workers=3)
    assert errors == {}
    final = logs.table_columns_of("final_models")
    assert final["samples"].sum() == 10 * 3 * 16
    assert final["updates"].sum() == 10 * 3
    if algo == "gossip":
        assert final["weight"].sum() == pytest.approx(3.0, rel=1e-12)
    assert np.isfinite(logs.last_params).all()


def undeclared_add(window: str, what: str = "an add into") -> str:
    return (f"{what} window {window!r}, which its layout declares \"publish\": declare it \"accumulate\" "
            "(reads of a window others add into must exclude the adders)")


def counter_only(window: str, what: str) -> str:
    return f"{what} window {window!r}, which its layout declares \"count\": a counter takes fetch-and-adds only"


@pytest.mark.timeout(60)
@pytest.mark.parametrize("op, rank, what", [(Accumulate("w", 0, ((0, np.ones(2, np.float32)),)), 1, "an add into"),
                                            (FetchAdd("w", 0, 1), 1, "an add into"), (Drain("w"), 0, "a drain of")])
def test_an_add_into_a_window_not_declared_accumulate_is_refused_by_the_transport(op, rank, what):
    """Under MPI a reader of such a window copies it without a lock, racing the adds (undefined in
    MPI), and its owner's drain could not exclude them: the algorithm's layout is wrong, and the
    transports say so."""
    def program():
        yield op

    hub = Loopback(2)
    ends = [hub.endpoint(r) for r in range(2)]
    for end in ends:
        end.open_window("w", 8, owned=end.rank == 0)
    with pytest.raises(RuntimeFailure) as refused:
        MpiDriver(ends[rank], Timeline(rank), timeout=1.0).run(program())
    assert str(refused.value) == undeclared_add("w", what)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("op, rank, what", [(Accumulate("w", 0, ((0, np.ones(2, np.float32)),)), 1, "an add into"),
                                            (Drain("w"), 0, "a drain of"), (Read("w", (0,)), 1, "a read of"),
                                            (Publish("w", np.zeros(8, np.uint8)), 0, "a publish into")])
def test_a_window_declared_a_counter_takes_only_fetch_and_adds(op, rank, what):
    """Under MPI its adds are lock-free atomics: a read, a drain or a plain add would race them."""
    def program():
        yield FetchAdd("w", 0, 1)
        yield op

    hub = Loopback(2)
    ends = [hub.endpoint(r) for r in range(2)]
    for end in ends:
        end.open_window("w", 8, owned=end.rank == 0, mode="count")
    with pytest.raises(RuntimeFailure) as refused:
        MpiDriver(ends[rank], Timeline(rank), timeout=1.0).run(program())
    assert str(refused.value) == counter_only("w", what)


@pytest.mark.timeout(60)
def test_a_ranks_processor_time_ends_with_its_last_training_operation():
    """What rank 0 does after its last training operation (reading and averaging the kept snapshots)
    measures the run: ``rank0_cpu_share`` leaves it out."""
    hub = Loopback(1)
    end = hub.endpoint(0)
    end.open_window("w", 8, owned=True)
    timeline = Timeline(0)
    driver = MpiDriver(end, timeline, timeout=1.0)
    burnt = []

    def program():
        yield Publish("w", np.zeros(8, np.uint8))
        start = time.process_time()
        while time.process_time() - start < 0.2:  # averaging snapshots, say
            pass
        burnt.append(time.process_time())
        yield Read("w", (0,), observe=True)

    driver.run(program())
    rows = timeline.columns()
    publish_end, read_start = rows["t_end"][rows["op"] == OP_CODE["Publish"]][0], rows["t_start"][-1]
    assert publish_end <= driver.trained[0] < read_start - 0.15
    assert driver.trained[1] < burnt[0] - 0.15


def simulate_with(name: str, change) -> RuntimeFailure:
    """Run ``name`` on the simulator with its layout changed by ``change(layout)``; → the error it ends with."""
    algo_cls = ALGORITHMS.get(name)
    cfg = RunConfig(algo=name, steps=4, warmup_epochs=0.0)
    algo = algo_cls(make_context(validate(cfg), 2, np.zeros(3, np.float32), train_size=10**6))
    layout = change(algo.layout())
    sim = SimConfig(workers=2)
    engine = Engine(Parts(algo=algo, layout=layout, cfg=sim, compute=ComputeModel(sim, 0, {}),
                          gradient=lambda r, p: Gradient(p, 0.0, 1, 0), logs=RunLogs(layout.tables, layout.columns),
                          real_size=3))
    with pytest.raises(RuntimeFailure) as refused:
        engine.run()
    return refused.value


def replaced(layout, part: str, name: str, **changes):
    specs = getattr(layout, part)
    return dataclasses.replace(layout, **{part: {**specs, name: dataclasses.replace(specs[name], **changes)}})


@pytest.mark.parametrize("window", ["centre", "budget"])
def test_the_simulator_refuses_an_add_into_a_window_not_declared_accumulate(window):
    """easgd's workers add into rank 0's centre and claim batches from its budget counter: either
    declared "publish", the simulator refuses the first add, as the MPI transport would."""
    error = simulate_with("easgd", lambda layout: replaced(layout, "windows", window, mode="publish"))
    assert str(error) == undeclared_add(window)


@pytest.mark.parametrize("name, window, what", [("easgd", "centre", "a read of"), ("gossip", "model", "a read of"),
                                                 ("allreduce", "kept", "a publish into")])
def test_the_simulator_refuses_anything_but_a_fetch_and_add_on_a_counter(name, window, what):
    error = simulate_with(name, lambda layout: replaced(layout, "windows", window, mode="count"))
    assert str(error) == counter_only(window, what)


@pytest.mark.parametrize("name, channel, changes, line", [
    ("asgd", "grad", {"nbytes": 12}, "a 'grad' message of {n} bytes, where its layout declares 12"),
    ("asgd", "ack", {"nbytes": 4}, "a 'ack' message of {n} bytes, where its layout declares 4"),
    ("ga-asgd", "ack", {"to": "server"},
     "a 'ack' message from rank 0 to rank {r}, where its layout declares it from the server to the server"),
    ("sgp", "push", {"sender": "server"},
     "a 'push' message from rank {r} to rank {d}, where its layout declares it from the server to the workers"),
    ("allreduce", "progress", {"to": "workers"},
     "a 'progress' message from rank {r} to rank 0, where its layout declares it from the workers to the workers"),
    ("local-sgd", "evaluate", {"sender": "workers"},
     "a 'evaluate' message from rank 0 to rank {r}, where its layout declares it from the workers to the workers"),
])
def test_the_simulator_refuses_a_message_its_layout_does_not_declare(name, channel, changes, line):
    """Under MPI a channel's receives are posted for its declared size and senders: a longer message
    is truncated, a shorter one leaves stale bytes. The simulator holds every algorithm to its layout."""
    error = str(simulate_with(name, lambda layout: replaced(layout, "channels", channel, **changes)))
    pattern = re.escape(line).replace(r"\{n\}", r"\d+").replace(r"\{r\}", r"[1-2]").replace(r"\{d\}", r"[1-2]")
    assert re.fullmatch(pattern, error), error


@pytest.mark.timeout(60)
def test_the_loopback_refuses_a_message_of_another_size():
    hub = Loopback(2)
    ends = [hub.endpoint(r) for r in range(2)]
    for end in ends:
        end.open_channel("grad", 8, (1,))
    with pytest.raises(RuntimeFailure) as refused:
        ends[1].send("grad", 0, np.zeros(3, np.float32))
    assert str(refused.value) == "a 'grad' message of 12 bytes, where its layout declares 8"
