"""Every algorithm under every injected fault, on local ranks: how each run ended and what it left.

    python benchmarks/fault_matrix.py [--ranks 4] [--timeout 10] [--algos asgd,allreduce] [--faults kill,stop]

For each (algorithm, fault) it prints: seconds until every rank had ended, mpiexec's exit status,
the line hpcbench printed (its last error line, or the result line), and the result file's status
and contents (timeline rows, evaluations, samples reached). A case "hangs" when it outlives
timeout_s + 10 s; the matrix then says so.
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tabulate import tabulate

from hpcbench.algorithms import ALGORITHMS
from hpcbench.errors import UsageError
from hpcbench.launch.local import launch_env, mpi_command
from hpcbench.report.metrics import how_far
from hpcbench.results.store import read_run

# Each fault hits worker 2 (rank 0 for "kill0" and "term0", the coordinator or server itself) 3 s into
# training, or at its 30th step for "raise"; "slow" makes worker 2 four times slower from the start;
# "term-final" sends SIGTERM to rank 0 while it scores and writes a finished run.
FAULTS = {
    "kill": "kill:2@3", "kill0": "kill:0@3", "stop": "stop:2@3", "raise": "raise:2@30", "slow": "slow:2@0:4",
    "stop-setup": "stop:2@setup", "stop-gather": "stop:1@gather",
    "term": "term:2@3", "term0": "term:0@3", "term-final": "term:0@final",
}


def said(proc: subprocess.CompletedProcess) -> str:
    """The line a user sees: hpcbench's last error line, else its result line, else the MPI
    launcher's last word (a rank killed outright leaves hpcbench no time to speak)."""
    everything = proc.stderr + proc.stdout
    lines = [line for line in everything.splitlines() if line.startswith("hpcbench: error") or " -> " in line]
    if lines:
        text = lines[-1]
    elif "BAD TERMINATION" in everything:
        text = "(mpiexec's BAD TERMINATION banner only)"
    else:
        others = [line.strip() for line in proc.stderr.splitlines() if line.strip() and "warning" not in line]
        text = others[-1] if others else "(nothing)"
    return text if len(text) < 110 else text[:107] + "..."


def case(algo: str, fault: str, ranks: int, timeout: float, out_dir: Path) -> list[str]:
    out = out_dir / f"{algo}-{fault}.h5"
    steps = "20" if fault.endswith(("setup", "gather", "final")) or fault == "slow" else "100000"
    args = ["run", "--algo", algo, "--steps", steps, "--set", f"fault={FAULTS[fault]}", "--set",
            f"timeout_s={timeout:g}",
            "--set", "flush_s=1", "--out", str(out)]
    t0 = time.monotonic()
    try:
        proc = subprocess.run(mpi_command(ranks, args), env=launch_env(ranks), capture_output=True, text=True,
                              timeout=timeout + 60)
        took, code, line = time.monotonic() - t0, str(proc.returncode), said(proc)
    except subprocess.TimeoutExpired:
        took, code, line = time.monotonic() - t0, "killed", "(hung: killed by the benchmark)"
    if out.exists():
        try:
            rec = read_run(out)
            status = str(rec.attrs["status"])
            contents = (f"{len(rec.timeline['rank'])} rows, {len(rec.evals['t'])} evals"
                        + (f", {how_far(rec)}" if status != "ok" else ""))
        except UsageError as exc:
            status, contents = "unreadable", str(exc)[:60]
    else:
        status, contents = "no file", "-"
    verdict = "HANG" if took > timeout + 10 else ""
    return [algo, fault, f"{took:.1f}", code, status, contents, line, verdict]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ranks", type=int, default=4, help="world size (default 4: rank 0 and three workers)")
    p.add_argument("--timeout", type=float, default=10.0, help="timeout_s of every run (default 10)")
    p.add_argument("--algos", default=",".join(ALGORITHMS.names()))
    p.add_argument("--faults", default=",".join(FAULTS))
    p.add_argument("--format", default="github", help="tabulate format (default github)")
    args = p.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for algo in args.algos.split(","):
            for fault in args.faults.split(","):
                rows.append(case(algo, fault, args.ranks, args.timeout, Path(tmp)))
                print(" | ".join(rows[-1]), file=sys.stderr, flush=True)
    print(tabulate(rows, headers=["algorithm", "fault", "ended after s", "exit", "file status", "file holds",
                                  "what the user saw", ""], tablefmt=args.format))
    hangs = sum(r[-1] == "HANG" for r in rows)
    false_ok = sum(r[4] == "ok" and r[1] != "slow" for r in rows)
    print(f"\n{len(rows)} cases, {hangs} past timeout_s + 10 s, {false_ok} files saying ok for a run that did not "
          f"finish")
    return 1 if hangs or false_ok else 0


if __name__ == "__main__":
    raise SystemExit(main())
