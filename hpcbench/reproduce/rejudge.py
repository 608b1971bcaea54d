"""``hpcbench reproduce STUDY --rejudge --out-dir DIR``: a study judged again from its verdict.json.

A verdict.json holds every cell's per-seed numbers, the setting each cell chose, the recipe grid and how
the study was run: enough to apply today's judging rules to the runs a study already made, without its
result files and without running anything. report.md and verdict.json are written again; the plots (of
the same cells) and ``made_with`` (the code the runs were made with) are kept, and the verdict records
the headline it replaced.
"""
from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from hpcbench.errors import UsageError
from hpcbench.reproduce import findings, report, resilience
from hpcbench.reproduce.protocol import ArmResult, CellKey, Recipe, candidates, ceiling, choose_recipe
from hpcbench.reproduce.studies import Size, Study, study
from hpcbench.reproduce.verdicts import Cell
from hpcbench.terminal import for_terminal, wrapped
from hpcbench.tuning.grid import Setting, Trial

NOTES = ("preset", "mode", "elapsed_s", "runs", "kept", "capped", "max_steps", "jobs", "invocations", "failed",
         "calibration", "run_flags", "setup", "skipped", "command", "node_mtbf_s")
CELL_FIELDS = ("algo", "workers", "variant", "accuracy", "time_to_target", "wall", "eval_gap", "bytes_per_sample",
               "seeds")


def number(x: Any) -> float:
    """A number as verdict.json writes it (null: infinite, a run that never reached the target)."""
    return math.inf if x is None else float(x)


def held_to(values: Sequence[float], low: float, high: float, what: str) -> None:
    """Each of ``values`` within low..high (NaN: not measured), else the file cannot be what it says."""
    bad = [x for x in values if not (math.isnan(x) or low <= x <= high)]
    if bad:
        raise ValueError(f"{what} {bad[0]!r} is outside {low:g}..{high:g}")


def notes_of(v: dict[str, Any]) -> dict[str, Any]:
    """What verdict.json says of how the study ran, its numbers held to what they can be: counts whole and
    never negative (no more runs kept than made), seconds finite and never negative."""
    notes = {k: v[k] for k in NOTES if k in v}
    for key in ("runs", "kept", "max_steps", "jobs"):
        if key in notes and (type(notes[key]) is not int or notes[key] < 0):
            raise ValueError(f"{key} {notes[key]!r} is not a count")
    if notes.get("kept", 0) > notes.get("runs", math.inf):
        raise ValueError(f"kept {notes['kept']} of {notes['runs']} runs")
    for key in ("elapsed_s", "node_mtbf_s"):
        if key in notes:
            held_to([float(notes[key])], 0, math.inf if key == "node_mtbf_s" else 1e9, key)
    return notes


def cell_of(c: dict[str, Any], algos: Sequence[str]) -> Cell:
    """A cell as verdict.json holds it; one whose per-seed tuples disagree in length, or of an algorithm the
    study does not run, is refused (a hand-edited file must not be judged as if it were whole)."""
    cell = Cell(str(c["algo"]), int(c["workers"]), str(c["variant"]), tuple(map(float, c["accuracy"])),
                tuple(map(number, c["time_to_target"])), tuple(map(float, c["wall"])), float(c["eval_gap"]),
                tuple(map(number, c.get("bytes_per_sample", ()))), tuple(map(int, c.get("seeds", ()))))
    lengths = {len(x) for x in (cell.accuracy, cell.time_to_target, cell.wall, cell.bytes_per_sample, cell.seeds)
               if x}
    if cell.algo not in algos:
        raise ValueError(f"a cell of {cell.algo!r}, which the study does not run (it runs {', '.join(algos)})")
    if len(lengths) != 1 or not cell.accuracy:
        raise ValueError(f"cell {cell.algo} n={cell.workers}: its per-seed values disagree in length or are empty")
    held_to(cell.accuracy, 0, 1, f"cell {cell.algo} n={cell.workers}: an accuracy of")
    held_to(cell.wall + cell.time_to_target, 0, math.inf, f"cell {cell.algo} n={cell.workers}: a time of")
    return cell


def key_of(name: str) -> CellKey:
    """``ga-asgd n=16 10 GbE`` (verdict_file.cell_name) → (ga-asgd, 16, 10 GbE)."""
    algo, _, rest = name.partition(" n=")
    workers, _, variant = rest.partition(" ")
    return algo, int(workers), variant


def recipe_of(v: dict[str, Any]) -> tuple[list[Trial], Recipe]:
    trials = [Trial("asgd", 1, Setting.of(t["setting"]), tuple(map(number, t["val_accuracy"])))
              for t in v["recipe_grid"]]
    for t in trials:
        held_to(t.val, 0, 1, "the recipe grid's validation accuracy")
    recipe = choose_recipe(trials)
    chosen = [Setting.of(t["setting"]) for t in v["recipe_grid"] if t.get("chosen")]
    if chosen and chosen[0] != recipe.best:
        raise UsageError(f"its recipe grid chooses {recipe.best.label()} where the study chose {chosen[0].label()}: "
                         "the verdict was not written by this protocol")
    return trials, recipe


def arm_of(s: Study, preset: str, a: dict[str, Any], recipe: Recipe) -> ArmResult:
    """An arm as verdict.json holds it, its claims not yet judged."""
    cells = tuple(cell_of(c, s.algos) for c in a["cells"])
    if len({(c.algo, c.workers, c.variant) for c in cells}) != len(cells):
        raise ValueError(f"arm {a['name']!r} holds a cell twice")
    size = s.sizes[preset]
    chose = any(len(candidates(a["name"], x, recipe, size.lr_factors, s.scales, size.epochs,
                               s.contender(x).outer_lrs)) > 1 for x in s.algos)
    chosen = {(c.algo, c.workers, c.variant): Setting.of(raw["setting"]) for c, raw in zip(cells, a["cells"])}
    return ArmResult(str(a["name"]), cells, chosen, (), tuple(map(key_of, a.get("edges", []))), chose,
                     tuple(map(key_of, a.get("grown", []))), tuple(a.get("ties", [])))


def pair(p: dict[str, Any]) -> resilience.Pair:
    """A seed's pair of runs as verdict.json holds it (a verdict of the first design has the first eight; one
    of the second that lost workers says when they died)."""
    if p.get("wall") is not None and int(p["lost"]) and not p.get("deaths"):
        raise ValueError(f"seed {p['seed']}: workers lost without their times of death")
    return resilience.Pair(int(p["seed"]), float(p["goodput"]), float(p["goodput_failing"]), float(p["accuracy"]),
                           float(p["accuracy_failing"]), number(p["recovery_s"]), int(p["lost"]),
                           int(p["samples_lost"]), number(p.get("wall")), number(p.get("wall_failing")),
                           tuple(map(float, p.get("deaths", ()))), int(p.get("scheduled", 2)),
                           int(p.get("workers", 0)))


def same_task(path: Path, v: dict[str, Any], size: Size) -> None:
    """A verdict's runs are judged as its preset only where the preset still runs what they ran: the same data
    set, model, budget and target (a verdict from before its protocol named them ran the teacher task's mlp
    for a time to 70%); else one line."""
    proto = v["protocol"]
    ran = (findings.dataset_of(v), findings.model_of(v), float(proto["budget_epochs"]),
           float(proto.get("target_accuracy", 0.7)))
    runs = (size.task.dataset, size.task.model, size.epochs, size.target)
    if ran != runs:
        raise UsageError(f"{path}: its runs were made on {ran[0]} with {ran[1]} for {ran[2]:g} epochs (target "
                         f"{ran[3]:g}); preset {v['preset']!r} now runs {runs[0]} with {runs[1]} for {runs[2]:g} "
                         f"(target {runs[3]:g}): judge it as the preset that ran it")


def rejudge(out_dir: str, name: str) -> int:
    """Judge the study in ``out_dir`` again from its verdict.json (module docstring); → 0. A file that is not
    one (edited by hand, cut short) is one line naming what it lacks; judging and writing are outside that
    net, so a fault of the judge is not mistaken for the file's."""
    from hpcbench.reproduce.resilience_run import publish_resilience
    from hpcbench.reproduce.runner import HERE
    from hpcbench.reproduce.verdict_file import publish

    out = Path(out_dir)
    path = out / "verdict.json"
    try:
        v = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise UsageError(f"{path}: no verdict to judge again ({type(exc).__name__}: {exc})") from None
    if not isinstance(v, dict) or v.get("study") != name or "recipe_grid" not in v:
        raise UsageError(f"{path}: not a verdict of study {name!r} as hpcbench reproduce writes it")
    try:
        preset = str(v["preset"])
        s = study(name).at(preset)
        same_task(path, v, s.sizes[preset])
        seeds = tuple(v.get("protocol", {}).get("seeds", ())) or s.sizes[preset].seeds
        s = replace(s, sizes={**s.sizes, preset: replace(s.sizes[preset], seeds=seeds)})
        trials, recipe = recipe_of(v)
        notes = notes_of(v) | {"emulated": [], "fresh_seeds": bool(v.get("protocol", {}).get("test_seeds"))}
        if name == "resilience":
            cells = [resilience.ResilienceCell(str(c["algo"]), int(c["workers"]), tuple(pair(p) for p in c["seeds"]),
                                               str(c.get("scenario", ""))) for c in v["cells"]]
        else:
            arms = [arm_of(s, preset, a, recipe) for a in v["arms"]]
            network = HERE if v["mode"] == "mpi" else ""
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:
        what = f"no {exc}" if isinstance(exc, KeyError) else f"{type(exc).__name__}: {str(exc).splitlines()[0][:120]}"
        raise UsageError(f"{path}: not a verdict of study {name!r} as hpcbench reproduce writes it ({what})") \
            from None
    extra = {"rejudged": {"replaced_headline": v.get("rejudged", {}).get("replaced_headline", v.get("headline")),
                          "why": "judged again from this file's cells under the current rules (hpcbench reproduce "
                                 f"{name} --rejudge); no run was made"}}
    if name == "resilience":
        plotted = "resilience.png" if (out / "resilience.png").exists() else "no plot"
        text = publish_resilience(out, s, cells, recipe, trials, notes, plotted, v.get("made_with", {}), extra)
    else:
        top = ceiling(trials, recipe)
        arms = [replace(a, claims=tuple(report.judge(s, list(a.cells), network, top))) for a in arms]
        plots = {a.name: f"{s.name}-{a.name.replace(' ', '-')}.png" for a in arms}
        plots = {k: p if (out / p).exists() else "no plot" for k, p in plots.items()}
        text = publish(out, s, arms, recipe, trials, notes, plots, v.get("made_with", {}), v.get("emulated", []),
                       extra)
    print(f"{for_terminal(text, str(path.parent / 'report.md'))}\n"
          + wrapped(f"report: {path.parent / 'report.md'} (judged again from {path})"), flush=True)
    return 0
