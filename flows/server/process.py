"""The local server process: it starts the store's Prefect API, warms up, listens on its socket, and forks a
child per command (see the package docstring)."""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import signal
import socket
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path

from corpusforge.door import (
    RLIMITS,
    UnsafeSocketPlace,
    code_fingerprint,
    die_with_parent,
    effective_environ,
    env_fingerprint,
    peer_credentials,
    pid_alive,
    read_state,
    recv_message,
    send_message,
    socket_path,
    state_path,
)
from corpusforge.server.log import log as _log
from corpusforge.server.prefect_api import (
    PREFERRED_PREFECT_PORT,
    READY_TIMEOUT_S,
    executable,
    free_port,
    own_prefect_healthy,
    port_free,
    prefect_items,
    refresh_prefect_settings,
    ui_api_env,
    ui_api_matches,
)
from corpusforge.server.warm import (
    LATER_MODULES,
    WARM_MODULES,
    _check_single_threaded,
    _import_quietly,
    freeze_heap,
    share_prefect_tls_contexts,
    skip_torch_library_cleanup_at_exit,
    warm_corpus,
    warm_tracking,
)

IDLE_SECONDS = 1200
SERVER_MODULE = "corpusforge.cli.server_main"  # the server process's entry point (python -m), which wires in the CLI
KILL_GRACE_S = 10.0  # after SIGTERM to a command whose client went away, then SIGKILL


def socket_path_for(store_root: Path) -> str:
    """The server's socket path, in this user's checked private directory (made if absent); see
    corpusforge.door.socket_dir. Raises door.UnsafeSocketPlace when that place cannot be trusted."""
    return socket_path(store_root, create=True)



PREFECT_PORT_RECORD = "prefect-port.json"  # under <store>/logs: the port the store's Prefect server had last


def remembered_prefect_port(store_root: Path) -> int | None:
    """The port this store's local Prefect server listened on last: tried first on the next start, so the flow-run
    links a run printed keep opening this store's runs after the server went idle and came back."""
    try:
        port = json.loads((Path(store_root) / "logs" / PREFECT_PORT_RECORD).read_text(encoding="utf-8"))["port"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return port if isinstance(port, int) and 0 < port < 65536 else None


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
        logs = self.store_root / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        if port is None:  # the port this store's server had last (its printed flow-run links), else 4200, else any
            last = remembered_prefect_port(self.store_root)
            port = last if last is not None and port_free(last) else \
                free_port(int(os.environ.get("CORPUSFORGE_PREFECT_PORT", PREFERRED_PREFECT_PORT)))
        with contextlib.suppress(OSError):
            write_private(logs / PREFECT_PORT_RECORD, json.dumps({"port": port}) + "\n")
        env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}
        env.update(ui_api_env(env, f"http://127.0.0.1:{port}"))  # its UI reads this API, not one on 4200
        self.seed_prefect_database(env)
        with open(logs / "prefect-server.log", "ab") as log:
            self.prefect = subprocess.Popen(
                [executable("prefect"), "server", "start", "--host", "127.0.0.1", "--port", str(port)],
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
                self.start_prefect(port=free_port(0))
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
            if not ui_api_matches(url):  # started by older code whose UI read the API on port 4200: replace it
                self._adopted_pid = int(pid)
                self.stop_prefect()
                self._adopted_pid = None
                _log(f"stopped the Prefect API at {url}: its UI did not read it; starting another")
                return False
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
