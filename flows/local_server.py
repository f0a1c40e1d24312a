"""The store's local server: one Prefect API and one warm corpusforge process, shared by every CLI call.

Without it, every command started its own ephemeral Prefect API (~10 CPU-s) and imported Prefect, MLflow
and Great Expectations again (~7 CPU-s) before doing any work. The local server pays for both once:

- a **Prefect API server** for the store (``prefect server start`` on 127.0.0.1, its database under
  ``<store>/prefect``, the same one ``corpusforge ui`` shows), so flow runs are recorded without a
  server start per command;
- a **warm process** that has imported the heavy libraries and forks a child per command
  (see flows/entry.py for the client side): the child runs the command with the caller's arguments,
  working directory, environment and terminal.

The first command that needs orchestration starts it in the background (``CORPUSFORGE_LOCAL_SERVER=off``
turns that off and falls back to an ephemeral API per command); it stops itself after
``CORPUSFORGE_LOCAL_SERVER_IDLE`` seconds without a command (default 1200). ``corpusforge server
start|stop|status`` control it by hand. One server per store: a lock file makes a second start exit.
When corpusforge's code changes (an edited checkout, a reinstall) the server finishes its running
commands and re-executes itself; meanwhile commands run in their own processes as before.

Everything binds 127.0.0.1; the command socket lives in a 0700 directory of the user and checks the
peer's uid, so no other user can run commands through it.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import selectors
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
import traceback
import urllib.request
from collections.abc import Callable
from pathlib import Path

from corpusforge.door import (
    RLIMITS,
    UnsafeSocketPlace,
    code_fingerprint,
    connect_to_server,
    die_with_parent,
    effective_environ,
    env_fingerprint,
    peer_credentials,
    pid_alive,
    read_state,
    recv_message,
    send_message,
    server_enabled,
    socket_path,
    state_path,
)

IDLE_SECONDS = 1200
SERVER_MODULE = "corpusforge.server_main"  # the server process's entry point (python -m), which wires in the CLI
READY_TIMEOUT_S = 180
KILL_GRACE_S = 10.0  # after SIGTERM to a command whose client went away, then SIGKILL
PREFERRED_PREFECT_PORT = 4200
# Imported once by the server so that commands do not pay for them: everything a stage may need. First what
# every pipeline runs (orchestration, tracking, the corpus stage, n-grams): the server is ready after these.
WARM_MODULES = (
    "prefect", "prefect.flow_engine", "prefect.task_engine", "prefect.task_runners", "prefect.artifacts",
    "prefect.client.orchestration", "prefect.events.clients", "prefect.logging.handlers",
    "mlflow", "mlflow.tracking", "mlflow.store.tracking.sqlalchemy_store",
    "mlflow.store.model_registry.sqlalchemy_store", "mlflow.pyfunc", "alembic", "alembic.migration",
    "great_expectations", "great_expectations.render.renderer", "pandas", "polars", "pyarrow", "pyarrow.parquet",
    "duckdb", "numpy", "matplotlib", "matplotlib.pyplot", "rich", "typer", "yaml", "httpx", "rensa",
    "fontTools.subset", "corpusforge.pipeline", "corpusforge.plan", "corpusforge.tasks.corpus.shard",
    "corpusforge.tasks.corpus.merge", "corpusforge.tasks.ngram.build", "corpusforge.tasks.track",
    "corpusforge.storage.tracking", "corpusforge.storage.db_templates",
)
# Then, after the server is ready and only while no command runs, one module at a time: what the tokenizer,
# embedding and neural stages add (torch alone is ~2 CPU-s). The first command on a new store does not wait
# for them; a command that needs one before it is warm imports it itself, as it would without a server.
LATER_MODULES = (
    "tokenizers", "corpusforge.tasks.tokenizer.train", "corpusforge.tasks.tokenizer.encode", "scipy.sparse",
    "gensim.models", "corpusforge.tasks.embeddings.build", "torch", "safetensors.torch",
    "corpusforge.models.training", "corpusforge.tasks.lm.train",
)


def _log(message: str) -> None:
    print(f"{time.strftime('%Y-%m-%d %H:%M:%S')} [{os.getpid()}] {message}", file=sys.stderr, flush=True)


def socket_path_for(store_root: Path) -> str:
    """The server's socket path, in this user's checked private directory (made if absent); see
    corpusforge.door.socket_dir. Raises door.UnsafeSocketPlace when that place cannot be trusted."""
    return socket_path(store_root, create=True)


def prefect_healthy(url: str, timeout: float = 2.0) -> bool:
    try:
        with urllib.request.urlopen(url.rstrip("/") + "/api/health", timeout=timeout) as response:
            return response.status == 200
    except (OSError, ValueError):
        return False


def tcp_listener_inodes(port: int) -> set[int]:
    """Inodes of the sockets listening on TCP ``port`` (IPv4 and IPv6) in this network namespace."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table, encoding="ascii") as fh:
                next(fh, None)
                for line in fh:
                    fields = line.split()
                    if len(fields) > 9 and fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                        inodes.add(int(fields[9]))
        except OSError:
            continue
    return inodes


def listens_on(pid: int, port: int) -> bool:
    """Whether process ``pid`` holds the socket listening on 127.0.0.1:``port``: the kernel's word, not the
    answer of whatever replies on that port (another store's Prefect API, or another user's listener that took
    the port between our check and its bind)."""
    inodes = tcp_listener_inodes(port)
    if not inodes:
        return False
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return False
    for fd in fds:
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:[") and int(target[8:-1]) in inodes:
            return True
    return False


def url_port(url: str) -> int:
    from urllib.parse import urlsplit

    return urlsplit(url).port or 80


def own_prefect_healthy(url: str, pid: int | None, timeout: float = 2.0) -> bool:
    """A Prefect API we started is healthy: its port is held by its process (checked before a request is
    sent, so nothing reaches a listener that is not ours), and it answers /api/health."""
    if not pid or not listens_on(int(pid), url_port(url)):
        return False
    return prefect_healthy(url, timeout)


def _free_port(preferred: int) -> int:
    for port in (preferred, 0):
        with contextlib.closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds: TIME_WAIT is no obstacle
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return s.getsockname()[1]
    raise OSError("no free TCP port on 127.0.0.1")


def _executable(name: str) -> str:
    beside = Path(sys.executable).parent / name
    return str(beside) if beside.exists() else name


class LocalServer:
    def __init__(self, store_root: Path, idle_seconds: float, run_command: Callable[[], None]):
        """``run_command()`` runs one CLI command from ``sys.argv`` in a forked child (corpusforge.cli.main; given
        by corpusforge.server_main, so this module does not import the CLI that imports it)."""
        self.run_command = run_command
        self.store_root = store_root
        self.idle_seconds = idle_seconds
        self.environ = dict(os.environ)  # as started: the warm-up's imports may add variables of their own
        self.env_fp = env_fingerprint(effective_environ(self.environ, store_root))
        self.code_fp = code_fingerprint()
        self.prefect: subprocess.Popen | None = None
        self.prefect_url = ""
        self.listener: socket.socket | None = None
        self.children: dict[int, socket.socket | None] = {}  # child pid -> the client's connection
        self.keepalive: set[socket.socket] = set()
        self.stopping = False
        self.prefect_env: dict[str, str] = {}
        self.new_prefect_db: Path | None = None  # a database this start migrates: the template, once healthy
        self.kill_after: dict[int, float] = {}
        self.reload = False
        self.last_active = time.monotonic()
        self.selector = selectors.DefaultSelector()
        self.socket_path = ""
        self.later = list(LATER_MODULES)  # imported after the server is ready, while no command runs
        self.later_cpu = 0.0
        self.pid = os.getpid()
        self.lock = None  # the store's server lock (an open file), never inherited by a command

    # --- state ----------------------------------------------------------------------------------------
    def write_state(self, status: str) -> None:
        state = {"pid": os.getpid(), "status": status, "store": str(self.store_root), "prefect_url": self.prefect_url,
                 "prefect_pid": self.prefect.pid if self.prefect else getattr(self, "_adopted_pid", None),
                 "socket": self.socket_path,
                 "env": self.env_fp, "code": self.code_fp, "idle_seconds": self.idle_seconds,
                 "warm": status == "ready" and not self.later,  # every module imported (LATER_MODULES too)
                 "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
        write_private(state_path(self.store_root), json.dumps(state, indent=1) + "\n")

    def remove_state(self) -> None:
        state = read_state(self.store_root)
        if state and state.get("pid") == os.getpid():
            with contextlib.suppress(OSError):
                state_path(self.store_root).unlink()

    # --- the Prefect API ----------------------------------------------------------------------------------
    def start_prefect(self, port: int | None = None) -> None:
        if port is None:
            port = _free_port(int(os.environ.get("CORPUSFORGE_PREFECT_PORT", PREFERRED_PREFECT_PORT)))
        logs = self.store_root / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}
        self.seed_prefect_database(env)
        with open(logs / "prefect-server.log", "ab") as log:
            self.prefect = subprocess.Popen(
                [_executable("prefect"), "server", "start", "--host", "127.0.0.1", "--port", str(port)],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env, preexec_fn=die_with_parent)
        self.prefect_url = f"http://127.0.0.1:{port}"

    def seed_prefect_database(self, env: dict[str, str]) -> None:
        """A new store's Prefect database starts as a copy of the cached template (~5 s to healthy instead of
        ~15 s of migrations); without one, this start's fresh database becomes the template once it is healthy
        (save_prefect_template)."""
        from corpusforge.settings import default_prefect_database, seed_prefect_database
        from corpusforge.storage.db_templates import database_files

        db = default_prefect_database(env)
        if db is None or any(p.exists() for p in database_files(db)):
            return
        if seed_prefect_database(db):
            _log(f"created {db} from the cached template of this Prefect version")
        else:
            self.new_prefect_db = db

    def save_prefect_template(self) -> None:
        """Right after the server migrated a new database and before any command ran: keep it as the template.
        A command that used the API early (ensure_prefect_api does not wait for the warm-up) leaves a run in it;
        such a copy is discarded, and the next new store makes the template."""
        db = self.new_prefect_db
        if db is None:
            return
        from corpusforge.settings import save_prefect_template

        self.new_prefect_db = None
        template = save_prefect_template(db)
        if template is not None:
            _log(f"kept this new Prefect database as the template for new stores: {template}")
        else:
            _log("kept no template of this new Prefect database (it holds more than Prefect's own rows, or the "
                 "cache cannot be written)")

    def wait_prefect_ready(self, attempts: int = 4) -> None:
        """Wait until our Prefect API answers on a port its own process holds. The port was free when chosen,
        but anyone (another store's server starting at the same moment, another user) may bind it before
        Prefect does: then Prefect exits, and it starts again on a port the kernel picks."""
        if self.prefect is None:
            return
        logs = self.store_root / "logs"
        deadline = time.monotonic() + READY_TIMEOUT_S
        while not own_prefect_healthy(self.prefect_url, self.prefect.pid):
            if self.stopping:
                raise SystemExit(0)
            if self.prefect.poll() is not None and attempts > 1 and time.monotonic() < deadline:
                attempts -= 1
                _log(f"the Prefect API could not start on {self.prefect_url} (the port was taken?): another port")
                self.start_prefect(port=_free_port(0))
                self.write_state("warming")
                continue
            if self.prefect.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the Prefect server did not start; see {logs / 'prefect-server.log'}")
            time.sleep(0.2)
        _log(f"Prefect API ready at {self.prefect_url} (pid {self.prefect.pid})")

    def adopt_prefect(self) -> bool:
        """After a reload (exec), the Prefect server started by this pid is still running: keep using it."""
        state = read_state(self.store_root) or {}
        url, pid = state.get("prefect_url"), state.get("prefect_pid")
        if state.get("pid") == os.getpid() and url and pid and pid_alive(int(pid)) and own_prefect_healthy(url, pid):
            self.prefect_url = url
            self.prefect = None
            self._adopted_pid = int(pid)
            _log(f"kept the Prefect API at {url} across the reload")
            return True
        return False

    def stop_prefect(self) -> None:
        pid = self.prefect.pid if self.prefect else getattr(self, "_adopted_pid", None)
        if not pid:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 15
        while pid_alive(pid) and time.monotonic() < deadline:
            with contextlib.suppress(ChildProcessError):
                if os.waitpid(pid, os.WNOHANG)[0]:
                    break
            time.sleep(0.1)
        if pid_alive(pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    def prefect_alive(self) -> bool:
        if not self.prefect and not getattr(self, "_adopted_pid", None):
            return True  # an external (team) Prefect API: not ours to watch
        if self.prefect is not None:
            return self.prefect.poll() is None
        pid = getattr(self, "_adopted_pid", None)
        if not pid:
            return False
        with contextlib.suppress(ChildProcessError):
            if os.waitpid(pid, os.WNOHANG)[0]:
                return False
        return pid_alive(pid)

    # --- warm-up ------------------------------------------------------------------------------------------
    def warm_up(self) -> None:
        started = time.process_time()
        for name in WARM_MODULES:
            _import_quietly(name)
        with contextlib.suppress(Exception):
            import matplotlib

            matplotlib.use("Agg")
        for warm in (share_prefect_tls_contexts, warm_tracking, warm_corpus):
            try:
                warm()
            except Exception as exc:  # noqa: BLE001 - a warm-up that fails only costs the commands its time
                _log(f"warm-up: {warm.__name__} failed: {exc}")
        _check_single_threaded()
        freeze_heap()
        _log(f"warm-up: {len(WARM_MODULES)} modules in {time.process_time() - started:.1f} CPU-s")

    def warm_up_later(self) -> None:
        """Import the next of LATER_MODULES (called by the serving loop while no command runs); after the last,
        the warm-ups that need them, and the state says ``warm``. Imports and forks both happen on this one
        thread, so a command is never forked in the middle of an import."""
        if not self.later:
            return
        started = time.process_time()
        name = self.later.pop(0)
        _import_quietly(name)
        freeze_heap()
        self.later_cpu += time.process_time() - started
        if not self.later:
            try:
                skip_torch_library_cleanup_at_exit()
            except Exception as exc:  # noqa: BLE001 - costs the commands ~0.05 CPU-s each, nothing more
                _log(f"warm-up: skip_torch_library_cleanup_at_exit failed: {exc}")
            _check_single_threaded()
            _log(f"warm-up, after ready: {len(LATER_MODULES)} more modules in {self.later_cpu:.1f} CPU-s")
            self.write_state("ready")

    # --- serving ------------------------------------------------------------------------------------------
    def listen(self) -> None:
        self.socket_path = socket_path_for(self.store_root)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.socket_path)
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(self.socket_path)
        os.chmod(self.socket_path, 0o600)
        self.listener.listen(64)
        self.listener.setblocking(False)
        self.selector.register(self.listener, selectors.EVENT_READ, "accept")

    def serve(self) -> None:
        wake_r, wake_w = os.pipe()
        os.set_blocking(wake_r, False)
        os.set_blocking(wake_w, False)
        signal.set_wakeup_fd(wake_w)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        self.selector.register(wake_r, selectors.EVENT_READ, "wake")
        while True:
            idle_warm_up = bool(self.later) and not self.children and not self.stopping
            for key, _ in self.selector.select(timeout=0 if idle_warm_up else 1.0):
                if key.data == "accept":
                    try:
                        self.accept()
                    except Exception:  # noqa: BLE001 - one bad connection never stops the server
                        _log("a connection failed:\n" + traceback.format_exc())
                elif key.data == "wake":
                    with contextlib.suppress(BlockingIOError):
                        os.read(wake_r, 512)
                else:  # a client connection became readable: it went away (or sent garbage)
                    self.client_gone(key.data, key.fileobj)
            self.reap()
            self.escalate()
            if self.children or self.keepalive:
                self.last_active = time.monotonic()
            elif self.stopping or self.reload:
                return
            elif self.later:  # warming up is not idle
                self.last_active = time.monotonic()
            elif time.monotonic() - self.last_active > self.idle_seconds:
                _log(f"idle for {self.idle_seconds:.0f} s: stopping")
                self.stopping = True
                return
            if not self.prefect_alive():
                _log("the Prefect API server exited: stopping")
                self.stopping = True
            if idle_warm_up and not self.children and not self.stopping:
                self.warm_up_later()

    def _on_stop_signal(self, signum, _frame) -> None:
        self.stopping = True

    def accept(self) -> None:
        try:
            conn, _ = self.listener.accept()
        except BlockingIOError:
            return
        conn.setblocking(True)
        conn.settimeout(5)
        fds: list[int] = []
        try:
            _, uid = peer_credentials(conn)  # before reading a byte of what it sends
            if uid != os.getuid():
                raise ValueError(f"a connection from uid {uid}, not this user")
            message, fds = recv_message(conn, want_fds=3)
            if message is None:
                raise ValueError("the client hung up before its request")
            if isinstance(message, dict) and message.get("keepalive") is True:  # `corpusforge ui` holds one open
                conn.settimeout(None)
                self.keepalive.add(conn)
                self.selector.register(conn, selectors.EVENT_READ, "keepalive")
                self.last_active = time.monotonic()
                return
            problem = request_problem(message) or ("" if len(fds) == 3 else
                                                   "a command comes with its stdin, stdout and stderr")
            if not problem and not limits_can_be_applied(message.get("rlimits") or {}):
                problem = "its resource limits are above this server's hard limits"
            if problem:
                send_message(conn, {"refused": problem})
                raise ValueError(f"bad request: {problem}")
            if self.stopping or self.reload:
                send_message(conn, {"refused": "stopping"})
                raise ValueError("stopping")
            if message.get("code") != self.code_fp:
                _log("corpusforge's code changed: reloading once the running commands finish")
                self.reload = True
                send_message(conn, {"refused": "code changed; the server reloads"})
                raise ValueError("stale")
            pid = os.fork()
            if pid == 0:
                self.run_child(message, fds, conn)  # never returns
            send_message(conn, {"pid": pid})
            conn.settimeout(None)
            self.children[pid] = conn
            self.selector.register(conn, selectors.EVENT_READ, pid)
            self.last_active = time.monotonic()
            _log(f"command {' '.join(message['argv'][:3])} ... -> child {pid}")
        except (OSError, ValueError) as exc:
            if str(exc) not in ("stale", "stopping"):
                _log(f"refused a connection: {exc}")
            conn.close()
        finally:
            for fd in fds:
                with contextlib.suppress(OSError):
                    os.close(fd)

    def client_gone(self, data, conn: socket.socket) -> None:
        try:
            if conn.recv(4096):
                return  # unexpected bytes: ignore them, keep waiting for the end of the stream
        except OSError:
            pass
        self.selector.unregister(conn)
        conn.close()
        if data == "keepalive":
            self.keepalive.discard(conn)
            self.last_active = time.monotonic()
            return
        pid = data
        if pid in self.children:  # the client died (kill -9, closed terminal): stop its command too
            _log(f"client of child {pid} went away: terminating it")
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGTERM)
            self.children[pid] = None
            self.kill_after[pid] = time.monotonic() + KILL_GRACE_S

    def escalate(self) -> None:
        """A command whose client went away got SIGTERM; if it (or what it started) is still there after the
        grace period, SIGKILL its process group."""
        now = time.monotonic()
        for pid, deadline in list(self.kill_after.items()):
            if pid not in self.children:
                del self.kill_after[pid]
            elif now > deadline:
                _log(f"child {pid} did not stop within {KILL_GRACE_S:.0f} s of SIGTERM: killing it")
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(pid, signal.SIGKILL)
                del self.kill_after[pid]

    def reap(self) -> None:
        """Report finished commands to their clients (only our command children: the Prefect server is
        watched separately)."""
        for pid in list(self.children):
            try:
                done, status, usage = os.wait4(pid, os.WNOHANG)
            except ChildProcessError:
                done, status, usage = pid, 1 << 8, None
            if not done:
                continue
            conn = self.children.pop(pid)
            code = os.waitstatus_to_exitcode(status)
            code = 128 - code if code < 0 else code  # killed by a signal: the shell's convention
            # the command's own cost (it and every process it waited for), for the client to report if asked
            cost = {"cpu": round(usage.ru_utime + usage.ru_stime, 4), "sys": round(usage.ru_stime, 4),
                    "maxrss_kb": usage.ru_maxrss, "minflt": usage.ru_minflt} if usage else {}
            if conn is not None:
                with contextlib.suppress(OSError):
                    send_message(conn, {"exit": code, **cost})
                with contextlib.suppress(KeyError, ValueError):
                    self.selector.unregister(conn)
                conn.close()

    # --- the child -----------------------------------------------------------------------------------------
    def run_child(self, message: dict, fds: list[int], client: socket.socket) -> None:
        code = 1
        try:
            os.setpgid(0, 0)  # its own group: the server can stop the command and whatever it started
            signal.set_wakeup_fd(-1)
            for signum in (signal.SIGCHLD, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT):
                signal.signal(signum, signal.SIG_DFL)
            signal.signal(signal.SIGINT, signal.default_int_handler)
            # The server killed (even by kill -9) takes its commands along at once: their Prefect API dies with
            # it, so they could only fail slowly; the client then ends what the command started (its group).
            die_with_parent(signal.SIGKILL)
            if os.getppid() != self.pid:  # it died before the line above took effect
                os._exit(128 + signal.SIGKILL)
            # Hold nothing of the server's: not the client's connection (the client must see the end of
            # stream when the server dies), not the store's server lock, not the other clients.
            self.selector.close()
            self.listener.close()
            client.close()
            if self.lock is not None:
                self.lock.close()
            for conn in [*self.children.values(), *self.keepalive]:
                if conn is not None:
                    conn.close()
            os.umask(message["umask"])
            apply_limits(message.get("rlimits") or {})
            for target, fd in enumerate(fds):
                os.dup2(fd, target)
                os.close(fd)
            fds.clear()
            os.chdir(message["cwd"])
            env = dict(message["env"])
            settings_env = effective_environ(env, self.store_root)
            if not env.get("PREFECT_API_URL") and self.prefect_url:  # what ensure_prefect_api() would set
                env["PREFECT_API_URL"] = settings_env["PREFECT_API_URL"] = self.prefect_url + "/api"
            os.environ.clear()
            os.environ.update(env)
            sys.argv = ["corpusforge", *message["argv"]]
            for stream in (sys.stdout, sys.stderr):
                with contextlib.suppress(AttributeError, ValueError, OSError):
                    stream.reconfigure(line_buffering=stream.isatty())
            # Prefect's settings were read from the environment when the warm-up imported it. They only need
            # reading again (0.03-0.15 CPU-s) if the command's Prefect variables differ; its log handlers
            # only if they may print in colour (a terminal, FORCE_COLOR): the warm-up's were made for a file.
            same = prefect_items(settings_env) == self.prefect_env
            colour = "FORCE_COLOR" in env or sys.stderr.isatty()
            if not same or colour:
                refresh_prefect_settings(logging_too=True)
            from corpusforge import door

            door.IN_SERVER = True
            profile_to = env.get("CORPUSFORGE_PROFILE")  # a developer's cProfile of the command (pstats file)
            if profile_to:
                import cProfile

                profiler = cProfile.Profile(time.process_time)
                try:
                    profiler.runcall(self.run_command)
                finally:
                    profiler.dump_stats(profile_to)
            else:
                self.run_command()
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        except KeyboardInterrupt:
            code = 130
        except BaseException:  # noqa: BLE001 - report, then exit like an uncaught exception would
            traceback.print_exc()
            code = 1
        finally:
            with contextlib.suppress(BaseException):
                import atexit

                atexit._run_exitfuncs()  # what a normal exit runs (Prefect drains its log and event workers)
            for stream in (sys.stdout, sys.stderr):
                with contextlib.suppress(BaseException):
                    stream.flush()
            os._exit(code)

    # --- the whole life ------------------------------------------------------------------------------------
    def run(self) -> int:
        lock_path = self.store_root / "prefect" / "local-server.lock"
        lock_path.parent.mkdir(parents=True, exist_ok=True)
        import fcntl

        lock = self.lock = os.fdopen(os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600), "a+")
        try:
            fcntl.flock(lock.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            _log("another local server already serves this store")
            lock.close()
            return 0
        try:  # before anything starts: a server that could not listen must not warm up for minutes first
            self.socket_path = socket_path_for(self.store_root)
        except UnsafeSocketPlace as exc:
            _log(f"cannot serve commands: {exc}")
            lock.close()
            return 1
        self.external_api = os.environ.get("PREFECT_API_URL", "")
        # Stop cleanly on SIGTERM/SIGINT at any point of the life (state file removed, Prefect stopped).
        signal.signal(signal.SIGTERM, self._on_stop_signal)
        signal.signal(signal.SIGINT, self._on_stop_signal)
        try:
            if self.external_api:  # a team server: use it, start none
                self.prefect_url = self.external_api.rstrip("/").removesuffix("/api")
            elif not self.adopt_prefect():
                self.write_state("starting")
                self.start_prefect()
            os.environ["PREFECT_API_URL"] = self.prefect_url + "/api"
            self.prefect_env = prefect_items(os.environ)  # what Prefect's settings are read from (warm-up)
            self.write_state("warming")
            self.warm_up()  # while the Prefect server starts in its own process
            self.wait_prefect_ready()
            if self.stopping:
                raise SystemExit(0)
            self.save_prefect_template()
            self.listen()
            self.write_state("ready")
            _log(f"serving commands for {self.store_root} on {self.socket_path} (idle stop after "
                 f"{self.idle_seconds:.0f} s)")
            self.serve()
        except SystemExit:
            self.stopping = True
        except Exception:  # noqa: BLE001 - logged; the clients fall back to running commands themselves
            _log("the local server failed:\n" + traceback.format_exc())
            self.stopping = True
        finally:
            if self.listener is not None:
                self.listener.close()
                with contextlib.suppress(OSError):
                    os.unlink(self.socket_path)
            if self.reload and not self.stopping:
                self.write_state("reloading")
                lock.close()  # released across exec; the new image takes it again
                _log("re-executing with the new code")
                env = self.environ  # the environment it was started with (PREFECT_API_URL is the user's, if any)
                os.execve(sys.executable, [sys.executable, "-m", SERVER_MODULE, "serve", "--store",
                                           str(self.store_root), "--idle", str(self.idle_seconds)], env)
            self.stop_prefect()
            self.remove_state()
            lock.close()
        return 0


def write_private(path: Path, text: str) -> None:
    """Replace ``path`` atomically with a file only this user can read (0600 whatever the umask)."""
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    with contextlib.suppress(FileNotFoundError):
        tmp.unlink()
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(text)
    os.replace(tmp, path)


def request_problem(message: object) -> str:
    """What is wrong with a command request (empty if nothing): checked before anything is forked, so a
    malformed message gets a refusal and the server goes on."""
    if not isinstance(message, dict):
        return "not a JSON object"
    argv, env = message.get("argv"), message.get("env")
    if not isinstance(argv, list) or not all(isinstance(a, str) for a in argv):
        return "argv must be a list of strings"
    if not isinstance(message.get("cwd"), str) or not os.path.isabs(message["cwd"]):
        return "cwd must be an absolute path"
    if not isinstance(env, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in env.items()):
        return "env must map strings to strings"
    if not isinstance(message.get("code"), str):
        return "code must be a string"
    umask = message.get("umask")
    if not isinstance(umask, int) or isinstance(umask, bool) or not 0 <= umask <= 0o777:
        return "umask must be an integer in 0..0o777"
    limits = message.get("rlimits")
    if not isinstance(limits, dict) or any(
            name not in RLIMITS or not isinstance(v, list) or len(v) != 2
            or not all(isinstance(x, int) and not isinstance(x, bool) for x in v) for name, v in limits.items()):
        return "rlimits must map resource names to [soft, hard] integers"
    return ""


def _limit_value(value: int) -> float:
    import resource

    return float("inf") if value == resource.RLIM_INFINITY or value < 0 else value


def limits_can_be_applied(limits: dict[str, list[int]]) -> bool:
    """Whether a forked child can take the client's limits: only root may raise a hard limit, so a client whose
    hard limit is above the server's runs its command in its own process instead."""
    import resource

    if os.geteuid() == 0:
        return True
    for name, (_, hard) in limits.items():
        _, mine = resource.getrlimit(getattr(resource, f"RLIMIT_{name}"))
        if _limit_value(hard) > _limit_value(mine):
            return False
    return True


def apply_limits(limits: dict[str, list[int]]) -> None:
    """The client's ``ulimit`` settings, in the forked command (as its umask and environment are)."""
    import resource

    for name, (soft, hard) in limits.items():
        which = getattr(resource, f"RLIMIT_{name}")
        if resource.getrlimit(which) != (soft, hard):
            resource.setrlimit(which, (soft, hard))


class _SharedVerifiedContexts:
    """Stands in for the ``ssl`` module in Prefect's client module: a verified context built from a CA file is
    built once per (file, its size and mtime) and shared. Any other call goes to ``ssl`` itself (Prefect's
    insecure branch changes the context it gets, so that one is never shared)."""

    def __init__(self, ssl_module):
        import threading

        self._ssl = ssl_module
        self._made: dict[tuple, object] = {}
        self._lock = threading.Lock()

    def __getattr__(self, name):
        return getattr(self._ssl, name)

    def create_default_context(self, purpose=None, *, cafile=None, capath=None, cadata=None):
        purpose = self._ssl.Purpose.SERVER_AUTH if purpose is None else purpose
        if cafile is None or capath is not None or cadata is not None or purpose != self._ssl.Purpose.SERVER_AUTH:
            return self._ssl.create_default_context(purpose, cafile=cafile, capath=capath, cadata=cadata)
        st = os.stat(cafile)
        key = (os.fspath(cafile), st.st_size, st.st_mtime_ns)
        with self._lock:
            if key not in self._made:
                self._made[key] = self._ssl.create_default_context(purpose, cafile=cafile)
            return self._made[key]


def share_prefect_tls_contexts() -> None:
    """Prefect builds a verified TLS context from a CA file (certifi's ~150 CAs, ~30 ms) for every API client it
    creates, even for a plain ``http://`` API; a flow run creates four (flow engine, log worker, events worker
    and its version check), ~0.13 CPU-s per command. Share one per CA file, built here before the fork. Verified
    contexts are shared by design (an SSLContext serves many connections); what Prefect verifies is unchanged."""
    import ssl

    import certifi
    from prefect.client import orchestration
    from prefect.settings import PREFECT_API_SSL_CERT_FILE

    if not isinstance(orchestration.ssl, _SharedVerifiedContexts):
        orchestration.ssl = _SharedVerifiedContexts(ssl)
    orchestration.ssl.create_default_context(cafile=PREFECT_API_SSL_CERT_FILE.value() or certifi.where())


def warm_tracking() -> None:
    """One tracked run on a throw-away sqlite store, so that the forked commands find what SQLAlchemy builds
    once per process (mapper configuration, generated cache-key and loader code) already built. The engine is
    closed and forgotten before the fork; nothing of it reaches the store.

    Its database is made by MLflow's migrations, not copied from the cached template (corpusforge.storage.
    db_templates) that new stores start from: with a copy, the warm-up ended with a full garbage collection
    due (the migrations' allocations had just run one), which every forked command then paid (+0.5 CPU-s per
    command measured, for ~0.8 CPU-s saved once per server start)."""
    import tempfile

    from mlflow.store.model_registry.sqlalchemy_store import SqlAlchemyStore as RegistryStore
    from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

    from corpusforge.storage.tracking import Tracker

    with tempfile.TemporaryDirectory(prefix="corpusforge-warm-") as tmp:
        root = Path(tmp)
        # not <root>/mlflow.db, which the Tracker would create from the template
        tracker = Tracker(root, "warm-up", tracking_uri=f"sqlite:///{root / 'warm-up.db'}")
        parent = tracker.start_pipeline_run("warm-up", {"warm": {"up": 1}}, {"corpusforge.warm_up": "1"})
        artifact = root / "artifact"
        artifact.mkdir()
        manifest = {"id": "0" * 64, "step": "warm_up", "name": "warm-up", "config": {"a": 1}, "files": {},
                    "metrics": {"n": 1}, "inputs": [{"id": "1" * 64, "kind": "warm_up", "name": "in"}]}
        (artifact / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
        tracker.log_step(parent, manifest, artifact)
        tracker.finish_pipeline_run(parent, {"steps_computed": 1})
        for engines in (SqlAlchemyStore._engine_map, RegistryStore._engine_map):
            for uri in [u for u in engines if tmp in u]:
                engines.pop(uri).dispose()


def warm_corpus() -> None:
    """One GX validation and Data Docs page of a three-row frame (corpusforge.tasks.corpus.validate.
    warm_validation), in a throw-away folder: GX's lazily built machinery and the page's compiled templates,
    which every command's first shard paid (~0.05-0.1 CPU-s), are built once, here."""
    from corpusforge.tasks.corpus.validate import warm_validation

    with tempfile.TemporaryDirectory(prefix="corpusforge-warm-") as scratch:
        warm_validation(Path(scratch))


def freeze_heap() -> None:
    """Move every object the server holds (the imported modules, the warm-ups' caches) out of the garbage
    collector's reach: a forked command's collections then scan only the objects it made itself, not the
    millions it inherited, and do not write to the inherited pages (which stay shared, not copied). What
    Python's docs advise before forking (``gc.freeze``); the server's own later garbage is collected as usual."""
    import gc

    gc.collect()
    gc.freeze()


def skip_torch_library_cleanup_at_exit() -> None:
    """torch deregisters each operator library it loaded from a ``weakref.finalize`` run at exit: ~0.05 CPU-s
    that every forked command paid on its way to ``os._exit``, where nothing is left to clean. Those finalizers
    (and only those) no longer run at exit; they still run if a library object is collected."""
    import weakref

    for ref, info in list(weakref.finalize._registry.items()):  # no public way to list them
        if getattr(info.func, "__module__", "") == "torch.library":
            ref.atexit = False


def _import_quietly(name: str) -> None:
    import importlib

    try:
        importlib.import_module(name)
    except Exception as exc:  # noqa: BLE001 - an optional library missing only costs its import later
        _log(f"warm-up: could not import {name}: {exc}")


def _check_single_threaded() -> None:
    import threading

    threads = [t.name for t in threading.enumerate()]
    if len(threads) > 1:  # forking a multi-threaded process can deadlock a child: serve cold instead
        raise RuntimeError(f"warm-up left threads running ({', '.join(threads)}); not forking from this process")


def prefect_items(environ) -> dict[str, str]:
    return {k: v for k, v in environ.items() if k.startswith("PREFECT_")}


def refresh_prefect_settings(logging_too: bool = False) -> None:
    """Prefect reads its settings from the environment when it is imported; after the environment changed
    (a forked command, PREFECT_API_URL set to the local server), make it read them again."""
    if "prefect.context" not in sys.modules:
        return
    from prefect.context import refresh_global_settings_context

    refresh_global_settings_context()
    if logging_too:
        from prefect.logging.configuration import setup_logging

        setup_logging(incremental=False)


# --- used by the CLI (the client side of the life cycle) ----------------------------------------------------

def start_in_background(store_root: Path, idle_seconds: float | None = None) -> subprocess.Popen:
    logs = store_root / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    idle = idle_seconds if idle_seconds is not None else float(os.environ.get("CORPUSFORGE_LOCAL_SERVER_IDLE",
                                                                             IDLE_SECONDS))
    with open(logs / "local-server.log", "ab") as log:
        return subprocess.Popen([sys.executable, "-m", SERVER_MODULE, "serve", "--store", str(store_root),
                                 "--idle", str(idle)],
                                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True, close_fds=True)


def wait_for(store_root: Path, statuses: tuple[str, ...], proc: subprocess.Popen | None,
             timeout: float = READY_TIMEOUT_S, warm: bool = False) -> dict | None:
    """The server's state once its status is one of ``statuses`` (and, with ``warm``, once it has imported
    LATER_MODULES too); None if it died or timed out."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        state = read_state(store_root)
        if (state and state.get("status") in statuses and pid_alive(int(state.get("pid", 0)))
                and (state.get("warm") or not warm)):
            return state
        if proc is not None and proc.poll() is not None:
            state = read_state(store_root)  # lost the start race to another server: use that one
            if not (state and pid_alive(int(state.get("pid", 0)))):
                return None
        time.sleep(0.1)
    return None


def running_prefect_url(store_root: Path) -> str | None:
    state = read_state(store_root)
    if not state or not pid_alive(int(state.get("pid", 0))):
        return None
    return state_prefect_url(state)


def state_prefect_url(state: dict) -> str | None:
    """The Prefect API a server's state names, if it answers: one the server started must be served by the
    process the state names (own_prefect_healthy); an external (team) API has no pid of ours to check."""
    url = state.get("prefect_url")
    if not url:
        return None
    if state.get("prefect_pid"):
        return url if own_prefect_healthy(url, state["prefect_pid"]) else None
    return url if state.get("status") in ("warming", "ready") and prefect_healthy(url) else None


_socket_place_problem: str | None = None


def socket_place_problem(console=None) -> str:
    """Why this user's local-server socket place cannot be used (empty if it can), checked once per process
    before any server is started; the first caller with a problem says it in one line."""
    global _socket_place_problem
    if _socket_place_problem is None:
        try:
            socket_path(Path("/"), create=True)
            _socket_place_problem = ""
        except UnsafeSocketPlace as exc:
            _socket_place_problem = str(exc)
            line = (f"not using the local server: {exc}; running this command in its own process "
                    "(CORPUSFORGE_LOCAL_SERVER=off says this without the check)")
            if console is not None:
                console.print(line, highlight=False, markup=False, soft_wrap=True)
            else:
                print(line, file=sys.stderr, flush=True)
    return _socket_place_problem


def hand_over(store_root: Path, console=None, timeout: float = READY_TIMEOUT_S) -> int | None:
    """For a command that runs in its own process and has work to orchestrate: start the store's local server
    if none runs, wait until it is warm, and run this same command there. Returns its exit code, or None
    when this process should run the command itself (server turned off, not the real CLI, a server started
    with another environment, or a server that failed to start)."""
    from corpusforge import door

    if (not door.ENTRY_USED or door.IN_SERVER or not server_enabled() or door.limits_need_own_process()
            or socket_place_problem(console)):
        return None
    state = read_state(store_root)
    mine = env_fingerprint(effective_environ(os.environ, store_root))
    proc = None
    if state and pid_alive(int(state.get("pid", 0))):
        if state.get("env") != mine:
            return None  # another environment's server: run here, against its Prefect API
    else:
        proc = start_in_background(store_root)
        if console is not None:
            console.print("starting the local server for this store in the background (Prefect API + warm "
                          "imports; it stops after 20 min idle, `corpusforge server stop` stops it now) ...",
                          highlight=False)
    if wait_for(store_root, ("ready",), proc, timeout) is None:
        return None
    return door.delegate(sys.argv[1:], store_root)


def ensure_prefect_api(store_root: Path, console=None) -> str | None:
    """Point Prefect at an API for this command: $PREFECT_API_URL if set, else the store's local server
    (started in the background on first use), else an ephemeral API in this process. Returns the URL, or
    None for the ephemeral fallback."""
    if os.environ.get("PREFECT_API_URL"):
        return os.environ["PREFECT_API_URL"]
    url = running_prefect_url(store_root)
    if url is None and server_enabled() and not socket_place_problem(console):
        state = read_state(store_root)
        proc = None if state and pid_alive(int(state.get("pid", 0))) else start_in_background(store_root)
        state = wait_for(store_root, ("warming", "ready"), proc)
        deadline = time.monotonic() + READY_TIMEOUT_S
        while state is not None:  # the server warms up while its Prefect API starts (maybe on a second port)
            url = state_prefect_url(state)
            if url or time.monotonic() > deadline or (proc is not None and proc.poll() is not None):
                break
            time.sleep(0.2)
            state = read_state(store_root)
    if url is None:
        from corpusforge.settings import start_ephemeral_prefect

        start_ephemeral_prefect()
        return None
    os.environ["PREFECT_API_URL"] = url + "/api"
    refresh_prefect_settings()
    return os.environ["PREFECT_API_URL"]


def hold_local_server(store_root: Path, console=None, prefect_port: int | None = None):
    """The store's local server's Prefect API (started if needed) and a connection that keeps the server from
    stopping while a long-lived command (`ui`, `schedule`) runs; (None, None) when the local server is turned
    off or cannot start."""
    if not server_enabled():
        return None, None
    url = running_prefect_url(store_root)
    if url is None:
        if socket_place_problem(console):
            return None, None
        if prefect_port:
            os.environ.setdefault("CORPUSFORGE_PREFECT_PORT", str(prefect_port))
        if console is not None:
            console.print("starting the store's local server (Prefect API + warm imports) ...")
        state = wait_for(store_root, ("ready",), start_in_background(store_root))
        url = state.get("prefect_url") if state else None
        if url is None:
            return None, None
    state = wait_for(store_root, ("ready",), None, timeout=READY_TIMEOUT_S) or {}
    hold = None
    if state:
        try:
            hold = connect_to_server(store_root, state)
            send_message(hold, {"keepalive": True})
        except OSError:
            hold = None
    return url, hold


def stop(store_root: Path, timeout: float = 60) -> bool:
    """Ask the store's local server to stop (it lets running commands finish first). True if it was running."""
    state = read_state(store_root)
    if not state or not pid_alive(int(state.get("pid", 0))):
        return False
    os.kill(int(state["pid"]), signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while pid_alive(int(state["pid"])) and time.monotonic() < deadline:
        time.sleep(0.1)
    return True
