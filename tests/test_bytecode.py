"""The bytecode cache (spec.bytecode): turned on only where Python may not write bytecode and torch
has none installed, kept in the tool's own cache folder, passed to the processes a run starts."""

from __future__ import annotations

import importlib.util
import os
import py_compile
import shutil
import stat
import subprocess
import sys
import tempfile
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


# ----------------------------------------------------------------------------- who may write there

ATTACKER = 65534  # nobody: the other user of the two-user tests
_TWO_USERS = os.geteuid() == 0 and shutil.which("setpriv") is not None


def _as_attacker(script: str, data: bytes = b"") -> None:
    """Run a shell ``script`` as the other user (uid and gid 65534, no groups, umask 000), with
    ``data`` on its standard input."""
    subprocess.run(["setpriv", "--reuid", str(ATTACKER), "--regid", str(ATTACKER), "--clear-groups",
                    "/bin/sh", "-c", f"umask 000; {script}"], input=data, check=True, timeout=30)


@pytest.fixture
def shared_folder():
    """A folder every user may write to (mode 1777, as /tmp), standing for a shared
    XDG_CACHE_HOME; removed afterwards with whatever another user put in it."""
    folder = Path(tempfile.mkdtemp(prefix="profiler_core_shared_"))
    folder.chmod(0o1777)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def _planted_pyc(tmp_path: Path, package: Path) -> tuple[bytes, Path]:
    """A package whose true source sets VALUE = 42, and the bytes of an unchecked-hash pyc (one
    Python loads without looking at the source) of other code that writes a marker file;
    returns the pyc's bytes and the marker's path."""
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("VALUE = 41 + 1\n")
    marker = tmp_path / "planted-code-ran"
    evil = tmp_path / "evil.py"
    evil.write_text(f"open({str(marker)!r}, 'w').write('planted')\nVALUE = 0\n")
    compiled = tmp_path / "evil.pyc"
    py_compile.compile(str(evil), cfile=str(compiled), doraise=True,
                       invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)
    return compiled.read_bytes(), marker


def _import_with_the_cache(tmp_path: Path, site: Path, xdg: Path) -> list[str]:
    """A fresh ``python -B`` (the setup the cache is for) that turns the cache on as the command
    line does and imports the package; returns its folder, reason and the package's VALUE."""
    script = textwrap.dedent("""
        from profiler_core.spec import bytecode
        bytecode.HEAVIEST_PACKAGE = "heavy_package"
        state = bytecode.keep_bytecode()
        import heavy_package
        print(state.folder, state.reason, heavy_package.VALUE, sep="|")
    """)
    environment = {**_python_environment(tmp_path, site), "XDG_CACHE_HOME": str(xdg)}
    return subprocess.run([sys.executable, "-B", "-c", script], capture_output=True, text=True,
                          env=environment, check=True, timeout=60).stdout.strip().split("|")


@pytest.mark.skipif(not _TWO_USERS, reason="needs root and setpriv to plant files as another user")
def test_bytecode_another_user_planted_in_a_shared_cache_folder_is_never_run(tmp_path, shared_folder):
    """Another user made the tool's cache folder in a shared XDG_CACHE_HOME, world-writable, and
    put in an unchecked-hash pyc of the victim's package: the victim's run refuses the cache
    (not its own), says why, and imports the true source."""
    package = tmp_path / "site" / "heavy_package"
    pyc, marker = _planted_pyc(tmp_path, package)
    planted = (shared_folder / bytecode.CACHE_FOLDER_NAME / bytecode.BYTECODE_FOLDER_NAME
               / (package / "__init__.py").parent.relative_to("/")
               / f"__init__.{sys.implementation.cache_tag}.pyc")
    _as_attacker(f"mkdir -p '{planted.parent}' && cat > '{planted}'", pyc)
    assert planted.stat().st_uid == ATTACKER
    folder, reason, value = _import_with_the_cache(tmp_path, tmp_path / "site", shared_folder)
    assert not marker.exists(), "the other user's code ran"
    assert value == "42" and folder == "None"
    assert "belongs to another user" in reason and str(shared_folder) in reason
    assert planted.read_bytes() == pyc  # another user's file is left as it is


@pytest.mark.parametrize("mode, used", [(0o777, False), (0o770, False), (0o1777, True)])
def test_a_cache_in_a_folder_where_others_could_replace_it_is_not_used(no_bytecode_python,
                                                                       tmp_path, mode, used):
    """XDG_CACHE_HOME writable by other users without the sticky bit: they could move the
    tool's private folder away and put their own in its place (with the sticky bit, as /tmp,
    they cannot)."""
    environ = no_bytecode_python
    (tmp_path / "xdg").mkdir()
    (tmp_path / "xdg").chmod(mode)
    state = bytecode.keep_bytecode(environ)
    assert (state.folder is not None) is used, state.reason
    if not used:
        assert "other users may write to" in state.reason and str(tmp_path / "xdg") in state.reason


def test_an_unchecked_hash_pyc_in_the_users_own_cache_is_never_loaded(tmp_path):
    """A private cache of the user's own holding an unchecked-hash pyc (written there while the
    folder was still open to others, say): the package's true source is imported."""
    package = tmp_path / "site" / "heavy_package"
    pyc, marker = _planted_pyc(tmp_path, package)
    cache = tmp_path / "xdg" / bytecode.CACHE_FOLDER_NAME
    planted = (cache / bytecode.BYTECODE_FOLDER_NAME / (package / "__init__.py").parent.relative_to("/")
               / f"__init__.{sys.implementation.cache_tag}.pyc")
    planted.parent.mkdir(parents=True, mode=0o700)
    for folder in (cache, *[p for p in planted.parents if cache in p.parents]):
        folder.chmod(0o700)
    planted.write_bytes(pyc)
    folder, _, value = _import_with_the_cache(tmp_path, tmp_path / "site", tmp_path / "xdg")
    assert folder == str(cache / bytecode.BYTECODE_FOLDER_NAME)
    assert value == "42" and not marker.exists()


def test_the_cache_folders_are_made_private(no_bytecode_python, tmp_path):
    state = bytecode.keep_bytecode(no_bytecode_python)
    assert state.folder is not None
    for folder in (state.folder, state.folder.parent):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700, folder


@pytest.mark.parametrize("linked", [bytecode.CACHE_FOLDER_NAME,
                                    f"{bytecode.CACHE_FOLDER_NAME}/{bytecode.BYTECODE_FOLDER_NAME}"])
def test_a_cache_folder_that_is_a_link_is_not_followed(no_bytecode_python, tmp_path, linked):
    environ = no_bytecode_python
    target = tmp_path / "elsewhere"
    target.mkdir(mode=0o700)
    link = tmp_path / "xdg" / linked
    link.parent.mkdir(parents=True, mode=0o700, exist_ok=True)
    link.parent.chmod(0o700)
    link.symlink_to(target)
    state = bytecode.keep_bytecode(environ)
    assert state.folder is None and state.refused and "is a link" in state.reason
    assert sys.dont_write_bytecode is True and "PYTHONPYCACHEPREFIX" not in environ
    assert environ[bytecode.OPT_OUT_VARIABLE] == "0"  # the processes it starts do not try again
    assert os.listdir(target) == []


@pytest.mark.parametrize("mode", [0o770, 0o777, 0o755 | stat.S_IWOTH])
def test_a_cache_folder_others_may_write_to_is_not_used(no_bytecode_python, tmp_path, mode):
    folder = tmp_path / "xdg" / bytecode.CACHE_FOLDER_NAME / bytecode.BYTECODE_FOLDER_NAME
    folder.mkdir(parents=True)
    folder.chmod(mode)
    folder.parent.chmod(0o700)
    state = bytecode.keep_bytecode(no_bytecode_python)
    assert state.folder is None and "writable by other users" in state.reason
    assert "remove" in state.reason  # what to do: it may hold their files
    assert stat.S_IMODE(folder.stat().st_mode) == mode  # left as it was


def test_a_refused_cache_is_said_once_on_the_command_line(tmp_path):
    """``python -B -m profiler_core`` whose cache folder is a link: one note, then the command."""
    (tmp_path / "site" / "torch").mkdir(parents=True)
    (tmp_path / "site" / "torch" / "__init__.py").write_text("raise ImportError('imported')\n")
    (tmp_path / "xdg").mkdir()
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "xdg" / bytecode.CACHE_FOLDER_NAME).symlink_to(tmp_path / "elsewhere")
    command = subprocess.run([sys.executable, "-B", "-m", "profiler_core", "--help"],
                             capture_output=True, text=True, timeout=60,
                             env=_python_environment(tmp_path, tmp_path / "site"))
    assert command.returncode == 0 and "usage" in command.stdout.lower(), command.stderr
    notes = command.stderr.strip().splitlines()
    assert len(notes) == 1 and notes[0].startswith("note: the bytecode cache") and "link" in notes[0]
    assert os.listdir(tmp_path / "elsewhere") == []
