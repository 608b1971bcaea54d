"""The two races of a versioned window's protocol, on one rank reading its own window.

``overtaken N``: the owner publishes N times after the reader chose its slot and before its count
of readers lands (1: the owner writes the other slot; 2: it then marks and writes the chosen one):
the reader must notice and read again. ``held``: a reader holds the slot the next publish but one
needs: that publish waits until the reader lets go. Prints "version=V retries=R waits=W".
"""
import sys

import numpy as np

from hpcbench.comm.mpi import MpiComm

SIZE = 1000


def content(version: int) -> np.ndarray:
    return np.full(SIZE, version, dtype=np.int64)


def overtaken(window, publishes: int) -> int:
    add = window._add
    late = [publishes]

    def late_add(rank, slot, value):
        if value == 1 and late:  # the reader's count, on its way
            for _ in range(late.pop()):
                window.publish(content(window.top // 2 + 1))
        return add(rank, slot, value)

    window._add = late_add
    return 0


def held(window) -> int:
    window._add(0, window.newest, 1)  # a reader copying version 1
    window.publish(content(2))  # the other slot: no wait
    waits = []

    def wait(test):  # the reader lets go after the publisher has looked three times
        while test() is None:
            waits.append(1)
            if len(waits) == 3:
                window._add(0, 1 - window.newest, -1)
    window.publish(content(3), wait=wait)
    return len(waits)


def main(case: str) -> None:
    comm = MpiComm()
    comm.open_window("w", SIZE * 8, owned=True)
    window = comm.windows["w"]
    window.publish(content(1))
    waits = held(window) if case == "held" else overtaken(window, int(case))
    [raw] = window.read((0,), SIZE * 8)
    values = np.unique(raw.view(np.int64))
    assert values.size == 1, f"torn: {values}"
    print(f"version={values[0]} retries={window.retries} waits={waits}", flush=True)
    window.free()


if __name__ == "__main__":
    main(sys.argv[1])
    sys.exit(0)
