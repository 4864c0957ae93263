"""The operating system's fence around a plug-in attack's worker process.

A spawned worker holds only what it is sent, but it runs as the user: without a fence it can
open the results folder (``run.key``, ``results.sqlite``, snapshots), the data root and the
runner's ``/proc/<pid>`` entries, and rebuild the ground truth from them. Landlock (Linux ≥
5.13, unprivileged) restricts the worker to reading the Python installation and the
workbench's own code and to writing a private temporary folder; once applied it cannot be
lifted, not even by root (whose capabilities the worker also drops). Landlock's ptrace rule
keeps the worker out of the runner's memory; the runner is made non-dumpable while a worker
lives as a second lock on ``/proc/<pid>/mem`` and ``environ``.

Where the kernel has no Landlock there is no fence: ``mechanism()`` says so and the caller
refuses plug-ins unless the user trusts them."""

from __future__ import annotations

import ctypes
import importlib.util
import os
import sys
import sysconfig
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from importlib.metadata import entry_points
from pathlib import Path

from fgl_workbench.errors import WorkbenchError

# Linux syscall numbers and constants (identical on x86-64 and arm64)
SYS_CREATE_RULESET, SYS_ADD_RULE, SYS_RESTRICT_SELF = 444, 445, 446
CREATE_RULESET_VERSION = 1
RULE_PATH_BENEATH = 1
PR_GET_DUMPABLE, PR_SET_DUMPABLE = 3, 4
PR_CAPBSET_DROP, PR_SET_NO_NEW_PRIVS = 24, 38
PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL = 47, 4
CAPABILITY_VERSION_3 = 0x20080522
# ABI 6: no connecting to abstract unix sockets, nor signalling, outside the sandbox
SCOPE_ABSTRACT_UNIX_SOCKET, SCOPE_SIGNAL = 1 << 0, 1 << 1
NET_BIND_TCP, NET_CONNECT_TCP = 1 << 0, 1 << 1  # ABI 4: every TCP bind and connect denied

# filesystem rights, by the ABI version that introduced them
EXECUTE, WRITE_FILE, READ_FILE, READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
DIR_ONLY_V1 = sum(1 << b for b in range(4, 13))  # remove, make dir/file/socket/fifo/dev/link
REFER, TRUNCATE = 1 << 13, 1 << 14  # ABI 2, ABI 3

# what a plug-in reads besides the Python installation and the workbench's code
SYSTEM_READ = ("/usr", "/lib", "/lib64", "/etc/ld.so.cache", "/dev/urandom", "/dev/random")
DEVICES_RW = ("/dev/null",)


class SandboxError(WorkbenchError):
    """The worker could not fence itself: the plug-in does not run."""


class _RulesetAttr(ctypes.Structure):
    _fields_ = [
        ("handled_access_fs", ctypes.c_uint64),
        ("handled_access_net", ctypes.c_uint64),
        ("scoped", ctypes.c_uint64),
    ]


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


_libc = ctypes.CDLL(None, use_errno=True)


def landlock_abi() -> int:
    """The kernel's Landlock ABI version; 0 where it has none (older kernel, disabled, or a
    seccomp filter that refuses the call)."""
    if not sys.platform.startswith("linux"):
        return 0
    version = _libc.syscall(SYS_CREATE_RULESET, None, ctypes.c_size_t(0), CREATE_RULESET_VERSION)
    return max(version, 0)


def mechanism() -> str | None:
    """The fence this machine gives a plug-in's worker, in words; None where there is none."""
    abi = landlock_abi()
    return f"Landlock ABI {abi}" if abi else None


def handled_rights(abi: int) -> int:
    """Every filesystem right the kernel's ABI knows: all of them are denied unless granted."""
    rights = EXECUTE | WRITE_FILE | READ_FILE | READ_DIR | DIR_ONLY_V1
    return rights | (REFER if abi >= 2 else 0) | (TRUNCATE if abi >= 3 else 0)


def readable_paths() -> list[Path]:
    """What a plug-in's code needs to read: the Python installation (its libraries and
    site-packages), the workbench's own packages and the system's shared libraries."""
    prefixes = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}
    libraries = {sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    own = {
        str(Path(module.__file__).parent)
        for name, module in list(sys.modules.items())
        if name.split(".")[0] == "fgl_workbench" and getattr(module, "__file__", None)
    }
    return [Path(p) for p in sorted(prefixes | libraries | own | set(SYSTEM_READ))]


def plugin_paths(group: str, names: Iterable[str] = ()) -> list[Path]:
    """Where plug-ins keep their code, so that a worker fenced before it imports them can
    still read them: every entry point registered under ``group`` and every ``module:Class``
    among ``names``, each by its top-level package or module, found without running it (an
    editable install's folder included)."""
    modules = {ep.module for ep in entry_points(group=group)}
    modules |= {name.split(":")[0] for name in names if ":" in name}
    found = set()
    for module in modules:
        spec = importlib.util.find_spec(module.split(".")[0])  # top level: runs nothing
        if spec is None:
            continue
        if spec.submodule_search_locations:
            found.update(Path(p) for p in spec.submodule_search_locations)
        elif spec.origin:
            found.add(Path(spec.origin))
    return sorted(found)


def check_fenced_off(readable: Iterable[Path], protected: Iterable[Path]) -> None:
    """Landlock only grants: a protected path (results folder, data root) inside a readable
    one would be readable. Refused rather than run with a hole."""
    for guarded in protected:
        guarded = guarded.resolve()
        for path in readable:
            if guarded.is_relative_to(path.resolve()):
                raise SandboxError(
                    f"{guarded} lies inside {path}, which a plug-in must read (its Python or "
                    "the workbench's code); choose a folder outside it"
                )


def enter(readable: Iterable[Path], writable: Iterable[Path]) -> None:
    """Fences this process for good: from now on it reads only ``readable`` and writes only
    ``writable`` (and what it had open), binds and connects no TCP socket (ABI ≥ 4), reaches
    no abstract unix socket and signals no process outside (ABI ≥ 6), and holds no
    capabilities. Raises ``SandboxError`` where the kernel refuses."""
    abi = landlock_abi()
    if not abi:
        raise SandboxError("this kernel has no Landlock: the plug-in's worker cannot be fenced")
    handled = handled_rights(abi)
    last_capability = int(Path("/proc/sys/kernel/cap_last_cap").read_text())
    network = NET_BIND_TCP | NET_CONNECT_TCP if abi >= 4 else 0
    scoped = SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL if abi >= 6 else 0
    attr = _RulesetAttr(handled, network, scoped)
    # the struct as long as the kernel's ABI knows it: access_fs, then access_net, then scoped
    size = ctypes.sizeof(ctypes.c_uint64) * (3 if abi >= 6 else 2 if abi >= 4 else 1)
    ruleset = _call(SYS_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(size), 0)
    try:
        for path in readable:
            _grant(ruleset, path, EXECUTE | READ_FILE | READ_DIR)
        for path in writable:
            _grant(ruleset, path, handled)
        _prctl(PR_SET_NO_NEW_PRIVS, 1)
        _call(SYS_RESTRICT_SELF, ruleset, 0)
    finally:
        os.close(ruleset)
    _drop_capabilities(last_capability)


def _grant(ruleset: int, path: Path, rights: int) -> None:
    """Grants ``rights`` beneath ``path`` (a file gets only the rights a file can have);
    a path this machine lacks is skipped."""
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except FileNotFoundError:
        return
    try:
        if not Path(path).is_dir():
            rights &= EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE
        rule = _PathBeneath(rights, fd)
        _call(SYS_ADD_RULE, ruleset, RULE_PATH_BENEATH, ctypes.byref(rule), 0)
    finally:
        os.close(fd)


def _drop_capabilities(last: int) -> None:
    """Root keeps its uid but loses every capability (CAP_DAC_READ_SEARCH's
    ``open_by_handle_at`` would pass beside Landlock). With no_new_privs set, no later exec
    gains them back; the bounding set is emptied too where CAP_SETPCAP allows it."""
    for cap in range(last + 1 if os.geteuid() == 0 else 0):
        _libc.prctl(PR_CAPBSET_DROP, ctypes.c_ulong(cap), 0, 0, 0)  # EPERM: no CAP_SETPCAP
    _prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL)
    header = (ctypes.c_uint32 * 2)(CAPABILITY_VERSION_3, 0)
    data = (ctypes.c_uint32 * 6)()  # effective, permitted, inheritable × 2 words: all empty
    if _libc.capset(header, data) != 0:
        raise SandboxError(f"capset: {os.strerror(ctypes.get_errno())}")


@contextmanager
def undumpable() -> Iterator[None]:
    """The runner non-dumpable while a plug-in's worker lives: its ``/proc/<pid>/mem``,
    ``environ`` and the like then belong to root and refuse a ptrace-style read."""
    if not sys.platform.startswith("linux"):
        yield
        return
    before = _prctl(PR_GET_DUMPABLE, 0)
    _prctl(PR_SET_DUMPABLE, 0)
    try:
        yield
    finally:
        _prctl(PR_SET_DUMPABLE, before)


def _prctl(option: int, value: int) -> int:
    result = _libc.prctl(option, ctypes.c_ulong(value), 0, 0, 0)
    if result < 0:
        raise SandboxError(f"prctl({option}): {os.strerror(ctypes.get_errno())}")
    return result


def _call(number: int, *args: object) -> int:
    result = _libc.syscall(number, *args)
    if result < 0:
        raise SandboxError(f"Landlock syscall {number}: {os.strerror(ctypes.get_errno())}")
    return result
