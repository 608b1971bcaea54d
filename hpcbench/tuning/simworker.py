"""A process that simulates the runs ``run_jobs`` hands it, one after another: Python, torch and the
package are imported once per process rather than once per run (about 2 s of CPU each, more than a small
run takes).

The protocol, one JSON line each way: a run's ``simulate`` options in, then ``{"failed", "out"}`` back
when it has ended (why it failed, "" if it did not, and the end of what it printed), each run simulated
as ``run_jobs`` simulates one in its own process (``execute.simulated_here``). Replies go to the pipe
that was standard output when the process started; anything else that writes to standard output (a
library's C code) lands on standard error instead (a file ``run_jobs`` reads should the process itself
end), so it cannot garble a reply."""
from __future__ import annotations

import json
import os
import sys
from typing import IO

KEPT = 4000  # characters of a run's output sent back: its last line is its result


def serve(requests: IO[str], replies: IO[str]) -> None:
    from hpcbench.launch.arguments import parse_run
    from hpcbench.tuning.execute import simulated_here

    for line in requests:
        failed, out = simulated_here(*parse_run(json.loads(line), simulate=True))
        replies.write(json.dumps({"failed": failed, "out": out[-KEPT:]}) + "\n")
        replies.flush()


if __name__ == "__main__":
    replies = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    serve(sys.stdin, replies)
