"""The operating system's fence around a plug-in attack's worker process.

A spawned worker holds only what it is sent, but it runs as the user: without a fence it can
open the results folder (``run.key``, ``results.sqlite``, snapshots), the data root and the
runner's ``/proc/<pid>`` entries, and rebuild the ground truth from them. Landlock (Linux ≥
5.13, unprivileged) restricts the worker to reading the Python installation and the
workbench's own code and to writing a private temporary folder; once applied it cannot be
lifted, not even by root (whose capabilities the worker also drops). Landlock's ptrace rule
keeps the worker out of the runner's memory; the runner is made non-dumpable while a worker
lives as a second lock on ``/proc/<pid>/mem`` and ``environ``. Landlock does not fence System
V IPC, UDP or a process that leaves the session, through which two plug-in rows of one suite
could talk (the fourth review: a querier row scored AUC 1.000 from the ids curious-client rows
left in shared memory), so a Landlock worker also runs in its own user, PID, network and IPC
namespaces: its segments and sockets are its own, and everything it started dies with it.

Where the kernel has no Landlock but lets an unprivileged process create user namespaces, the
worker is fenced by namespaces alone: a new root holding only what Landlock would grant
(read-only binds of ``readable``, read-write binds of ``writable``), a fresh ``/proc`` of a
new PID namespace, a network namespace with nothing in it, and no capabilities. Where
neither works (Landlock without user namespaces included) there is no fence: ``mechanism()``
says so and the caller refuses plug-ins unless the user trusts them. ``FGLWB_SANDBOX`` (read
where the run is decided) forces one."""

from __future__ import annotations

import ctypes
import functools
import importlib
import importlib.util
import os
import signal
import site
import subprocess
import sys
import sysconfig
import tempfile
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager, suppress
from importlib.machinery import PathFinder
from importlib.metadata import entry_points
from pathlib import Path

from fgl_workbench.errors import ConfigError, WorkbenchError

# Linux syscall numbers and constants (identical on x86-64 and arm64)
SYS_CREATE_RULESET, SYS_ADD_RULE, SYS_RESTRICT_SELF = 444, 445, 446
CREATE_RULESET_VERSION = 1
RULE_PATH_BENEATH = 1
PR_SET_PDEATHSIG, PR_GET_DUMPABLE, PR_SET_DUMPABLE = 1, 3, 4
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

# every fence's namespaces: a user namespace to own the others; PIDs (what the worker starts
# dies with it), network (no loopback to another worker), System V IPC; the namespace fence
# adds its own mounts
CLONE_NEWNS, CLONE_NEWIPC, CLONE_NEWUSER = 0x00020000, 0x08000000, 0x10000000
CLONE_NEWPID, CLONE_NEWNET = 0x20000000, 0x40000000
ISOLATED = CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT = 1, 2, 4, 8, 32
MS_BIND, MS_REC, MS_PRIVATE, MNT_DETACH = 1 << 12, 1 << 14, 1 << 18, 2
# a bind's flags that a user namespace may not clear, kept from the mount it comes from
# (statvfs reports them with these values; a remount keeps the atime flags by itself)
KEPT_MOUNT_FLAGS = MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC
# the new root's own folders, holding only the way to what is granted: read-only, listable
# (Python finds a module by listing its folder: /etc holds ld.so.cache alone, /tmp the
# scratch folder's way)
SKELETON_MODE = 0o555

# What no namespace holds, and so would pass from one plug-in process to another (the fifth
# review: a lock taken by a worker, seen by the long-lived describer and read by a later row's
# worker, AUC 1.000; the sixth: a file's write-life hint, set by one row and read by the next):
# the kernel's keyrings (a key linked into the session keyring every worker inherits, or into
# the user's, by its serial), file locks, leases, notifications and hints on files both may
# read, and inotify or fanotify watches on them. A seccomp filter answers these calls EPERM,
# and ``fcntl`` with any command but those on the descriptor itself (``FCNTL_OWN``). (The page
# cache's state stays readable, exactly, by ``mincore``, a ``RWF_NOWAIT`` read or the time a
# read takes: refusing some of these ways would close none; docs/design.md.) Per
# architecture: its audit arch, ``fcntl``'s number, and the calls refused whole (flock,
# add_key, request_key, keyctl, inotify_init, inotify_init1, fanotify_init; arm64 has no
# inotify_init)
SHARED_STATE_CALLS = {
    "x86_64": (0xC000003E, 72, (73, 248, 249, 250, 253, 294, 300)),
    "aarch64": (0xC00000B7, 25, (32, 217, 218, 219, 26, 262)),
}
# fcntl's commands on the descriptor and its own memfd: F_DUPFD, F_GETFD, F_SETFD, F_GETFL,
# F_SETFL, F_DUPFD_CLOEXEC, F_SETPIPE_SZ, F_GETPIPE_SZ, F_ADD_SEALS, F_GET_SEALS
FCNTL_OWN = (0, 1, 2, 3, 4, 1030, 1031, 1032, 1033, 1034)
X32_BIT = 0x40000000  # x86-64's x32 calls share its audit arch: their numbers carry this bit
PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 22, 2
BPF_LD_W_ABS, BPF_JEQ_K, BPF_JGE_K, BPF_RET_K = 0x20, 0x15, 0x35, 0x06
SECCOMP_RET_ALLOW, SECCOMP_RET_EPERM = 0x7FFF0000, 0x00050000 | 1
SECCOMP_ARCH, SECCOMP_NR, SECCOMP_ARG1 = 4, 0, 24  # offsets in seccomp_data (arg: low word)

SANDBOX_VARIABLE = "FGLWB_SANDBOX"
MECHANISMS = ("landlock", "namespaces")  # the best first


class SandboxError(WorkbenchError):
    """The worker could not fence itself: the plug-in does not run."""


class _RulesetAttr(ctypes.Structure):
    _fields_ = [
        ("handled_access_fs", ctypes.c_uint64),
        ("handled_access_net", ctypes.c_uint64),
        ("scoped", ctypes.c_uint64),
    ]


class _SockFilter(ctypes.Structure):
    _fields_ = [
        ("code", ctypes.c_uint16),
        ("jt", ctypes.c_uint8),
        ("jf", ctypes.c_uint8),
        ("k", ctypes.c_uint32),
    ]


class _SockProgram(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(_SockFilter))]


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


@functools.cache
def works(how: str) -> bool:
    """Whether this machine can build fence ``how`` (one of ``MECHANISMS``), tried once
    (cached) in a short-lived Python process: both fences fork, and forking the runner, whose
    threads may hold locks, is no probe."""
    if not sys.platform.startswith("linux") or (how == "landlock" and not landlock_abi()):
        return False
    probe = f"import sys; sys.path = {sys.path!r}; from fgl_workbench import sandbox; "
    probe += f"sandbox.enter([], [], {how!r})"
    try:
        done = subprocess.run([sys.executable, "-c", probe], capture_output=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def chosen() -> str | None:
    """The fence a plug-in's worker gets here (one of ``MECHANISMS``): the one
    ``FGLWB_SANDBOX`` names (``none``: no fence), else the best this machine has; None where
    there is none. A name it does not know, or a fence this machine cannot build, is one
    line."""
    asked = os.environ.get(SANDBOX_VARIABLE, "").strip()
    if not asked:
        return next((how for how in MECHANISMS if works(how)), None)
    if asked == "none":
        return None
    if asked not in MECHANISMS:
        raise ConfigError(
            f"{SANDBOX_VARIABLE}={asked!r}: choose one of {', '.join(MECHANISMS)} or none"
        )
    if not works(asked):
        why = " (Landlock needs user namespaces beside it)" if asked == "landlock" else ""
        raise ConfigError(
            f"{SANDBOX_VARIABLE}={asked}: this machine cannot fence with {asked}{why}"
        )
    return asked


def mechanism() -> str | None:
    """The fence a plug-in's worker gets here, in the words its row records (``Landlock ABI
    n + namespaces``, ``namespaces``); None where there is none."""
    how = chosen()
    if how == "landlock":
        return f"Landlock ABI {landlock_abi()} + namespaces"
    return how


def handled_rights(abi: int) -> int:
    """Every filesystem right the kernel's ABI knows: all of them are denied unless granted."""
    rights = EXECUTE | WRITE_FILE | READ_FILE | READ_DIR | DIR_ONLY_V1
    return rights | (REFER if abi >= 2 else 0) | (TRUNCATE if abi >= 3 else 0)


def readable_paths() -> list[Path]:
    """What a plug-in's code needs to read: the Python installation (its libraries and
    site-packages, the user's own and any a ``.pth`` file adds), the workbench's own packages
    and the system's shared libraries."""
    prefixes = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}
    libraries = {sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    libraries |= {p for p in [site.getusersitepackages(), *sys.path] if _is_site_packages(p)}
    # the workbench's packages' folders (not any module named under it: PyG writes the
    # propagate code it generates for our layers to /tmp, under our modules' names)
    own = {
        str(Path(folder))
        for name, module in list(sys.modules.items())
        if name.split(".")[0] == "fgl_workbench"
        for folder in getattr(module, "__path__", None) or ()
    }
    return [Path(p) for p in sorted(prefixes | libraries | own | set(SYSTEM_READ))]


def _is_site_packages(path: str) -> bool:
    """A folder installed packages live in (``pip install --user`` puts them in the user's)."""
    return Path(path).name in ("site-packages", "dist-packages") and os.path.isdir(path)


def plugin_paths(group: str, names: Iterable[str] = ()) -> list[Path]:
    """Where plug-ins keep their code, so that a worker fenced before it imports them can
    still read them: every entry point registered under ``group`` and every ``module:Class``
    among ``names``, each by its top-level package or module, found without running it (an
    editable install's folder included)."""
    modules = {ep.module for ep in entry_points(group=group)}
    modules |= {name.split(":")[0] for name in names if ":" in name}
    found = set()
    for module in modules:
        top = module.split(".")[0]  # the top level: finding it runs nothing
        spec = PathFinder.find_spec(top, [str(p) for p in plugin_folders()])
        spec = spec or importlib.util.find_spec(top)
        if spec is None:
            continue
        if spec.submodule_search_locations:
            found.update(Path(p) for p in spec.submodule_search_locations)
        elif spec.origin:
            found.add(Path(spec.origin))
    return sorted(found)


PLUGIN_PATH_VARIABLE = "FGLWB_PLUGIN_PATH"


def plugin_folders() -> list[Path]:
    """The folders of ``FGLWB_PLUGIN_PATH`` (``os.pathsep``-separated): where plug-in
    attacks named by ``module:Class`` live. Only fenced processes put them on their Python
    path, so nothing there (a module named like an optional dependency of ours, say) is
    ever imported by the runner, as it would be from a folder on the runner's own path."""
    text = os.environ.get(PLUGIN_PATH_VARIABLE, "")
    folders = [Path(p) for p in text.split(os.pathsep) if p]
    for folder in folders:
        if not folder.is_dir():
            raise ConfigError(f"{PLUGIN_PATH_VARIABLE}: {folder} is not a folder")
    return folders


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


def enter(
    readable: Iterable[Path], writable: Iterable[Path], how: str | None = None, cuda: bool = False
) -> None:
    """Fences this process for good with ``how`` (one of ``MECHANISMS``; None: ``chosen()``):
    from now on it reads only ``readable`` and writes only ``writable`` (and what it had
    open), holds no capabilities, shares no System V IPC or network with anyone and takes
    whatever it starts down with it. Only the last of three processes returns from here
    (``_isolate``). ``cuda``: a GPU context is opened inside the namespaces, before the
    filesystem closes (Landlock only: the namespace fence's root has no device files). Raises
    ``SandboxError`` where the fence cannot be built."""
    how = how or chosen()
    if how not in MECHANISMS:
        raise SandboxError(f"no sandbox {how!r} here: choose one of {', '.join(MECHANISMS)}")
    if cuda and how == "namespaces":
        raise SandboxError(
            "namespaces: this fence's new root has no GPU device files; run plug-ins on the "
            "CPU or where Landlock fences them"
        )
    readable, writable = list(readable), list(writable)
    last_capability = int(Path("/proc/sys/kernel/cap_last_cap").read_text())  # while readable
    if how == "landlock":
        _isolate(CLONE_NEWNS)
        try:
            _read_only_in_place(readable)
        except OSError as exc:
            raise SandboxError(f"Landlock's namespaces: {exc}") from None
        if cuda:
            _open_cuda()
        _prctl(PR_SET_NO_NEW_PRIVS, 1)
        _enter_landlock(readable, writable)
    else:
        root = tempfile.mkdtemp(prefix="fglwb-root-")  # the new root's mount point
        _isolate(CLONE_NEWNS, remove=root)
        try:
            _build_root(root, readable, writable)
        except OSError as exc:
            raise SandboxError(f"namespaces: {exc}") from None
        _prctl(PR_SET_NO_NEW_PRIVS, 1)
    _drop_capabilities(last_capability)
    _deny_shared_state()


def _deny_shared_state() -> None:
    """A seccomp filter (``no_new_privs`` is set) answering EPERM to the calls that reach
    what no namespace holds (``SHARED_STATE_CALLS``, ``fcntl`` beyond ``FCNTL_OWN``), as to
    every call of another architecture's numbering (x86's ``int 0x80``, x32). This process
    is single-threaded here (``_isolate`` forked it), so the filter covers all it will run."""
    machine = os.uname().machine
    if machine not in SHARED_STATE_CALLS:
        raise SandboxError(f"no system call numbers for {machine}: cannot fence")
    arch, fcntl, calls = SHARED_STATE_CALLS[machine]
    steps: list[tuple[int, int | str, int, int] | str] = [
        (BPF_LD_W_ABS, 0, 0, SECCOMP_ARCH),
        (BPF_JEQ_K, 1, 0, arch),
        (BPF_RET_K, 0, 0, SECCOMP_RET_EPERM),
        (BPF_LD_W_ABS, 0, 0, SECCOMP_NR),
        (BPF_JGE_K, "deny", 0, X32_BIT),
        (BPF_JEQ_K, "fcntl", 0, fcntl),
        *((BPF_JEQ_K, "deny", 0, call) for call in calls),
        (BPF_RET_K, 0, 0, SECCOMP_RET_ALLOW),
        "fcntl",
        (BPF_LD_W_ABS, 0, 0, SECCOMP_ARG1),
        *((BPF_JEQ_K, "allow", 0, command) for command in FCNTL_OWN),
        "deny",
        (BPF_RET_K, 0, 0, SECCOMP_RET_EPERM),
        "allow",
        (BPF_RET_K, 0, 0, SECCOMP_RET_ALLOW),
    ]
    program = _resolved(steps)
    filters = (_SockFilter * len(program))(*(_SockFilter(*step) for step in program))
    fprog = _SockProgram(len(program), filters)
    if _libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0) != 0:
        raise SandboxError(f"seccomp: {os.strerror(ctypes.get_errno())}")


def _resolved(steps: list) -> list[tuple[int, int, int, int]]:
    """A BPF program with its labels (strings among the steps) gone and each jump to a label
    made the count of instructions it skips."""
    at, program = {}, []
    for step in steps:
        if isinstance(step, str):
            at[step] = len(program)
        else:
            program.append(step)
    return [
        (code, at[jt] - i - 1 if isinstance(jt, str) else jt, jf, k)
        for i, (code, jt, jf, k) in enumerate(program)
    ]


def _read_only_in_place(readable: list[Path]) -> None:
    """Each readable path bound onto itself read-only, in this process's own mount namespace:
    reading there stamps no access time, which the fifth review read back from row to row
    (a worker read one byte of chosen files under ``/usr``, relatime stamped them, a later
    row's worker ``stat``-ed them: AUC 1.000, the bits outliving the run). What is mounted
    beneath a readable path stays out, as in the namespace fence's root."""
    _mount(None, "/", None, MS_REC | MS_PRIVATE)  # nothing propagates back out
    for path in sorted(str(p) for p in readable):  # a folder before what lies inside it
        _bind("", path, write=False)


def _open_cuda() -> None:
    """A GPU context, its device files opened while they can still be."""
    import torch

    torch.zeros(1, device="cuda")


def _enter_landlock(readable: list[Path], writable: list[Path]) -> None:
    """Landlock: binds and connects no TCP socket (ABI ≥ 4), reaches no abstract unix
    socket and signals no process outside (ABI ≥ 6)."""
    abi = landlock_abi()
    if not abi:
        raise SandboxError("this kernel has no Landlock: the plug-in's worker cannot be fenced")
    handled = handled_rights(abi)
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
        _call(SYS_RESTRICT_SELF, ruleset, 0)  # no_new_privs is set
    finally:
        os.close(ruleset)


def _isolate(more: int = 0, remove: str | None = None) -> None:
    """New user (its own uid and gid mapped, so root keeps no capability outside), PID,
    network and IPC namespaces, and ``more``: this process, maybe threaded (unshare refuses a
    user namespace to a threaded process), forks; its single-threaded child unshares and
    forks again; that grandchild, the new PID namespace's first process, returns. Each parent
    only waits and exits with its child's status; ``remove`` is an empty folder the first
    removes. When the grandchild ends, the kernel kills all it started (a ``setsid`` orphan
    included)."""
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        raise SandboxError(
            "this worker's CUDA context cannot follow it into the fence (CUDA does not "
            "survive a fork): open it inside (enter(cuda=True))"
        )
    _continue_in_child(remove=remove)
    uid, gid = os.getuid(), os.getgid()
    try:
        _check(_libc.unshare(ISOLATED | more), "unshare")
        Path("/proc/self/setgroups").write_text("deny")
        Path("/proc/self/uid_map").write_text(f"{uid} {uid} 1")
        Path("/proc/self/gid_map").write_text(f"{gid} {gid} 1")
    except OSError as exc:
        raise SandboxError(f"namespaces: {exc}") from None
    _continue_in_child()


def _continue_in_child(remove: str | None = None) -> None:
    """Forks: the child returns (killed if its parent dies); the parent waits for it,
    removes the empty folder ``remove`` and exits with the child's status (128 + the signal
    that killed it)."""
    pid = os.fork()
    if pid == 0:
        _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        return
    code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    if remove is not None:
        with suppress(OSError):
            os.rmdir(remove)
    os._exit(code if code >= 0 else 128 - code)


def _build_root(root: str, readable: list[Path], writable: list[Path]) -> None:
    """A tmpfs at ``root`` holding read-only binds of ``readable`` and read-write binds of
    ``writable`` (their own folders only: what is mounted beneath them stays out) and a
    fresh ``/proc`` (this PID namespace's processes alone); then it becomes ``/``, made
    read-only, and the old root is detached: nothing else exists."""
    _mount(None, "/", None, MS_REC | MS_PRIVATE)  # nothing propagates back out
    _mount("tmpfs", root, "tmpfs", MS_NOSUID | MS_NODEV, f"mode={SKELETON_MODE:o}")
    binds = sorted([(str(p), False) for p in readable] + [(str(p), True) for p in writable])
    for path, write in binds:  # a folder before what lies inside it
        _bind(root, path, write)
    _make_folders(root + "/proc")
    _mount("proc", root + "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    os.chdir(root)
    _check(_libc.pivot_root(b".", b"."), "pivot_root")  # the old root now lies on top
    _check(_libc.umount2(b".", MNT_DETACH), "umount of the old root")
    os.chdir("/")
    _mount(None, "/", None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)


def _bind(root: str, path: str, write: bool) -> None:
    """``path`` bound at the same place under ``root``, read-only unless ``write``, with the
    symbolic links on the way to it (``/lib`` → ``usr/lib``); a path this machine lacks is
    skipped."""
    source = os.path.realpath(path)
    if not os.path.exists(source):
        return
    _replicate_links(root, path)
    target = root + source
    if os.path.isdir(source):
        _make_folders(target)
    else:
        _make_folders(os.path.dirname(target))
        if not os.path.exists(target):
            os.close(os.open(target, os.O_CREAT | os.O_WRONLY, 0))
    _mount(source, target, None, MS_BIND)
    kept = os.statvfs(source).f_flag & KEPT_MOUNT_FLAGS
    flags = MS_BIND | MS_REMOUNT | MS_NOSUID | kept | (0 if write else MS_RDONLY)
    _mount(None, target, None, flags)


def _replicate_links(root: str, path: str) -> None:
    """Every symbolic link on ``path`` made again, pointing where it points, at its
    resolved place under ``root``."""
    here = "/"
    for part in Path(path).parts[1:]:
        step = os.path.join(here, part)
        if os.path.islink(step) and not os.path.lexists(root + step):
            _make_folders(root + here)
            os.symlink(os.readlink(step), root + step)
        here = os.path.realpath(step)


def _make_folders(path: str) -> None:
    """``path`` and its missing parents, as the new root's own folders."""
    if not os.path.isdir(path):
        _make_folders(os.path.dirname(path))
        os.mkdir(path, SKELETON_MODE)


def _mount(source: str | None, target: str, kind: str | None, flags: int, data: str = "") -> None:
    encoded = [None if v is None else v.encode() for v in (source, target, kind, data)]
    result = _libc.mount(encoded[0], encoded[1], encoded[2], ctypes.c_ulong(flags), encoded[3])
    _check(result, f"mount {target}")


def _check(result: int, what: str) -> None:
    if result < 0:
        raise SandboxError(f"{what}: {os.strerror(ctypes.get_errno())}")


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


def run_fenced(
    readable: list[Path] | None,
    how: str | None,
    scratch: str,
    environment: dict[str, str],
    cuda: bool,
    target: str,
    args: tuple,
) -> None:
    """A plug-in process's whole start, before anything of the workbench beyond this module
    is imported: its own session (the runner kills it and whatever it started together), no
    handle on the runner's resource tracker (which would unlink shared memory it names), its
    standard streams off the user's terminal, the environment replaced by ``environment``,
    temporary files in ``scratch``, a GPU context when ``cuda`` (opened inside the fence's
    namespaces), and the fence ``how`` (``readable`` None: the user trusted it unfenced).
    Only then is ``target`` (``module:function``) imported and called as ``target(refused,
    *args)``, ``refused`` the fence's one-line failure or None. Landlock fences the calling
    thread alone: a Python thread here besides this one would escape it, so one is a
    refusal."""
    os.setsid()
    _forget_resource_tracker()
    _off_the_terminal(scratch)
    folders = [str(p) for p in plugin_folders()]  # read before the environment goes
    os.environ.clear()
    os.environ.update(environment, TMPDIR=scratch)
    tempfile.tempdir = scratch
    refused = None
    try:
        if readable is not None:
            _alone()
            enter(readable, [Path(scratch), *map(Path, DEVICES_RW)], how, cuda)
        elif cuda:
            _open_cuda()
    except SandboxError as exc:
        refused = str(exc)
    sys.path[:0] = folders
    module, _, function = target.partition(":")
    getattr(importlib.import_module(module), function)(refused, *args)


def _off_the_terminal(scratch: str) -> None:
    """Standard input from ``/dev/null``, output and errors to a file in the scratch folder
    (gone with it): the fifth review's plug-in, holding the user's terminal on its inherited
    descriptors, read what the user typed and wrote escape sequences and a fake verdict line
    onto the screen."""
    nothing = os.open(os.devnull, os.O_RDONLY)
    console = os.open(os.path.join(scratch, "console.txt"), os.O_WRONLY | os.O_CREAT, 0o600)
    for fd, target in ((0, nothing), (1, console), (2, console)):
        os.dup2(target, fd)
    os.close(nothing)
    os.close(console)


def _alone() -> None:
    """No Python thread besides the caller: one started by code imported before the fence
    (the runner's main module, re-imported by ``spawn``) would escape Landlock. Threads of
    native libraries (OpenMP, allocators, a GPU driver) run no Python code and stay."""
    others = threading.active_count() - 1
    if others:
        raise SandboxError(f"{others} Python thread(s) started before the fence would escape it")


def _forget_resource_tracker() -> None:
    """Closes the pipe to the runner's multiprocessing resource tracker, which a spawned
    process inherits: the tracker runs unfenced and unlinks whatever names it is sent."""
    from multiprocessing import resource_tracker

    tracker = resource_tracker._resource_tracker  # the stdlib keeps it private
    fd = getattr(tracker, "_fd", None)
    if fd is not None:
        with suppress(OSError):
            os.close(fd)
        tracker._fd = None


def kill_session(pid: int | None) -> None:
    """Everything a plug-in process started in its session, after it: gone."""
    if pid is not None:
        with suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)
