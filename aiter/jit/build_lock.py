"""The per-key build lock of the JIT cache: one process builds a key while the others wait.

``<module>/<key>.lock`` is held with an exclusive fcntl.flock by the process that builds the key. It
records the holder (pid, host, time) and the holder touches its mtime every HEARTBEAT_S seconds, so
a waiter can break a lock whose holder died or froze. The file is opened with O_CREAT | O_NOFOLLOW
(not O_EXCL: every process of the key opens the same file to wait on it): a symbolic link there is
refused, and what opens must be a regular file of the user's (cache_dir.open_nofollow). Whatever goes wrong between opening and holding it closes the descriptor (which
drops the flock) before the error is raised, so a failed attempt never leaves this process waiting
on a lock it holds itself.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import socket
import sys
import threading
import time
from pathlib import Path

from . import cache_dir

# A lock whose holder stopped heart-beating this long ago (or whose holder is dead) is stale.
DEFAULT_LOCK_TIMEOUT_S = 600.0
HEARTBEAT_S = 10.0


def lock_timeout() -> float:
    try:
        return float(os.environ.get("AITER_JIT_LOCK_TIMEOUT", DEFAULT_LOCK_TIMEOUT_S))
    except ValueError:
        return DEFAULT_LOCK_TIMEOUT_S


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def lock_is_stale(holder: dict, age_s: float, timeout_s: float, host: str | None = None) -> bool:
    """A held lock is stale when its holder (on this host) is dead, or when it has not been
    touched for ``timeout_s`` (the holder heart-beats the file's mtime while it builds)."""
    host = host or socket.gethostname()
    pid = holder.get("pid")
    if isinstance(pid, int) and holder.get("host") == host and not pid_alive(pid):
        return True
    return age_s > timeout_s


class BuildLock:
    """An exclusive fcntl.flock on ``path`` with stale-lock recovery and a heartbeat."""

    def __init__(self, path: Path):
        self.path = path
        self.fd = None
        self._stop = threading.Event()
        self._beat = None

    def try_acquire(self) -> bool:
        """Whether this process now holds the lock. Raises JitBuildError (naming the lock) when the
        lock cannot be opened or claimed; the descriptor is closed by then."""
        try:
            fd = cache_dir.open_nofollow(self.path, os.O_RDWR | os.O_CREAT)
        except OSError as e:
            raise cache_dir.write_error(e, self.path, "opening the build lock") from e
        try:
            held = self._claim(fd)
        except BaseException as e:
            os.close(fd)  # drops the flock with it
            if isinstance(e, OSError):
                raise cache_dir.write_error(e, self.path, "taking the build lock") from e
            raise
        if not held:
            os.close(fd)
            return False
        self.fd = fd
        self._stop.clear()
        self._beat = threading.Thread(target=self._heartbeat, daemon=True)
        self._beat.start()
        return True

    def _claim(self, fd: int) -> bool:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            if e.errno not in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                raise
            self._break_if_stale(fd)
            return False
        # The file may have been unlinked (released, or broken as stale) after we opened it:
        # then our lock is on a dead inode and someone else may hold the live one.
        try:
            same = os.stat(self.path).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if not same:
            return False
        info = {"pid": os.getpid(), "host": socket.gethostname(), "time": time.time()}
        try:
            os.ftruncate(fd, 0)
            data = json.dumps(info).encode()
            if os.write(fd, data) != len(data):
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), os.fspath(self.path))
        except BaseException:
            # The file names no holder: take it away while the flock still keeps others out.
            try:
                os.unlink(self.path)
            except OSError:
                pass
            raise
        return True

    def _heartbeat(self):
        while not self._stop.wait(HEARTBEAT_S):
            try:
                os.utime(self.fd)
            except (OSError, TypeError):
                return

    def _break_if_stale(self, fd: int):
        try:
            st = os.fstat(fd)
            raw = os.pread(fd, 4096, 0)
            holder = json.loads(raw.decode() or "{}")
        except (OSError, ValueError):
            holder = {}
            st = os.fstat(fd)
        if not isinstance(holder, dict):
            holder = {}
        if not lock_is_stale(holder, time.time() - st.st_mtime, lock_timeout()):
            return
        try:
            # Only unlink the inode we judged; another waiter may already have replaced it.
            if os.stat(self.path).st_ino == st.st_ino:
                os.unlink(self.path)
                print(
                    f"aiter: removed stale JIT lock {self.path} (holder {holder or 'unknown'})",
                    file=sys.stderr,
                )
        except FileNotFoundError:
            pass

    def release(self):
        if self.fd is None:
            return
        self._stop.set()
        if self._beat is not None:
            self._beat.join()  # it must not touch the descriptor after the close below
            self._beat = None
        fd, self.fd = self.fd, None
        try:
            os.unlink(self.path)  # tidy; waiters re-check the inode and then find the build
        except OSError:
            pass  # a lock file left behind is only untidy: the next holder re-checks the inode
        finally:
            try:
                fcntl.flock(fd, fcntl.LOCK_UN)
            finally:
                os.close(fd)
