"""Regenerate the report screenshots in docs/ (report-html.png at 1280 px, report-html-800.png at 800 px).

    python docs/screenshots.py            # needs hpcbench installed with matplotlib, and Chromium

The page is the html report of a small simulated study made here (four algorithms at 2, 4 and 8
workers, two seeds each: about a minute), so the pictures show what a user's page looks like: the
headline first, then the plots, then the tables.
"""
from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

DOCS = Path(__file__).resolve().parent
ALGORITHMS = ("allreduce", "asgd", "ga-asgd", "sgp")
WORKERS = (2, 4, 8)
SEEDS = (0, 1)
SHOTS = {"report-html.png": (1280, 2000), "report-html-800.png": (800, 2000)}


def hpcbench(*args: str) -> str:
    proc = subprocess.run([sys.executable, "-m", "hpcbench", *args], capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"hpcbench {' '.join(args)} failed: {proc.stderr.strip()}")
    return proc.stdout


def main() -> None:
    chromium = next((p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p), None)
    if chromium is None:
        sys.exit("no Chromium on PATH (Debian: apt-get install chromium)")
    with tempfile.TemporaryDirectory() as tmp:
        study = Path(tmp) / "study"
        for algo in ALGORITHMS:
            for workers in WORKERS:
                for seed in SEEDS:
                    hpcbench("simulate", "--algo", algo, "--workers", str(workers), "--epochs", "4", "--seed",
                             str(seed),
                             "--set", "threads=1", "--out", str(study / f"{algo}-w{workers}-s{seed}.h5"))
        page = Path(tmp) / "report.html"
        page.write_text(hpcbench("report", str(study), "--format", "html", "--target", "0.85"))
        for name, (width, height) in SHOTS.items():
            subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                            f"--window-size={width},{height}", f"--screenshot={DOCS / name}", page.as_uri()],
                           capture_output=True, check=True, timeout=120)
            print(f"wrote {DOCS / name} ({width}x{height})")


if __name__ == "__main__":
    main()
