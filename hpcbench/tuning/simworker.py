"""A process that simulates the runs ``run_jobs`` hands it, one after another: Python, torch and the
package are imported once per process rather than once per run (about 2 s of CPU each, more than a
small run takes).

The protocol, one JSON line each way: a run's ``simulate`` options in, then ``{"code", "out", "err"}``
back when it has ended (its exit code, the ends of what it printed; a failure in one line, as the
command says it). Replies go to the pipe that was standard output when the process started; anything
else that writes to standard output (a library's C code) lands on standard error instead (a file
``run_jobs`` reads should the process itself end), so it cannot garble a reply.
"""
from __future__ import annotations

import contextlib
import io
import json
import os
import sys
from typing import IO

KEPT = 4000  # characters of each stream sent back: the run's last line and a failure's lines


def simulate(argv: list[str]) -> int:
    """``hpcbench simulate ARGV``, as the command runs it."""
    from hpcbench.launch.arguments import parse_run
    from hpcbench.runtime.plan import prepare
    from hpcbench.runtime.sim.session import simulate as simulated

    cfg, sim = parse_run(argv, simulate=True)
    return simulated(prepare(cfg, "simulate", sim))


def serve(requests: IO[str], replies: IO[str]) -> None:
    from hpcbench.errors import UsageError, one_line

    for line in requests:
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = simulate(json.loads(line))
            except UsageError as exc:
                print(f"hpcbench: {one_line(str(exc))}", file=sys.stderr)
                code = 2
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else 1
            except Exception as exc:  # one run's bug must not end the process the next runs need
                print(f"hpcbench: {type(exc).__name__}: {one_line(str(exc))}", file=sys.stderr)
                code = 1
        replies.write(json.dumps({"code": code, "out": out.getvalue()[-KEPT:], "err": err.getvalue()[-KEPT:]}) + "\n")
        replies.flush()


if __name__ == "__main__":
    replies = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    serve(sys.stdin, replies)
