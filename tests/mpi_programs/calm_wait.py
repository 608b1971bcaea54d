"""A receive told that nothing urgent is due for a while still takes a message that comes sooner or later.

Rank 1 sends one message LATE_S after a barrier and prints when (the monotonic clock is the host's);
rank 0 waits for it with ``calm`` = the first argument and no deadline, as a coordinator waits for its
next progress report, then prints when it took it.
"""
import math
import sys
import time

import numpy as np

from hpcbench.comm.mpi import MpiComm

LATE_S = 0.2


def main() -> None:
    calm = float(sys.argv[1])
    comm = MpiComm()
    comm.open_channel("progress", 8, (1,) if comm.rank == 0 else ())
    comm.world_barrier(30.0)
    if comm.rank == 1:
        time.sleep(LATE_S)
        print(f"sent at {time.monotonic():.6f}", flush=True)
        comm.send("progress", 0, np.ones(8, np.uint8))
    else:
        src, data = comm.recv("progress", -1, math.inf, calm=calm)
        print(f"taken at {time.monotonic():.6f} from rank {src}: {data.tolist()}", flush=True)
    comm.close(30.0)


if __name__ == "__main__":
    main()
