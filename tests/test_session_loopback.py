"""The MPI session without MPI: ``run_on`` on every rank of the loopback cluster, each a thread.

Set-up agreement, placement, heartbeats, failure notices, the final gather and the result file are
the session's own code here, exactly as under mpiexec; only the transport differs.
"""
from __future__ import annotations

import time

import numpy as np
import pytest

from hpcbench.comm.loopback import Loopback
from hpcbench.config import Faults, RunConfig
from hpcbench.errors import UsageError, WaitTimeout
from hpcbench.options.sim import SimConfig
from hpcbench.results.store import read_run
from hpcbench.runtime.mpi import session
from hpcbench.runtime.plan import validate
from hpcbench.runtime.sim.session import simulated_record

from lockstep import as_threads

COMMON = dict(model="mlp", dataset="digits", batch_size=16, lr=0.05, momentum=0.9, evals=3, warmup_epochs=0.0,
              flush_s=0.2)


def run_cluster(cfg: RunConfig, workers: int, limit: float = 60.0) -> list[int]:
    """``run_on`` on rank 0 and ``workers`` worker threads; → every rank's exit code, in rank order."""
    hub = Loopback(workers + 1)
    codes = as_threads(lambda rank: session.run_on(validate(cfg), hub.endpoint(rank)), workers + 1, limit)
    return [codes[r] for r in range(workers + 1)]


@pytest.mark.timeout(120)
def test_a_synchronous_run_writes_the_simulators_model_and_every_ranks_part(tmp_path):
    out = tmp_path / "sgp.h5"
    cfg = RunConfig(algo="sgp", steps=6, out=str(out), **COMMON)
    assert run_cluster(cfg, workers=3) == [0, 0, 0, 0]
    rec = read_run(out)
    assert rec.attrs["status"] == "ok" and rec.mode == "mpi" and rec.attrs["world_size"] == 4
    expected, _ = simulated_record(validate(cfg.with_updates(out="")), SimConfig(workers=3), show_progress=False)
    np.testing.assert_array_equal(rec.final_params, expected.final_params)
    # The final gather: every rank's placement and timeline, on one clock.
    assert rec.per_rank["hostnames"] == ["loopback"] * 4 and rec.per_rank["local_ranks"] == ["0", "1", "2", "3"]
    assert sorted(set(rec.timeline["rank"].tolist())) == [0, 1, 2, 3]
    computes = rec.timeline["phase"] == rec.phases.index("compute")
    assert np.bincount(rec.timeline["rank"][computes], minlength=4).tolist() == [0, 6, 6, 6]
    assert rec.summary["samples"] == 6 * 3 * 16 and rec.summary["warmup_s"] > 0  # the workers' warm-up came too
    assert np.isfinite(rec.summary["rank0_cpu_share"])


@pytest.mark.timeout(120)
def test_a_set_up_error_on_one_worker_is_agreed_on_and_said_once_by_rank_0(tmp_path, monkeypatch, capsys):
    prepare = session.prepare

    def failing_on_rank_2(plan, rank, *args):
        if rank == 2:
            raise UsageError("no room for the model here")
        return prepare(plan, rank, *args)

    monkeypatch.setattr(session, "prepare", failing_on_rank_2)
    out = tmp_path / "never.h5"
    assert run_cluster(RunConfig(algo="asgd", steps=4, out=str(out), **COMMON), workers=3) == [2, 2, 2, 2]
    assert capsys.readouterr().err.splitlines() == ["hpcbench: error: rank 2 on loopback: no room for the model here"]
    assert not out.exists()


@pytest.mark.timeout(120)
def test_a_worker_that_fails_tells_rank_0_which_keeps_the_record_and_ends_every_rank(tmp_path, capsys):
    out = tmp_path / "failed.h5"
    cfg = RunConfig(algo="asgd", steps=50, out=str(out), fault=Faults.parse("raise:2@3"), **COMMON)
    t0 = time.monotonic()
    codes = run_cluster(cfg, workers=3)
    assert codes == [1, 1, 1, 1]
    assert time.monotonic() - t0 < session.NOTICE_GRACE_S  # rank 0 ended the run; no one waited out the grace
    rec = read_run(out)
    assert rec.attrs["status"] == "failed"
    assert rec.attrs["error"] == "rank 2 on loopback: injected fault raise:2@3"
    err = capsys.readouterr().err
    assert "hpcbench: error: rank 2 on loopback: injected fault raise:2@3" in err
    assert f"what rank 0 recorded until then is in {out}" in err
    assert len(rec.tables["updates"]["t"]) >= 3  # what the server applied before it heard


@pytest.mark.timeout(120)
def test_a_worker_that_stops_answering_is_named_by_its_heartbeats(tmp_path, monkeypatch):
    """Rank 2 stalls inside a gradient (no tick, so no heartbeat): the others go on, and rank 0 names
    rank 2 once it has been silent for timeout_s; the stalled rank ends when it wakes."""
    from hpcbench.runtime.mpi import driver

    run_program = driver.MpiDriver.run

    def stalling(self, program):
        if self.comm.rank == 2:
            time.sleep(4.0)
        return run_program(self, program)

    monkeypatch.setattr(driver.MpiDriver, "run", stalling)
    out = tmp_path / "silent.h5"
    cfg = RunConfig(algo="asgd", steps=100_000, out=str(out), **{**COMMON, "evals": 2}).with_updates(timeout_s=1.0)
    assert run_cluster(cfg, workers=3) == [1, 1, 1, 1]
    rec = read_run(out)
    assert rec.attrs["status"] == "timeout"
    assert rec.attrs["error"].startswith("rank 0 on loopback: a rank has stopped answering (nothing heard past "
                                         "timeout_s): rank 2 on loopback for ")


@pytest.mark.timeout(60)
def test_a_rank_missing_from_a_collective_is_named_by_the_others():
    hub = Loopback(3)
    ends = [hub.endpoint(r) for r in range(3)]
    ended = as_threads(lambda rank: ends[rank].exchange(rank, 0.3, "the set-up"), 2, 10)  # rank 2 never comes
    assert {r: str(e) for r, e in ended.items()} == {
        r: "timed out after 0.3 s waiting for rank 2 on loopback to take part in the set-up" for r in (0, 1)}
    assert all(isinstance(e, WaitTimeout) for e in ended.values())


@pytest.mark.timeout(120)
def test_a_periodic_rewrite_that_fails_is_said_and_the_run_goes_on(tmp_path, monkeypatch, capsys):
    from hpcbench.errors import ResultWriteError
    from hpcbench.runtime import output

    write, calls = output.ResultFile.write, []

    def full_disk_once(self, rec, last=False):
        calls.append(rec.attrs["status"])
        if len(calls) == 2:  # the first rewrite during training
            raise ResultWriteError("no space left on device")
        return write(self, rec, last)

    monkeypatch.setattr(output.ResultFile, "write", full_disk_once)
    out = tmp_path / "flushed.h5"
    cfg = RunConfig(algo="asgd", steps=400, out=str(out), **{**COMMON, "flush_s": 0.05})
    assert run_cluster(cfg, workers=2) == [0, 0, 0]
    assert calls[:2] == ["incomplete", "incomplete"] and calls[-1] == "ok" and len(calls) > 3  # it tried again
    assert "a periodic rewrite of the result failed, the run goes on and tries again in 0.05 s: no space left " \
           "on device" in capsys.readouterr().err
    assert read_run(out).attrs["status"] == "ok"
