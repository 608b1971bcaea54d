"""A stop signal that lands while a worker holds a lock on rank 0's window must not leave it locked.

Rank 1 is signalled (SIGUSR1, the handler hpcbench installs) the moment its lock on rank 0's window is
granted, during ``accumulate``, ``fetch_add`` or ``read`` (argv[1]) of a window others add into (the
only kind read under a lock); then rank 0 locks its own window exclusively, as it does to drain it. Prints "rank 1
stopped: ..." and "rank 0 locked its window";
a lock left behind blocks rank 0 forever, so a watchdog exits 3 after 20 s saying so.
"""
import os
import signal
import sys
import threading

import numpy as np

from hpcbench.comm.mpi import MpiComm
from hpcbench.errors import Stopped
from hpcbench.signals import stop_on_signals

NBYTES = 64


class SignalledOnLock:
    """The window's MPI.Win, but a stop signal arrives as each Lock returns."""

    def __init__(self, win) -> None:
        self.win = win

    def Lock(self, *args, **kwargs) -> None:
        self.win.Lock(*args, **kwargs)
        signal.raise_signal(signal.SIGUSR1)

    def __getattr__(self, name):
        return getattr(self.win, name)


def touch(window, op: str) -> None:
    if op == "accumulate":
        window.accumulate(0, ((0, np.ones(4, dtype=np.float32)),))
    elif op == "fetch_add":
        window.fetch_add(0, 1)
    else:
        window.read((0,), NBYTES)


def main(op: str) -> None:
    comm = MpiComm()
    comm.open_window("w", NBYTES, owned=comm.rank == 0, mode="accumulate")  # reads of others' take no lock
    window = comm.windows["w"]
    comm.world_barrier(60)
    if comm.rank == 1:
        window.win = SignalledOnLock(window.win)
        with stop_on_signals():
            try:
                touch(window, op)
                print("rank 1 was not stopped", flush=True)
            except Stopped as exc:
                print(f"rank 1 stopped: {exc}", flush=True)
        window.win = window.win.win
    comm.world_barrier(60)
    if comm.rank == 0:
        watchdog = threading.Timer(20, lambda: (print("rank 0 blocked on its own window", flush=True),
                                                os._exit(3)))
        watchdog.start()
        window.publish(np.zeros(NBYTES, dtype=np.uint8))
        watchdog.cancel()
        print("rank 0 locked its window", flush=True)
    comm.world_barrier(60)
    window.free()


if __name__ == "__main__":
    main(sys.argv[1])
    sys.exit(0)
