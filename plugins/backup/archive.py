"""One-file backups of a Hermes home, and their checked restore.

The archive is a gzip'd tar whose first member is ``manifest.json``::

    {"format": "hermes-backup", "format_version": 1, "hermes_version": "0.1.0",
     "created": "2026-11-23T23:01:02+00:00", "source_home": "/home/ada/.hermes",
     "with_secrets": false,
     "files": {"memories/MEMORY.md": {"sha256": "…", "bytes": 812}, …},
     "databases": {"state.db": {"user_version": 4}, …}}

What goes in: ``memories/`` (the curated files, their history and its shadows, taken
under the memory files' locks so file and history agree), every SQLite database of the
home — the session store (``state.db`` or ``plugins.sqlite-sessions.path``), the lossless
context engine's ``lcm.db`` when present, any other ``*.db`` at the top of the home —
copied with SQLite's online backup API in one step (a read transaction: a consistent
snapshot even while chats write, which never blocks them in WAL mode), ``skills/``,
``SOUL.md``, ``config.yaml``, and ``.env`` only when asked (it holds API keys).

A restore reads the whole archive into a staging directory beside the target home,
checking every member against the manifest (name, size, SHA-256; nothing outside the
manifest, no links, no ``..``), then ``PRAGMA quick_check`` and the schema version of each
database, and only then moves the pieces into the home (a stale ``-wal``/``-shm`` of a
replaced database is removed first, or SQLite would replay it over the restored file).
Anything wrong leaves the home untouched.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import sqlite3
import stat
import tarfile
import tempfile
import zlib
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath
from typing import Any

import hermes

FORMAT = "hermes-backup"
FORMAT_VERSION = 1
MANIFEST = "manifest.json"

#: Entries a fresh home may already hold and a restore may overwrite without --force.
EMPTY_HOME_NAMES = frozenset({"logs"})

_CHUNK = 1 << 20


class BackupError(hermes.HermesError):
    """A backup or restore that cannot go on; ``str(exc)`` is one line saying what to do."""


# -- what to back up ------------------------------------------------------------------------


def _databases(kernel: Any) -> dict[str, Path]:
    """archive name → database file: the session store, the lossless engine's store,
    and every other ``*.db`` at the top of the home."""
    home = Path(kernel.home)
    found: dict[str, Path] = {}
    candidates: list[Path] = []
    with contextlib.suppress(Exception):
        path = kernel.plugin_settings("sqlite-sessions").get("path")
        if path:
            candidates.append(Path(path).expanduser())
    with contextlib.suppress(Exception):
        path = kernel.config.get("plugins.lcm.db_path")
        if path:
            candidates.append(Path(path).expanduser())
    candidates += sorted(home.glob("*.db"))
    for candidate in candidates:
        file = candidate if candidate.is_absolute() else home / candidate
        if file.is_file() and file.name not in found:
            found[file.name] = file
    return found


def _plain_files(root: Path, base: str) -> Iterator[tuple[str, Path]]:
    """(archive name, path) of the regular files under ``root``; lock files and the
    temporary files of interrupted atomic writes are skipped, symlinks are not followed."""
    if not root.is_dir():
        return
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted(filenames):
            path = Path(dirpath) / name
            if name.endswith(".lock") or (name.startswith(".") and name.endswith(".tmp")):
                continue
            if not stat.S_ISREG(os.lstat(path).st_mode):
                continue
            yield f"{base}/{path.relative_to(root).as_posix()}", path


def _sha256(path: Path) -> tuple[str, int]:
    digest, size = hashlib.sha256(), 0
    with open(path, "rb") as fh:
        while chunk := fh.read(_CHUNK):
            digest.update(chunk)
            size += len(chunk)
    return digest.hexdigest(), size


def snapshot_database(source: Path, dest: Path, *, timeout: float = 30.0) -> int:
    """Copy the SQLite database ``source`` to ``dest`` with the online backup API in one
    step (one read transaction: a consistent snapshot while other connections write).
    Returns its ``user_version``."""
    src = sqlite3.connect(f"file:{source}?mode=ro", uri=True, timeout=timeout)
    try:
        dst = sqlite3.connect(dest)
        try:
            src.backup(dst, pages=-1)
            version = int(dst.execute("PRAGMA user_version").fetchone()[0])
            # A self-contained file: no WAL beside it in the archive.
            dst.execute("PRAGMA journal_mode=DELETE")
        finally:
            dst.close()
    finally:
        src.close()
    return version


@contextlib.contextmanager
def _memory_locked(home: Path) -> Iterator[None]:
    """Hold both memory files' locks: no write lands between a file and its history."""
    memories = home / "memories"
    if not memories.is_dir():
        yield
        return
    with hermes.file_lock(memories / "MEMORY.md"), hermes.file_lock(memories / "USER.md"):
        yield


def create_backup(kernel: Any, dest: str | os.PathLike[str], *, with_secrets: bool = False,
                  compresslevel: int = 1) -> dict[str, Any]:
    """Write the archive of ``kernel.home`` to ``dest`` (atomically, mode 0600) and
    return its manifest."""
    home = Path(kernel.home)
    dest = Path(dest).expanduser().absolute()
    if dest.is_dir():
        raise BackupError(f"{dest} is a directory; give the archive's file name, e.g. {dest / 'hermes.tar.gz'}")
    if not dest.parent.is_dir():
        raise BackupError(f"{dest.parent} does not exist; create it or choose another place for the archive")
    files: dict[str, Path] = {}
    manifest: dict[str, Any] = {
        "format": FORMAT, "format_version": FORMAT_VERSION, "hermes_version": hermes.__version__,
        "created": datetime.now(UTC).isoformat(timespec="seconds"), "source_home": str(home),
        "with_secrets": bool(with_secrets), "files": {}, "databases": {},
    }
    # Staged beside the archive (same disk the user chose for it), not in /tmp.
    with tempfile.TemporaryDirectory(prefix=".hermes-backup-", dir=dest.parent) as tmp:
        staging = Path(tmp)
        with _memory_locked(home):
            for name, path in _plain_files(home / "memories", "memories"):
                copy = staging / name
                copy.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(path, copy)
                files[name] = copy
        for name, path in _plain_files(home / "skills", "skills"):
            files[name] = path
        for name in ("SOUL.md", "config.yaml") + ((".env",) if with_secrets else ()):
            if (home / name).is_file():
                files[name] = home / name
        for name, path in _databases(kernel).items():
            copy = staging / "db" / name
            copy.parent.mkdir(parents=True, exist_ok=True)
            try:
                version = snapshot_database(path, copy)
            except sqlite3.Error as exc:
                raise BackupError(f"{path} could not be copied ({exc}); nothing was written") from exc
            files[name] = copy
            manifest["databases"][name] = {"user_version": version}
        for name, path in files.items():
            digest, size = _sha256(path)
            manifest["files"][name] = {"sha256": digest, "bytes": size}
        payload = json.dumps(manifest, indent=2, ensure_ascii=False).encode("utf-8")
        with hermes.atomic_writer(dest, mode=0o600, binary=True) as fh, \
                tarfile.open(fileobj=fh, mode="w:gz", compresslevel=compresslevel) as tar:
            info = tarfile.TarInfo(MANIFEST)
            info.size, info.mode, info.mtime = len(payload), 0o600, int(datetime.now(UTC).timestamp())
            tar.addfile(info, _BytesReader(payload))
            for name, path in files.items():
                info = tar.gettarinfo(str(path), arcname=name)
                info.mode, info.uid, info.gid, info.uname, info.gname = 0o600, 0, 0, "", ""
                with open(path, "rb") as src:
                    tar.addfile(info, src)
    os.chmod(dest, 0o600)  # atomic_writer keeps an existing file's mode; an archive is private
    return manifest


class _BytesReader:
    def __init__(self, data: bytes):
        self.data, self.pos = data, 0

    def read(self, n: int = -1) -> bytes:
        end = len(self.data) if n < 0 else self.pos + n
        out, self.pos = self.data[self.pos:end], min(end, len(self.data))
        return out


# -- restore --------------------------------------------------------------------------------


def home_is_empty(home: Path) -> bool:
    """Whether ``home`` is missing or holds nothing but what a fresh start creates."""
    try:
        return all(entry.name in EMPTY_HOME_NAMES for entry in os.scandir(home))
    except FileNotFoundError:
        return True


def read_manifest(tar: tarfile.TarFile, archive: Path) -> dict[str, Any]:
    first = tar.next()
    if first is None or first.name != MANIFEST or not first.isfile():
        raise BackupError(f"{archive} is not a Hermes backup (no {MANIFEST} first); nothing was restored")
    fh = tar.extractfile(first)
    try:
        manifest = json.loads(fh.read(1 << 24).decode("utf-8")) if fh else None
    except (ValueError, UnicodeDecodeError):
        manifest = None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise BackupError(f"{archive}: {MANIFEST} is not a Hermes backup manifest; nothing was restored")
    version = manifest.get("format_version")
    if not isinstance(version, int) or version > FORMAT_VERSION:
        raise BackupError(f"{archive} was written by a newer Hermes (backup format {version}, this one reads "
                          f"{FORMAT_VERSION}); upgrade Hermes to restore it")
    if not isinstance(manifest.get("files"), dict):
        raise BackupError(f"{archive}: the manifest lists no files; nothing was restored")
    return manifest


def _safe_name(name: str) -> bool:
    path = PurePosixPath(name)
    return bool(name) and not path.is_absolute() and ".." not in path.parts and "\\" not in name


def restore_backup(archive: str | os.PathLike[str], home: str | os.PathLike[str], *,
                   force: bool = False) -> dict[str, Any]:
    """Check ``archive`` completely, then restore it into ``home`` (created when
    missing). A non-empty home is refused unless ``force``. Returns the manifest."""
    archive = Path(archive).expanduser()
    home = Path(home).expanduser().absolute()
    if not archive.is_file():
        raise BackupError(f"{archive} does not exist or is not a file")
    if not force and not home_is_empty(home):
        raise BackupError(f"{home} is not empty; restore into an empty or new directory with --home DIR, "
                          "or pass --force to replace what the backup holds")
    home.mkdir(parents=True, exist_ok=True, mode=0o700)
    with tempfile.TemporaryDirectory(prefix=f".{home.name}.restore-", dir=home.parent) as tmp:
        staging = Path(tmp)
        try:
            tar = tarfile.open(archive, mode="r:gz")
        except (tarfile.TarError, OSError, EOFError, zlib.error) as exc:
            raise BackupError(f"{archive} is not a Hermes backup (not a gzip'd tar archive: "
                              f"{_one_line(exc)}); nothing was restored") from exc
        with tar:
            manifest = read_manifest(tar, archive)
            expected: dict[str, Any] = manifest["files"]
            seen: set[str] = set()
            try:
                for index, member in enumerate(tar):
                    name = member.name
                    if index == 0:
                        continue  # the manifest, read above
                    if name not in expected or not _safe_name(name) or not member.isfile() or name in seen:
                        raise BackupError(f"{archive}: unexpected member {name!r}; the archive was altered, "
                                          "nothing was restored")
                    seen.add(name)
                    out = staging / name
                    out.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
                    digest, size = hashlib.sha256(), 0
                    src = tar.extractfile(member)
                    assert src is not None
                    # fsynced before it is moved into the home (the home must not end
                    # up holding a file whose bytes never reached the disk)
                    with hermes.atomic_writer(out, mode=0o600, binary=True) as dst:
                        while chunk := src.read(_CHUNK):
                            digest.update(chunk)
                            size += len(chunk)
                            dst.write(chunk)
                    want = expected[name]
                    if digest.hexdigest() != want.get("sha256") or size != want.get("bytes"):
                        raise BackupError(f"{archive}: {name} does not match its checksum; the archive is "
                                          "damaged, nothing was restored")
            except (tarfile.TarError, EOFError, OSError, zlib.error) as exc:
                raise BackupError(f"{archive} is damaged ({_one_line(exc)}); nothing was restored") from exc
        missing = sorted(set(expected) - seen)
        if missing:
            raise BackupError(f"{archive} lacks {', '.join(missing[:3])}; the archive is incomplete, "
                              "nothing was restored")
        for name, info in (manifest.get("databases") or {}).items():
            _check_database(staging / name, info, archive)
        _move_into(staging, home)
    return manifest


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


def _check_database(path: Path, info: dict[str, Any], archive: Path) -> None:
    try:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            check = conn.execute("PRAGMA quick_check").fetchone()[0]
            version = conn.execute("PRAGMA user_version").fetchone()[0]
        finally:
            conn.close()
    except sqlite3.Error as exc:
        raise BackupError(f"{archive}: {path.name} is not a usable database ({exc}); nothing was restored") from exc
    if check != "ok":
        raise BackupError(f"{archive}: {path.name} fails SQLite's check ({check}); nothing was restored")
    if version != info.get("user_version"):
        raise BackupError(f"{archive}: {path.name} has schema {version}, the manifest says "
                          f"{info.get('user_version')}; nothing was restored")


def _move_into(staging: Path, home: Path) -> None:
    """Replace each top-level piece of ``home`` the backup holds with the staged one."""
    for entry in sorted(staging.iterdir()):
        target = home / entry.name
        if entry.name.endswith(".db"):
            for suffix in ("-wal", "-shm", "-journal"):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(f"{target}{suffix}")
        if target.is_dir() and not target.is_symlink():
            shutil.rmtree(target)
        elif target.exists() or target.is_symlink():
            target.unlink()
        os.replace(entry, target)
