"""Rank 0 republishes a large vector filled with its version number while workers read it one-sidedly.

A torn read would show a mix of two versions; prints "reads=R torn=T" per worker.
"""
import sys

import numpy as np

from hpcbench.algorithms.frames import Frame
from hpcbench.comm.mpi import MpiComm

SIZE, VERSIONS = 1_000_000, 200


def main() -> None:
    comm = MpiComm()
    frame = Frame(version=(np.int64, 1), params=(np.float32, SIZE), check=(np.int64, 1))
    comm.open_window("params", frame.nbytes, owned=comm.rank == 0)
    comm.world_barrier(60)
    window = comm.windows["params"]
    if comm.rank == 0:
        buf = frame.new()
        for v in range(1, VERSIONS + 1):
            frame.view(buf, "version")[0] = v
            frame.view(buf, "params")[:] = v
            frame.view(buf, "check")[0] = v
            window.publish(buf)
        comm.send_done = comm.world.Ibarrier()
        comm.send_done.Wait()
    else:
        done = comm.world.Ibarrier()
        reads = torn = 0
        while not done.Test():
            [raw] = window.read((0,), frame.nbytes)
            v = frame.integer(raw, "version")
            body = frame.view(raw, "params")
            reads += 1
            if v != frame.integer(raw, "check") or not (body == v).all():
                torn += 1
        print(f"rank={comm.rank} reads={reads} torn={torn}", flush=True)
    comm.world_barrier(60)
    window.free()


if __name__ == "__main__":
    main()
    sys.exit(0)
