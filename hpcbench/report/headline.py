"""The report's first answer (pure): at each worker count, who reaches the target first, who ends most
accurate and who trains fastest, by how much, and whether that lead is beyond the spread of the repeats."""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from hpcbench.report.metrics import Curve, ScalePoint

# (what is compared, the point's value and its spread, True when lower is better, how a value reads)
Measure = tuple[str, Callable[[ScalePoint], tuple[float, float]], bool, Callable[[float], str]]


def measures(target: float) -> list[Measure]:
    return [
        (f"first to accuracy {target:g}", lambda p: (p.time_to_target_s, p.time_to_target_spread), True,
         lambda v: f"{v:.3g} s"),
        ("best final accuracy", lambda p: (p.final_accuracy, p.final_accuracy_spread), False, lambda v: f"{v:.3f}"),
        ("most samples/s", lambda p: (p.samples_per_s, p.samples_per_s_spread), False, lambda v: f"{v:,.0f}"),
    ]


@dataclass(frozen=True)
class Lead:
    """One answer: at ``workers`` workers, ``winner`` leads on ``what``."""

    workers: int
    what: str
    winner: str  # the curve's label, as the tables and plots show it
    value: str
    runner_up: str  # "" when it had no rival
    runner_value: str
    margin: str  # "1.40x sooner than", "+0.021 over", "" without a rival
    judged: str  # "beyond the spread of the repeats", "within the spread of the repeats", or why neither

    def line(self, judged: bool = True) -> str:
        """The answer in words; ``judged``: with whether the repeats back it (left out where no point has
        repeats, which the headline then says once)."""
        if not self.runner_up:
            return f"{self.what}: {self.winner} ({'; '.join(filter(None, (self.value, self.judged)))})"
        return (f"{self.what}: {self.winner} ({self.value}), {self.margin} {self.runner_up} "
                f"({self.runner_value})" + (f"; {self.judged}" if judged else ""))


SINGLE = "one run each, so no spread to judge it by"


def judge(best: ScalePoint, second: ScalePoint, value: Callable[[ScalePoint], tuple[float, float]]) -> str:
    """Whether the lead is larger than the repeats' own spread (the two min-max ranges do not overlap)."""
    if value(best)[0] == value(second)[0]:
        return "a tie"
    if best.repeats < 2 or second.repeats < 2:
        return SINGLE if best.repeats < 2 and second.repeats < 2 else \
            "one side has a single run, so no spread to judge it by"
    (a, sa), (b, sb) = value(best), value(second)
    if abs(a - b) > sa + sb:
        return f"beyond the spread of the repeats ({best.repeats} and {second.repeats} runs)"
    return f"within the spread of the repeats ({best.repeats} and {second.repeats} runs): not a clear lead"


def margin(best: float, second: float, lower_better: bool, what: str) -> str:
    if best == second:
        return "level with"
    if what.startswith("best final"):
        return f"{best - second:+.{3 if abs(best - second) >= 5e-4 else 4}f} over"
    ratio = second / best if lower_better else best / second
    return f"{ratio:.2f}x {'sooner' if lower_better else 'more'} than" if math.isfinite(ratio) else "ahead of"


def leads(points: Sequence[ScalePoint], labels: dict[Curve, str], target: float) -> list[Lead]:
    """Each measure at each worker count where at least one point has a value."""
    out = []
    for workers in sorted({p.workers for p in points}):
        here = [p for p in points if p.workers == workers and p.result == "ok"]
        for what, value, lower_better, show in measures(target):
            known = [p for p in here if math.isfinite(value(p)[0])]
            if not known:
                if what.startswith("first to") and here:
                    measured = any(p.reached_target + p.missed_target for p in here)  # else: timing only
                    out.append(Lead(workers, what, "none reached it" if measured else
                                    "timing only: no run measured accuracy", "", "", "", "",
                                    f"{len(here)} curve{'s' * (len(here) > 1)} with finished runs"))
                continue
            ranked = sorted(known, key=lambda p: (value(p)[0] if lower_better else -value(p)[0], labels[p.curve]))
            best = ranked[0]
            if len(ranked) == 1:
                out.append(Lead(workers, what, labels[best.curve], show(value(best)[0]), "", "", "",
                                "the only curve with a value"))
                continue
            second = ranked[1]
            out.append(Lead(workers, what, labels[best.curve], show(value(best)[0]), labels[second.curve],
                            show(value(second)[0]), margin(value(best)[0], value(second)[0], lower_better, what),
                            judge(best, second, value)))
    return out
