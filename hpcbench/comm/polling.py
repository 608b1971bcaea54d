"""Waiting inside MPI: every blocking wait is a polling loop with a deadline. It keeps calling into MPI
(so passive-target operations aimed at this rank progress), backs off to short sleeps when idle (so
oversubscribed ranks leave the cores to those computing) and fails with a clear message on timeout."""
from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from typing import Any, TypeVar

from hpcbench.comm import openmpi
from hpcbench.comm.mpilib import MPI
from hpcbench.errors import WaitTimeout

T = TypeVar("T")
SPIN_S = 0.002  # with a core to itself, test without sleeping this long (collectives advance only when tested)
# ... then test between yields of the core (to whatever else is runnable, as MPICH's own blocking
# waits do) this long: the answer to a request usually comes within it (measured: a parameter server
# of 100k floats went from 0.21x to 0.48x the updates/s of a bare mpi4py one, 3 ranks on 2 cores) ...
YIELD_S = 0.0003
YIELDING_RANKS_PER_CORE = 4  # up to this many ranks a core, a collective's wait yields and never sleeps
FIRST_SLEEP_S = 0.00005  # then sleep between tests, doubling while nothing happens ...
# A wait with no deadline of its own (a coordinator's next progress report) on a rank that holds no
# window others read or write: nothing needs it inside MPI, so it sleeps up to this between tests ...
IDLE_SLEEP_S = 0.01
# ... beginning with this: reports every few steps would otherwise wake the coordinator five or six
# times each as the naps grow again from FIRST_SLEEP_S (measured: rank 0's share 7.2% -> 5.6% of a
# core in 0.6 s allreduce runs with 2 workers)
IDLE_FIRST_SLEEP_S = 0.001
MAX_SLEEP_S = 0.0002  # ... up to this: an idle rank costs the computing ones little (workers on an
# oversubscribed node sleep up to this times the ranks per core: 64 idle workers per core polling
# every 0.2 ms would take the cores from rank 0 and from the workers that compute)


def wait_for(test: Callable[[], T | None], timeout: float, what: str, fail: bool = True,
             spin: float = SPIN_S, peer: int | None = None, nap: float = MAX_SLEEP_S,
             patience: float = YIELD_S, first: float = FIRST_SLEEP_S) -> T | None:
    """Call ``test`` until it returns non-None; after ``timeout`` seconds fail or return None.

    Each test calls into MPI, so operations aimed at this rank progress while it waits. ``spin``:
    how long to test back to back before sleeping between tests; 0 when ranks outnumber cores,
    where a spinning rank takes CPU from the ranks that compute; ``patience``: how long after that
    to test between yields of the core (0 for a wait nothing is in a hurry for); ``first``, ``nap``:
    the first and the longest sleep after it.
    """
    result = test()
    if result is not None or timeout == 0:
        return result
    start = time.monotonic()
    pause = first
    while True:
        result = test()
        if result is not None:
            return result
        waited = time.monotonic() - start
        if waited > timeout:
            if fail:
                raise WaitTimeout(f"timed out after {timeout:g} s waiting for {what}", peer)
            return None
        if waited > spin + patience:
            time.sleep(pause)
            pause = min(2 * pause, nap)
        elif waited > spin:
            os.sched_yield()


def leave_together(timeout_s: float) -> None:
    """Every rank of a launch that refused to run (a bad command line, checked before MPI started) meets
    the others here before it exits, so none exits while rank 0 has yet to say why: Open MPI's launcher
    ends every rank at the first non-zero exit. A rank still missing after ``timeout_s`` is not waited
    for (this rank ends at once, without MPI's finalize, which would wait for it). Ends MPI."""
    if MPI.Is_finalized():  # the run had begun and ended its MPI: the ranks have met
        return
    done = MPI.COMM_WORLD.Ibarrier()
    if wait_for(lambda: True if done.Test() else None, timeout_s, "the others", fail=False, spin=0.0) is None:
        sys.stdout.flush()
        openmpi.exit_now(2)
    MPI.Finalize()  # so that mpi4py's runner exits with the code instead of aborting the job


def spin(test: Callable[[], Any]) -> None:
    while test() is None:
        pass
