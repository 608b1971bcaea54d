"""``report --format html``: one self-contained page, rendered in headless Chromium where it is installed
(``.ci/run`` installs Debian's package where apt-get works)."""
from __future__ import annotations

import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest

from conftest import cli

from hpcbench.results.store import read_run, write_run

CHROMIUM = next((p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p), None)


class Page(HTMLParser):
    """What a page holds: its tables as rows of cell texts, its images' sources and any outside links."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: list[list[list[str]]] = []
        self.images: list[str] = []
        self.outside: list[str] = []
        self.cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        if tag == "table":
            self.tables.append([])
        elif tag == "tr":
            self.tables[-1].append([])
        elif tag in ("td", "th"):
            self.cell = []
        elif tag == "img":
            self.images.append(found.get("src") or "")
        for key in ("src", "href"):
            if (found.get(key) or "").startswith(("http:", "https:", "//", "file:")):
                self.outside.append(found[key] or "")

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self.cell is not None:
            self.tables[-1][-1].append("".join(self.cell).strip())
            self.cell = None

    def handle_data(self, data: str) -> None:
        if self.cell is not None:
            self.cell.append(data)


def parse(text: str) -> Page:
    page = Page()
    page.feed(text)
    return page


@pytest.fixture(scope="module")
def page_file(tmp_path_factory) -> Path:
    """A study of asgd and allreduce at 1 and 2 simulated workers, allreduce at 2 marked as timed out."""
    root = tmp_path_factory.mktemp("html")
    for algo in ("asgd", "allreduce"):
        for workers in (1, 2):
            code, _, err = cli("simulate", "--numerics", "off", "--steps", "30", "--algo", algo,
                               "--workers", str(workers), "--out", str(root / f"{algo}-{workers}.h5"))
            assert code == 0, err
    rec = read_run(root / "allreduce-2.h5")
    rec.attrs.update(status="timeout", error="rank 0 on a: timed out after 9 s waiting for a barrier")
    write_run(root / "allreduce-2.h5", rec, overwrite=True)
    code, out, err = cli("report", str(root), "--format", "html")
    assert code == 0, err
    path = root / "report.html"
    path.write_text(out)
    return path


def check_shows_the_report(page: Page) -> None:
    runs, scaling, unfinished = page.tables
    assert runs[0][:4] == ["algorithm", "mode", "nodes", "workers"]
    assert sorted((r[0], r[3]) for r in runs[1:]) == [("allreduce", "1"), ("allreduce", "2"), ("asgd", "1"),
                                                        ("asgd", "2")]
    timed_out = next(r for r in scaling[1:] if r[0] == "allreduce" and r[3] == "2")
    assert "TIMEOUT" in timed_out and "0 (1 failed)" in timed_out
    assert unfinished[1][:3] == ["allreduce", "2", "timeout"] and "timed out after 9 s" in unfinished[1][4]
    assert len(page.images) == 4 and all(src.startswith("data:image/png;base64,") for src in page.images)


def test_the_page_is_self_contained_and_holds_the_tables_and_plots(page_file):
    page = parse(page_file.read_text())
    assert not page.outside
    check_shows_the_report(page)


@pytest.mark.skipif(CHROMIUM is None, reason="no headless Chromium here (Debian: apt-get install chromium)")
@pytest.mark.timeout(180)
def test_headless_chromium_renders_the_page(page_file, tmp_path):
    flags = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars"]
    dom = subprocess.run([*flags, "--dump-dom", page_file.as_uri()], capture_output=True, text=True, timeout=120)
    assert dom.returncode == 0, dom.stderr[-2000:]
    check_shows_the_report(parse(dom.stdout))  # what the browser built from the page
    shot = tmp_path / "page.png"
    subprocess.run([*flags, "--window-size=1400,1600", f"--screenshot={shot}", page_file.as_uri()],
                   capture_output=True, timeout=120, check=True)
    from matplotlib.image import imread

    pixels = imread(shot)
    assert pixels.shape[:2] == (1600, 1400) and pixels.std() > 0.05  # drawn, not a blank page
