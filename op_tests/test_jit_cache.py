"""The JIT cache's trust rules and its failure paths (aiter/jit/cache_dir.py, build_lock.py, build.py, load.py).

No test here compiles: the build child is replaced by a fake that writes a log (and, where a test
needs one, a library of made-up bytes), so each runs in well under a second. What must never happen
is checked directly: a planted library imported, a file behind a planted link written, a descriptor
or a lock left behind, a second call waiting on the first one's lock.

"Another uid": run as root, the tests chown a folder to 65534 (nobody); either way they also make a
folder look foreign through cache_dir._owner, the seam the ownership check reads.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import stat
import time
from pathlib import Path

import pytest

from aiter.jit import build, build_lock, build_progress, cache_dir, cache_entry, cache_key, core, load, toolchain

OTHER_UID = 65534
IS_ROOT = os.geteuid() == 0
VICTIM_TEXT = "a file of the user's that a planted link points to\n"


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """A fresh cache root, a spec of a one-file module, and a fake build child."""
    src = tmp_path / "src"
    (src / "include").mkdir(parents=True)
    (src / "tiny.cpp").write_text("int tiny() { return 42; }\n")
    (src / "include" / "tiny.h").write_text("#define TINY 1\n")
    root = tmp_path / "jit"
    monkeypatch.setenv("AITER_JIT_DIR", os.fspath(root))
    spec = core.ModuleSpec(
        name="tiny_jit_cache_test", sources=(os.fspath(src / "tiny.cpp"),), root=os.fspath(src),
        targets=("cpu",), extra_cflags=("-O1",), include_dirs=(os.fspath(src / "include"),),
        source_dirs=(os.fspath(src / "include"),))
    calls = []

    def fake_child(spec_, job_path, work, log_path, rc=1, library=False):
        calls.append(json.loads(Path(job_path).read_text()))
        staged = sorted(os.fspath(p.relative_to(work / "src")) for p in (work / "src").rglob("*"))
        calls[-1]["staged"] = staged
        log_path.write_text("[1/2] c++ -c tiny.cpp\ntiny.cpp:1:1: error: simulated failure\n")
        if library:
            (work / cache_key.library_name(spec_)).write_bytes(b"\x7fELF not really a library")
            return 0
        return rc

    monkeypatch.setattr(build, "run_build_child", fake_child)
    imports = []
    real_import = load.import_library

    def recording_import(name, path, trusted=False):
        imports.append(os.fspath(path))
        return real_import(name, path, trusted)

    monkeypatch.setattr(load, "import_library", recording_import)

    class Cache:
        pass

    c = Cache()
    c.root, c.spec, c.calls, c.imports, c.tmp = root, spec, calls, imports, tmp_path
    c.key = core.cache_key(spec)
    c.module_dir = root / spec.name
    c.entry = c.module_dir / c.key
    c.fake_child = fake_child
    return c


def _plant_entry(entry: Path, spec) -> Path:
    """A key folder whose library matches its build.json (size and sha256 are no secret)."""
    entry.mkdir(parents=True, exist_ok=True)
    library = entry / cache_key.library_name(spec)
    library.write_bytes(b"\x7fELF planted code")
    meta = {"key": entry.name, "targets": ["cpu"], "library": cache_entry.library_record(library)}
    (entry / cache_entry.ENTRY_META).write_text(json.dumps(meta))
    return library


def _victim(tmp_path) -> Path:
    victim = tmp_path / "victim.txt"
    victim.write_text(VICTIM_TEXT)
    return victim


def _refused(c, match: str) -> str:
    with pytest.raises(core.JitBuildError) as info:
        core.load_or_build(c.spec)
    message = str(info.value)
    assert match in message, message
    return message


# ------------------------------------------------------------------------------------------------
# A cache others can write: refused, nothing loaded
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", [0o777, 0o775, 0o757])
def test_root_writable_by_others_is_refused_and_its_planted_library_never_loaded(cache, monkeypatch, mode):
    monkeypatch.setattr(cache_dir, "_private_group", lambda gid, uid: False)  # a group with others in it
    library = _plant_entry(cache.entry, cache.spec)
    before = library.read_bytes()
    cache.root.chmod(mode)
    message = _refused(cache, f"refusing the JIT cache path {cache.root}:")
    assert "can write it" in message and "AITER_JIT_DIR" in message and "chmod go-w" in message
    assert cache.imports == [] and cache.calls == []  # neither loaded nor rebuilt over
    assert library.read_bytes() == before


def test_sticky_root_of_ours_is_trusted(cache):
    cache.root.mkdir()
    cache.root.chmod(0o1777)  # as /tmp: others cannot rename or remove what we made in it
    assert cache_dir.check_root(cache.root)
    with pytest.raises(core.JitBuildError, match="simulated failure"):  # it gets as far as building
        core.load_or_build(cache.spec)
    assert stat.S_IMODE(cache.module_dir.stat().st_mode) == 0o700


@pytest.mark.parametrize("sticky", [False, True])
def test_folder_above_the_root_writable_by_others(cache, monkeypatch, sticky):
    shared = cache.tmp / "shared"
    shared.mkdir()
    shared.chmod(0o1777 if sticky else 0o777)
    root = shared / "jit"
    monkeypatch.setenv("AITER_JIT_DIR", os.fspath(root))
    if sticky:
        assert not cache_dir.check_root(root)  # not made yet; /tmp-like parents are fine
        cache_dir.make_dirs(root / "m", root)
        assert cache_dir.check_root(root)
    else:
        message = _refused(cache, f"refusing the JIT cache path {shared}:")
        assert "no sticky bit" in message
        assert not root.exists()


def _make_foreign(path: Path, how: str, monkeypatch):
    if how == "chown":
        if not IS_ROOT:
            pytest.skip("chown to another uid needs root; the simulated case covers this")
        os.lchown(path, OTHER_UID, -1)
    else:
        real = cache_dir._owner
        target = os.fspath(path)
        monkeypatch.setattr(cache_dir, "_owner",
                            lambda p, st: OTHER_UID if os.fspath(p) == target else real(p, st))


@pytest.mark.parametrize("how", ["chown", "simulated"])
@pytest.mark.parametrize("layer", ["root", "module", "key", "library"])
def test_folder_or_library_owned_by_another_uid_is_refused(cache, monkeypatch, layer, how):
    library = _plant_entry(cache.entry, cache.spec)
    before = library.read_bytes()
    path = {"root": cache.root, "module": cache.module_dir, "key": cache.entry, "library": library}[layer]
    _make_foreign(path, how, monkeypatch)
    message = _refused(cache, f"refusing the JIT cache path {path}:")
    assert f"owned by uid {OTHER_UID}" in message
    assert cache.imports == [] and cache.calls == []
    assert library.read_bytes() == before


def test_ancestor_owned_by_another_uid_is_refused(cache, monkeypatch):
    above = cache.tmp / "theirs"
    above.mkdir()
    monkeypatch.setenv("AITER_JIT_DIR", os.fspath(above / "jit"))
    _make_foreign(above, "simulated", monkeypatch)
    message = _refused(cache, f"refusing the JIT cache path {above}:")
    assert f"owned by uid {OTHER_UID}" in message


@pytest.mark.parametrize("what", ["key", "module", "root"])
def test_symlinked_cache_folder_is_refused(cache, monkeypatch, what):
    elsewhere = cache.tmp / "elsewhere"
    if what == "key":
        cache.module_dir.mkdir(parents=True, mode=0o700)
        library = _plant_entry(elsewhere / cache.key, cache.spec)
        link = cache.entry
        link.symlink_to(elsewhere / cache.key)
    elif what == "module":
        cache.root.mkdir(mode=0o700)
        library = _plant_entry(elsewhere / cache.spec.name / cache.key, cache.spec)
        link = cache.module_dir
        link.symlink_to(elsewhere / cache.spec.name)
    else:
        library = _plant_entry(elsewhere / "jit" / cache.spec.name / cache.key, cache.spec)
        link = cache.root
        link.symlink_to(elsewhere / "jit")
    before = library.read_bytes()
    message = _refused(cache, f"refusing the JIT cache path {link}: it is a symbolic link")
    assert "Remove the link" in message
    assert cache.imports == [] and cache.calls == []
    assert library.read_bytes() == before and link.is_symlink()


def test_library_that_is_a_symlink_or_writable_by_others_is_refused(cache, tmp_path):
    library = _plant_entry(cache.entry, cache.spec)
    library.chmod(0o666)
    _refused(cache, f"refusing the JIT cache path {library}: other users can write it")
    library.chmod(0o755)
    real = tmp_path / "real.so"
    shutil.move(library, real)
    library.symlink_to(real)
    _refused(cache, f"refusing the JIT cache path {library}: it is a symbolic link")
    assert cache.imports == [] and cache.calls == []


def test_group_writable_is_fine_only_for_the_users_private_group(cache, monkeypatch):
    cache.root.mkdir(mode=0o700)
    cache.root.chmod(0o770)
    monkeypatch.setattr(cache_dir, "_private_group", lambda gid, uid: False)
    _refused(cache, "can write it (mode 0770)")
    monkeypatch.setattr(cache_dir, "_private_group", lambda gid, uid: True)
    assert cache_dir.check_root(cache.root)


# ------------------------------------------------------------------------------------------------
# Planted links in a folder of ours: refused, not followed
# ------------------------------------------------------------------------------------------------


def test_planted_lock_symlink_is_refused_and_its_target_untouched(cache, tmp_path):
    victim = _victim(tmp_path)
    cache.module_dir.mkdir(parents=True, mode=0o700)
    lock = cache.module_dir / f"{cache.key}.lock"
    lock.symlink_to(victim)
    fds = _open_fds()
    message = _refused(cache, f"refusing the JIT cache path {lock}: it is a symbolic link (not followed)")
    assert "Remove the link" in message
    assert victim.read_text() == VICTIM_TEXT and lock.is_symlink()
    assert cache.calls == [] and _open_fds() == fds


def test_planted_failed_log_symlink_is_refused_and_its_target_untouched(cache, tmp_path):
    victim = _victim(tmp_path)
    cache.module_dir.mkdir(parents=True, mode=0o700)
    failed_log = cache.module_dir / f"failed-{cache.key}.log"
    failed_log.symlink_to(victim)
    fds = _open_fds()
    message = _refused(cache, "simulated failure")  # the compile failure is still the report
    assert f"the full log is not kept: aiter: refusing the JIT cache path {failed_log}: it is a symbolic" \
           " link" in message
    assert victim.read_text() == VICTIM_TEXT and failed_log.is_symlink()
    assert _open_fds() == fds
    # A waiter reading the failure does not read through the link either.
    with pytest.raises(core.JitBuildError, match="symbolic link"):
        cache_dir.read_file(failed_log)


def test_failed_log_is_written_private_and_replaced_not_appended(cache):
    for _ in range(2):
        _refused(cache, "simulated failure")
    failed_log = cache.module_dir / f"failed-{cache.key}.log"
    assert failed_log.read_text().count("simulated failure") == 1
    assert stat.S_IMODE(failed_log.stat().st_mode) == 0o600
    assert sorted(p.name for p in cache.module_dir.iterdir()) == [failed_log.name]


@pytest.mark.parametrize("where", ["AITER_JIT_DIR", "XDG_CACHE_HOME"])
def test_folders_are_created_0700(cache, monkeypatch, where):
    if where == "XDG_CACHE_HOME":
        monkeypatch.delenv("AITER_JIT_DIR")
        monkeypatch.setenv("XDG_CACHE_HOME", os.fspath(cache.tmp / "xdg"))
        made = [cache.tmp / "xdg", cache.tmp / "xdg" / "aiter", cache.tmp / "xdg" / "aiter" / "jit"]
    else:
        made = [cache.root]
    cache.module_dir = core.cache_root() / cache.spec.name
    _refused(cache, "simulated failure")
    for d in [*made, cache.module_dir]:
        assert stat.S_IMODE(d.stat().st_mode) == 0o700, d


def test_a_built_entry_is_private_and_checked_before_import(cache, monkeypatch):
    monkeypatch.setattr(build, "run_build_child",
                        lambda *a: cache.fake_child(*a, library=True))
    with pytest.raises(core.JitBuildError, match="does not import in this one"):
        core.load_or_build(cache.spec)  # made-up bytes: it verifies, then fails to import
    library = cache.entry / cache_key.library_name(cache.spec)
    assert stat.S_IMODE(cache.entry.stat().st_mode) == 0o700
    assert not stat.S_IMODE(library.stat().st_mode) & 0o022
    assert cache.imports == [os.fspath(library)]


# ------------------------------------------------------------------------------------------------
# Disk full and other failures of the lock and the staging
# ------------------------------------------------------------------------------------------------


def _enospc(path="") -> OSError:
    return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), path or None)


def _fail_lock_writes(monkeypatch, name: str):
    """Make os.<name> fail with ENOSPC on the lock file's descriptor only (the disk is full once
    the empty lock file exists)."""
    real = getattr(os, name)

    def failing(fd, *args):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except (OSError, TypeError):
            target = ""
        if target.endswith(".lock"):
            raise _enospc()
        return real(fd, *args)

    monkeypatch.setattr(os, name, failing)


@pytest.mark.parametrize("call", ["write", "ftruncate"])
def test_lock_write_on_a_full_disk_is_a_clear_error_with_no_leak_and_no_self_wait(cache, monkeypatch, call):
    monkeypatch.setenv("AITER_JIT_LOCK_TIMEOUT", "600")
    _fail_lock_writes(monkeypatch, call)
    lock = cache.module_dir / f"{cache.key}.lock"
    fds = _open_fds()
    for attempt in range(2):
        t0 = time.monotonic()
        message = _refused(cache, f"taking the build lock {lock} failed: No space left on device")
        assert "free space there" in message and "AITER_JIT_DIR" in message
        assert time.monotonic() - t0 < 5.0, f"attempt {attempt} waited"  # never on its own lock
        assert _open_fds() == fds
    assert cache.calls == []
    monkeypatch.undo()
    free = build_lock.BuildLock(lock)
    assert free.try_acquire()  # nobody holds it
    free.release()


def test_lock_open_failure_is_a_clear_error(cache, monkeypatch):
    real_open = cache_dir.os.open

    def failing_open(path, *args, **kwargs):
        if os.fspath(path).endswith(".lock"):
            raise OSError(errno.EMFILE, os.strerror(errno.EMFILE), os.fspath(path))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(os, "open", failing_open)
    _refused(cache, f"opening the build lock {cache.module_dir / (cache.key + '.lock')} failed:"
                    " Too many open files")


def _inject(monkeypatch, cache, point: str):
    """Make one file operation of the build fail with ENOSPC; returns the path the error must name."""
    if point in ("stage-copy", "stage-file"):  # in copytree, gathered into a shutil.Error; or alone
        real = shutil.copyfile
        name = "tiny.h" if point == "stage-copy" else "tiny.cpp"

        def copyfile(src, dst, *a, **k):
            if os.fspath(src).endswith(name):
                raise _enospc(os.fspath(dst))
            return real(src, dst, *a, **k)

        monkeypatch.setattr(shutil, "copyfile", copyfile)
        return "src/include/tiny.h" if point == "stage-copy" else "src/tiny.cpp"
    if point == "build-dir":
        def mkdtemp(*a, **k):
            raise _enospc(os.fspath(k.get("dir", "")))

        monkeypatch.setattr(build.tempfile, "mkdtemp", mkdtemp)
        return os.fspath(cache.module_dir)
    if point == "job-file":
        real = Path.write_text

        def write_text(self, *a, **k):
            if self.name == "job.json":
                raise _enospc(os.fspath(self))
            return real(self, *a, **k)

        monkeypatch.setattr(Path, "write_text", write_text)
        return "job.json"
    if point == "install":
        monkeypatch.setattr(build, "run_build_child", lambda *a: cache.fake_child(*a, library=True))
        real = Path.write_text

        def write_text(self, *a, **k):
            if self.name == cache_entry.ENTRY_META:
                raise _enospc(os.fspath(self))
            return real(self, *a, **k)

        monkeypatch.setattr(Path, "write_text", write_text)
        return cache_entry.ENTRY_META
    if point == "failed-log":
        real = cache_dir.tempfile.mkstemp

        def mkstemp(*a, **k):
            raise _enospc(os.fspath(k.get("dir", "")))

        monkeypatch.setattr(cache_dir.tempfile, "mkstemp", mkstemp)
        return "the full log is not kept"
    raise ValueError(point)


@pytest.mark.parametrize("point", ["stage-copy", "stage-file", "build-dir", "job-file", "install", "failed-log"])
def test_build_failure_on_a_full_disk_names_the_path_and_leaves_nothing(cache, monkeypatch, point):
    named = _inject(monkeypatch, cache, point)
    fds = _open_fds()
    for _ in range(2):  # the second call fails the same way, at once
        t0 = time.monotonic()
        with pytest.raises(core.JitBuildError) as info:
            core.load_or_build(cache.spec)
        message = str(info.value)
        assert named in message and "No space left on device" in message, message
        assert time.monotonic() - t0 < 5.0
        assert _open_fds() == fds
    left = sorted(p.name for p in cache.module_dir.iterdir())
    assert all(name.startswith("failed-") for name in left), left  # no temp dir, no lock
    assert not list(Path(build.tempfile.gettempdir()).glob(f"aiter-jit-{cache.key}-*"))


def test_cpu_build_stages_only_the_folders_it_hashes(cache, monkeypatch):
    monkeypatch.delenv("AITER_JIT_EXTRA_CFLAGS", raising=False)
    cache.calls.clear()
    spec = core.module_spec()
    with pytest.raises(core.JitBuildError, match="simulated failure"):
        core.load_or_build(spec)
    staged = cache.calls[-1]["staged"]
    expected = {"binding", "common", "cpu"}
    assert {p.split("/")[0] for p in staged} == expected
    csrc = Path(spec.root)
    for folder in expected:
        assert {p for p in staged if p.split("/")[0] == folder} == {folder} | {
            os.fspath(p.relative_to(csrc)) for p in (csrc / folder).rglob("*")}


# What another family's or target's module holds (path prefixes under csrc/).
FORBIDDEN_IN = {
    ("prefill", "sm90"): ("sm90/paged/", "sm90/topk/", "gfx950/"),
    ("paged", "sm90"): ("sm90/instances/", "sm90/launcher.cu", "sm90/topk/", "gfx950/"),
    ("topk", "sm90"): ("sm90/instances/", "sm90/launcher.cu", "sm90/paged/", "gfx950/"),
    ("prefill", "gfx950"): ("sm90/",),
}


@pytest.mark.parametrize("family,target", sorted(FORBIDDEN_IN))
def test_gpu_family_build_stages_only_what_its_key_hashes(cache, monkeypatch, family, target):
    """A GPU module's build copies its sources and the files they include, nothing of another
    family or target: what it stages is what its key hashes."""
    monkeypatch.delenv("AITER_JIT_EXTRA_CFLAGS", raising=False)
    monkeypatch.setattr(toolchain, "toolchain_identity", lambda targets: {})  # no nvcc needed to stage
    cache.calls.clear()
    spec = core.family_spec(family, target)
    with pytest.raises(core.JitBuildError, match="simulated failure"):
        core.load_or_build(spec)
    csrc = Path(spec.root)
    staged = {p for p in cache.calls[-1]["staged"] if (csrc / p).is_file()}
    assert staged == {os.fspath(Path(p).relative_to(csrc)) for p in cache_key.hashed_files(spec)}
    forbidden = FORBIDDEN_IN[(family, target)] + ("cpu/",)  # no CPU kernel in a GPU module
    assert not [p for p in staged if p.startswith(forbidden)]


# ------------------------------------------------------------------------------------------------
# Flags from the environment
# ------------------------------------------------------------------------------------------------


def test_env_flags_are_split_as_words_and_never_run(monkeypatch):
    flag = '-DTINY_TEXT="a`touch /tmp/x`$(id)$HOME b"'
    monkeypatch.setenv("AITER_JIT_EXTRA_CFLAGS", f"-O1 '{flag}'")
    spec = core.module_spec(("cpu",))
    assert spec.extra_cflags[-2:] == ("-O1", flag)
    # In build.ninja: one shell word, '$' doubled for ninja.
    assert toolchain.build_arg(flag) == "'" + flag.replace("$", "$$") + "'"
    assert toolchain.build_arg("-O3") == "-O3"
    monkeypatch.setenv("AITER_JIT_EXTRA_CFLAGS", "-DX='unclosed")
    with pytest.raises(core.JitBuildError, match="AITER_JIT_EXTRA_CFLAGS cannot be split"):
        core.module_spec(("cpu",))
    monkeypatch.setenv("AITER_JIT_EXTRA_CFLAGS", "'-DX=a\nb'")
    with pytest.raises(core.JitBuildError, match="AITER_JIT_EXTRA_CFLAGS: the flag .* line break"):
        core.module_spec(("cpu",))


# ------------------------------------------------------------------------------------------------
# What the build says
# ------------------------------------------------------------------------------------------------


def test_progress_line_reads_ninja_status():
    spec = core.module_spec(("cpu",))
    assert build_progress.progress_line(spec, b"", 3.2) == "aiter: module_fp8_mqa_logits for cpu: preparing, 3 s"
    log = b"[0/6] c++ a.cpp\n[1/6] c++ b.cpp\nwarning: x\n[3/6] c++ c.cpp\n"
    assert build_progress.progress_line(spec, log, 42.4) == \
        "aiter: module_fp8_mqa_logits for cpu: 3/6 build steps done, 42 s"
    assert build_progress.progress_line(spec, b"", 9.0, total=6) == "aiter: module_fp8_mqa_logits for cpu: 0/6 build steps done, 9 s"


def test_build_message_counts_units_and_cites_only_a_measured_time(cache, capsys):
    message = build.build_message(cache.spec, cache.module_dir)
    assert "1 translation unit to compile;" in message and "about" not in message and " took " not in message
    old = cache.module_dir / ("0" * 24)
    old.mkdir(parents=True)
    (old / cache_entry.ENTRY_META).write_text(json.dumps({"targets": ["cpu"], "seconds": 193.4, "built_at": "x"}))
    assert "its last build here took 193 s" in build.build_message(cache.spec, cache.module_dir)
