"""Messages taken from a channel stay as they arrived while later ones come in from the same rank.

Rank 1 sends ROUNDS messages on each of two channels, message k filled with k; rank 0 takes them one
after another (from rank 1 on one channel, from any rank on the other), keeping every one it took,
and prints what each holds once all have come.
"""
import numpy as np

from hpcbench.comm.mpi import MpiComm

ROUNDS = 4
NBYTES = 4096


def main() -> None:
    comm = MpiComm()
    comm.open_channel("from", NBYTES, (1,) if comm.rank == 0 else ())
    comm.open_channel("any", NBYTES, (1,) if comm.rank == 0 else ())
    if comm.rank == 1:
        for k in range(1, ROUNDS + 1):
            comm.send("from", 0, np.full(NBYTES, k, np.uint8))
            comm.send("any", 0, np.full(NBYTES, k, np.uint8))
    else:
        kept = {"from": [], "any": []}
        for _ in range(ROUNDS):
            kept["from"].append(comm.recv("from", 1, 30.0))
            kept["any"].append(comm.recv("any", -1, 30.0))
        for channel, got in kept.items():
            held = [sorted(set(data.tolist())) for _, data in got]
            print(f"{channel}: {held}", flush=True)
    comm.close(30.0)


if __name__ == "__main__":
    main()
