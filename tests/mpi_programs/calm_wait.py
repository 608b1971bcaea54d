"""A receive told that nothing urgent is due for a long while still takes a message that comes sooner.

Rank 1 sends one message LATE_S after a barrier; rank 0 waits for it with ``calm`` = CALM_S (much longer)
and no deadline, as a coordinator waits for its next progress report, then prints how long it waited.
"""
import math
import time

import numpy as np

from hpcbench.comm.mpi import MpiComm

LATE_S = 0.2
CALM_S = 5.0


def main() -> None:
    comm = MpiComm()
    comm.open_channel("progress", 8, (1,) if comm.rank == 0 else ())
    comm.world_barrier(30.0)
    if comm.rank == 1:
        time.sleep(LATE_S)
        comm.send("progress", 0, np.ones(8, np.uint8))
    else:
        t0 = time.monotonic()
        src, data = comm.recv("progress", -1, math.inf, calm=CALM_S)
        print(f"from rank {src} after {time.monotonic() - t0:.3f} s: {data.tolist()}", flush=True)
    comm.close(30.0)


if __name__ == "__main__":
    main()
