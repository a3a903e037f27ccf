"""Which JIT cache folders and files this process trusts, and how it creates and opens them.

A cached module is native code that the process loads and runs, so whoever can write the cache can
run code as every user of it. The cache therefore trusts only what the current user controls:

- the cache root (``$AITER_JIT_DIR``, else ``$XDG_CACHE_HOME/aiter/jit``, else ``~/.cache/aiter/jit``)
  is a real directory (not a symbolic link) owned by the current user; others may write it only when
  its sticky bit is set (as on /tmp: then no one else can rename or remove what the user made in it);
- every directory above it, the symbolic links resolved, is owned by the user or by root and is not
  writable by others unless sticky, so that nobody else can swap the root for a folder of theirs;
- the module folder, each key folder and each library are owned by the user, are no symbolic links
  and are not writable by others.

"Writable by others" is the other-write bit, and the group-write bit unless the group is the user's
private group (the group of the user's own name with no other members, as user-private-group
systems create with umask 002).

What fails these rules is refused with a JitBuildError that names the path and what to do; nothing is
loaded from it, written into it or deleted from it. The builder does not fall back to another folder
on its own: a cache that silently moved would hide the problem and rebuild for minutes.

Folders are created 0700. Files in the cache are opened with O_NOFOLLOW, so a planted symbolic link
is refused instead of followed to the file it names.
"""

from __future__ import annotations

import errno
import os
import stat
import tempfile
from pathlib import Path

from .errors import JitBuildError

_WHAT_TO_DO = "set AITER_JIT_DIR to a directory that only you can write (it is created 0700)"


def current_uid() -> int:
    """The uid whose files the cache trusts."""
    return os.geteuid()


def _owner(path: os.PathLike | str, st: os.stat_result) -> int:
    """The owner of ``path``. A seam for tests: with no second uid to chown to, they make a
    folder look foreign here."""
    return st.st_uid


def _private_group(gid: int, uid: int) -> bool:
    try:
        import grp
        import pwd

        user = pwd.getpwuid(uid)
        group = grp.getgrgid(gid)
    except (ImportError, KeyError):
        return False
    return group.gr_name == user.pw_name and gid == user.pw_gid and set(group.gr_mem) <= {user.pw_name}


def _writable_by_others(st: os.stat_result, uid: int) -> str | None:
    """Who besides the owner can write a file of this mode: "other users", "group <gid>" or None."""
    if st.st_mode & stat.S_IWOTH:
        return "other users"
    if st.st_mode & stat.S_IWGRP and not _private_group(st.st_gid, uid):
        return f"group {st.st_gid}"
    return None


def _refuse(path, problem: str, fix: str = _WHAT_TO_DO) -> JitBuildError:
    return JitBuildError(
        f"aiter: refusing the JIT cache path {path}: {problem}; a library loaded from there could be"
        f" another user's code. {fix[0].upper() + fix[1:]}."
    )


def _lstat(path) -> os.stat_result | None:
    try:
        return os.lstat(path)
    except FileNotFoundError:
        return None
    except NotADirectoryError:
        return None


def _check_owned(path, st: os.stat_result, kind: str, allow_sticky: bool = False):
    """The rules for a folder or file of the cache itself: ours, not a link, not writable by others."""
    uid = current_uid()
    if stat.S_ISLNK(st.st_mode):
        raise _refuse(path, "it is a symbolic link (cache folders and files must be real ones)",
                      f"remove the link, or {_WHAT_TO_DO}")
    wanted = stat.S_ISDIR if kind == "directory" else stat.S_ISREG
    if not wanted(st.st_mode):
        raise _refuse(path, f"it is not a {kind}", f"remove it, or {_WHAT_TO_DO}")
    owner = _owner(path, st)
    if owner != uid:
        raise _refuse(path, f"it is owned by uid {owner}, not by you (uid {uid})",
                      f"remove it, or {_WHAT_TO_DO}")
    others = _writable_by_others(st, uid)
    if others and not (allow_sticky and st.st_mode & stat.S_ISVTX):
        raise _refuse(path, f"{others} can write it (mode {stat.S_IMODE(st.st_mode):04o})",
                      f"run `chmod go-w {path}`, or {_WHAT_TO_DO}")


def _check_ancestor(path: str, st: os.stat_result):
    uid = current_uid()
    owner = _owner(path, st)
    if owner not in (uid, 0):
        raise _refuse(path, f"this folder above the cache is owned by uid {owner}, who can replace"
                      " what is in it")
    others = _writable_by_others(st, uid)
    if others and not st.st_mode & stat.S_ISVTX:
        raise _refuse(path, f"{others} can write this folder above the cache (mode"
                      f" {stat.S_IMODE(st.st_mode):04o}, no sticky bit) and so replace the cache")


def _ancestors(path: Path) -> list:
    """The directories above ``path``, both as written and with symbolic links resolved."""
    written = Path(os.path.abspath(path)).parent
    resolved = Path(os.path.realpath(written))
    found: list = []
    for p in (written, *written.parents, resolved, *resolved.parents):
        if os.fspath(p) not in found:
            found.append(os.fspath(p))
    return found


def _check_if_present(path, kind: str, allow_sticky: bool = False) -> bool:
    """_check_owned on ``path`` when it exists (not following a link); returns whether it exists."""
    st = _lstat(path)
    if st is None:
        return False
    _check_owned(path, st, kind, allow_sticky)
    return True


def check_root(root: Path) -> bool:
    """Raise JitBuildError unless the cache root (when it exists) and every folder above it can be
    trusted; returns whether the root exists."""
    for parent in _ancestors(root):
        try:
            st = os.stat(parent)
        except FileNotFoundError:
            continue  # not made yet: created below a trusted folder, 0700
        except OSError as e:
            raise JitBuildError(f"aiter: cannot inspect the JIT cache path {parent}: {e.strerror}") from e
        _check_ancestor(parent, st)
    return _check_if_present(root, "directory", allow_sticky=True)


def check_dir(path: Path) -> bool:
    """Raise JitBuildError unless ``path`` (a module or key folder) is ours and only ours to write;
    returns whether it exists."""
    return _check_if_present(path, "directory")


def check_file(path: Path) -> bool:
    """Raise JitBuildError unless ``path`` (a library) is a regular file of ours that only we can
    write; returns whether it exists."""
    return _check_if_present(path, "file")


def make_dirs(path: Path, top: Path):
    """Create ``path`` (a folder at or below the cache root ``top``) and whatever folders above it
    are missing, each 0700, then check the root and each folder below it like existing ones (another
    process, or another user, may have made one first)."""
    missing = []
    p = Path(os.path.abspath(path))
    while _lstat(p) is None and p != p.parent:
        missing.append(p)
        p = p.parent
    for d in reversed(missing):
        try:
            os.mkdir(d, 0o700)
        except FileExistsError:
            pass
    check_root(top)
    below = top
    for part in Path(os.path.abspath(path)).relative_to(os.path.abspath(top)).parts:
        below = below / part
        check_dir(below)


def open_nofollow(path: Path, flags: int, mode: int = 0o600) -> int:
    """os.open with O_NOFOLLOW and O_CLOEXEC: a symbolic link at ``path`` is refused, never
    followed; what is opened must be a regular file of ours."""
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise _refuse(path, "it is a symbolic link (not followed)", f"remove the link, or {_WHAT_TO_DO}") from e
        raise
    try:
        _check_owned(path, os.fstat(fd), "file")
    except BaseException:
        os.close(fd)
        raise
    return fd


def _write_and_close(fd: int, data: bytes):
    """Write all of ``data`` to ``fd`` (os.write may take only part of it), then close ``fd``."""
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    finally:
        os.close(fd)


def write_file(path: Path, data: bytes):
    """Write ``data`` to ``path`` (created 0600 or truncated), never through a symbolic link."""
    _write_and_close(open_nofollow(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC), data)


def read_file(path: Path, limit: int = 1 << 20) -> bytes:
    """The first ``limit`` bytes of ``path``, never read through a symbolic link."""
    fd = open_nofollow(path, os.O_RDONLY)
    try:
        chunks, left = [], limit
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 16))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def write_error(e: OSError, path, doing: str) -> JitBuildError:
    """A JitBuildError for an OSError met while ``doing`` something to ``path`` in the cache: which
    path, why, and what to do about it."""
    path = e.filename or path
    directory = Path(path).parent
    reason = e.strerror or str(e)
    if e.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return JitBuildError(
            f"aiter: {doing} {path} failed: the JIT cache directory {directory} is not writable"
            f" ({reason}); set AITER_JIT_DIR to a writable directory"
        )
    if e.errno in (errno.ENOSPC, errno.EDQUOT):
        return JitBuildError(
            f"aiter: {doing} {path} failed: {reason} (the disk or quota holding {directory} is full);"
            " free space there, or set AITER_JIT_DIR (the cache) and TMPDIR to folders on another disk"
        )
    return JitBuildError(f"aiter: {doing} {path} failed: {reason}")


def replace_file(path: Path, data: bytes):
    """Make ``path`` hold ``data``: written to a new file beside it (O_EXCL, 0600) and renamed over
    it, so the old ``path`` is never opened. A symbolic link or foreign file there is refused."""
    check_file(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        _write_and_close(fd, data)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
