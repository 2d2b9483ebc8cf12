"""The bytecode cache (spec.bytecode): turned on only where Python may not write bytecode and torch
has none installed, kept in the tool's own cache folder, passed to the processes a run starts."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from profiler_core.spec import bytecode

ROOT = Path(__file__).resolve().parents[1]


def _python_environment(tmp_path: Path, site: Path) -> dict[str, str]:
    """This environment for a child Python: the tool's cache folder under ``tmp_path``, ``site``
    and the project importable, and no bytecode setting of the parent's."""
    environment = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "xdg"),
                   "PYTHONPATH": os.pathsep.join([str(site), str(ROOT)])}
    environment.pop("PYTHONPYCACHEPREFIX", None)
    environment.pop(bytecode.OPT_OUT_VARIABLE, None)
    return environment


@pytest.fixture
def no_bytecode_python(monkeypatch, tmp_path):
    """This process as under PYTHONDONTWRITEBYTECODE, with no prefix, its cache folder in tmp_path
    and torch's bytecode missing; returns the environment mapping the function is given."""
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    monkeypatch.setattr(sys, "pycache_prefix", None)
    monkeypatch.setattr(bytecode, "_has_bytecode", lambda package: False)
    return {"XDG_CACHE_HOME": str(tmp_path / "xdg"), "PYTHONDONTWRITEBYTECODE": "1"}


def test_turned_on_where_nothing_is_compiled_and_passed_to_child_processes(no_bytecode_python, tmp_path):
    environ = no_bytecode_python
    state = bytecode.keep_bytecode(environ)
    folder = tmp_path / "xdg" / bytecode.CACHE_FOLDER_NAME / bytecode.BYTECODE_FOLDER_NAME
    assert state.folder == folder and folder.is_dir()
    assert sys.pycache_prefix == str(folder) and sys.dont_write_bytecode is False
    assert environ == {"XDG_CACHE_HOME": str(tmp_path / "xdg"), "PYTHONPYCACHEPREFIX": str(folder)}
    assert "PROFILER_CORE_BYTECODE_CACHE=0" in state.reason
    assert bytecode.bytecode_source() == f"kept in {folder}"


@pytest.mark.parametrize("setup, reason", [
    (lambda mp, env: mp.setattr(sys, "dont_write_bytecode", False), "writes bytecode beside"),
    (lambda mp, env: mp.setattr(sys, "pycache_prefix", "/elsewhere"), "/elsewhere"),
    (lambda mp, env: env.update(PROFILER_CORE_BYTECODE_CACHE="0"), "compiled from source"),
    (lambda mp, env: mp.setattr(bytecode, "_has_bytecode", lambda package: True), "is installed"),
    (lambda mp, env: mp.setattr(bytecode, "_has_bytecode", lambda package: None), "is installed"),
])
def test_left_as_it_was_otherwise(no_bytecode_python, monkeypatch, setup, reason):
    environ = no_bytecode_python
    setup(monkeypatch, environ)
    before = (dict(environ), sys.pycache_prefix, sys.dont_write_bytecode)
    state = bytecode.keep_bytecode(environ)
    assert state.folder is None and reason in state.reason
    assert (dict(environ), sys.pycache_prefix, sys.dont_write_bytecode) == before


def test_a_cache_folder_that_cannot_be_made_changes_nothing(no_bytecode_python, tmp_path):
    environ = no_bytecode_python
    (tmp_path / "file").write_text("not a folder")
    environ["XDG_CACHE_HOME"] = str(tmp_path / "file")
    state = bytecode.keep_bytecode(environ)
    assert state.folder is None and "could not be made" in state.reason
    assert sys.dont_write_bytecode is True and "PYTHONPYCACHEPREFIX" not in environ
    assert (tmp_path / "file").read_text() == "not a folder"


def test_has_bytecode_reads_an_installed_package_without_importing_it(tmp_path, monkeypatch):
    package = tmp_path / "some_heavy_package"
    package.mkdir()
    (package / "__init__.py").write_text("raise RuntimeError('imported')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert bytecode._has_bytecode("some_heavy_package") is False
    compiled = Path(importlib.util.cache_from_source(str(package / "__init__.py")))
    compiled.parent.mkdir()
    compiled.write_bytes(b"")
    assert bytecode._has_bytecode("some_heavy_package") is True
    assert bytecode._has_bytecode("no_such_package_here") is None
    assert "some_heavy_package" not in sys.modules


def test_a_real_python_under_dont_write_bytecode_keeps_what_it_compiles_in_the_cache(tmp_path):
    """A fresh ``python -B`` (no bytecode written) whose heavy package has no bytecode: after
    keep_bytecode, importing it writes its compiled module under the tool's cache only, and a
    child process it starts reads the same cache."""
    package = tmp_path / "site" / "heavy_package"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("VALUE = 41 + 1\n")
    script = textwrap.dedent("""
        import subprocess, sys
        from profiler_core.spec import bytecode
        bytecode.HEAVIEST_PACKAGE = "heavy_package"
        state = bytecode.keep_bytecode()
        import heavy_package
        child = subprocess.run([sys.executable, "-c", "import sys; print(sys.pycache_prefix)"],
                               capture_output=True, text=True, check=True).stdout.strip()
        print(state.folder, heavy_package.VALUE, child, sep="|")
    """)
    output = subprocess.run([sys.executable, "-B", "-c", script], capture_output=True, text=True,
                            env=_python_environment(tmp_path, tmp_path / "site"), check=True,
                            timeout=60).stdout.strip()
    folder, value, child = output.split("|")
    assert Path(folder) == tmp_path / "xdg" / "cuda-graph-profiler" / "bytecode"
    assert value == "42" and child == folder
    assert list(Path(folder).rglob("__init__*.pyc")), "the package's compiled module is in the cache"
    assert not (package / "__pycache__").exists(), "nothing is written beside the package"


def test_the_command_line_says_once_that_its_first_command_compiles(tmp_path):
    """``python -B -m profiler_core`` where torch has no bytecode (a stand-in torch that fails if
    imported: ``--help`` must not need it): the first command notes the one-time compiling on
    stderr and fills the cache; the next one says nothing."""
    (tmp_path / "site" / "torch").mkdir(parents=True)
    (tmp_path / "site" / "torch" / "__init__.py").write_text("raise ImportError('imported')\n")
    environment = _python_environment(tmp_path, tmp_path / "site")
    folder = tmp_path / "xdg" / "cuda-graph-profiler" / "bytecode"
    errors = []
    for _ in range(2):
        command = subprocess.run([sys.executable, "-B", "-m", "profiler_core", "--help"],
                                 capture_output=True, text=True, env=environment, timeout=60)
        assert command.returncode == 0 and "usage" in command.stdout.lower(), command.stderr
        errors.append(command.stderr)
    assert errors[0].startswith("note: Python here writes no bytecode") and str(folder) in errors[0]
    assert errors[1] == ""
    assert list(folder.rglob("*.pyc")), "the first command's compiled modules are in the cache"
