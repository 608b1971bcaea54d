"""A message arrives as it was when sent, however its sender goes on.

Rank 1 sends ROUNDS messages of a size sent by rendezvous (the bytes move only once rank 0 takes
them) on two channels, message k filled with k: on "copied" from one buffer it writes over at once,
on "given" each from a new buffer it hands over and lets go of, then fills new buffers of that size
(which take the memory of any buffer nobody holds). Rank 0 waits before taking them and prints what
each holds.
"""
import time

import numpy as np

from hpcbench.comm.mpi import MpiComm

ROUNDS = 4
NBYTES = 400_000


def main() -> None:
    comm = MpiComm()
    comm.open_channel("copied", NBYTES, (1,) if comm.rank == 0 else ())
    comm.open_channel("given", NBYTES, (1,) if comm.rank == 0 else ())
    scribbled: list[np.ndarray] = []  # held to the end, so that none of them is freed again
    if comm.rank == 1:
        reused = np.empty(NBYTES, np.uint8)
        for k in range(1, ROUNDS + 1):
            reused[:] = k
            comm.send("copied", 0, reused)
            reused[:] = 255
            comm.send("given", 0, np.full(NBYTES, k, np.uint8), given=True)
        scribbled.extend(np.full(NBYTES, 255, np.uint8) for _ in range(2 * ROUNDS))
    else:
        time.sleep(0.5)
        for channel in ("copied", "given"):
            got = [comm.recv(channel, 1, 30.0) for _ in range(ROUNDS)]
            print(f"{channel}: {[sorted(set(data.tolist())) for _, data in got]}", flush=True)
    comm.close(30.0)


if __name__ == "__main__":
    main()
