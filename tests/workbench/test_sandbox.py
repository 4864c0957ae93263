"""The sandbox's pieces: a protected folder inside a readable one is refused (Landlock only
grants), the runner is non-dumpable only while plug-ins run, FGLWB_SANDBOX picks the fence,
and a child fenced by namespaces reaches nothing but what it is given."""

import contextlib
import fcntl
import importlib
import json
import multiprocessing
import os
import socket
import sys
import threading
import time
from pathlib import Path

import pytest

from fgl_workbench import sandbox
from fgl_workbench.errors import ConfigError


def test_a_protected_folder_inside_a_readable_one_is_refused(tmp_path):
    code, out = tmp_path / "code", tmp_path / "code" / "results"
    out.mkdir(parents=True)
    with pytest.raises(sandbox.SandboxError, match="lies inside"):
        sandbox.check_fenced_off([code], [out])
    sandbox.check_fenced_off([code], [tmp_path / "elsewhere"])


def test_the_runners_python_is_readable_and_nothing_else_of_it():
    """Nor the temporary folder where PyG writes the code it generates for our layers, under
    our modules' names (a run then refused any results folder under /tmp)."""
    import fgl_workbench.models.node  # noqa: F401  (its layers' generated modules)

    readable = sandbox.readable_paths()
    assert any(p == sandbox.Path(sys.prefix) for p in readable)
    assert not any(p in (sandbox.Path("/"), sandbox.Path("/tmp")) for p in readable)


def test_packages_installed_for_the_user_or_by_a_pth_file_are_readable(tmp_path, monkeypatch):
    """``pip install --user`` puts packages in the user's site-packages, and a ``.pth`` file
    may add another: a plug-in importing them fenced must be able to read them (run as a
    user other than root, a venv whose ``.pth`` adds another venv's packages failed so)."""
    user, added = tmp_path / "user" / "site-packages", tmp_path / "other" / "dist-packages"
    user.mkdir(parents=True)
    added.mkdir(parents=True)
    monkeypatch.setattr(sandbox.site, "getusersitepackages", lambda: str(user))
    monkeypatch.setattr(sys, "path", [*sys.path, str(added), str(tmp_path)])
    readable = sandbox.readable_paths()
    assert user in readable and added in readable and tmp_path not in readable


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="prctl is Linux's")
def test_the_runner_is_non_dumpable_while_a_plugin_runs():
    before = sandbox._prctl(sandbox.PR_GET_DUMPABLE, 0)
    with sandbox.undumpable():
        assert sandbox._prctl(sandbox.PR_GET_DUMPABLE, 0) == 0
    assert sandbox._prctl(sandbox.PR_GET_DUMPABLE, 0) == before


def test_fglwb_sandbox_picks_the_fence_in_one_line(monkeypatch):
    """The variable forces a fence, or none; a name it does not know, or a fence this machine
    cannot build, is one line naming the variable."""
    if sandbox.works("namespaces"):
        monkeypatch.setenv(sandbox.SANDBOX_VARIABLE, "namespaces")
        assert sandbox.chosen() == "namespaces" and sandbox.mechanism() == "namespaces"
    monkeypatch.setenv(sandbox.SANDBOX_VARIABLE, "none")
    assert sandbox.chosen() is None and sandbox.mechanism() is None
    monkeypatch.setenv(sandbox.SANDBOX_VARIABLE, "seccomp")
    with pytest.raises(ConfigError, match="FGLWB_SANDBOX='seccomp': choose one of landlock"):
        sandbox.mechanism()
    monkeypatch.setattr(sandbox, "works", lambda how: how != "landlock")
    monkeypatch.setenv(sandbox.SANDBOX_VARIABLE, "landlock")
    with pytest.raises(ConfigError, match="FGLWB_SANDBOX=landlock: this machine cannot") as no:
        sandbox.mechanism()
    assert "\n" not in str(no.value) and "user namespaces beside it" in str(no.value)


def fenced_child(readable, scratch, secret, parent, port, unix_name):
    """In a spawned child with a second thread running (as a worker that loaded torch has):
    the namespace fence, then each reach tried; what happened is written to the scratch
    folder, the one place it may write."""
    threading.Thread(target=threading.Event().wait, daemon=True).start()
    sandbox.enter(readable, [Path(scratch), Path("/dev/null")], "namespaces")
    attempts = {
        "secret": lambda: Path(secret).read_bytes(),
        "secret_folder": lambda: os.listdir(Path(secret).parent),
        "tmp": lambda: os.listdir("/tmp"),
        "home": lambda: os.listdir(Path.home()),
        "cmdline": lambda: Path(f"/proc/{parent}/cmdline").read_bytes(),
        "environ": lambda: Path(f"/proc/{parent}/environ").read_bytes(),
        "mem": lambda: open(f"/proc/{parent}/mem", "rb").close(),  # noqa: SIM115
        "tcp": lambda: socket.create_connection(("127.0.0.1", port), timeout=5).close(),
        "abstract_socket": lambda: _connect_unix("\0" + unix_name),
        "numpy": lambda: importlib.import_module("numpy").ones(2).sum(),
        "torch": lambda: importlib.import_module("torch").ones(2).sum(),
    }
    tried = {}
    for what, attempt in attempts.items():
        try:
            got = attempt()
            tried[what] = sorted(got) if isinstance(got, list) else "reached"
        except OSError as exc:
            tried[what] = type(exc).__name__
    (Path(scratch) / "tried.json").write_text(json.dumps(tried))


def _connect_unix(address):
    with socket.socket(socket.AF_UNIX) as s:
        s.connect(address)


@pytest.mark.skipif(not sandbox.works("namespaces"), reason="no unprivileged user namespaces")
def test_a_child_fenced_by_namespaces_reaches_only_what_it_is_given(tmp_path):
    """The fallback fence: a protected file, its folder, /tmp, home, this process's
    /proc entries (its pid told to the child) and a TCP port and abstract unix socket this
    process listens on are out of reach; numpy and torch still import, and the scratch
    folder takes its report."""
    scratch, secret = tmp_path / "scratch", tmp_path / "secret"
    scratch.mkdir()
    secret.write_text("run key")
    name = f"fglwb-test-{os.getpid()}"
    with socket.create_server(("127.0.0.1", 0)) as tcp, socket.socket(socket.AF_UNIX) as unix:
        unix.bind("\0" + name)
        unix.listen()
        start = (sandbox.readable_paths(), str(scratch), str(secret), os.getpid())
        child = multiprocessing.get_context("spawn").Process(
            target=fenced_child, args=(*start, tcp.getsockname()[1], name), daemon=True
        )
        child.start()
        child.join(120)
    assert child.exitcode == 0  # the fenced grandchild's status, passed on by its parents
    tried = json.loads((scratch / "tried.json").read_text())
    granted = [*start[0], scratch]
    assert tried["secret_folder"] == ["scratch"]  # the way to the scratch folder alone
    assert tried["tmp"] == listed(Path("/tmp"), granted)
    assert tried["home"] == listed(Path.home(), granted)
    assert tried["numpy"] == tried["torch"] == "reached"
    unreached = ("secret", "cmdline", "environ", "mem", "tcp", "abstract_socket")
    assert {what: tried[what] for what in unreached} == {
        **dict.fromkeys(("secret", "cmdline", "environ", "mem"), "FileNotFoundError"),
        "tcp": "OSError",  # the new network namespace's loopback is down: unreachable
        "abstract_socket": "ConnectionRefusedError",  # nobody listens in that namespace
    }


def listed(folder, granted):
    """What a fenced child lists in ``folder``: the first step of the way to each granted
    path inside it; where there is none the folder does not exist."""
    ways = {p.relative_to(folder).parts[0] for p in granted if p.is_relative_to(folder)}
    return sorted(ways) if ways else "FileNotFoundError"


def _start_thread() -> None:
    threading.Thread(target=threading.Event().wait, args=(30,), daemon=True).start()


class _ThreadOnArrival:
    """Unpickled in the child, before the fence, it starts a Python thread: what code the
    child imports before the fence (its parent's main module) could do."""

    def __reduce__(self):
        return (_start_thread, ())


def record_refusal(refused: str | None, path: str, _: object) -> None:
    Path(path).write_text(refused or "fenced")


@pytest.mark.skipif(not sandbox.works("landlock"), reason="this kernel has no Landlock")
def test_a_python_thread_started_before_the_fence_is_a_refusal(tmp_path):
    """The third review: Landlock fences the calling thread alone, and a thread started by
    code imported before the fence read ``run.key`` after it (AUC 1.000). A plug-in process
    with such a thread now refuses to run."""
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    report = scratch / "refused"
    readable = [*sandbox.readable_paths(), Path(__file__).parent]
    work = (str(report), _ThreadOnArrival())
    start = (readable, "landlock", str(scratch), {}, False, f"{__name__}:record_refusal", work)
    child = multiprocessing.get_context("spawn").Process(target=sandbox.run_fenced, args=start)
    child.start()
    child.join(120)
    assert "Python thread(s) started before the fence would escape it" in report.read_text()


SHM_KEY = 0x43C0  # the fourth review's segment key
ADD_KEY, KEYCTL = {"x86_64": (248, 250), "aarch64": (217, 219)}.get(os.uname().machine, (0, 0))
KEY_NAME, SESSION_KEYRING, KEYCTL_SEARCH = b"fglwb-test-ids", -3, 10
F_SET_RW_HINT = 1036


def leave_traces(refused: str | None, scratch: str, port: int, stamped: str) -> None:
    """What the fourth review's colluding rows did, from inside a fence: a System V shared
    memory segment left behind, a UDP datagram to a port of the runner's machine, and a
    ``setsid`` orphan that keeps beating in the scratch folder."""
    if refused:
        Path(scratch, "refused").write_text(refused)
        return
    libc = sandbox._libc
    segment = libc.shmget(SHM_KEY, 4096, 0o1600)  # IPC_CREAT, owner read-write
    Path(scratch, "segment").write_text(str(segment))
    key = libc.syscall(ADD_KEY, b"user", KEY_NAME, b"member ids", 10, SESSION_KEYRING)
    Path(scratch, "key").write_text(str(key))
    shared = {}  # the fifth review's channels through what every process may read
    with open(__file__, "rb") as readable:
        for name, how in (("flock", fcntl.LOCK_SH), ("lockf", fcntl.LOCK_SH | fcntl.LOCK_NB)):
            try:
                (fcntl.flock if name == "flock" else fcntl.lockf)(readable, how)
                shared[name] = "taken"
            except OSError as exc:
                shared[name] = type(exc).__name__
    shared["inotify"] = libc.inotify_init1(0)
    with open(__file__, "rb") as readable:  # the sixth review's write-life hint (a u64)
        try:
            fcntl.fcntl(readable, F_SET_RW_HINT, bytes(8))
            shared["hint"] = "set"
        except OSError as exc:
            shared["hint"] = type(exc).__name__
        shared["own_flags"] = fcntl.fcntl(readable, fcntl.F_GETFL) >= 0  # still allowed
    Path(stamped).read_bytes()  # relatime would stamp its access time, days old
    shared["stdin_is_null"] = os.path.samestat(os.fstat(0), os.stat(os.devnull))
    console = os.stat(Path(scratch, "console.txt"))
    shared["console"] = [os.path.samestat(os.fstat(fd), console) for fd in (1, 2)]
    Path(scratch, "shared.json").write_text(json.dumps(shared))
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp, contextlib.suppress(OSError):
        udp.sendto(b"member ids", ("127.0.0.1", port))
    if os.fork() == 0:
        os.setsid()
        beat = Path(scratch, "beat")
        for _ in range(600):
            with beat.open("a") as f:
                f.write(".")
            time.sleep(0.05)
        os._exit(0)
    time.sleep(0.3)


@pytest.mark.parametrize("how", sandbox.MECHANISMS)
def test_a_fenced_worker_leaves_nothing_another_can_reach(how, tmp_path):
    """The fourth review's collusion (a querier row scored AUC 1.000 on ids curious-client
    rows left in System V shared memory, or sent over UDP from an orphan that outlived its
    row): under either fence the segment is the worker's own and goes with it, the datagram
    reaches nobody, and the orphan dies with the worker. Nor can it leave a key in the
    session keyring every worker inherits, lock a file every worker may read, watch one, or
    stamp its access time by reading it (the fifth review's channels: no namespace holds
    keyrings, locks, inotify or access times), or set a file's write-life hint (the sixth
    review's: a value on the inode, read back by a later row)."""
    if not sandbox.works(how):
        pytest.skip(f"this machine cannot fence with {how}")
    scratch, stamped = tmp_path / "scratch", tmp_path / "readable" / "old"
    scratch.mkdir()
    stamped.parent.mkdir()
    stamped.write_text("read me")
    days_ago = time.time() - 3 * 86400
    os.utime(stamped, (days_ago, days_ago))
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as listener:
        listener.bind(("127.0.0.1", 0))
        listener.settimeout(0.5)
        readable = [*sandbox.readable_paths(), Path(__file__).parent, stamped.parent]
        work = (str(scratch), listener.getsockname()[1], str(stamped))
        start = (readable, how, str(scratch), {}, False, f"{__name__}:leave_traces", work)
        child = multiprocessing.get_context("spawn").Process(target=sandbox.run_fenced, args=start)
        child.start()
        child.join(120)
        with pytest.raises(TimeoutError):
            listener.recvfrom(64)
    assert child.exitcode == 0 and not (scratch / "refused").exists()
    assert int((scratch / "segment").read_text()) >= 0  # made, inside the fence
    left = sandbox._libc.shmget(SHM_KEY, 0, 0)
    if left >= 0:  # not to fool a later run
        sandbox._libc.shmctl(left, 0, None)  # IPC_RMID
    assert left == -1  # gone with its namespace
    assert int((scratch / "key").read_text()) == -1  # refused inside
    assert stamped.stat().st_atime == days_ago  # reading it, fenced, left no stamp
    assert json.loads((scratch / "shared.json").read_text()) == {
        "flock": "PermissionError",
        "lockf": "PermissionError",
        "inotify": -1,
        "hint": "PermissionError",
        "own_flags": True,
        "stdin_is_null": True,  # not the user's terminal (the review read keystrokes)
        "console": [True, True],  # a file in the scratch folder, not the screen
    }
    assert sandbox._libc.syscall(KEYCTL, KEYCTL_SEARCH, SESSION_KEYRING, b"user", KEY_NAME, 0) < 0
    beats = (scratch / "beat").read_text()
    time.sleep(0.5)
    assert (scratch / "beat").read_text() == beats  # the orphan died with the worker
