"""Open run reports (report.html) in headless Chromium and check that every figure shows
something: exit 1 when a figure did not load in the browser or a panel of a figure draws
nothing (or a single scatter point, or has no axis labels), 0 when every report passes.

For each report the script

1. loads a copy of report.html with a small script added at the end of its body, which
   writes, once the page has loaded, each <img>'s ``complete`` and ``naturalWidth`` into
   the page; Chromium's ``--dump-dom`` prints the page and the script reads them back
   (no pip package: Chromium and the standard library);
2. reads the record posgen writes into each figure's PNG (``posgen:figure``, see
   ``posgen.results.report.figure_record``: per panel what it draws) and reports every
   panel that shows nothing; a figure without a record (a report made before posgen
   recorded its figures) fails, since nothing then says what it draws;
3. with ``--screenshots DIR``, saves two screenshots per report, made small (scaled and
   reduced to a palette): ``report-NAME-TAG.png``, the top of the page as a reader
   first sees it, and ``report-NAME-TAG-figures.png``, the page with only its headings and
   figures shown.

Usage (reports named by ``NAME=RUN_FOLDER``)::

    PYTHONPATH=src python benchmarks/check_report_browser.py \\
        default=RUN1 one-model=RUN2 three-models=RUN3 --screenshots docs/figures --tag after

Chromium: ``/usr/bin/chromium`` (``--chromium`` to change), run headless with no sandbox,
no GPU and a fresh profile per call.
"""

from __future__ import annotations

import argparse
import base64
import html
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from posgen.results.report.figure_record import problems, read_record

FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
]
PROBE = """<script>window.addEventListener('load', () => {
  const out = {height: document.documentElement.scrollHeight,
    images: [...document.images].map(i => ({alt: i.alt, complete: i.complete,
      width: i.naturalWidth, height: i.naturalHeight}))};
  const pre = document.createElement('pre');
  pre.id = 'posgen-browser-check';
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
});</script>"""
FIGURES_ONLY = "<style>body>*:not(h1):not(h2):not(figure){display:none}</style>"
IMG = re.compile(r'<img alt="([^"]*)" src="data:image/png;base64,([^"]+)"')
TOP_HEIGHT = 2600  # px of the page's top in the first screenshot
MAX_HEIGHT = 16000  # px: a taller figures-only page is cut there
SCALE = 0.6


def chromium(binary: str, args: list[str], timeout: int = 180) -> str:
    """Run headless Chromium with a fresh profile; its stdout."""
    with tempfile.TemporaryDirectory(prefix="posgen-chromium-") as profile:
        cmd = [binary, *FLAGS, f"--user-data-dir={profile}", *args]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        raise RuntimeError(f"chromium exited {done.returncode}: {done.stderr.strip()[-400:]}")
    return done.stdout


def with_extra(report: Path, extra: str, folder: Path, name: str) -> Path:
    """A copy of ``report`` with ``extra`` added at the end of its body."""
    text = report.read_text(encoding="utf-8")
    if "</body>" not in text:
        raise ValueError(f"{report} has no </body>")
    out = folder / name
    out.write_text(text.replace("</body>", extra + "</body>", 1), encoding="utf-8")
    return out


def browser_view(binary: str, page: Path) -> dict:
    """What the page's images were in the browser, and the page's height."""
    size = ["--window-size=1280,1000", "--virtual-time-budget=15000"]
    dom = chromium(binary, [*size, "--dump-dom", page.as_uri()])
    found = re.search(r'<pre id="posgen-browser-check">(.*?)</pre>', dom, re.S)
    if found is None:
        raise RuntimeError(f"the page's check did not run in the browser ({page.name})")
    return json.loads(html.unescape(found.group(1)))


def check_report(binary: str, report: Path, folder: Path) -> tuple[list[str], int]:
    """Every fault of one report (a figure not loaded, a panel showing nothing), and its
    number of figures."""
    text = report.read_text(encoding="utf-8")
    figures = IMG.findall(text)
    view = browser_view(binary, with_extra(report, PROBE, folder, "probe.html"))
    faults = []
    if len(view["images"]) != len(figures):
        faults.append(f"{len(figures)} figures in the file, {len(view['images'])} in the page")
    for i, img in enumerate(view["images"], 1):
        if not (img["complete"] and img["width"] > 0):
            faults.append(f"figure {i} ({img['alt']}) did not load in the browser")
    for i, (alt, data) in enumerate(figures, 1):
        record = read_record(base64.b64decode(data))
        faults += [f"figure {i} ({html.unescape(alt)}): {p}" for p in problems(record)]
    return faults, len(figures)


def screenshots(binary: str, report: Path, folder: Path, out: Path, stem: str) -> list[Path]:
    """The top of the page and its figures-only view, as small PNGs under ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    figures_page = with_extra(report, FIGURES_ONLY + PROBE, folder, "figures.html")
    height = min(browser_view(binary, figures_page)["height"], MAX_HEIGHT)
    shots = []
    for page, tall, name in (
        (report, TOP_HEIGHT, f"{stem}.png"),
        (figures_page, height, f"{stem}-figures.png"),
    ):
        raw = folder / f"raw-{name}"
        size = [f"--screenshot={raw}", f"--window-size=1280,{tall}", "--virtual-time-budget=15000"]
        chromium(binary, [*size, page.as_uri()])
        shots.append(shrink(raw, out / name))
    return shots


def shrink(raw: Path, dest: Path) -> Path:
    """``raw`` scaled by SCALE and reduced to a 256-colour palette, written to ``dest``."""
    from PIL import Image

    with Image.open(raw) as im:
        small = im.convert("RGB").resize(
            (round(im.width * SCALE), round(im.height * SCALE)), Image.Resampling.LANCZOS
        )
    small.quantize(colors=256, method=Image.Quantize.FASTOCTREE).save(dest, optimize=True)
    return dest


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("reports", nargs="+", help="NAME=RUN_FOLDER (its report.html)")
    parser.add_argument("--chromium", default="/usr/bin/chromium")
    parser.add_argument("--screenshots", type=Path, help="folder for the screenshots")
    parser.add_argument("--tag", default="", help="added to the screenshots' names")
    args = parser.parse_args(argv)
    failed = False
    for spec in args.reports:
        name, _, run = spec.rpartition("=")
        report = Path(run) / "report.html"
        name = name or Path(run).name
        with tempfile.TemporaryDirectory(prefix="posgen-report-check-") as tmp:
            faults, n = check_report(args.chromium, report, Path(tmp))
            if args.screenshots:
                stem = f"report-{name}" + (f"-{args.tag}" if args.tag else "")
                for shot in screenshots(args.chromium, report, Path(tmp), args.screenshots, stem):
                    print(f"{name}: screenshot {shot}")
        verdict = "FAIL" if faults else "ok"
        print(f"{name}: {report}: {n} figures, {len(faults)} fault(s): {verdict}")
        for fault in faults:
            print(f"  {fault}")
        failed = failed or bool(faults)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
