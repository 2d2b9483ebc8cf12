"""Child processes of the bad-input campaign (``tests/fuzz/campaign.py``); not a test.

``python tests/fuzz/children.py dashboard ARGS``: open a runs folder in the dashboard with
Streamlit's AppTest (the app as ``streamlit run`` runs it, in this fresh process) and visit the
pages in turn; one JSON line per page, written before and after it, so a page that never ends or
takes the process down is known by name.

``python tests/fuzz/children.py forks``: read calls as JSON lines on stdin, run each in a forked
child (a new process with this one's imports already done, which is what makes thousands of cases
affordable) under the campaign's address-space limit, and answer one JSON line per call: its
outcome (ok, refused in one line, refused in several, traceback, memory, hang, killed). The calls:
the run-folder loaders, an upload, the calibration cache, and ``bench --out`` with its benchmark
stood in for.
"""

from __future__ import annotations

import json
import os
import resource
import select
import signal
import sys
import time
import traceback
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

MEMORY_WORDS = ("MemoryError", "bad_alloc", "Cannot allocate memory", "can't allocate memory",
                "out of memory")


# ----------------------------------------------------------------------------- dashboard pages


def dashboard(args: dict) -> int:
    from streamlit import config
    from streamlit.testing.v1 import AppTest

    from dashboard import state

    # as `streamlit run` from the repository does (its .streamlit/config.toml): loopback only
    config.set_option("server.address", "127.0.0.1",
                      where_defined="command-line argument or environment variable")

    app = AppTest.from_file(str(REPO / "dashboard" / "app.py"), default_timeout=args["page_timeout"])
    app.session_state[state.RUNS_DIR] = args["runs"]
    if args.get("open"):
        app.session_state[state.OPEN_RUN] = args["open"]
    for number, page in enumerate(args["pages"]):
        print(json.dumps({"start": page}), flush=True)
        started = time.monotonic()
        record: dict = {"page": page}
        try:
            if number == 0:
                app.run()  # the default page (Overview) on the first run, as a browser opens it
            else:
                app.switch_page(page).run()
            problems = [f"{e.message}\n{''.join(e.stack_trace)}" for e in app.exception]
            record["exception"] = problems
            record["errors"] = [e.value[:300] for e in app.error]
            record["titles"] = [t.value for t in app.title]
        except MemoryError:
            record["memory"] = "MemoryError in the test harness"
        except BaseException as error:  # reported to the campaign
            text = f"{type(error).__name__}: {error}"
            record["hang" if "timed out" in text else "harness"] = text[:2000]
        record["secs"] = round(time.monotonic() - started, 2)
        print(json.dumps(record), flush=True)
    return 0


# ----------------------------------------------------------------------------- forked calls


def _one_line(error, args: list) -> bool:
    """One line, once the case's own paths (which may hold line breaks) are left out."""
    text = str(error)
    for arg in args:
        if isinstance(arg, str) and arg:
            text = text.replace(arg, "").replace(os.path.basename(arg), "")
    return "\n" not in text and "\r" not in text


def call_load(path: str) -> str:
    """The engine's loader and the dashboard's (its table limits, its summary checks)."""
    from dashboard import rundata
    from profiler_core.storage.results import RunResult

    RunResult.load(path)
    rundata.open_run(Path(path), "folder")
    return "loaded"


def call_load_sweep(path: str) -> str:
    from profiler_core.sweep import store as sweep
    sweep.list_sweeps(Path(path).parent)
    sweep.load_sweep(Path(path))
    return "loaded"


def call_upload(data_file: str, name: str, base: str, times: int) -> str:
    """Upload the zip ``times`` times in one session, as the Runs page does; a refused upload
    must leave nothing in the session's folder."""
    from dashboard import uploads

    data = Path(data_file).read_bytes()
    session = uploads.UploadStore(base=Path(base)).session()
    for _ in range(times):
        try:
            session.add(data, name)
        except BaseException as refusal:
            left = [p for p in session.dir.rglob("*") if not p.is_dir()]
            if left:
                raise AssertionError(f"a refused upload left {len(left)} file(s): {left[:3]}") from refusal
            raise
    return f"kept {len(session.paths())}"


def call_calibration(path: str) -> str:
    """The calibration cache at ``path`` (its folder and file as the case left them): read, a
    measurement written, read again; reading must never raise, writing neither."""
    from profiler_core.engine.calibration_cache import CalibrationCache, GraphFit

    key = {"gpu": "Fuzz GPU", "sms": "132", "driver": "580.1", "torch": "2", "cuda": "12"}
    counts = (1, 32, 256)
    cache = CalibrationCache(Path(path))
    before = cache.read(key, counts)
    fit = GraphFit(launch_us=1.0, per_node_us=0.07, node_counts=counts, timed=(100, 100, 25),
                   replay_us=(1.1, 3.3, 18.0), busy_us=(0.5, 1.0, 2.0), recorded=True,
                   elements=1024, held="back to back", device_name="Fuzz GPU",
                   measured_at="2026-12-02T00:00:00+00:00")
    written = cache.write(key, fit)
    after = cache.read(key, counts)
    if written and after != fit:
        raise AssertionError(f"written, then read back as {after!r}")
    if before is not None and not (0 <= before.launch_us <= 1e6):
        raise AssertionError(f"read a cost out of range: {before!r}")
    return f"read {before is not None}, written {written}"


def call_bench(out: str, overwrite: bool) -> str:
    """``bench --out OUT`` as the command line runs it, with a GPU and the benchmark stood in
    for (one round's tables at once): the exit code must be a documented one and a refusal one
    closing line."""
    import io
    from contextlib import redirect_stderr, redirect_stdout

    import pandas as pd
    import torch

    from profiler_core.cli.main import main
    from profiler_core.orchestration import bench

    torch.cuda.is_available = lambda: True
    bench.run_benchmark = lambda rounds, configs, progress, quiet_tool: {
        "rounds": pd.DataFrame({"config": ["seed-fp32"], "eager": [1.0], "graph": [0.2]}),
        "fidelity": pd.DataFrame({"config": ["seed-fp32"], "tool_over_bare": [1.01]}),
        "tool": pd.DataFrame({"config": ["seed-fp32"], "speedup": [5.0]})}
    err = io.StringIO()
    with redirect_stderr(err), redirect_stdout(io.StringIO()):
        code = main(["bench", "--rounds", "1", "--configs", "seed-fp32", "--out", out,
                     *(["--overwrite"] if overwrite else [])])
    lines = [line for line in err.getvalue().splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("error: ")]
    if code not in (0, 2, 7) or (code and errors != lines[-1:]):
        raise AssertionError(f"exit {code}, stderr: {err.getvalue()[-1500:]}")
    return f"exit {code}"


CALLS = {"load": call_load, "load_sweep": call_load_sweep, "upload": call_upload,
         "calibration": call_calibration, "bench": call_bench}


def _child(request: dict, write_end: int) -> None:
    from profiler_core.spec.errors import ProfilerError

    limit = request["limit"]
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    os.chdir(request["cwd"])
    try:
        result = {"outcome": "ok", "detail": CALLS[request["call"]](*request["args"])}
    except ProfilerError as error:
        result = {"outcome": "refused" if _one_line(error, request["args"]) else "multiline",
                  "detail": str(error)[:2000]}
    except MemoryError:
        result = {"outcome": "memory", "detail": traceback.format_exc()[-2000:]}
    except BaseException as error:  # what the campaign counts
        text = traceback.format_exc()
        memory = any(word in str(error) for word in MEMORY_WORDS[1:])
        result = {"outcome": "memory" if memory else "traceback", "detail": text[-3000:]}
    os.write(write_end, json.dumps(result).encode())
    os._exit(0)


def _serve_one(request: dict) -> dict:
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_end)
        try:
            _child(request, write_end)
        finally:
            os._exit(70)
    os.close(write_end)
    deadline = time.monotonic() + request["timeout"]
    chunks = []
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            os.close(read_end)
            return {"outcome": "hang", "detail": f"no result within {request['timeout']} s"}
        ready, _, _ = select.select([read_end], [], [], min(left, 1.0))
        if ready:
            chunk = os.read(read_end, 65536)
            if not chunk:
                break
            chunks.append(chunk)
    os.close(read_end)
    _, status = os.waitpid(pid, 0)
    if chunks:
        return json.loads(b"".join(chunks))
    if os.WIFSIGNALED(status):
        return {"outcome": "memory", "detail": f"killed by signal {os.WTERMSIG(status)}"}
    return {"outcome": "traceback", "detail": f"exited {os.WEXITSTATUS(status)} with no result"}


def forks() -> int:
    # warm the imports once: every forked child starts with them done
    from dashboard import rundata, uploads  # noqa: F401
    from profiler_core.cli import main  # noqa: F401
    from profiler_core.engine import calibration_cache  # noqa: F401
    from profiler_core.storage.results import RunResult  # noqa: F401
    from profiler_core.sweep import store  # noqa: F401

    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        print(json.dumps(_serve_one(json.loads(line))), flush=True)
    return 0


if __name__ == "__main__":
    if sys.argv[1] == "dashboard":
        sys.exit(dashboard(json.loads(sys.argv[2])))
    sys.exit(forks())
