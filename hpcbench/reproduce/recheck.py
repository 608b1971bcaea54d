"""``hpcbench reproduce STUDY --recheck --out-dir DIR``: do a published study's numbers still come out of the code here?

A simulated run is deterministic: the same code, options and seed give the same result file, to the last
digit of every accuracy and virtual time. So a study's verdict need not be run again whole each time the
code its runs were made of changes (``made_with.stale``): one run per algorithm, made again from what
verdict.json records (the cell, its chosen setting, its first seed), either comes out the same — then the
change did not touch what the study measured — or it does not, and the study has to be run again.

recheck.json, beside verdict.json, records the runs made again, what each gave then and now, and the
digests of the code they were made with now; ``findings`` takes a recheck in which every run came out the
same as the record the study's staleness is measured from. Nothing of verdict.json changes (its reading
stays that verdict's).
"""
from __future__ import annotations

import json
import math
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from hpcbench.errors import UsageError
from hpcbench.reproduce import made_with
from hpcbench.reproduce.protocol import CellKey
from hpcbench.terminal import wrapped
from hpcbench.tuning.grid import Setting

FILE = "recheck.json"
COMPARED = ("accuracy", "time_to_target", "wall")  # per seed, as verdict.json holds them


def chosen(v: Mapping[str, Any], algos: Sequence[str]) -> list[tuple[CellKey, Setting, int, dict[str, Any]]]:
    """The runs to make again: for each algorithm, its cell at the most workers in the first arm that has
    one, at that cell's chosen setting and first seed; → (cell, setting, seed, the numbers the verdict holds)."""
    out, seen = [], set()
    for arm in v["arms"]:
        for algo in algos:
            cells = [c for c in arm["cells"] if c["algo"] == algo]
            if algo in seen or not cells:
                continue
            c = max(cells, key=lambda c: int(c["workers"]))
            seen.add(algo)
            seed = int(c["seeds"][0]) if c.get("seeds") else 0
            was = {k: c[k][0] for k in COMPARED}
            out.append(((algo, int(c["workers"]), str(c["variant"])), Setting.of(c["setting"]), seed, was))
    return out


def same(was: Any, now: Any) -> bool:
    """Equal as verdict.json writes them (None: a run that never reached its target)."""
    return (was is None and (now is None or math.isinf(now))) or (was is not None and now is not None
                                                                     and float(was) == float(now))


def numbers(cell: Any) -> dict[str, Any]:
    return {"accuracy": cell.accuracy[0], "wall": cell.wall[0],
            "time_to_target": None if math.isinf(cell.time_to_target[0]) else cell.time_to_target[0]}


def failing_runs(v: Mapping[str, Any], algos: Sequence[str]) -> list[tuple[CellKey, Setting, int, dict[str, Any], str]]:
    """The resilience study's runs to make again: for each algorithm, its cell at the most workers in the first
    scenario, first seed: the run without failures and the one with the scenario's failures (drawn again from
    that run's duration, as the study drew them); → (cell, setting, seed, the numbers the verdict holds, fault)."""
    from hpcbench.reproduce.resilience import schedule

    best = next(Setting.of(r["setting"]) for r in v["recipe_grid"] if r.get("chosen"))
    mtbf = v.get("node_mtbf_s")
    out = []
    for algo in algos:
        cells = sorted((c for c in v["cells"] if c["algo"] == algo and c["seeds"]),
                       key=lambda c: (-int(c["workers"]), str(c["scenario"])))
        if not cells:
            continue
        c, p = cells[0], cells[0]["seeds"][0]
        n, seed, scenario = int(c["workers"]), int(p["seed"]), str(c["scenario"])
        fault = schedule(scenario, n, float(p["wall"]), seed, math.inf if mtbf is None else float(mtbf))
        out.append(((algo, n, ""), best, seed, {"accuracy": p["accuracy"], "wall": p["wall"]}, ""))
        if fault:
            out.append(((algo, n, f"failures-{scenario}"), best, seed,
                        {"accuracy": p["accuracy_failing"], "wall": p["wall_failing"]}, fault))
    return out


def verdict_at(out_dir: Path) -> dict[str, Any]:
    path = out_dir / "verdict.json"
    try:
        v = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise UsageError(f"{path}: cannot read a verdict to recheck ({exc})") from None
    if not isinstance(v, dict) or not isinstance(v.get("arms"), list):
        raise UsageError(f"{path}: not a study's verdict (hpcbench reproduce writes one)")
    if v.get("study") == "resilience":
        if not isinstance(v.get("cells"), list) or not any(r.get("chosen") for r in v.get("recipe_grid", [])):
            raise UsageError(f"{path}: a resilience verdict without its cells or its chosen recipe: run the study "
                             "again")
    elif not all(isinstance(a, dict) and isinstance(a.get("cells"), list) for a in v["arms"]):
        raise UsageError(f"{path}: a recheck makes a claims study's cells again (gap-aware, jin, sgp, diloco, "
                         "resilience); this verdict's arms hold none: run the study again")
    return v


def recheck(name: str, out_dir: str, jobs: int = 1, timeout: float = 1800.0) -> int:
    """Make one run per algorithm of the study in ``out_dir`` again with the code here, compare each with its
    verdict, write recheck.json; → 0 when every run came out the same, 1 when one did not."""
    from hpcbench.reproduce.runner import cell_of, planned, sized
    from hpcbench.reproduce.verdict_file import cell_name
    from hpcbench.results.reader import commit_of
    from hpcbench.tuning.execute import run_jobs

    out = Path(out_dir)
    v = verdict_at(out)
    if v.get("study") != name:
        raise UsageError(f"{out / 'verdict.json'} is study {v.get('study')!r}'s verdict, not {name!r}'s")
    if v.get("mode", "sim") != "sim":
        raise UsageError("only a simulated study can be rechecked: real runs' times never repeat to the digit; "
                         "run the study again")
    if v.get("calibration") and "run_flags" not in v:
        raise UsageError(f"{out / 'verdict.json'} does not record the compute model its runs were given (the "
                         "calibration's flags): run the study again to recheck it later")
    s = sized(name, str(v.get("preset")), "sim")
    tmp = Path(tempfile.mkdtemp(prefix="hpcbench-recheck-"))
    try:
        if name == "resilience":
            remade = [(planned(s, str(v["preset"]), tmp, cell, setting, seed, "sim",
                               ("--set", f"fault={fault}") if fault else ()), was)
                      for cell, setting, seed, was, fault in failing_runs(v, s.algos)]
            what = "each algorithm's without failures and with them"
        else:
            remade = [(planned(s, str(v["preset"]), tmp, cell, setting, seed, "sim", tuple(v.get("run_flags", ()))),
                       was) for cell, setting, seed, was in chosen(v, s.algos)]
            what = "one per algorithm"
        plans = [p for p, _ in remade]
        print(wrapped(f"recheck of {out}: {len(plans)} run(s), {what}, made again with the code here"), flush=True)
        outcome = run_jobs([p.job for p in plans], "sim", jobs, timeout)
        rows = []
        for p, was in remade:
            row = {"cell": cell_name(p.cell), "setting": p.setting.values(), "seed": p.seed, "was": was}
            if outcome.get(p.job.path):
                row |= {"now": None, "why": outcome[p.job.path], "same": False}
            else:
                now = numbers(cell_of(p.cell, [p.job.path], s.target))
                row |= {"now": now, "same": all(same(was[k], now[k]) for k in was)}
            rows.append(row)
        commits = {commit_of(p.job.path) for p in plans if not outcome.get(p.job.path)}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    record = made_with.record(commits, s.algorithms(), simulated=True)
    result = {"study": name, "preset": v.get("preset"), "of": versions_of(v), "same": all(r["same"] for r in rows),
              "runs": rows, "made_with": record}
    (out / FILE).write_text(json.dumps(result, indent=1), encoding="utf-8")
    for r in rows:
        found = r["now"] if r["now"] is not None else r["why"]
        print(wrapped(f"  {r['cell']}, seed {r['seed']}: " + ("the same" if r["same"] else
                                                              f"DIFFERS: was {r['was']}, now {found}")))
    differ = sum(not r["same"] for r in rows)
    again = f"run it again (hpcbench reproduce {name} --preset {v.get('preset')})"
    print(wrapped(f"{out / FILE}: " + ("every run came out the same: the verdict stands for the code here" if not differ
                                       else f"{differ} of {len(rows)} run(s) differ: the code here changes the study's "
                                       f"numbers; {again}")))
    return 1 if differ else 0


def versions_of(v: Mapping[str, Any]) -> Any:
    """What ties a recheck to the runs of a verdict: the versions of the code they were made with (a study run
    again has others; one judged again keeps them)."""
    made = v.get("made_with")
    return made.get("versions") if isinstance(made, Mapping) else None


def of(out_dir: Path, v: Mapping[str, Any]) -> dict[str, Any] | None:
    """The recheck in ``out_dir`` of verdict ``v``'s runs; None where there is none (or it is of other runs)."""
    try:
        r = json.loads((out_dir / FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    ok = (isinstance(r, dict) and r.get("study") == v.get("study") and r.get("of") == versions_of(v)
          and isinstance(r.get("made_with"), dict) and isinstance(r.get("runs"), list) and r["runs"]
          and isinstance(r.get("same"), bool))
    return r if ok else None
