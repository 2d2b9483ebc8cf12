"""The dashboard against hostile runs and uploads (issue 9), all in temporary folders: CSV
downloads that would run as spreadsheet formulas, a run's text that would render as Markdown
(outside images, links, HTML, Streamlit directives), where the server listens, and zip bombs."""

from __future__ import annotations

import ast
import io
import json
import os
import re
import socket
import struct
import subprocess
import sys
import time
import tracemalloc
import urllib.request
import zipfile
import zlib
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import tomllib
from conftest import write_synthetic_run
from streamlit.testing.v1 import AppTest

from dashboard import binding, rundata, state, ui, uploads
from profiler_core.spec.errors import ProfilerError
from profiler_core.storage.csvsafe import csv_bytes, neutralise_formulas
from profiler_core.storage.results import RunResult

ROOT = Path(__file__).resolve().parent.parent
APP = ROOT / "dashboard" / "app.py"
pytestmark = pytest.mark.usefixtures("fresh_app_state")

FORMULAS = ["=cmd|' /C calc'!A0", "+1+cmd|' /C calc'!A0", "-2+3+cmd|' /C calc'!A0",
            "@SUM(1+1)*cmd|' /C calc'!A0", "\t=1+1", "\r=1+1", "=HYPERLINK(\"http://x\")"]
SPREADSHEET_STARTS = ("=", "+", "-", "@", "\t", "\r")
# A run's own CSVs are written by RunResult.save, which leaves a carriage return unquoted, so
# names holding one cannot be part of a run (see test_a_line_break_inside_a_cell_never_starts_a_row
# for the downloads).
RUN_FORMULAS = [text for text in FORMULAS if "\r" not in text]


def _app(runs_dir: Path) -> AppTest:
    at = AppTest.from_file(str(APP), default_timeout=60)
    at.session_state[state.RUNS_DIR] = str(runs_dir)
    return at.run()


# ----------------------------------------------------------------------------- CSV formulas


def test_formula_cells_get_a_quote_and_numbers_stay_numbers():
    frame = pd.DataFrame({"kernel": FORMULAS + ["plain", "-1.5", "-inf", None],
                          "saving_us": [-5.0, -0.5, 3.0, 1e-9, -1e300, 0.0, 2.0, -7.0, -1.0,
                                        float("nan"), -2.0],
                          "launches": np.arange(-5, 6)})
    safe = neutralise_formulas(frame)
    assert safe["kernel"].tolist()[:len(FORMULAS)] == ["'" + text for text in FORMULAS]
    assert safe["kernel"].tolist()[len(FORMULAS):-1] == ["plain", "-1.5", "-inf"]  # numbers
    assert pd.isna(safe["kernel"].iloc[-1])
    pd.testing.assert_frame_equal(safe[["saving_us", "launches"]], frame[["saving_us", "launches"]])
    pd.testing.assert_frame_equal(frame, pd.DataFrame({**frame}))  # the input is left alone
    read = pd.read_csv(io.BytesIO(csv_bytes(frame)))
    assert read["kernel"].iloc[:-1].tolist() == safe["kernel"].iloc[:-1].tolist()
    assert read["saving_us"].iloc[:3].tolist() == [-5.0, -0.5, 3.0]
    assert read["launches"].tolist() == list(range(-5, 6))
    mixed = pd.DataFrame({"value": pd.Series([-3, "=1+1", 2.5, True], dtype=object)})
    assert neutralise_formulas(mixed)["value"].tolist() == [-3, "'=1+1", 2.5, True]
    assert neutralise_formulas(pd.DataFrame(columns=["a"])).columns.tolist() == ["a"]


def test_a_line_break_inside_a_cell_never_starts_a_row():
    data = csv_bytes(pd.DataFrame({"kernel": ["x\r=1+1", "y\n@SUM(1)"], "us": [1.0, 2.0]}))
    assert data == b'kernel,us\r\n"x\r=1+1",1.0\r\n"y\n@SUM(1)",2.0\r\n'


def _hostile_run(tmp_path: Path, name: str = "hostile") -> Path:
    """A complete run whose kernels and counter phases are named like spreadsheet formulas."""
    run = RunResult.load(write_synthetic_run(tmp_path / "source" / name))
    kernels = run.table("kernels")
    kernels["kernel"] = [RUN_FORMULAS[i % len(RUN_FORMULAS)] for i in range(len(kernels))]
    kernels["kernel_full"] = kernels["kernel"] + " (full)"
    tables = dict(run.tables, kernels=kernels)
    hostile = RunResult(config=run.config, environment=run.environment, headline=run.headline,
                        notes=run.notes, tables=tables, trace_paths={})
    return hostile.save(tmp_path / "runs" / name)


def test_every_table_download_is_formula_safe(tmp_path):
    run = rundata.open_run(_hostile_run(tmp_path), "folder")
    for name, frame in run.tables.items():
        read = pd.read_csv(io.BytesIO(rundata.table_csv_bytes(frame)), keep_default_na=False)
        assert len(read) == len(frame), name
        for column in read.columns[read.dtypes == object]:  # noqa: E721  (pandas' dtype comparison)
            cells = read[column].astype(str)
            numbers = cells.map(_is_number).astype(bool)  # bool even for an empty column
            bad = cells[cells.str.startswith(SPREADSHEET_STARTS) & ~numbers]
            assert bad.empty, (name, column, bad.tolist()[:3])
    kernels = pd.read_csv(io.BytesIO(rundata.table_csv_bytes(run.table("kernels"))))
    assert set(kernels["kernel"]) == {"'" + text for text in RUN_FORMULAS}
    pd.testing.assert_series_equal(kernels["total_us"], run.table("kernels")["total_us"])


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def test_the_run_zip_is_formula_safe_and_uploads_again_with_the_same_numbers(tmp_path):
    path = _hostile_run(tmp_path)
    data = rundata.run_zip_bytes(path)
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        packed = {Path(name).name: zf.read(name) for name in zf.namelist()}
    kernels = pd.read_csv(io.BytesIO(packed["kernels.csv"]), keep_default_na=False)
    assert set(kernels["kernel"]) == {"'" + text for text in RUN_FORMULAS}
    for name in ("summary.json", "latency.csv", "stats.csv", "nvml.csv", "breakdown.csv"):
        assert packed[name] == (path / name).read_bytes(), name  # nothing to change: as it was
    reopened = rundata.unpack_run(data, tmp_path / "uploaded")
    original = RunResult.load(path)
    for name, frame in original.tables.items():
        numeric = frame.select_dtypes("number").columns
        pd.testing.assert_frame_equal(reopened.result.table(name)[numeric], frame[numeric])
    quoted = ["'" + kernel for kernel in original.table("kernels")["kernel"]]
    assert list(reopened.table("kernels")["kernel"]) == quoted
    # the zip of the re-uploaded run is the same zip: quoting is not applied twice
    assert rundata.run_zip_bytes(reopened.path, root=path.name) == data


def test_no_dashboard_code_writes_csv_but_through_csvsafe():
    """Every CSV the dashboard serves is built by rundata.table_csv_bytes / csvsafe.csv_bytes."""
    writers = []
    for source in sorted((ROOT / "dashboard").rglob("*.py")):
        for node in ast.walk(ast.parse(source.read_text())):
            if isinstance(node, ast.Attribute) and node.attr in ("to_csv", "writer", "DictWriter"):
                writers.append(f"{source.relative_to(ROOT)}:{node.lineno} {node.attr}")
    assert writers == []
    ui_source = (ROOT / "dashboard" / "ui.py").read_text()
    assert "rundata.table_csv_bytes(frame)" in ui_source


# ----------------------------------------------------------------------------- Markdown


IMAGE = "![x](http://attacker.invalid/p.png)"
LINK = "[click me](https://attacker.invalid/phish)"
HTML = "<img src=http://attacker.invalid/h.png onerror=alert(1)>"
DIRECTIVES = ":red[red text] :material/home: :streamlit: :smile: $x^2$"
BARE = "http://attacker.invalid/bare www.attacker.invalid me@attacker.invalid"
HOSTILE = f"{IMAGE} {LINK}\n# heading\r{HTML} {DIRECTIVES} {BARE} **bold** `code` | a |"
# What Plotly renders as a live link in a category label, legend entry or hover text.
PLOTLY_LINK = '<a href="https://attacker.invalid/plotly">k&amp;<b>bold</b></a>'
FORBIDDEN = [re.compile(pattern) for pattern in (
    r"!\[", r"\]\(", r"(?<!\\)<", r"https?://attacker", r"www\.attacker", r"@attacker",
    r":material/", r":streamlit:", r":smile:", r":red\[", r"(?<!\\)\$x", r"\n#",
)]
# Element fields that Streamlit renders as Markdown (st.text, st.code, st.json and table cells are
# plain text, and so are selectbox options).
MARKDOWN_FIELDS = ("body", "label", "help", "text", "placeholder")
PLAIN_TYPES = ("text", "code", "json", "dataframe", "selectbox")


def _markdown_sources(node, found: list[tuple[str, str]]) -> list[tuple[str, str]]:
    proto, kind = getattr(node, "proto", None), getattr(node, "type", "")
    if proto is not None and hasattr(proto, "ListFields") and kind not in PLAIN_TYPES:
        for field, value in proto.ListFields():
            if field.name in MARKDOWN_FIELDS and isinstance(value, str):
                found.append((f"{kind}.{field.name}", value))
    for child in getattr(node, "children", {}).values():
        _markdown_sources(child, found)
    return found


def _shown(markdown: str) -> str:
    """What a Markdown source escaped by ui.escape_md displays."""
    return re.sub(r"\\(.)", r"\1", markdown).replace("\u2060", "")


def _assert_no_markup_from_the_run(at: AppTest, where: str) -> list[tuple[str, str]]:
    assert not at.exception, (where, [e.value for e in at.exception])
    sources = _markdown_sources(at._tree, [])
    assert sources, where
    for field, source in sources:
        for pattern in FORBIDDEN:
            assert not pattern.search(source), (where, field, pattern.pattern, source[:300])
    return sources


@pytest.mark.parametrize("payload", [IMAGE, LINK, HTML, DIRECTIVES, BARE, HOSTILE, "a\u202eb\x00c"])
def test_escaped_text_has_no_markup_and_shows_as_itself(payload):
    escaped = ui.escape_md(payload)
    for pattern in FORBIDDEN:
        assert not pattern.search(escaped), (pattern.pattern, escaped)
    expected = re.sub("[\x00-\x1f\u202e]+", " ", payload)
    assert _shown(escaped) == expected
    assert "\n" not in escaped and "\r" not in escaped


def _markdown_run(tmp_path: Path) -> Path:
    """An incomplete run whose every free-text field holds Markdown, HTML and directives."""
    path = write_synthetic_run(tmp_path / "runs" / "run [x](https:attacker.invalid) **b**")
    summary = json.loads((path / "summary.json").read_text())
    summary["environment"].update(gpu_name=HOSTILE, device_type=IMAGE, started_at=LINK,
                                  driver_version=HTML)
    summary["notes"] = [HOSTILE, f"incomplete: the run stopped during {IMAGE} {LINK}"]
    summary["complete"] = False
    (path / "summary.json").write_text(json.dumps(summary))
    counters = pd.read_csv(path / "counters.csv")
    counters["phase"] = [IMAGE, LINK, HTML, DIRECTIVES]
    counters["rule"] = [BARE, HOSTILE, IMAGE, LINK]
    counters.to_csv(path / "counters.csv", index=False)
    breakdown = pd.read_csv(path / "breakdown.csv")
    breakdown.loc[len(breakdown)] = ["graph", IMAGE, 1.0, 1.0, 0.0, 0.0]  # an unknown component
    breakdown.to_csv(path / "breakdown.csv", index=False)
    kernels = pd.read_csv(path / "kernels.csv")  # kernel names as Plotly would render HTML
    kernels.loc[0, ["kernel", "kernel_full"]] = [PLOTLY_LINK, PLOTLY_LINK + " full"]
    kernels.to_csv(path / "kernels.csv", index=False)
    phases = pd.read_csv(path / "phases.csv")
    phases.loc[1, "phase"] = PLOTLY_LINK
    phases.to_csv(path / "phases.csv", index=False)
    return path


PAGES = ["views/overview.py", "views/counters.py", "views/latency.py", "views/launch_split.py",
         "views/gpu.py", "views/kernels.py", "views/runs.py"]


def test_no_text_from_a_run_renders_as_markdown_on_any_view(tmp_path):
    path = _markdown_run(tmp_path)
    write_synthetic_run(tmp_path / "runs" / "plain")  # a second run, so Runs compares two
    at = _app(tmp_path / "runs")
    at.session_state[state.OPEN_RUN] = str(path.resolve())
    shown_everywhere = []
    for page in PAGES:
        at.switch_page(page).run()
        sources = _assert_no_markup_from_the_run(at, page)
        shown_everywhere.append("\n".join(_shown(source) for _, source in sources))
    overview, counters = shown_everywhere[0], shown_everywhere[1]
    flat = HOSTILE.replace("\n", " ").replace("\r", " ")
    assert flat in overview  # the GPU name in the header and the note: shown, as text
    assert f"the run stopped during {IMAGE} {LINK}" in overview  # the incomplete warning
    assert f"**{IMAGE}**: " in counters and f"**{DIRECTIVES}**: " in counters  # lesson lines
    assert "breakdown.csv holds components this dashboard does not know" in shown_everywhere[3]
    assert IMAGE in shown_everywhere[3]
    assert "run [x](https:attacker.invalid) **b**" in shown_everywhere[6]  # Runs: compared runs


def test_an_upload_name_and_a_refusal_render_as_text(tmp_path):
    at = _app(tmp_path / "runs")
    at.switch_page("views/runs.py").run()
    name = f"{IMAGE} {HTML}.zip"
    at.file_uploader(key="upload_zip").set_value((name, b"not a zip", "application/zip")).run()
    sources = _assert_no_markup_from_the_run(at, "upload")
    errors = [_shown(source) for field, source in sources if field.startswith("alert")
              or "error" in field]
    refusal = f"{name} was refused: the upload is not a zip file"
    assert any(refusal in text for text in errors), errors


# ----------------------------------------------------------------------------- where it listens


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _listening_addresses(port: int) -> list[str]:
    """Local addresses (hex, as /proc/net shows them) of the sockets listening on ``port``."""
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            address, hex_port = fields[1].rsplit(":", 1)
            if fields[3] == "0A" and int(hex_port, 16) == port:  # 0A: LISTEN
                found.append(address)
    return found


LOOPBACK = {"0100007F", "00000000000000000000000001000000"}  # 127.0.0.1, ::1


@pytest.mark.skipif(not Path("/proc/net/tcp").exists(), reason="needs Linux's /proc/net/tcp")
@pytest.mark.parametrize("started_in", ["dashboard", "elsewhere"])
def test_the_server_listens_on_loopback_wherever_it_is_started(tmp_path, started_in):
    """`cd dashboard && streamlit run app.py`, or from any folder, even with a global
    ~/.streamlit/config.toml (another project's) that asks for every interface."""
    home = tmp_path / "home"
    (home / ".streamlit").mkdir(parents=True)
    (home / ".streamlit" / "config.toml").write_text('[server]\naddress = "0.0.0.0"\n')
    cwd, script = (APP.parent, "app.py") if started_in == "dashboard" else (tmp_path, str(APP))
    env = {k: v for k, v in os.environ.items() if not k.startswith("STREAMLIT_")}
    env.update(HOME=str(home), PROFILER_RUNS_DIR=str(tmp_path / "runs"))
    port = _free_port()
    log = tmp_path / "server.log"
    with open(log, "w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "streamlit", "run", script,
                                 "--server.port", str(port)], cwd=cwd, env=env, stdout=out,
                                stderr=subprocess.STDOUT)
    try:
        deadline = time.time() + 30
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health",
                                            timeout=1) as answer:
                    if answer.read() == b"ok":
                        break
            except OSError:
                pass
            assert proc.poll() is None and time.time() < deadline, log.read_text()[-2000:]
            time.sleep(0.1)
        addresses = _listening_addresses(port)
        assert addresses and set(addresses) <= LOOPBACK, addresses
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_both_config_files_hold_the_same_settings():
    root = tomllib.loads((ROOT / ".streamlit" / "config.toml").read_text())
    beside_the_app = tomllib.loads((APP.parent / ".streamlit" / "config.toml").read_text())
    assert beside_the_app == root and root["server"]["address"] == "127.0.0.1"


@pytest.mark.parametrize("address, local", [
    ("127.0.0.1", True), ("127.0.0.5", True), ("::1", True), ("[::1]", True), ("localhost", True),
    ("unix:///tmp/dashboard.sock", True), ("0.0.0.0", False), ("::", False), (None, False),
    ("", False), ("  ", False), ("10.1.2.3", False), ("192.168.0.7", False),
    ("gpu-box.example", False), ("127.0.0.1.example", False),
])
def test_only_loopback_and_unix_sockets_count_as_this_machine(address, local):
    assert binding.is_local(address) is local


@pytest.fixture
def server_address():
    """Set server.address (and where Streamlit says it came from) for the app; put it back."""
    from streamlit import config

    option = config.get_config_options()["server.address"]
    saved = (option.value, option.where_defined)

    def set_to(value, where_defined):
        config.set_option("server.address", value, where_defined=where_defined)

    yield set_to
    set_to(*saved)


FLAG = "command-line argument or environment variable"  # what Streamlit records for a flag


@pytest.mark.parametrize("address, where_defined, allow, served", [
    ("0.0.0.0", "<default>", "", False),
    (None, "<default>", "", False),
    ("0.0.0.0", "/home/someone/.streamlit/config.toml", "", False),
    ("192.168.0.7", "<default>", "yes", False),  # only "1" opts in
    ("0.0.0.0", FLAG, "", True),
    ("0.0.0.0", "<default>", "1", True),
    ("::1", "<default>", "", True),
])
def test_the_app_serves_nothing_on_a_network_address_nobody_chose(
        tmp_path, monkeypatch, server_address, address, where_defined, allow, served):
    monkeypatch.setenv(binding.ALLOW_REMOTE_ENV, allow)
    write_synthetic_run(tmp_path / "runs" / "a-run")
    server_address(address, where_defined)
    at = _app(tmp_path / "runs")
    assert not at.exception, [e.value for e in at.exception]
    shown = _shown("\n".join(e.value for e in at.error))
    if served:
        assert not at.error and at.sidebar.button(key="run_button")
        assert at.title and at.title[0].value == "Overview"
        shared = _shown("\n".join(w.value for w in at.sidebar.warning))
        assert ("Shared on the network" in shared) is (not binding.is_local(address))
        return
    assert len(at.error) == 1 and not at.sidebar.button and not at.title and not at.dataframe
    where = f"on {address}" if address else "on every network interface"
    assert f"This server listens {where}" in shown
    assert "restart it with --server.address 127.0.0.1" in shown
    opt_in = f"--server.address 0.0.0.0 on the command line, or set {binding.ALLOW_REMOTE_ENV}=1"
    assert opt_in in shown
    assert "\n" not in shown


# ----------------------------------------------------------------------------- upload bombs


def _deflated(chunk: bytes, times: int) -> tuple[bytes, int]:
    """Raw deflate data inflating to ``chunk * times``, and its CRC-32, compressing ``chunk`` only
    once: a block flushed with Z_FULL_FLUSH refers to nothing before it, so it can be repeated."""
    packer = zlib.compressobj(9, zlib.DEFLATED, -15)
    block = packer.compress(chunk) + packer.flush(zlib.Z_FULL_FLUSH)
    crc = 0
    for _ in range(times):
        crc = zlib.crc32(chunk, crc)
    return block * times + b"\x03\x00", crc  # \x03\x00: an empty final block


def _bomb_zip(members: dict[str, bytes | tuple[bytes, int]]) -> bytes:
    """A zip (deflate, written by hand) of ``name: data`` or ``name: (chunk, times)`` members."""
    out, central = io.BytesIO(), []
    for name, content in members.items():
        chunk, times = content if isinstance(content, tuple) else (content, 1)
        data, crc = _deflated(chunk, times)
        size, encoded, offset = len(chunk) * times, name.encode(), out.tell()
        out.write(struct.pack("<4s5H3I2H", b"PK\x03\x04", 20, 0, 8, 0, 0, crc, len(data), size,
                              len(encoded), 0) + encoded + data)
        central.append(struct.pack("<4s6H3I5H2I", b"PK\x01\x02", 20, 20, 0, 8, 0, 0, crc,
                                   len(data), size, len(encoded), 0, 0, 0, 0, 0, offset) + encoded)
    directory = b"".join(central)
    start = out.tell()
    out.write(directory + struct.pack("<4s4H2IH", b"PK\x05\x06", 0, 0, len(members), len(members),
                                      len(directory), start, 0))
    return out.getvalue()


@pytest.fixture(scope="module")
def good_members(tmp_path_factory) -> dict[str, bytes]:
    run = write_synthetic_run(tmp_path_factory.mktemp("bombs") / "run", per_mode=20, trials=2)
    return {f"run/{p.name}": p.read_bytes() for p in sorted(run.iterdir())}


def _refused_upload(data: bytes, tmp_path: Path, message: str) -> float:
    """Refused with ``message``, quickly, holding little memory, leaving nothing on disk."""
    tracemalloc.start()
    started = time.perf_counter()
    try:
        with pytest.raises(ProfilerError) as caught:
            uploads.UploadStore(base=tmp_path / "store").session().add(data, "bomb.zip")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    elapsed = time.perf_counter() - started
    assert message in caught.value.message, caught.value.message
    assert "\n" not in str(caught.value) and caught.value.hint
    assert elapsed < 3 and peak < 64 * 2**20, (elapsed, peak / 2**20)
    store = next((tmp_path / "store").iterdir())
    assert [p for p in store.rglob("*") if p.is_file()] == []  # nothing of it is left
    return elapsed


def test_the_cheap_bomb_builder_makes_real_zips(good_members):
    members = dict(good_members, **{"run/nvml.csv": (b"t_s,metric,value,source\n", 3)})
    with zipfile.ZipFile(io.BytesIO(_bomb_zip(members))) as zf:
        assert zf.testzip() is None
        assert zf.read("run/nvml.csv") == b"t_s,metric,value,source\n" * 3
        assert zf.read("run/summary.json") == good_members["run/summary.json"]


def test_four_250_mib_tables_in_a_small_zip_are_refused_unread(good_members, tmp_path):
    """The zip from the report: 4 x 250 MiB of CSV (each under the 256 MiB of one table)."""
    members = dict(good_members)
    for name in ("latency", "nvml", "kernels", "launch_split"):
        header = members[f"run/{name}.csv"].split(b"\n", 1)[0] + b"\n"
        members[f"run/{name}.csv"] = header + b"0," * (2**19 - len(header) // 2), 250
    data = _bomb_zip(members)
    assert len(data) < 3 * 2**20
    _refused_upload(data, tmp_path,
                    "the run's tables unpack to 1,000 MiB together (at most 256 MiB)")


def test_a_250_mb_single_line_table_is_refused_after_a_mebibyte(good_members, tmp_path):
    header = good_members["run/latency.csv"].split(b"\n", 1)[0] + b"\n"
    for content in ((header + b"0," * 2**19, 250), (b"mode," * (2**20 // 5), 250)):  # row, header
        members = dict(good_members, **{"run/latency.csv": content})
        _refused_upload(_bomb_zip(members), tmp_path / str(len(content[0])),
                        "latency.csv has a line longer than 1,024 KiB, the limit for a line")


def test_a_table_of_too_many_short_rows_is_refused(good_members, tmp_path):
    header, rows = good_members["run/latency.csv"].split(b"\n", 2)[:2]
    row = rows + b"\n"
    members = dict(good_members, **{"run/latency.csv": (header + b"\n" + row * 2**16,
                                                        rrows := -(-3_000_000 // 2**16))})
    assert rrows * 2**16 > rundata.MAX_TABLE_ROWS
    _refused_upload(_bomb_zip(members), tmp_path, "latency.csv has more than 2,000,000 rows")


def test_tables_just_under_every_limit_still_upload(good_members, tmp_path, monkeypatch):
    rows = {name: len(data.splitlines()) - 1 for name, data in good_members.items()
            if name.endswith(".csv")}
    limit = max(rows.values())  # the largest table is exactly at the limit
    monkeypatch.setattr(rundata, "MAX_TABLE_ROWS", limit)
    monkeypatch.setattr(rundata, "MAX_CSV_LINE_BYTES", 4096)
    kernels = good_members["run/kernels.csv"]
    members = dict(good_members, **{"run/kernels.csv": kernels.replace(b"sgd_update_kernel",
                                                                       b"k" * 1800)})
    assert max(map(len, members["run/kernels.csv"].splitlines())) > 3600  # under 4096
    run, _ = uploads.UploadStore(base=tmp_path).session().add(_bomb_zip(members), "ok.zip")
    assert len(run.table("kernels")) == rows["run/kernels.csv"]
    header, row = good_members["run/latency.csv"].splitlines(keepends=True)[:2]
    members["run/latency.csv"] = header + row * limit
    rundata.validate_run_zip(_bomb_zip(members))
    members["run/latency.csv"] = header + row * (limit + 1)  # one row over
    with pytest.raises(ProfilerError, match=f"latency.csv has more than {limit:,} rows"):
        rundata.validate_run_zip(_bomb_zip(members))
    members["run/latency.csv"] = header + row.rstrip(b"\n") + b"," * 4096 + b"\n"
    with pytest.raises(ProfilerError, match="latency.csv has a line longer than 4 KiB"):
        rundata.validate_run_zip(_bomb_zip(members))


def test_a_bomb_uploaded_in_the_page_is_refused_in_one_line(good_members, tmp_path):
    header = good_members["run/latency.csv"].split(b"\n", 1)[0] + b"\n"
    bomb = _bomb_zip(dict(good_members, **{"run/latency.csv": (header + b"0," * 2**19, 250)}))
    at = _app(tmp_path / "runs")
    at.switch_page("views/runs.py").run()
    at.file_uploader(key="upload_zip").set_value(("bomb.zip", bomb, "application/zip")).run()
    assert not at.exception
    (error,) = [_shown(e.value) for e in at.error]
    assert error.startswith("bomb.zip was refused: latency.csv has a line longer than 1,024 KiB")
    assert "\n" not in error
    session = at.session_state[state.UPLOADS]
    assert session.paths() == [] and [p for p in session.dir.rglob("*") if p.is_file()] == []


# ----------------------------------------------------------------------------- wrong types and names (issue 18)


WRONG_VALUES = [{"a": 1}, [1, 2], "fast", True, 10**400]  # objects, lists, text, true, 401 digits


def _edit_summary(path: Path, edit) -> None:
    summary = json.loads((path / "summary.json").read_text())
    edit(summary)
    (path / "summary.json").write_text(json.dumps(summary))


def _wrong_headline(path: Path, every: object | None = None) -> None:
    """Every headline value of the wrong type: ``every`` one, or the WRONG_VALUES in turn (the
    keys the views read first get an object, a list, a 400-digit number and text)."""
    def edit(summary):
        head = summary["headline"]
        first = {"timing_method": {"a": 1}, "speedup": [1, 2], "eager_median_ms": 10**400,
                 "graph_median_ms": "fast", "counters_match": "yes"}
        for i, key in enumerate(head):
            head[key] = every if every is not None else first.get(
                key, WRONG_VALUES[i % len(WRONG_VALUES)])

    _edit_summary(path, edit)


def _duplicate_stats_rows(path: Path) -> None:
    """Each (mode, method) of stats.csv twice, the second time with other numbers."""
    stats = pd.read_csv(path / "stats.csv")
    again = stats.assign(median_ms=stats["median_ms"] * 9, count=stats["count"] + 1)
    pd.concat([stats, again]).to_csv(path / "stats.csv", index=False)


@pytest.mark.parametrize("every", [None, {"a": 1}, 10**400], ids=["mixed", "objects", "400-digits"])
def test_headline_values_of_the_wrong_type_are_not_measured_on_every_view(tmp_path, every):
    runs = tmp_path / "runs"
    wrong = write_synthetic_run(runs / "wrong", started_at="2026-11-30T10:00:00")
    _wrong_headline(wrong, every)
    # the figures are read from the headline alone, as in a run written before metrics.csv held
    # them (with metrics.csv there, its own figures are read: see the end of this test)
    (wrong / "metrics.csv").unlink()
    _duplicate_stats_rows(wrong)
    write_synthetic_run(runs / "plain", started_at="2026-11-29T10:00:00")  # Runs compares both
    at = _app(runs)
    at.session_state[state.OPEN_RUN] = str(wrong.resolve())
    for page in PAGES:
        at.switch_page(page).run()
        assert not at.exception, (page, [e.value for e in at.exception])
        if page == "views/overview.py":
            shown = {metric.label: metric.value for metric in at.metric}
            assert shown["Speedup"] == "n/a" and shown["Eager median per step"] == "n/a"
            captions = " ".join(c.value for c in at.caption)
            assert "counter lesson" not in captions  # "yes" says nothing about the counters
    opened = rundata.open_run(wrong, "folder")
    assert not {"timing_method", "speedup", "eager_median_ms"} & set(opened.headline)
    stats = opened.table("stats")
    assert not stats.duplicated(["mode", "method"]).any()
    first = pd.read_csv(wrong / "stats.csv").drop_duplicates(["mode", "method"])
    assert stats["median_ms"].tolist() == first["median_ms"].tolist()  # the first row of each
    intact = write_synthetic_run(tmp_path / "other" / "intact-figures")
    _wrong_headline(intact, every)  # metrics.csv kept: the figures are read there, once
    pair = rundata.open_run(intact, "folder").pair
    figures = pd.read_csv(intact / "metrics.csv").set_index(["mode", "metric"])["value"]
    assert pair.speedup == figures[("graph", "speedup")] and pair.timing_method == ""
    assert pair.eager_ms == figures[("eager", "median_ms")]


def test_a_folder_name_that_is_not_utf8_and_lone_surrogates_open_every_view(tmp_path):
    runs = tmp_path / "runs"
    odd = write_synthetic_run(runs / "odd", started_at="2026-11-30T10:00:00")

    def surrogates(summary):
        summary["environment"].update(gpu_name="GPU \udcff", torch_version="\ud800")
        summary["headline"]["odd_\udcff_ms"] = 1.0
        summary["notes"] = ["a note \udcff"]

    _edit_summary(odd, surrogates)
    write_synthetic_run(runs / os.fsdecode(b"run-\xff"), started_at="2026-11-29T10:00:00")
    at = _app(runs)
    assert not at.exception, [e.value for e in at.exception]
    labels = at.sidebar.selectbox[0].options
    assert any(label.startswith("run-\ufffd") and label.endswith("unreadable") for label in labels)
    at.session_state[state.OPEN_RUN] = str(odd.resolve())
    for page in PAGES:
        at.switch_page(page).run()
        assert not at.exception, (page, [e.value for e in at.exception])
    overview = at.switch_page("views/overview.py").run()
    assert "GPU \ufffd" in " ".join(c.value for c in overview.caption)
    at.session_state[state.OPEN_RUN] = str(runs / "run-\ufffd")  # the listed (unreadable) run
    at.switch_page("views/overview.py").run()
    assert not at.exception and at.error  # said in one line, never a crash
    table = rundata.list_runs(runs).set_index("name")
    assert table.loc["run-\ufffd", "problem"] == rundata.NOT_UTF8_PROBLEM
