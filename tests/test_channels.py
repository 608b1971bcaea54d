"""A channel's receives when their source fails (ULFM): what it hands over must be a message that
arrived, never the bytes a failed receive's buffer happened to hold. The requests here follow MPI's
rules for a nonblocking receive (a completed one, well or with an error, becomes MPI_REQUEST_NULL, and
a test of MPI_REQUEST_NULL says "done"), so each failure can be placed exactly where a run meets it."""
import numpy as np

from hpcbench.comm.channels import Channel
from hpcbench.comm.mpilib import MPI

NBYTES = 16
STALE = np.full(NBYTES, 7, dtype=np.uint8)  # what a buffer holds before a message lands in it


class Request:
    def __init__(self, comm: "Comm", buf: np.ndarray, src: int) -> None:
        self.comm, self.buf, self.src, self.state = comm, buf, src, "pending"

    def __eq__(self, other: object) -> bool:
        return other is MPI.REQUEST_NULL and self.state == "null"

    __hash__ = object.__hash__

    def Test(self) -> bool:
        if self.state == "pending" and self.comm.queued[self.src]:
            self.buf[:] = self.comm.queued[self.src].pop(0)
            self.state = "done"
        if self.state == "pending" and self.src in self.comm.failed:
            self.state = "null"
            raise MPI.Exception(MPI.ERR_PROC_FAILED)
        if self.state == "pending":
            return False
        self.state = "null"
        return True

    def Cancel(self) -> None:
        pass

    def Wait(self) -> None:
        failed = self.state == "pending" and self.src in self.comm.failed
        self.state = "null"
        if failed:  # Open MPI with ULFM: a receive from a failed rank ends with an error, cancelled or not
            raise MPI.Exception(MPI.ERR_PROC_FAILED)


class Comm:
    """Sources whose messages are queued in order; a failed source sends nothing more, and a receive
    posted from it afterwards fails at once (Open MPI with ULFM)."""

    def __init__(self, sources: tuple[int, ...]) -> None:
        self.queued: dict[int, list[np.ndarray]] = {s: [] for s in sources}
        self.failed: set[int] = set()

    def Irecv(self, spec: list, src: int, tag: int) -> Request:
        buf = spec[0]
        buf[:] = STALE
        if src in self.failed and not self.queued[src]:
            raise MPI.Exception(MPI.ERR_PROC_FAILED)
        return Request(self, buf, src)

    def send(self, src: int, value: int) -> None:
        self.queued[src].append(np.full(NBYTES, value, dtype=np.uint8))


def received(channel: Channel, src: int) -> list[int]:
    """Every message ``src``'s receives hand over, as the ranks' code takes them: a failure met on the
    way is learned (the source forgotten) and the poll tried again."""
    got = []
    for _ in range(10):
        try:
            found = channel.poll_from(src)
        except MPI.Exception:
            channel.forget(src)
            found = channel.poll_from(src)
        if found is not None:
            got.append(int(found[1][0]))
    return got


def test_a_receive_that_failed_with_its_source_hands_nothing_over():
    comm = Comm((2,))
    channel = Channel(comm, 1, NBYTES, (2,))
    comm.failed.add(2)  # nothing had come: the receive ends with an error, its buffer as it was
    assert received(channel, 2) == []


def test_a_message_in_when_its_source_is_forgotten_is_handed_over_once():
    comm = Comm((2,))
    channel = Channel(comm, 1, NBYTES, (2,))
    comm.send(2, 21)
    comm.send(2, 23)
    assert int(channel.poll_from(2)[1][0]) == 21
    comm.failed.add(2)
    channel.forget(2)  # 23 had landed in the receive posted after 21
    assert received(channel, 2) == [23]


def test_a_message_taken_as_its_sources_next_receive_fails_is_handed_over_once():
    comm = Comm((2,))
    channel = Channel(comm, 1, NBYTES, (2,))
    comm.send(2, 21)
    comm.failed.add(2)  # 21 is in; the receive posted after it fails at once
    assert received(channel, 2) == [21]


def test_messages_before_a_failure_come_in_order_then_nothing():
    comm = Comm((2,))
    channel = Channel(comm, 1, NBYTES, (2,))
    for value in (19, 21, 23):
        comm.send(2, value)
    assert int(channel.poll_from(2)[1][0]) == 19
    comm.failed.add(2)
    assert received(channel, 2) == [21, 23]


def test_a_source_forgotten_before_its_first_receive_gets_none_posted():
    """A channel opens a source's receive when it is first polled: one already known to have failed
    gets none (a receive posted to a failed rank would end with an error at close)."""
    comm = Comm((2,))
    channel = Channel(comm, 1, NBYTES, ())
    comm.failed.add(2)
    channel.forget(2)
    assert received(channel, 2) == [] and channel.reqs == [MPI.REQUEST_NULL]
    channel.close()


def test_closing_a_channel_whose_source_failed_unnoticed_does_not_raise():
    comm = Comm((2, 3))
    channel = Channel(comm, 1, NBYTES, (2, 3))
    comm.failed.add(2)  # never learned here: its receive is still posted
    channel.close()
