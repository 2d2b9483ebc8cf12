"""The README's setup (`.ci/setup`, which the dashboard command and CI's `.ci/run` both call):
which torch build it installs on which machine, checked with SETUP_DRY_RUN=1 (nothing is
installed) and a stand-in `nvidia-smi` on the PATH."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SETUP = ROOT / ".ci" / "setup"
CPU_INDEX = "https://download.pytorch.org/whl/cpu"
TOOLS = ("bash", "grep", "sed", "head", "dirname", "cat", "timeout")


def _torch_line() -> str:
    lines = (ROOT / "requirements.txt").read_text().splitlines()
    return next(line.split("#")[0].strip() for line in lines if re.match(r"torch\b", line))


def _run(tmp_path: Path, nvidia_smi: str | None, **env: str) -> str:
    """The setup's dry run with only the basic tools on the PATH, plus ``nvidia-smi`` written
    as a script (None: not installed)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(parents=True)
    for tool in TOOLS:
        found = shutil.which(tool)
        assert found, tool
        (bin_dir / tool).symlink_to(found)
    if nvidia_smi is not None:
        fake = bin_dir / "nvidia-smi"
        fake.write_text(f"#!{shutil.which('bash')}\n{nvidia_smi}\n")
        fake.chmod(0o755)
    done = subprocess.run([shutil.which("bash"), str(SETUP), "--tests"], capture_output=True,
                          text=True, timeout=60, check=False,
                          env={"PATH": str(bin_dir), "SETUP_DRY_RUN": "1",
                               "SETUP_PROBE_S": "0", **env})  # no index asked unless a test says
    assert done.returncode == 0, done.stderr
    return done.stdout


def _torch_install(output: str) -> str:
    return next(line for line in output.splitlines() if " install " in line and "torch" in line
                and "-r requirements.txt" not in line)


def test_a_machine_without_nvidia_smi_gets_the_cpu_build_from_pytorchs_cpu_index(tmp_path):
    out = _run(tmp_path, None)
    install = _torch_install(out)
    assert f"install {_torch_line()} --index-url {CPU_INDEX}" in install
    assert "no working NVIDIA GPU" in out and "CPU build" in out
    assert "install -q -r requirements.txt -r .ci/test-requirements.txt" in out


def test_an_nvidia_smi_that_finds_no_gpu_still_means_the_cpu_build(tmp_path):
    out = _run(tmp_path, 'echo "NVIDIA-SMI has failed because it couldn\'t communicate with the '
                         'NVIDIA driver." >&2; exit 9')
    assert f"--index-url {CPU_INDEX}" in _torch_install(out)


def test_a_gpu_workstation_gets_the_cuda_build_from_the_default_index(tmp_path):
    out = _run(tmp_path, 'echo "GPU 0: NVIDIA H200 (UUID: GPU-0000)"')
    install = _torch_install(out)
    assert install.endswith(f"install {_torch_line()}")  # PyPI: its Linux wheel is the CUDA build
    assert "--index-url" not in install and "CUDA build" in out


@pytest.mark.parametrize("build, index", [("cpu", CPU_INDEX), ("cuda", None)])
def test_the_choice_can_be_overridden(tmp_path, build, index):
    gpu = 'echo "GPU 0: NVIDIA H200 (UUID: GPU-0000)"' if build == "cpu" else None
    install = _torch_install(_run(tmp_path, gpu, TORCH_BUILD=build))
    assert (f"--index-url {index}" in install) if index else ("--index-url" not in install)
    custom = _torch_install(_run(tmp_path / "x", None, TORCH_INDEX_URL="https://example.invalid/cu126"))
    assert "--index-url https://example.invalid/cu126" in custom


def test_the_readme_and_ci_use_the_same_setup():
    readme = (ROOT / "README.md").read_text()
    dashboard = re.search(r"## Run the dashboard.*?```bash\n(.*?)\n```", readme, re.S).group(1)
    tests = re.search(r"## Run the tests.*?```bash\n(.*?)\n```", readme, re.S).group(1)
    assert dashboard.strip() == "bash .ci/setup && .venv/bin/streamlit run dashboard/app.py"
    assert tests.strip() == "bash .ci/run"
    ci = (ROOT / ".ci" / "run").read_text()
    assert "bash .ci/setup --tests" in ci and "pip install" not in ci  # no second way to install
    assert CPU_INDEX in readme and os.access(SETUP, os.X_OK)


def test_an_index_that_does_not_answer_is_said_in_one_line_and_asked_once(tmp_path):
    """Issue 28: with download.pytorch.org unreachable, pip printed five "Retrying" lines per
    package before it fell back on a local wheel. The setup checks the index first (here a port
    of this machine nobody listens on, so nothing leaves it) and says in one line what it does
    and how to skip it; pip then asks it once."""
    import socket

    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]  # closed again: nobody listens there
    index = f"http://127.0.0.1:{port}/whl/cpu"
    out = _run(tmp_path, None, TORCH_INDEX_URL=index, SETUP_PROBE_S="2")
    said = [line for line in out.splitlines() if "does not answer" in line]
    assert said == [f"setup: {index} does not answer (offline or firewalled?), so pip asks it once "
                    "and takes torch from the other indexes and wheel folders of its configuration "
                    "(pip config list); TORCH_INDEX_URL=<a mirror or a file:// index> skips it"]
    assert _torch_install(out).endswith(f"--index-url {index} --retries 0 --timeout 2")
    with socket.socket() as listening:  # an index that answers: no retry option, one line
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        index = f"http://127.0.0.1:{listening.getsockname()[1]}/whl/cpu"
        out = _run(tmp_path / "up", None, TORCH_INDEX_URL=index, SETUP_PROBE_S="2")
    assert f"setup: {index} answers; torch comes from it" in out
    assert _torch_install(out).endswith(f"--index-url {index}")
    offline = _run(tmp_path / "file", None, TORCH_INDEX_URL="file:///opt/wheels/simple",
                   SETUP_PROBE_S="2")  # a local index is not checked
    assert "answer" not in offline and _torch_install(offline).endswith("file:///opt/wheels/simple")
