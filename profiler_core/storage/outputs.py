"""What the tool may write and replace on disk: output paths, manifests and folder ownership.

Every command that writes a folder (``run``, ``sweep``, ``trace-stats``) follows these rules: an
``--out`` path is resolved before anything is created (:func:`output_path`); the tool lists what
it wrote in ``manifest.json`` with their sizes and content hashes (:func:`write_manifest`); a
folder is replaced only when every entry is recognisably the tool's own, unchanged
(:func:`owned_folder`, :func:`replace_folder`), links never followed; single files are replaced
through a rename (:func:`replace_file`). Standard library only.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
import tempfile
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from profiler_core.spec.errors import ConfigError

TOOL_NAME = "profiler_core"  # what a summary.json, sweep.json or manifest.json of ours says
MANIFEST_FILE = "manifest.json"
MANIFEST_VERSION = 1
_MAX_MANIFEST_BYTES = 4 * 2**20
_SHOWN_NAME_CHARS = 60
_SHA256 = re.compile(r"[0-9a-f]{64}")
_HASH_CHUNK_BYTES = 2**20
# Bytes of a folder's name kept free for the staging names beside it (``.<name>.r<owner tag>.
# XXXXXXXX`` is the longest: 41 more).
STAGING_NAME_BYTES = 48


def is_version(value: Any, allowed: Collection[int]) -> bool:
    """Whether ``value`` is one of the whole numbers ``allowed`` (``True`` is not 1 here)."""
    return isinstance(value, int) and not isinstance(value, bool) and value in allowed


def read_folder_json(path: Path, file_name: str, max_bytes: int) -> Any:
    """The JSON in ``path/file_name`` when ``path`` is a real folder and the file a real file of at
    most ``max_bytes``; None otherwise (links, other kinds of file, unreadable or not JSON)."""
    target = path / file_name
    try:
        if path.is_symlink() or not path.is_dir() or target.is_symlink() or not target.is_file():
            return None
        if target.stat().st_size > max_bytes:
            return None
        return json.loads(target.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return None


def output_path(directory: str | os.PathLike) -> Path:
    """The folder ``directory`` names: ``~`` expanded and the path normalised lexically (``a/../b``
    is ``b``, a trailing ``/`` dropped). An empty text stays empty (``Path('')`` is ``.``)."""
    text = os.fspath(directory)
    if not text.strip():
        return Path(text)
    return Path(os.path.normpath(os.path.expanduser(text)))


def folder_target(directory: str | os.PathLike, what: str, example: str,
                  refuse: Callable[[str, str], Exception]) -> Path:
    """The folder ``directory`` names for ``what`` (:func:`output_path`), or ``refuse(message,
    hint)`` raised when it cannot name a new folder: empty, ``.`` or ``..``, a character no file
    name can hold, or a name with no room left for a staging name beside it (``example``: a
    folder name to suggest)."""
    text = os.fspath(directory)
    shown = repr(text)
    try:
        os.fsencode(text)
    except UnicodeEncodeError:  # a lone surrogate (a serve request can carry one)
        raise refuse(f"out {shown} holds a character no file name can hold",
                     "choose a folder name of ordinary text") from None
    last = os.path.basename(text.rstrip(os.sep))
    target = output_path(text)
    if not text.strip() or last in ("", ".", "..") or Path(text).name in ("", ".", "..") or \
            target.name in ("", ".", ".."):
        raise refuse(f"out must name a new folder for {what}; got {shown}",
                     f"give a folder name such as {example}")
    try:
        limit = os.pathconf(target.parent if target.parent.is_dir() else ".", "PC_NAME_MAX")
    except (OSError, ValueError):
        limit = 255
    if len(target.name.encode("utf-8", "surrogateescape")) > limit - STAGING_NAME_BYTES:
        raise refuse(f"the folder name {shown} is too long (over {limit - STAGING_NAME_BYTES} "
                     "bytes)", "choose a shorter name")
    return target


def shown_name(name: str) -> str:
    """A file name for a message: quoted, escaped, at most about 60 characters."""
    return repr(name if len(name) <= _SHOWN_NAME_CHARS else name[:_SHOWN_NAME_CHARS - 3] + "...")


def make_parents(target: Path) -> list[Path]:
    """Create the missing folders above ``target``; returns those created, outermost first."""
    missing = []
    for parent in Path(target).parents:
        if os.path.lexists(parent):
            break
        missing.append(parent)
    missing.reverse()
    try:
        Path(target).parent.mkdir(parents=True, exist_ok=True)
    except BaseException:
        remove_made(missing)  # those it made before it failed
        raise
    return missing


def remove_made(folders: list[Path]) -> None:
    """Remove folders :func:`make_parents` created, innermost first, where they are still empty
    (one that is missing is skipped: it was never made)."""
    for folder in reversed(folders):
        try:
            os.rmdir(folder)
        except FileNotFoundError:
            continue
        except OSError:
            return


def check_writable(target: Path, described: str, refuse: Callable[[str], Exception]) -> None:
    """Raise ``refuse(reason)`` when a folder could not be created at ``target``: the missing
    parents are created, a probe folder beside ``target`` is made and removed, then the parents
    made for the probe are removed again (nothing is left behind either way)."""
    made: list[Path] = []
    try:
        made = make_parents(target)
        probe = tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent)
        os.rmdir(probe)
    except OSError as error:
        raise refuse(f"cannot write {described}: {error.strerror or type(error).__name__}") from None
    finally:
        remove_made(made)


# ----------------------------------------------------------------------------- manifests


def file_sha256(path: Path) -> str:
    """The SHA-256 of the file at ``path`` (read a mebibyte at a time), in hex."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(_HASH_CHUNK_BYTES):
            digest.update(chunk)
    return digest.hexdigest()


def write_manifest(folder: Path, kind: str, files: Iterable[str],
                   folders: Iterable[str] = ()) -> None:
    """Write ``folder/manifest.json`` (through a temporary file and a rename): ``kind``, each of
    ``files`` that is there with its size (``files``) and its content's SHA-256 (``sha256``), and
    the subfolders the tool may write (``folders``)."""
    sizes, hashes = {}, {}
    for name in dict.fromkeys(files):
        try:
            info = os.lstat(folder / name)
        except FileNotFoundError:
            continue
        if stat.S_ISREG(info.st_mode):
            sizes[name] = info.st_size
            hashes[name] = file_sha256(folder / name)
    content = {"tool": TOOL_NAME, "kind": kind, "manifest_version": MANIFEST_VERSION,
               "files": sizes, "sha256": hashes, "folders": sorted(dict.fromkeys(folders))}
    replace_file(folder / MANIFEST_FILE, json.dumps(content, indent=1).encode("utf-8"))


@dataclass(frozen=True)
class _Manifest:
    """A manifest as read: each listed file's size and SHA-256 (None in a manifest written
    before hashes were recorded: its sizes alone are compared), and the listed subfolders."""

    sizes: dict[str, int]
    hashes: dict[str, str | None]
    folders: set[str]


def _read_manifest(folder: Path, kind: str) -> _Manifest | None:
    """The manifest of ``kind`` in ``folder``; None when it is not one this tool wrote."""
    content = read_folder_json(folder, MANIFEST_FILE, _MAX_MANIFEST_BYTES)
    if not isinstance(content, dict) or content.get("tool") != TOOL_NAME or \
            content.get("kind") != kind or not is_version(content.get("manifest_version"),
                                                          (MANIFEST_VERSION,)):
        return None
    files, folders = content.get("files"), content.get("folders", [])
    hashes = content.get("sha256", dict.fromkeys(files) if isinstance(files, dict) else None)
    if not isinstance(files, dict) or not isinstance(folders, list) or \
            not isinstance(hashes, dict) or set(hashes) != set(files):
        return None
    if not all(isinstance(name, str) and is_version(size, range(0, 2**63))
               for name, size in files.items()) or not all(isinstance(n, str) for n in folders):
        return None
    if not all(digest is None or (isinstance(digest, str) and _SHA256.fullmatch(digest))
               for digest in hashes.values()) or (
            "sha256" in content and None in hashes.values()):
        return None
    return _Manifest(dict(files), dict(hashes), set(folders))


# ----------------------------------------------------------------------------- ownership


class NotOwned(Exception):
    """A folder holds something the tool did not write: ``entry`` (relative to the folder
    checked) and ``what`` about it."""

    def __init__(self, entry: str, what: str) -> None:
        super().__init__(f"{shown_name(entry)} {what}" if entry else what)
        self.entry, self.what = entry, what

    def inside(self, folder_name: str) -> NotOwned:
        """The same reason, one folder further out."""
        return NotOwned(f"{folder_name}/{self.entry}" if self.entry else folder_name, self.what)


@dataclass(frozen=True)
class Owned:
    """The entries of a folder the tool wrote: its files (names) and owned subfolders."""

    path: Path
    files: tuple[str, ...]
    folders: tuple[Owned, ...] = ()


def owned_folder(folder: Path, kind: str, file_ok: Callable[[str], bool],
                 subfolder: Callable[[Path], Owned] | None = None,
                 folder_ok: Callable[[str], bool] = lambda name: False,
                 unlisted_ok: Callable[[str], bool] | None = None) -> Owned:
    """The entries of ``folder`` when every one of them was written by the tool; ``NotOwned``
    naming the first that was not.

    Every entry must be a regular file (never a link) whose name ``file_ok`` accepts, or the
    manifest; or a real folder whose name ``folder_ok`` accepts and that ``subfolder`` accepts in
    turn. With a manifest of ``kind``, a file must also be listed there with its size and content
    (SHA-256) unchanged, and a folder listed among its folders. Without one (a folder written
    before manifests existed) the names alone decide, by ``unlisted_ok`` where given (the names
    the tool wrote then). A manifest of another kind, or not of this tool, refuses."""
    if folder.is_symlink() or not folder.is_dir():
        raise NotOwned("", "is not a folder")
    manifest: _Manifest | None = None
    if os.path.lexists(folder / MANIFEST_FILE):
        manifest = _read_manifest(folder, kind)
        if manifest is None:
            raise NotOwned(MANIFEST_FILE, f"is not a manifest of a {kind} written by this tool")
    elif unlisted_ok is not None:
        file_ok = unlisted_ok
    with os.scandir(folder) as scan:
        entries = sorted(scan, key=lambda entry: entry.name)
    files, subfolders = [], []
    for entry in entries:
        name = entry.name
        if entry.is_symlink():
            raise NotOwned(name, "is a link, which this tool never writes")
        if entry.is_dir(follow_symlinks=False):
            if subfolder is None or not folder_ok(name) or (
                    manifest is not None and name not in manifest.folders):
                raise NotOwned(name, "is a folder this tool did not write")
            try:
                subfolders.append(subfolder(Path(entry.path)))
            except NotOwned as inner:
                raise inner.inside(name) from None
            continue
        if not entry.is_file(follow_symlinks=False):
            raise NotOwned(name, "is not a regular file")
        if name == MANIFEST_FILE:
            files.append(name)
            continue
        if not file_ok(name) or (manifest is not None and name not in manifest.sizes):
            raise NotOwned(name, "is not a file this tool wrote")
        if manifest is not None and _changed(Path(entry.path), manifest.sizes[name],
                                             manifest.hashes[name]):
            raise NotOwned(name, "was changed after this tool wrote it")
        files.append(name)
    return Owned(folder, tuple(files), tuple(subfolders))


def _changed(path: Path, size: int, digest: str | None) -> bool:
    """Whether the file at ``path`` is not the one a manifest lists: another size, or (where the
    manifest has it) another content hash."""
    if os.lstat(path).st_size != size:
        return True
    return digest is not None and file_sha256(path) != digest


def remove_owned(owned: Owned) -> bool:
    """Remove exactly the files ``owned`` lists (regular files only, links never followed), then
    the folders emptied; returns whether ``owned.path`` is gone (anything else keeps it)."""
    for inner in owned.folders:
        remove_owned(inner)
    for name in owned.files:
        path = owned.path / name
        try:
            if stat.S_ISREG(os.lstat(path).st_mode):
                os.unlink(path)
        except OSError:
            pass
    try:
        os.rmdir(owned.path)
    except OSError:
        return False
    return True


def replace_folder(target: Path, check: Callable[[Path], Owned], new: Path | None = None) -> None:
    """Replace the folder at ``target`` by ``new`` (a folder beside it; None: by nothing).

    ``target`` is moved aside in one rename and ``check`` runs on it there: when it refuses
    (``NotOwned``, or any error) the folder is moved back untouched and the error raised. Then
    ``new`` takes its place and exactly the files ``check`` listed are removed, then the emptied
    folders. Whatever appeared there in between stays, in the hidden folder it was moved to."""
    retired = Path(tempfile.mkdtemp(prefix=f".{target.name}.old.", dir=target.parent))
    aside = retired / target.name
    try:
        os.replace(target, aside)
    except BaseException:
        os.rmdir(retired)
        raise
    try:
        owned = check(aside)
        if new is not None:
            os.replace(new, target)
    except BaseException:
        _put_back(aside, target)
        raise
    if remove_owned(owned):
        try:
            os.rmdir(retired)
        except OSError:
            pass


def _put_back(aside: Path, target: Path) -> None:
    try:
        os.replace(aside, target)
        os.rmdir(aside.parent)
    except OSError as error:
        raise ConfigError("out", f"{str(target)!r} changed while it was being replaced; what was "
                                 f"there is kept in {str(aside)!r} ({error.strerror})",
                          "move it back by hand") from None


def replace_file(path: Path, data: bytes) -> None:
    """Write ``data`` at ``path`` through a temporary file beside it and a rename: the old entry
    is replaced, never written through (a hard link elsewhere keeps the old content)."""
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(handle, "wb") as stream:
            stream.write(data)
        os.replace(temporary, path)
    except BaseException:
        try:
            os.unlink(temporary)
        except OSError:
            pass
        raise


@dataclass(frozen=True)
class FolderKind:
    """A kind of output folder the tool writes whole (a run, a benchmark), in the words of its
    refusals: ``noun`` ("run"), ``what`` the folder holds ("the run"), an ``example`` path,
    what a refusal leaves undone (``consequence``) and what its files are (``files``)."""

    noun: str
    what: str
    example: str
    consequence: str
    files: str


def _refused_out(message: str, hint: str) -> ConfigError:
    return ConfigError("out", message, hint)


def not_replaced(kind: FolderKind, shown: str, why: NotOwned | OSError) -> ConfigError:
    """The refusal of a folder of ``kind`` that ``--overwrite`` may not replace (``why``)."""
    if isinstance(why, OSError):
        return _refused_out(f"{shown} cannot be read ({why.strerror or type(why).__name__}), so "
                            f"{kind.consequence}", "choose a new folder name")
    if not why.entry:
        return _refused_out(f"{shown} already exists and is not a {kind.noun} folder of this tool, "
                            f"so {kind.consequence}", "choose a new folder name")
    return _refused_out(f"{shown} holds a {kind.noun} of this tool and more: {why}, so "
                        f"{kind.consequence}", "move what you keep out of it, or choose a new "
                        "folder name; --overwrite replaces only a folder holding nothing but "
                        f"{kind.files} this tool wrote")


def check_output_folder(directory: str | os.PathLike, overwrite: bool, kind: FolderKind,
                        files_of: Callable[[Path], Owned]) -> Path:
    """The folder of ``kind`` to write, checked before anything runs: a new folder whose parent
    can be written, or (``overwrite``) one of this tool's folders of that kind holding nothing
    else (``files_of`` raises ``NotOwned`` otherwise). Anything else is refused with
    ``ConfigError`` on ``out`` and left untouched; nothing is created (the parents made to probe
    the location are removed)."""
    shown = repr(os.fspath(directory))
    target = folder_target(directory, kind.what, kind.example, _refused_out)
    if os.path.lexists(target):
        try:
            files_of(target)
        except (NotOwned, OSError) as why:
            raise not_replaced(kind, shown, why) from None
        if not overwrite:
            raise _refused_out(f"{shown} already holds a {kind.noun}",
                               f"choose a new folder, or pass --overwrite to replace that "
                               f"{kind.noun}")
    check_writable(target, f"the {kind.noun} folder {shown}", lambda reason: _refused_out(
        reason, "choose a folder on a writable disk"))
    return target
