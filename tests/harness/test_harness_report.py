"""The HTML report: self-contained, and its plots really render in headless Chromium."""

from __future__ import annotations

import re
import shutil
import struct
import subprocess
import zlib
from pathlib import Path

import pytest

from harness_fakes import synthetic_run
from rejoinder.harness.report import render_html, write_report

PLOTS = ("plot-curve", "plot-cdf", "plot-stacked", "plot-waterfall")
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def chromium(*args: str, tmp: Path) -> subprocess.CompletedProcess:
    cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
           "--disable-component-update", "--disable-sync", "--no-first-run", f"--user-data-dir={tmp / 'profile'}",
           "--virtual-time-budget=5000", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


def png_pixels(path: Path) -> tuple[int, int, bytes]:
    """(width, height, decompressed scanlines) of a PNG — enough to tell blank from drawn."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, width, height = 8, b"", 0, 0
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            width, height = struct.unpack(">II", body[:8])
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    return width, height, zlib.decompress(idat)


def test_report_is_self_contained_with_every_plot(store, tmp_path):
    run_id = synthetic_run(store, tts="piper", seed=1)
    store.add_note(run_id, "baseline on the 2-core box")
    html = render_html(store, run_id)
    for div in PLOTS:
        assert f'id="{div}"' in html
    assert not any("src=" in attrs for attrs in re.findall(r"<script([^>]*)>", html))  # nothing fetched
    assert "cdn.plot.ly/plotly" not in html
    assert len(re.findall(r"Plotly\.newPlot", html)) == 4
    assert html.count("plotly.js v") <= 2  # the library is inlined once
    assert "baseline on the 2-core box" in html and "embedded-cpu" in html and "final_db" in html
    path = write_report(store, "last", tmp_path / "r.html")
    assert path.exists() and path.stat().st_size > 1_000_000  # plotly.js is inside


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed")
def test_report_renders_in_headless_chromium(store, tmp_path):
    run_id = synthetic_run(store, tts="piper", seed=1)
    path = write_report(store, run_id, tmp_path / "report.html")
    dom = chromium("--dump-dom", path.resolve().as_uri(), tmp=tmp_path).stdout
    for div in PLOTS:  # plotly drew an SVG inside each plot div (the JS ran, offline)
        m = re.search(rf'<div id="{div}"[^>]*class="plotly-graph-div[^"]*js-plotly-plot', dom)
        assert m, f"{div} was not rendered"
    assert dom.count('class="main-svg"') >= 8
    assert dom.count('class="trace bars"') >= 2 and 'class="scatterlayer' in dom
    png = tmp_path / "shot.png"
    proc = chromium(f"--screenshot={png}", "--window-size=1400,3000", path.resolve().as_uri(), tmp=tmp_path)
    assert png.exists(), proc.stderr[-2000:]
    width, height, pixels = png_pixels(png)
    assert (width, height) == (1400, 3000)
    assert png.stat().st_size > 60_000  # a blank page compresses to a few kB
    assert len(set(pixels[::97])) > 30  # many distinct byte values: coloured plots, text, axes
