"""hpcbench list: algorithms, models, datasets and options with defaults."""
from __future__ import annotations

import argparse
from typing import Any


def add(sub: Any) -> None:
    p = sub.add_parser("list", help="algorithms, models, datasets and options with defaults")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from hpcbench.listing import listing

    print(listing())
    return 0

