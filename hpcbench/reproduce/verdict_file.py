"""What a study writes when it is judged: its report.md and verdict.json (``publish``), and what its
verdict says of how it ran (``bookkeeping``: time, runs kept and failed, the step cap, the invocations).
Shared by every study's runner (``reproduce.runner``, ``reproduce.resilience_run``) and by ``rejudge``.
"""
from __future__ import annotations

import math
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from hpcbench.report.strict_json import dumps
from hpcbench.reproduce import report
from hpcbench.reproduce.protocol import ArmResult, CellKey, Recipe, across_arms, arm_text, ceiling, headline
from hpcbench.reproduce.studies import Study
from hpcbench.results.store import step_cap_of
from hpcbench.tuning.grid import Trial


def cell_name(key: CellKey) -> str:
    a, n, v = key
    return f"{a} n={n}" + (f" {v}" if v else "")


def publish(out: Path, s: Study, arms: Sequence[ArmResult], recipe: Recipe, recipe_trials: Sequence[Trial],
            notes: dict[str, Any], plots: dict[str, str], made: dict[str, Any], emulated: Any,
            extra: Mapping[str, Any] | None = None) -> str:
    """Judge across arms, and write the study's report.md and verdict.json (a study run now, or one judged
    again from its verdict.json); → the report's text."""
    preset, mode = notes["preset"], notes["mode"]
    across = across_arms(s.name, arms, ceiling(recipe_trials, recipe))
    outcome_text = headline(arms, across)
    text = report.markdown(s, arms, outcome_text, recipe, recipe_trials, notes, plots, across)
    (out / "report.md").write_text(text, encoding="utf-8")
    (out / "verdict.json").write_text(dumps({
        "study": s.name, "title": s.title, "preset": preset, "headline": outcome_text,
        "verdict": report.verdict_line(outcome_text, notes),
        "claims": claims_record(arms),
        "across": [{**asdict(cv.claim), "arms": {label: cv.record()}} for label, cv in across],
        "protocol": report.protocol(s, preset, recipe, mode, notes.get("fresh_seeds", True)),
        "ceiling": ceiling(recipe_trials, recipe),
        "recipe_grid": recipe_record(recipe_trials, recipe),
        "arms": [{"name": a.name, "what": arm_text(a.name),
                  "cells": [{**asdict(c), "setting": a.chosen[(c.algo, c.workers, c.variant)].values()}
                            for c in a.cells],
                  "grown": [cell_name(k) for k in a.grown], "edges": [cell_name(k) for k in a.edges],
                  "ties": list(a.ties)} for a in arms],
        **{k: v for k, v in notes.items() if k != "emulated"}, **(extra or {}),
        "made_with": made, "emulated": emulated}, indent=1), encoding="utf-8")
    return text


def recipe_record(trials: Sequence[Trial], recipe: Recipe) -> list[dict[str, Any]]:
    return [{"setting": t.setting.values(), "val_accuracy": list(t.val), "chosen": t.setting == recipe.best}
            for t in trials]


def bookkeeping(out: Path, name: str, preset: str, mode: str, t0: float, outcome: Mapping[Path, str], kept: int,
                jobs: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """What every study's verdict says of how it ran: → (the verdict an earlier invocation wrote where
    its runs were kept, or {}; the notes: preset, mode, time, runs, runs kept and failed, the cap, the
    runs at a time and the invocations that ran them)."""
    elapsed, ran, at_once = time.monotonic() - t0, len(outcome), jobs if mode == "sim" else 1
    before = earlier(out / "verdict.json", name, preset) if kept else {}  # none kept: all made now
    return before, {"preset": preset, "mode": mode, "elapsed_s": elapsed, "runs": ran, "kept": kept,
                    **capped(outcome), "jobs": at_once,
                    "invocations": invocations(before, elapsed, ran - kept, at_once),
                    "failed": sorted(f"{p.name}: {why}" for p, why in outcome.items() if why)}


def earlier(previous: Path, name: str, preset: str) -> dict[str, Any]:
    """The verdict an earlier invocation of this study and preset wrote where this one writes, or {}."""
    import json

    try:
        before = json.loads(previous.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return before if isinstance(before, dict) and before.get("study") == name and before.get("preset") == preset else {}


def invocations(before: dict[str, Any], elapsed: float, ran: int, jobs: int = 1) -> list[dict[str, Any]]:
    """The invocations that ran the study's runs (``before``'s, then this one, which ran ``ran`` runs;
    one that only reported adds nothing): the time a study took is their sum, however often it was resumed."""
    spent: list[dict[str, Any]] = before.get("invocations") or []
    if not spent and before.get("runs", 0) > before.get("kept", 0):
        spent = [{"elapsed_s": before.get("elapsed_s", 0.0), "ran": before["runs"] - before["kept"]}]
    return [*spent, *([{"elapsed_s": elapsed, "ran": ran, "jobs": jobs}] if ran else [])]


def finite(x: float) -> float | None:
    return x if math.isfinite(x) else None


def claims_record(arms: Sequence[ArmResult]) -> list[dict[str, Any]]:
    """Each claim (as the study states it) with its verdict in each arm and the evidence rows behind it."""
    out = []
    for claim in [cv.claim for cv in arms[0].claims] if arms else []:
        per_arm = {a.name: next(x for x in a.claims if x.claim.key == claim.key).record() for a in arms}
        out.append({**asdict(claim), "arms": per_arm})
    return out


def capped(paths: Iterable[Path]) -> dict[str, Any]:
    """Whether max_steps (HPCBENCH_MAX_STEPS) cut the study's runs short, as their files say (verdict.json
    says so, and the largest cap)."""
    cap = max((step_cap_of(p) for p in paths), default=0)
    return {"capped": cap > 0, "max_steps": cap}


def command_line(name: str, out_dir: str, preset: str, mode: str, emulated: bool = False,
                 seeds: Sequence[int] = (), extensions: int | None = None) -> str:
    flags = {"full": "", "quick": " --quick"}.get(preset, f" --preset {preset}")
    flags += f" --seeds {','.join(map(str, seeds))}" if seeds else ""
    flags += f" --extend {extensions}" if extensions is not None else ""
    return (f"hpcbench reproduce {name}{flags}{' --mode mpi' if mode == 'mpi' else ''}"
            f"{' --emulated' if emulated else ''} --out-dir {out_dir}")
