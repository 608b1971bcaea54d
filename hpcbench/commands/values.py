"""The values command-line flags take (each refused in argparse's one line), and options several
commands share."""
from __future__ import annotations

import argparse
import math
import re
from collections.abc import Callable


def seconds(text: str) -> float:
    """A flag's number of seconds: finite and > 0."""
    value = number(text)
    if not 0 < value < math.inf:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds > 0")
    return value


def accuracy(text: str) -> float:
    value = number(text)
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not an accuracy in (0, 1]")
    return value


def percent(text: str) -> float:
    value = number(text)
    if not 0 <= value < math.inf:
        raise argparse.ArgumentTypeError(f"{text!r} is not a percentage >= 0")
    return value


def number(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None


def at_least(least: int) -> Callable[[str], int]:
    def whole(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if value < least:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number >= {least}")
        return value
    whole.__name__ = f"whole number >= {least}"
    return whole


def seed_list(text: str) -> tuple[int, ...]:
    """Distinct seeds, comma-separated: whole numbers a run's seed takes, at most 100 of them."""
    from hpcbench.config import MAX_SEED

    try:
        values = tuple(int(x) for x in text.split(","))
    except ValueError:
        values = ()
    if not values or len(set(values)) != len(values) or len(values) > 100 \
            or not all(0 <= v <= MAX_SEED for v in values):
        raise argparse.ArgumentTypeError(f"{text!r} is not a list of distinct seeds (whole numbers in [0, {MAX_SEED}], "
                                         "comma-separated, e.g. 0,1,2)")
    return values


SLURM_TIME = re.compile(r"(\d+-\d{1,2}(:\d{1,2}){0,2}|\d+(:\d{1,2}){0,2}|UNLIMITED|INFINITE)", re.IGNORECASE)


def slurm_time(text: str) -> str:
    """sbatch --time: MINUTES, MINUTES:SECONDS, HOURS:MINUTES:SECONDS, DAYS-HOURS[:MINUTES[:SECONDS]]."""
    if not SLURM_TIME.fullmatch(text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a Slurm time (MINUTES, HH:MM:SS or DAYS-HH:MM:SS)")
    return text


def strict_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--strict", action="store_true", help="exit 1 when a result file could not be read (by "
                   "default such files are listed on stderr and skipped)")


def table_options(p: argparse.ArgumentParser) -> None:
    """The options of commands that print report tables."""
    strict_option(p)
    p.add_argument("--format", default="text", help="text | md | latex | csv | json | html (the last three: report "
                                                    "only) (default text)")
    p.add_argument("--target", type=accuracy, default=0.9, help="accuracy for time-to-target (default 0.9)")

