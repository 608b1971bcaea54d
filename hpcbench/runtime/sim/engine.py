"""Discrete-event execution of every rank's program in virtual time, on one process.

The same algorithm programs as under MPI; each operation costs virtual time from the models:
compute from the compute model, transfers α + bytes/bandwidth through per-rank full-duplex links
(a send and a receive direction, each shared fairly by the transfers in it: links.py), locks on the
windows others add into granted in the order asked, versioned windows read without one, the
all-reduce's cost for collectives, and fixed per-message and per-step costs for rank 0's and the
workers' own math.
Events at equal times run in the order they were scheduled, so a run is deterministic.

Workers fail as scheduled (``deaths``) the way they do under an MPI that lets the others go on: a
failed worker's program stops (at once while the worker computes or waits for a message or a
collective, else when the operation it is in ends, so never inside a lock or a reader's slot), messages to it go
nowhere, and ``detect_s`` later the others
learn of it: a receive waiting for it (or, from any rank, for news of a failure) gets ``Lost``, reads
of and adds into its windows get ``Lost``, and a workers' collective it did not join is agreed on and
begun again by the survivors (after ``regroup_s`` + ``regroup_log_s``·log2 of their number), who from
then on are the workers' collectives' members.

The engine is put together from its parts, each in a module of its own: the event loop and the state
they share (``core``), transfers over the links (``transfers``), the one-sided windows (``windows``),
point-to-point messages (``messages``) and the workers' collectives (``collectives``); here, failures
and the operations local to a rank.
"""
from __future__ import annotations

from hpcbench.algorithms.ops import Compute, Evaluate, Failures, Progress, Record, Timestamp, Workers
from hpcbench.runtime.sim.collectives import Collectives
from hpcbench.runtime.sim.core import Parts, Pending
from hpcbench.runtime.sim.messages import Messages
from hpcbench.runtime.sim.windows import Windows


class Engine(Windows, Messages, Collectives):
    """Every rank's program run in virtual time (the module's docstring); ``Engine(Parts(...)).run()``."""

    def __init__(self, parts: Parts) -> None:
        super().__init__(parts)
        self.compute_model, self.gradient, self.logs = parts.compute, parts.gradient, parts.logs
        self.progress_line = parts.progress
        for rank, t in sorted((parts.deaths or {}).items()):
            self.at(t, self.kill, rank)

    # --- failures -----------------------------------------------------------------------------
    def kill(self, rank: int) -> None:
        """``rank`` fails now if it waits for a message or a collective, else when its operation ends."""
        if self.dead[rank] or self.finished[rank]:
            return
        joined = self.joined + self.reducing + [a for f in self.flights for a in f.arrivals]
        if rank in self.waiting or self.now < self.outside_mpi_until[rank] or any(a[0] == rank for a in joined):
            self.die(rank)
        else:
            self.dying.add(rank)

    def die(self, rank: int) -> None:
        self.dying.discard(rank)
        self.dead[rank] = True
        self.died[rank] = self.end[rank] = self.now
        self.programs[rank].close()
        self.waiting.pop(rank, None)
        self.joined = [c for c in self.joined if c[0] != rank]
        self.reducing = [c for c in self.reducing if c[0] != rank]
        self.at(self.now + self.cfg.detect_s, self.notify, rank)

    def notify(self, rank: int) -> None:
        """The others learn that ``rank`` failed: receives waiting for it (or for news) get ``Lost``, and a
        collective it was to join goes on among the survivors."""
        self.known[rank] = self.now
        for r, (_, src, _, since) in list(self.waiting.items()):
            lost = self.lost_for(r, src)
            if lost is not None and self.waiting.get(r, (None, None, None, None))[3] == since:
                del self.waiting[r]
                self.row(r, "wait", since, self.now, 0, "Recv")
                self.resume(r, lost)
        if self.joined:
            self.finish_gather()
        if self.reducing:
            self.finish_reducing()
        if self.failing:
            self.retry()

    # --- operations ---------------------------------------------------------------------------
    def compute(self, rank: int, op: Compute) -> object:
        self.steps[rank] += 1
        t = self.now
        result = self.gradient(rank, op.params)
        if isinstance(result, Pending):
            result.out = op.out
        else:
            result = result.into(op.out)
        done = t + self.compute_model.sample(rank)
        if op.buckets:
            self.reducing.append((rank, t, done, result))
            self.reducing_op = op
            return self.finish_reducing()
        self.row(rank, "compute", t, done, 0, "Compute")
        return self.later(rank, self.updated(rank, done), result)

    def evaluate(self, rank: int, op: Evaluate) -> None:
        self.steps[rank] += 1
        self.logs.snapshot(self.now if op.at != op.at else op.at, op)
        self.row(rank, "eval", self.now, self.now, op.params.nbytes, "Evaluate")

    def timestamp(self, rank: int, op: Timestamp) -> float:
        return self.now

    def progress(self, rank: int, op: Progress) -> None:
        if self.progress_line is not None:
            self.progress_line.update(*op)

    def failures(self, rank: int, op: Failures) -> frozenset[int]:
        return frozenset(self.known)

    def workers(self, rank: int, op: Workers) -> tuple[int, ...]:
        return self.members

    def record(self, rank: int, op: Record) -> None:
        self.steps[rank] += 1
        self.logs.record(self.now, op)
