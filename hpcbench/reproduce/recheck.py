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

import dataclasses
import json
import math
import shutil
import subprocess
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
        rows: list[dict[str, Any]] = []
        for p, was in remade:
            row = {"cell": cell_name(p.cell), "setting": p.setting.values(), "seed": p.seed, "was": was}
            if outcome.get(p.job.path):
                row |= {"now": None, "why": outcome[p.job.path], "same": False}
            else:
                now = numbers(cell_of(p.cell, [p.job.path], s.target))
                row |= {"now": now, "same": all(same(was[k], now[k]) for k in was)}
            rows.append(row)
        commits = {commit_of(p.job.path) for p in plans if not outcome.get(p.job.path)}
        machine = ""
        if any(not r["same"] and r["now"] is not None for r in rows):
            machine = machine_or_code(v, plans, rows, s.target, jobs, timeout)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    record = made_with.record(commits, s.algorithms(), simulated=True)
    result = {"study": name, "preset": v.get("preset"), "of": versions_of(v), "same": all(r["same"] for r in rows),
              "runs": rows, "made_with": record} | ({"machine": machine} if machine else {})
    (out / FILE).write_text(json.dumps(result, indent=1), encoding="utf-8")
    for r in rows:
        found = r["now"] if r["now"] is not None else r["why"]
        if r.get("by_machine"):
            said = f"as the verdict's code makes it here: {found} (the verdict holds {r['was']})"
        else:
            said = "the same" if r["same"] else f"DIFFERS: was {r['was']}, now {found}"
        print(wrapped(f"  {r['cell']}, seed {r['seed']}: {said}"))
    differ = sum(not r["same"] for r in rows)
    again = f"run it again (hpcbench reproduce {name} --preset {v.get('preset')})"
    if machine:
        print(wrapped(f"  {machine}"))
    print(wrapped(f"{out / FILE}: " + ("every run came out the same: the verdict stands for the code here" if not differ
                                       else f"{differ} of {len(rows)} run(s) differ: the code here changes the study's "
                                       f"numbers; {again}")))
    return 1 if differ else 0


# Keys that choose only what is scored of the validation split during training, nothing a recheck compares: at
# their defaults in runs made with the verdict's commit, which may not know them.
SCORING_ONLY = {"val_eval_samples": None}


def machine_or_code(v: Mapping[str, Any], plans: Sequence[Any], rows: list[dict[str, Any]], target: float,
                    jobs: int, timeout: float) -> str:
    """Where runs came out otherwise, whether the code or the machine made the difference: the same runs made
    here again with the code the verdict was made with (its commit, from this checkout's git). A row whose
    run that code makes as the code here does, to the last digit, counts as the same: the code here did not
    change it, this machine's arithmetic did (a CPU with other vector units rounds otherwise). A verdict
    recorded as made on a machine like this one is not tried: the machine cannot explain it. → A sentence
    saying what was found ("" where it could not be tried)."""
    from hpcbench.reproduce.runner import cell_of
    from hpcbench.tuning.execute import run_jobs

    made = v.get("made_with") or {}
    if made.get("machine") == made_with.machine():
        return (f"the verdict was made on a machine like this one ({made['machine']}): its numbers are not what "
                "its runs give here, the code or the verdict changed")
    tmp = Path(tempfile.mkdtemp(prefix="hpcbench-recheck-then-"))
    try:
        commit = code_of(made, tmp)
        if not commit:
            return ""
        again = [dataclasses.replace(p.job, cfg=p.job.cfg.with_updates(out=str(tmp / p.job.path.name), **SCORING_ONLY),
                                     path=tmp / p.job.path.name) for p in plans]
        outcome = run_jobs(again, "sim", jobs, timeout, package=tmp)
        agreed = 0
        for p, job, row in zip(plans, again, rows):
            if outcome.get(job.path):
                return f"commit {commit}, which the verdict was made with, could not make its runs here"
            row["then_here"] = then = numbers(cell_of(p.cell, [job.path], target))
            if not row["same"] and row["now"] is not None and all(same(then[k], row["now"][k]) for k in row["was"]):
                row["same"] = row["by_machine"] = True
                agreed += 1
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if not agreed:
        return f"made here with commit {commit} (the verdict's), they come out otherwise: the code here changed them"
    return (f"{agreed} run(s) differ from the verdict, and commit {commit} (the verdict's) gives here what the code "
            "here gives, to the last digit: this machine's arithmetic made the difference (floating point rounds "
            "otherwise on another CPU), not the code")


def code_of(made: Mapping[str, Any], tmp: Path) -> str:
    """Put in ``tmp`` the package as the commit the verdict's runs were made with holds it (one of the commits
    its files name whose files are the digests the verdict recorded, from this checkout's git); → the
    commit's first 10 digits, "" where none is (not a git checkout, or runs made with uncommitted code)."""
    repo, files = made_with.package().parent, made.get("files") or {}
    for commit in made.get("commits") or [] if files else []:
        shutil.rmtree(tmp / "hpcbench", ignore_errors=True)
        archive = subprocess.run(["git", "-C", str(repo), "archive", commit, "hpcbench"], capture_output=True,
                                 timeout=120)
        if archive.returncode != 0:
            continue
        subprocess.run(["tar", "-x", "-C", str(tmp)], input=archive.stdout, check=True, timeout=120)
        there = made_with.digests(tmp / "hpcbench")
        if all(there.get(path) == digest for path, digest in files.items()):
            return str(commit)[:10]
    return ""


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
