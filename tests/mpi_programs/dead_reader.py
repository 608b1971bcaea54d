"""A reader SIGKILLed while it copies a versioned window, under ULFM: its count stays on the slot the
owner's next publish but one needs. The owner takes the slot back once the count has stayed
STALE_READERS_S while no more readers than have failed hold it; a live reader then reads the newest
version whole. Ranks: 0 owns the window, 1 dies holding its count, 2 reads at the end.
Prints "version=V waited=S" on rank 0 and "read=V" on rank 2.
"""
import os
import signal
import time

import numpy as np

from hpcbench.comm.mpi import MpiComm

SIZE = 1000


def content(version: int) -> np.ndarray:
    return np.full(SIZE, version, dtype=np.int64)


def main() -> None:
    comm = MpiComm()
    comm.open_window("w", SIZE * 8, owned=comm.rank == 0)
    window = comm.windows["w"]
    if comm.rank == 0:
        comm.publish("w", content(1))
    comm.world_barrier(30)
    if comm.rank == 1:  # a reader counts itself on the newest slot, as a copy begins, and dies there
        window._add(0, readable_slot(window), 1)
        os.kill(os.getpid(), signal.SIGKILL)
    if comm.rank == 0:
        while not comm.failed():  # ULFM tells rank 0 within milliseconds
            time.sleep(0.01)
        comm.publish("w", content(2))  # the other slot: no wait
        t0 = time.monotonic()
        comm.publish("w", content(3))  # the slot the dead reader holds
        print(f"version=3 waited={time.monotonic() - t0:.1f}", flush=True)
    while 1 not in comm.failed():
        time.sleep(0.01)
    comm.exchange(None, 30, "the end")  # rank 0 has published version 3
    if comm.rank == 2:
        [raw] = comm.read("w", (0,), SIZE * 8)
        values = np.unique(raw.view(np.int64))
        assert values.size == 1, f"torn: {values}"
        print(f"read={values[0]}", flush=True)
    comm.close(30)
    comm.finalize()


def readable_slot(window) -> int:
    """The slot a reader of rank 0's window would copy now."""
    from mpi4py import MPI

    from hpcbench.comm.windows import COUNT_BITS, WORD, readable

    words = np.empty(2, WORD)
    window.win.Get([words, MPI.INT64_T], 0, target=(0, 2, MPI.INT64_T))
    window.win.Flush(0)
    return readable(words >> COUNT_BITS)


if __name__ == "__main__":
    main()
