"""The comm layer under real MPI: windows rank 0 keeps republishing (never a mix of two versions),
counters, channels, waits, and ranks closing."""
import re
import subprocess
import sys

import pytest

from hpcbench.launch.local import mpi_family, mpiexec_path

from conftest import mpirun, ok, requires_mpi

pytestmark = [requires_mpi, pytest.mark.both, pytest.mark.timeout(300)]


def test_workers_never_read_a_torn_parameter_vector():
    proc = ok(mpirun(4, module="mpi_programs.torn_reads", env={"PYTHONPATH": "tests"}))
    found = re.findall(r"rank=(\d+) reads=(\d+) torn=(\d+)", proc.stdout)
    assert len(found) == 3, proc.stdout
    assert sum(int(r) for _, r, _ in found) >= 10  # the readers really overlapped the writer
    assert all(int(t) == 0 for _, _, t in found), proc.stdout


@pytest.mark.parametrize("case, expected", [
    ("1", "version=1 retries=0 waits=0"),  # the owner wrote the other slot: the chosen one is still whole
    ("2", "version=3 retries=1 waits=0"),  # it marked the chosen one before the reader's count landed
    ("held", "version=3 retries=0 waits=3"),  # the publish waited until the reader let go
])
def test_the_races_of_a_versioned_window(case, expected):
    # A reader counts itself on the newest slot, then checks the owner has not marked it meanwhile; the
    # owner marks a slot, then checks no reader counts on it. Each side must see the other.
    proc = ok(mpirun(1, case, module="mpi_programs.overtaken_read", env={"PYTHONPATH": "tests"}))
    assert expected in proc.stdout, proc.stdout + proc.stderr


@pytest.mark.parametrize("op", ["accumulate", "fetch_add", "read"])
def test_a_stop_signal_while_a_worker_holds_a_lock_leaves_the_window_unlocked(op):
    # The signal lands as the lock is granted, before the transfer: the transfer and the unlock still
    # happen, then the worker stops. A lock left behind would block rank 0's next publish forever.
    proc = ok(mpirun(2, op, module="mpi_programs.stop_in_lock", env={"PYTHONPATH": "tests"}))
    assert "rank 1 stopped: stopped by SIGUSR1" in proc.stdout
    assert "rank 0 locked its window" in proc.stdout


@pytest.mark.parametrize("mode", ["count", "accumulate"])
def test_a_counters_adds_need_nothing_from_a_busy_owner_where_one_locked_needs_its_progress(mode):
    # The shared sample budget: workers claim batches from rank 0's counter. Declared "count", the adds
    # are lock-free atomics on shared memory, so rank 0 need not serve them (and may wait for its
    # messages at leisure); under a lock each add waits for rank 0 to come back into MPI with MPICH,
    # whose one-sided operations progress only inside the target's MPI calls (Open MPI's shared-memory
    # windows take a lock without the owner: measured, adds of 0.000 s).
    proc = ok(mpirun(3, mode, module="mpi_programs.busy_counter", env={"PYTHONPATH": "tests"}))
    found = re.findall(r"rank (\d) adds_s=([0-9.]+) seen=(\d+)", proc.stdout)
    assert len(found) == 2, proc.stdout + proc.stderr
    assert all(int(seen) == 50 for _, _, seen in found)  # each add saw a different count: atomic
    assert "counter=150" in proc.stdout  # 50 adds of 1 and 50 of 2
    slowest = max(float(s) for _, s, _ in found)
    waits_for_owner = mode == "accumulate" and mpi_family(mpiexec_path()) == "mpich"
    assert slowest > 0.75 if waits_for_owner else slowest < 0.75, proc.stdout


def test_ranks_that_finished_keep_answering_while_rank_0_still_works():
    # Before: the workers stopped their heartbeats on entering close() and waited a fixed timeout, so
    # rank 0 scoring a long run's snapshots for longer than timeout_s ended the run as "stopped answering".
    proc = ok(mpirun(3, module="mpi_programs.late_server", env={"PYTHONPATH": "tests"}))
    for rank in range(3):
        assert f"rank {rank} closed" in proc.stdout, proc.stdout + proc.stderr


def test_a_message_taken_from_a_channel_is_not_changed_by_the_next_ones_from_the_same_rank():
    # A message is handed over in the buffer it arrived in, and a new receive takes a new buffer:
    # reposting the receive into the buffer just handed over would overwrite what the caller holds.
    proc = ok(mpirun(2, module="mpi_programs.held_messages", env={"PYTHONPATH": "tests"}))
    assert "from: [[1], [2], [3], [4]]" in proc.stdout, proc.stdout + proc.stderr
    assert "any: [[1], [2], [3], [4]]" in proc.stdout, proc.stdout + proc.stderr


@pytest.mark.parametrize("calm", [5.0, 0.05])
def test_a_receive_told_nothing_urgent_is_due_still_takes_a_message_that_comes_sooner(calm):
    # A coordinator told its next report that matters is 5 s away looks less often meanwhile, not never:
    # a report sent after 0.2 s is taken at the next look (at most 10 ms apart), not after the 5 s; one
    # told 50 ms takes it after that calm ended, on its usual looks.
    proc = ok(mpirun(2, str(calm), module="mpi_programs.calm_wait",
                     env={"PYTHONPATH": "tests"}))
    sent = re.search(r"sent at ([0-9.]+)", proc.stdout)
    taken = re.search(r"taken at ([0-9.]+) from rank 1: \[1, 1, 1, 1, 1, 1, 1, 1\]", proc.stdout)
    assert sent and taken, proc.stdout + proc.stderr
    assert 0.0 <= float(taken[1]) - float(sent[1]) < 0.3, proc.stdout


def test_a_message_arrives_as_it_was_sent_whether_copied_or_handed_over():
    # A copied message survives its sender writing over the buffer at once; a handed-over one is
    # held by the transport until sent, though its sender lets go of it and allocates more.
    proc = ok(mpirun(2, module="mpi_programs.sent_messages", env={"PYTHONPATH": "tests"}))
    assert "copied: [[1], [2], [3], [4]]" in proc.stdout, proc.stdout + proc.stderr
    assert "given: [[1], [2], [3], [4]]" in proc.stdout, proc.stdout + proc.stderr


def test_a_wait_sleeps_first_for_its_first_nap_then_longer():
    # An idle coordinator's wait begins with a long nap: restarting from 50 us after each progress
    # report woke rank 0 five or six times a report. (A sleep never ends early, so this cannot flake.)
    # In a process of its own: importing mpi4py initialises MPI.
    code = """
import time
from hpcbench.comm.mpi import wait_for
calls = []
wait_for(lambda: calls.append(time.monotonic()), 0.15, "nothing", fail=False, spin=0.0, patience=0.0,
         first=0.02, nap=0.04)
print(*[b - a for a, b in zip(calls[1:], calls[2:])])  # the first two calls come back to back
"""
    gaps = [float(g) for g in ok(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                                timeout=60)).stdout.split()]
    assert gaps[0] >= 0.02 and all(g >= 0.04 for g in gaps[1:]), gaps
