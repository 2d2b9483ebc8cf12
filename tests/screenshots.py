"""The README's screenshots (docs/images/*.png), taken from the real dashboard in headless Chromium.

Not a test: ``.venv/bin/python tests/screenshots.py [--out docs/images]`` (docs/development.md).
It fills a temporary runs folder with the bundled runs (a copy of ``dashboard/sample_run`` and of
the bundled sweep ``dashboard/sample_sweeps/seed-fp32-batch``, whose points the Runs page lists)
and a run it records itself for the Ranks page: two gloo ranks on this machine's CPU, rank 1
slowed by 2 ms a step on purpose (no data-parallel run ships with the project); the Shapes page
shows the H200 run of changing shapes the run picker offers (``dashboard/sample_runs``). It starts
``streamlit run dashboard/app.py`` on a free port of this machine, opens every page in Debian's
Chromium at 1400x1000 (the bundled sample on every run page, as a new user first sees it) and
writes each page's first screen, scaled to 1000x714, into ``--out``. A request to any address but
the app's own is refused and stops the script (the page must load nothing from elsewhere).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic"]
VIEWPORT = {"width": 1400, "height": 1000}
SCALED = (1000, 714)
RANKS_RUN = "cpu-2-ranks-rank1-slowed-2ms"
# the bundled H200 run of changing shapes, as the run picker words it (dashboard/sample_runs)
SHAPES_RUN = "Sample shapes-transformer"
# Page in the navigation -> (file name, the page's title, the run it shows: None for the sample,
# the heading the picture starts at: None for the page's top).
PAGES = {
    "Overview": ("overview", "Overview", None, None),
    "Counters": ("counters", "Counters: the article's lessons", None, None),
    "Latency": ("latency", "Latency per training step", None, None),
    "Launch split": ("launch-split", "Launch split: CPU launch vs GPU work", None, None),
    "GPU": ("gpu", "GPU telemetry (NVML)", None, None),
    "Kernels": ("kernels", "Kernels", None, None),
    "Runs": ("runs", "Runs", None, None),
    "Sweep": ("sweep", "Sweep", None, "Sweeps in the runs folder"),  # below the new-sweep form
    "Ranks": ("ranks", "Ranks (data parallel)", RANKS_RUN, None),
    "Shapes": ("shapes", "Shapes", SHAPES_RUN, None),
}


def fill_runs_folder(runs: Path) -> None:
    """The bundled runs and a 2-rank CPU run recorded now (about 10 s on 2 cores: the small CPU
    step's sizes given, so that it is profiled)."""
    shutil.copytree(ROOT / "dashboard" / "sample_run", runs / "sample-seed-bf16")
    shutil.copytree(ROOT / "dashboard" / "sample_sweeps" / "seed-fp32-batch",
                    runs / "sweep-seed-fp32-batch")
    subprocess.run([sys.executable, "-m", "profiler_core", "run", "--device", "cpu",
                    "--batch", "64", "--d-in", "512", "--hidden", "512", "--d-out", "128",
                    "--replays", "100", "--trials", "5", "--nproc-per-node", "2",
                    "--inject-delay-ms", "1:2", "--profile", "--profile-iters", "4",
                    "--progress", "none", "--out", str(runs / RANKS_RUN)],
                   cwd=ROOT, check=True, timeout=600)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_server(runs: Path, port: int, log: Path) -> subprocess.Popen:
    env = dict(os.environ, PROFILER_RUNS_DIR=str(runs), PROFILER_RUNS_ROOT=str(runs.parent),
               STREAMLIT_BROWSER_GATHER_USAGE_STATS="false")
    server = subprocess.Popen(
        [sys.executable, "-m", "streamlit", "run", "dashboard/app.py", "--server.headless",
         "true", "--server.address", "127.0.0.1", "--server.port", str(port)],
        cwd=ROOT, env=env, stdout=log.open("w"), stderr=subprocess.STDOUT)
    deadline = time.time() + 120
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=2) as r:
                if r.read() == b"ok":
                    return server
        except OSError:
            pass
        if time.time() > deadline or server.poll() is not None:
            server.terminate()
            raise SystemExit(f"the dashboard did not start; see {log}")
        time.sleep(0.3)


def settle(page) -> None:
    """Wait until Streamlit's rerun has finished and every chart on the page is drawn."""
    page.wait_for_timeout(300)
    page.wait_for_function(
        "() => document.querySelectorAll('[data-testid=\"stStatusWidget\"]').length === 0")
    page.wait_for_function("""() => [...document.querySelectorAll('[data-testid="stPlotlyChart"]')]
        .every(c => c.querySelector('.main-svg') && c.querySelector('.trace, .hm, canvas, .annotation'))""")
    page.wait_for_timeout(800)  # the charts' last transitions


def show(page, name: str) -> None:
    page.locator('[data-testid="stSidebar"] [data-testid="stSelectbox"]').filter(
        has_text="Showing").click()
    page.get_by_role("option", name=re.compile("^" + re.escape(name))).click()
    settle(page)


def shoot(url: str, out: Path, scratch: Path) -> list[str]:
    """Every page's first screen into ``out``; the requests it refused (none, or it stops)."""
    from PIL import Image
    from playwright.sync_api import sync_playwright

    refused: list[str] = []

    def guard(route) -> None:
        address = route.request.url
        if address.startswith((url + "/", "data:", "blob:")) or address == url:
            route.continue_()
        else:
            refused.append(address)
            route.abort()

    with sync_playwright() as api:
        browser = api.chromium.launch(executable_path=str(CHROMIUM), headless=True,
                                      args=CHROMIUM_ARGS)
        context = browser.new_context(viewport=VIEWPORT, color_scheme="light")
        context.route("**/*", guard)
        page = context.new_page()
        page.set_default_timeout(90_000)
        page.goto(url)
        page.get_by_role("heading", name="Overview", exact=True).wait_for()
        settle(page)
        for nav, (name, title, run, start) in PAGES.items():
            if run is not None:
                show(page, run)
            page.locator('[data-testid="stSidebarNavLink"]', has_text=nav).first.click()
            page.get_by_role("heading", name=title, exact=True).wait_for()
            # every page draws a chart (a slow page's first ones come after its heading)
            page.locator('[data-testid="stPlotlyChart"] .main-svg').first.wait_for()
            settle(page)
            if start is not None:  # that heading at the top of the picture
                page.get_by_role("heading", name=start, exact=True).evaluate(
                    "e => e.scrollIntoView({block: 'start'})")
                page.wait_for_timeout(500)
            full = scratch / f"{name}.png"
            page.screenshot(path=str(full))
            # 256 colours: a page's flat colours and text stay sharp at a fifth of the size
            Image.open(full).convert("RGB").resize(SCALED, Image.LANCZOS).quantize(
                256, method=Image.Quantize.MAXCOVERAGE).save(out / f"{name}.png", optimize=True)
            print(f"{out / (name + '.png')}", flush=True)
        browser.close()
    return refused


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "images",
                        help="folder for the PNGs (default docs/images)")
    args = parser.parse_args(argv)
    if not CHROMIUM.exists():
        raise SystemExit(f"{CHROMIUM} is missing: apt-get install -y chromium")
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="cgp-screenshots-") as folder:
        scratch = Path(folder)
        runs = scratch / "runs"
        fill_runs_folder(runs)
        server = start_server(runs, free_port(), scratch / "server.log")
        try:
            port = server.args[server.args.index("--server.port") + 1]
            refused = shoot(f"http://127.0.0.1:{port}", args.out, scratch)
        finally:
            server.terminate()
            server.wait(20)
    if refused:
        print("refused requests to other addresses: " + ", ".join(sorted(set(refused))),
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
