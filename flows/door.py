"""What the ``corpusforge`` console script (corpusforge.entry) and the store's local server share: the local
server's state file, the socket protocol that hands a command over, fingerprints of the environment and the code,
and the defaults every command sets first. A leaf: the standard library only, so the door stays cheap and
every module of the package can import it without an import circle.

How a command is handed over (the design of Spring, Gradle and Bazel servers) is described in
corpusforge.entry."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import socket
import stat
import struct
import sys
from pathlib import Path

# Variables that libraries read when they are imported (the server has imported them already), so a
# command whose value differs from the server's must run in its own process. Everything else in the
# environment, corpusforge's own CORPUSFORGE_* settings included (read when a command runs), is applied to
# the child before the command runs.
IMPORT_TIME_PREFIXES = ("PREFECT_", "MLFLOW_", "GX_", "OMP_", "MKL_", "OPENBLAS_", "POLARS_", "RAYON_",
                        "TOKENIZERS_", "CUDA_", "PYTORCH_", "TORCH", "HF_", "PYTHON", "DO_NOT_TRACK", "LD_",
                        "MPLBACKEND", "MPLCONFIGDIR",
                        # allocators, configured when a process starts: polars' jemalloc, glibc, pyarrow's mimalloc
                        "_RJEM_MALLOC_CONF", "MALLOC_", "MIMALLOC_", "JE_ARROW_MALLOC_CONF")
NOT_DELEGATED = ("server", "ui", "schedule")
# What configure_environment() adds (flows/settings.py): offline and quiet, Prefect's state in the store.
QUIET_DEFAULTS = {
    "DO_NOT_TRACK": "true",  # MLflow accepts only the literal 'true'
    "MLFLOW_DISABLE_TELEMETRY": "true",
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    "GX_ANALYTICS_ENABLED": "false",
}
# What every corpusforge command sets for itself first (flows/cli/__init__.py and flows/cli/lm.py did it at import):
# UTF-8 output, and OpenMP threads that sleep rather than spin while waiting (on a busy 2-core machine spinning
# threads made CPU training 5-10x slower: 1.6 s vs 0.28 s per step of the CPU baby GPT).
CLI_DEFAULTS = {"PYTHONIOENCODING": "utf-8", "OMP_WAIT_POLICY": "PASSIVE"}
# Set by main() when this process is the real `corpusforge` command (not a test's CliRunner), and in a
# command forked by the local server: only the former may hand its command over to the server.
ENTRY_USED = False
IN_SERVER = False
STATE_FILE = "local-server.json"
HEADER = struct.Struct("!Q")
MAX_MESSAGE = 64 * 1024 * 1024
PACKAGES = ("flows", "tasks", "storage", "models")


def server_enabled(environ=os.environ) -> bool:
    return environ.get("CORPUSFORGE_LOCAL_SERVER", "on").strip().lower() not in ("0", "off", "false", "no")


def die_with_parent(signum: int = signal.SIGTERM) -> None:
    """Runs in a child process before exec (``preexec_fn``), or after a fork: Linux sends it ``signum`` when its
    parent dies, even by kill -9, so no orphaned server keeps a port or a database, and no command runs on
    without its server."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signum)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def store_from_argv(argv: list[str], environ=os.environ) -> Path:
    """The store a command addresses: ``--store DIR`` (or ``--store=DIR``), else $CORPUSFORGE_STORE, else
    ./.corpusforge, resolved like corpusforge.storage.store.resolve_store_root."""
    root = None
    for i, arg in enumerate(argv):
        if arg == "--":
            break
        if arg == "--store" and i + 1 < len(argv):
            root = argv[i + 1]
        elif arg.startswith("--store="):
            root = arg.split("=", 1)[1]
    root = root or environ.get("CORPUSFORGE_STORE") or ".corpusforge"
    return Path(root).expanduser().resolve()


def state_path(store_root: Path) -> Path:
    return store_root / "prefect" / STATE_FILE


class UnsafeSocketPlace(OSError):
    """The place for the local server's socket cannot be trusted (or made): commands run in their own
    processes instead, and the message says why in one line."""


def socket_dir(create: bool = False) -> str:
    """The directory of this user's local-server sockets: ``$XDG_RUNTIME_DIR/corpusforge-<uid>``, else
    ``$TMPDIR`` (or /tmp) ``/corpusforge-<uid>``. It must be a real directory (not a symlink: it is opened with
    O_NOFOLLOW, and owner and mode are read from the opened descriptor, so nothing can swap it between the
    check and the use), owned by this user, with no access for anyone else; and its parent must not let another
    user rename it away (the parent is this user's, or root's, or sticky). ``create`` makes it (0700) if absent.
    Raises UnsafeSocketPlace otherwise."""
    uid = os.getuid()
    parent = os.environ.get("XDG_RUNTIME_DIR") or os.environ.get("TMPDIR") or "/tmp"
    base = os.path.join(parent, f"corpusforge-{uid}")
    try:
        pst = os.stat(parent)
    except OSError as exc:
        raise UnsafeSocketPlace(f"{parent} (the socket directory's parent) is not usable: {exc.strerror}") from None
    if pst.st_uid not in (uid, 0) and pst.st_mode & 0o022 and not pst.st_mode & stat.S_ISVTX:
        raise UnsafeSocketPlace(f"{parent} is writable by others and not sticky: another user could replace {base}")
    if create:
        try:
            os.mkdir(base, 0o700)
        except FileExistsError:
            pass
        except OSError as exc:
            raise UnsafeSocketPlace(f"cannot make {base}: {exc.strerror}") from None
    try:
        fd = os.open(base, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        raise UnsafeSocketPlace(f"{base} does not exist") from None
    except OSError as exc:  # ELOOP: a symlink; ENOTDIR: a file; EACCES: someone else's
        what = "a symbolic link" if os.path.islink(base) else exc.strerror
        raise UnsafeSocketPlace(f"{base} is {what}, not this user's private directory") from None
    try:
        st = os.fstat(fd)
    finally:
        os.close(fd)
    if st.st_uid != uid:
        raise UnsafeSocketPlace(f"{base} is owned by uid {st.st_uid}, not by this user (uid {uid})")
    if stat.S_IMODE(st.st_mode) & 0o077:
        raise UnsafeSocketPlace(f"{base} has mode {stat.S_IMODE(st.st_mode):o}: others may enter it (must be 700)")
    return base


def socket_path(store_root: Path, create: bool = False) -> str:
    """Where the store's local server listens: derived here, by whoever connects or listens, from the store's
    path and this user's checked socket directory; never read from a file that someone else could edit."""
    name = hashlib.sha256(str(store_root).encode()).hexdigest()[:20] + ".sock"
    return os.path.join(socket_dir(create), name)


# The limits a shell's `ulimit` sets, which a command handed to the server runs under as it would here.
RLIMITS = ("AS", "CORE", "CPU", "DATA", "FSIZE", "MEMLOCK", "NOFILE", "NPROC", "RSS", "STACK")


def current_umask() -> int:
    try:  # Linux >= 4.7 says it without changing it
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def limits_need_own_process() -> bool:
    """A finite address-space or data-segment limit (`ulimit -v`, `ulimit -d`) counts the whole process: in a
    process forked from the warm server it would count the server's imports (~4 GB of address space with torch)
    too, and mean something else than the user set. Such a command runs in its own process."""
    import resource

    return any(resource.getrlimit(which)[0] != resource.RLIM_INFINITY
               for which in (resource.RLIMIT_AS, resource.RLIMIT_DATA))


def resource_limits() -> dict[str, list[int]]:
    import resource

    return {name: list(resource.getrlimit(getattr(resource, f"RLIMIT_{name}"))) for name in RLIMITS
            if hasattr(resource, f"RLIMIT_{name}")}


PEERCRED = struct.Struct("3i")  # struct ucred: pid, uid, gid


def peer_credentials(sock: socket.socket) -> tuple[int, int]:
    """(pid, uid) of the process at the other end of a connected Unix socket, from the kernel (SO_PEERCRED)."""
    pid, uid, _ = PEERCRED.unpack(sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, PEERCRED.size))
    return pid, uid


def connect_to_server(store_root: Path, state: dict, timeout: float = 5) -> socket.socket:
    """A connection to the store's local server, checked before a byte is sent: the socket lies in this user's
    private directory, and the process listening on it is this user's and the server the state file names
    (SO_PEERCRED). Raises OSError otherwise; nothing has been sent then."""
    path = socket_path(store_root)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(timeout)
        sock.connect(path)
        pid, uid = peer_credentials(sock)
        if uid != os.getuid():
            raise UnsafeSocketPlace(f"the process listening on {path} runs as uid {uid}, not as this user")
        if pid != int(state.get("pid", -1)):
            raise UnsafeSocketPlace(f"the process listening on {path} (pid {pid}) is not the store's server")
    except BaseException:
        sock.close()
        raise
    return sock


def effective_environ(environ, store_root: Path) -> dict[str, str]:
    """The environment a command of this store runs with once configure_environment() has run."""
    env = dict(environ)
    for key, value in {**CLI_DEFAULTS, **QUIET_DEFAULTS}.items():
        env.setdefault(key, value)
    if not env.get("PREFECT_API_URL") and not env.get("PREFECT_HOME"):
        env["PREFECT_HOME"] = str(Path(store_root) / "prefect")
    return env


def env_fingerprint(environ) -> str:
    items = sorted((k, v) for k, v in environ.items() if k.startswith(IMPORT_TIME_PREFIXES))
    return hashlib.sha256(json.dumps(items).encode()).hexdigest()[:16]


def code_fingerprint() -> str:
    """Changes when corpusforge's code, the interpreter or the installed packages change (an edited
    checkout, a reinstall): the server then reloads itself instead of running stale code."""
    root = Path(__file__).resolve().parent.parent
    h = hashlib.sha256(f"{sys.executable}\0{sys.version}".encode())
    for package in PACKAGES:
        for dirpath, dirnames, filenames in os.walk(root / package):
            dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
            for name in sorted(filenames):
                if name.endswith((".py", ".json", ".txt")):
                    try:
                        st = os.stat(os.path.join(dirpath, name))
                    except OSError:
                        continue
                    h.update(f"{dirpath}/{name}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    site = Path(os.__file__).parent  # stdlib dir; the venv's site-packages is the one that changes:
    for path in sys.path:
        if path.endswith("site-packages"):
            site = Path(path)
            break
    try:
        h.update(str(os.stat(site).st_mtime_ns).encode())  # packages added or removed
    except OSError:
        pass
    return h.hexdigest()[:16]


def read_state(store_root: Path) -> dict | None:
    """The local server's state for this store, or None. A state file that names another store is not this
    store's: a copy (``cp -a STORE COPY``) carries the original's file, whose pid, socket and Prefect API are the
    original's server; status, stop and commands on the copy must never reach it (issue 50)."""
    try:
        data = json.loads(state_path(store_root).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict):
        return None
    named = data.get("store")
    if isinstance(named, str) and os.path.realpath(named) != os.path.realpath(store_root):
        return None
    return data


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie (exited, not yet reaped: an orphan whose init does not reap) is not alive
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[-1].split()[0] != b"Z"
    except (OSError, IndexError):
        return True


def send_message(sock: socket.socket, payload: dict, fds: list[int] | None = None) -> None:
    data = json.dumps(payload).encode()
    message = HEADER.pack(len(data)) + data
    if fds:
        sent = socket.send_fds(sock, [message], fds)
        message = message[sent:]
    if message:
        sock.sendall(message)


def recv_message(sock: socket.socket, want_fds: int = 0) -> tuple[dict | None, list[int]]:
    """One length-prefixed JSON message (None at end of stream) and any descriptors sent with it."""
    buf, fds = b"", []
    while len(buf) < HEADER.size:
        if want_fds and not fds:
            chunk, fds, _, _ = socket.recv_fds(sock, 65536, want_fds)
        else:
            chunk = sock.recv(65536)
        if not chunk:
            return None, fds
        buf += chunk
    (size,) = HEADER.unpack(buf[:HEADER.size])
    if size > MAX_MESSAGE:
        raise ValueError(f"message of {size} bytes refused")
    buf = buf[HEADER.size:]
    while len(buf) < size:
        chunk = sock.recv(min(65536, size - len(buf)))
        if not chunk:
            return None, fds
        buf += chunk
    return json.loads(buf[:size]), fds


def delegate(argv: list[str], store_root: Path | None = None, environ=os.environ) -> int | None:
    """Run ``argv`` in the store's warm local server; its exit code, or None when it cannot take the command
    (the caller then runs it itself). Nothing has been written to stdout or stderr when None is returned."""
    if not server_enabled(environ) or (argv and argv[0] in NOT_DELEGATED):
        return None
    store_root = store_root or store_from_argv(argv, environ)
    state = read_state(store_root)
    if not state or state.get("status") != "ready" or IN_SERVER:
        return None
    if state.get("env") != env_fingerprint(effective_environ(environ, store_root)):
        return None
    if not pid_alive(int(state.get("pid", 0))) or limits_need_own_process():
        return None
    try:
        sock = connect_to_server(store_root, state)
    except (OSError, ValueError):
        return None
    try:
        send_message(sock, {"argv": argv, "cwd": os.getcwd(), "env": dict(environ), "code": code_fingerprint(),
                            "umask": current_umask(), "rlimits": resource_limits()},
                     [0, 1, 2])
        reply, _ = recv_message(sock)
        if not reply or "pid" not in reply:
            return None  # refused (stale code: the server reloads itself) or busy shutting down
        sock.settimeout(None)
    except (OSError, ValueError, KeyError):
        sock.close()
        return None
    return _wait_for_child(sock, int(reply["pid"]), int(state.get("pid", 0)))


def _wait_for_child(sock: socket.socket, pid: int, server_pid: int = 0) -> int:
    """Forward signals to the child until the server reports its exit status. The connection's other end is
    held by the server alone (the child closed its copy), so the server's death is an end of stream here at once."""
    forwarded = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)

    def forward(signum, _frame):
        try:
            os.kill(pid, signum)
        except ProcessLookupError:
            pass

    for signum in forwarded:
        signal.signal(signum, forward)
    try:
        while True:
            try:
                reply, _ = recv_message(sock)
                break
            except InterruptedError:
                continue
    except (OSError, ValueError):
        reply = None
    finally:
        sock.close()
    if not reply or "exit" not in reply:
        # The server died; its command died with it (PR_SET_PDEATHSIG, SIGKILL: its Prefect API is gone too, there
        # is nothing left to report to). Take whatever the command started along, then say so, last.
        try:
            os.killpg(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        sys.stderr.write(f"error: the local corpusforge server{f' (pid {server_pid})' if server_pid else ''} died "
                         "while running this command, which was stopped with it; run the command again (a new "
                         "server starts); see <store>/logs/local-server.log\n")
        return 1
    report = os.environ.get("CORPUSFORGE_SERVER_RUSAGE")  # benchmarks: where the command's own CPU goes
    if report:
        with open(report, "a", encoding="utf-8") as fh:
            fh.write(json.dumps({"pid": pid, **reply}) + "\n")
    return int(reply["exit"])
