"""hpcbench findings: docs/findings.md and the README's findings lines, written from the studies' verdicts."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any


def add(sub: Any) -> None:
    p = sub.add_parser("findings", help="write docs/findings.md and the README's findings lines from the studies' "
                                        "verdict.json; --check compares, --stale says which studies to run again")
    p.add_argument("--studies", default="docs/reproduce", help="a directory of studies, one per subdirectory with "
                   "its verdict.json (default docs/reproduce)")
    p.add_argument("--out", default="docs/findings.md", help="the findings file written (default docs/findings.md)")
    p.add_argument("--readme", default="README.md", help="the README whose findings block is rewritten "
                   "(default README.md)")
    p.add_argument("--check", action="store_true", help="write nothing; exit 1 where a file differs from what "
                   "the verdicts say")
    p.add_argument("--stale", action="store_true", help="write nothing; say for each study whether the code its "
                   "files were made with has changed since (exit 1 where one has)")
    p.set_defaults(func=run)


def studies(root: Path) -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
    """Each study's verdict (parsed) and its verdict.json's text, by the name of its directory."""
    from hpcbench.errors import UsageError

    if not root.is_dir():
        raise UsageError(f"{root} is not a directory of studies (each a subdirectory with its verdict.json)")
    verdicts, texts = {}, {}
    for path in sorted(root.glob("*/verdict.json")):
        try:
            text = path.read_text(encoding="utf-8")
            value = json.loads(text)
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            raise UsageError(f"{path}: not a verdict ({type(exc).__name__}: {str(exc).splitlines()[0][:120]})") \
                from None
        if not isinstance(value, dict) or not readable(path.parent.name, value):
            raise UsageError(f"{path}: not a verdict (a JSON object with its study's claims, arms and cells, as "
                             "hpcbench reproduce writes it)")
        verdicts[path.parent.name], texts[path.parent.name] = value, text
    if not verdicts:
        raise UsageError(f"no study in {root}: no */verdict.json there")
    return verdicts, texts


def readable(name: str, value: dict[str, Any]) -> bool:
    """Whether a verdict can be written out: its section renders (a file edited by hand may not)."""
    from hpcbench.reproduce import findings

    try:
        findings.study_section(name, value, None)
        findings.summary_lines({name: value})
    except (KeyError, TypeError, ValueError, AttributeError, IndexError, ArithmeticError):
        return False
    return True


def run(args: argparse.Namespace) -> int:
    from hpcbench.reproduce import findings, made_with, recheck
    from hpcbench.reproduce.studies import STUDIES

    root = Path(args.studies)
    verdicts, texts = studies(root)
    stale, rechecks = {}, {}
    for name, v in verdicts.items():
        study = STUDIES.get(str(v.get("study")))  # unknown: every algorithm's files count
        rechecks[name] = found = recheck.of(root / name, v)
        # a recheck that found every run the same stands for the code it was made with
        base = found["made_with"] if found and found["same"] else v.get("made_with")
        stale[name] = made_with.stale(base or {}, study.algorithms() if study else None,
                                      simulated=v.get("mode", "sim") == "sim")
    if args.stale:
        changed = 0
        for name, _ in findings.ordered(verdicts):
            files = stale[name]
            changed += bool(files)
            if files == [made_with.NO_RECORD]:
                print(f"{name}: run it again: its verdict has {made_with.NO_RECORD}")
            else:
                print(f"{name}: " + ("up to date with the code here" if not files else
                                     f"run it again: {len(files)} file(s) changed since: {', '.join(files[:8])}"
                                     + (", ..." if len(files) > 8 else "")))
        return 1 if changed else 0
    readings, unread = {}, []
    for name in verdicts:
        path = root / name / "reading.md"
        reading, why = findings.reading_for(path.read_text(encoding="utf-8") if path.exists() else None, texts[name])
        readings[name] = reading if reading is not None else why or None
        if reading is None:
            unread.append(f"{path}: no reading of this verdict; one that starts with "
                          f"{findings.READING.format(findings.digest(texts[name]))} is included")
    plots = {name: [p.name for p in sorted((root / name).glob("*.png"))] for name in verdicts}
    want = {Path(args.out): findings.findings_md(verdicts, readings, plots, stale, rechecks)}
    readme = Path(args.readme)
    if readme.exists():
        want[readme] = findings.with_readme_block(readme.read_text(encoding="utf-8"),
                                                   findings.readme_block(verdicts, stale))
    differ = [p for p, text in want.items() if not p.exists() or p.read_text(encoding="utf-8") != text]
    if args.check:
        for p in differ:
            print(f"{p}: differs from what the verdicts in {root} say (run hpcbench findings)", file=sys.stderr)
        return 1 if differ else 0
    for p in differ:
        p.write_text(want[p], encoding="utf-8")
        print(f"wrote {p}")
    print("\n".join(unread), end="\n" if unread else "")
    return 0
