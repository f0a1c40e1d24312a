"""The local server under attack and kill (issue: "The local server and the store under attack and kill").

The security tests play the other local user for real: as root they make files owned by, and run processes
as, a throwaway uid (OTHER), the way another account on the machine would; without root they are skipped.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import REPO, write
from tests.flows.test_local_server import CLI, alive, children_in_log, run, server_env, state, wait_until

pytestmark = pytest.mark.server

OTHER = 54321  # a uid no account on the test machine has
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="playing another local user needs root (CI runs as root)")


def owned_by_other(path: Path) -> Path:
    os.lchown(path, OTHER, OTHER)
    return path


def private_tmp(tmp_path: Path, sticky: bool) -> Path:
    """A stand-in for /tmp (world-writable and sticky), or a directory of the other user's."""
    place = tmp_path / ("tmp" if sticky else "other-home")
    place.mkdir()
    if sticky:
        place.chmod(0o1777)
    else:
        place.chmod(0o755)
        owned_by_other(place)
    return place


def no_runtime_dir(env: dict[str, str], tmpdir: Path) -> dict[str, str]:
    """Root, cron, `docker exec` and ssh without pam_systemd: no XDG_RUNTIME_DIR, sockets under $TMPDIR."""
    env = {k: v for k, v in env.items() if k != "XDG_RUNTIME_DIR"}
    env["TMPDIR"] = str(tmpdir)
    return env


# --- 1. the socket directory and the peer --------------------------------------------------------------------

@as_root
@pytest.mark.parametrize("sticky", [False, True], ids=["other-users-dir", "sticky-tmp"])
def test_a_symlinked_socket_directory_is_refused(tmp_path, monkeypatch, sticky):
    """The other user pre-creates corpusforge-<uid> as a symlink to a 0700 directory the victim owns: the old
    check followed the link (stat) and accepted it, so the other user could later re-point it."""
    from corpusforge.door import UnsafeSocketPlace
    from corpusforge.server.process import socket_path_for

    place = private_tmp(tmp_path, sticky)
    victims = tmp_path / "victims-private"
    victims.mkdir(mode=0o700)
    link = place / f"corpusforge-{os.getuid()}"
    link.symlink_to(victims)
    owned_by_other(link)
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    monkeypatch.setenv("TMPDIR", str(place))
    with pytest.raises(UnsafeSocketPlace, match="symbolic link"):
        socket_path_for(tmp_path / "store")
    assert not list(victims.iterdir())


@as_root
def test_the_client_sends_nothing_to_a_listener_that_is_not_the_servers(tmp_path, short_tmp, monkeypatch):
    """A listener of another uid sits where the client connects (what re-pointing the symlink achieved), and the
    state file names it: the client checks the peer (SO_PEERCRED) and sends nothing, not its environment (the
    drill's AWS_SECRET_ACCESS_KEY), not its descriptors; the command then runs in its own process."""
    from corpusforge import door

    monkeypatch.setenv("XDG_RUNTIME_DIR", str(short_tmp / "run"))
    (short_tmp / "run").mkdir(mode=0o700)
    store = tmp_path / "store"
    (store / "prefect").mkdir(parents=True)
    path = door.socket_path(store, create=True)
    received = tmp_path / "received"
    # the attacker: bind as root where the client will connect, then listen as the other user and record
    # every byte that arrives
    attacker = subprocess.Popen([sys.executable, "-c", f"""
import os, socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.bind({path!r}); os.chmod({path!r}, 0o777)
os.setgid({OTHER}); os.setuid({OTHER})
s.listen(8)
print("listening", flush=True)
while True:
    c, _ = s.accept()
    data = c.recv(1 << 20)
    with open({str(received)!r}, "ab") as f:
        f.write(data or b"")
    c.close()
"""], stdout=subprocess.PIPE, text=True)
    try:
        received.touch()
        received.chmod(0o666)
        assert attacker.stdout.readline().strip() == "listening"
        environ = {**os.environ, "CORPUSFORGE_LOCAL_SERVER": "on", "AWS_SECRET_ACCESS_KEY": "hunter2"}
        fake_state = {"pid": attacker.pid, "status": "ready", "socket": path,
                      "env": door.env_fingerprint(door.effective_environ(environ, store))}
        (store / "prefect" / door.STATE_FILE).write_text(json.dumps(fake_state))
        monkeypatch.setattr(door, "IN_SERVER", False)
        assert door.delegate(["corpus", "x", "--store", str(store)], store, environ) is None
        time.sleep(0.5)
        assert received.read_bytes() == b""
    finally:
        attacker.kill()
        attacker.wait()


def test_state_files_are_private(served_store):
    store, _ = served_store
    for name in ("local-server.json", "local-server.lock"):
        mode = (store / "prefect" / name).stat().st_mode & 0o777
        assert mode == 0o600, (name, oct(mode))


# --- 3. a socket place owned by someone else -----------------------------------------------------------------

@as_root
def test_a_socket_directory_of_another_user_makes_commands_run_here_at_once(tmp_path):
    """`mkdir -m700 /tmp/corpusforge-<uid>` by the other user: the command used to wait for a server that warmed
    up for minutes and then failed to listen; now it runs in its own process at once and says why in one line."""
    place = private_tmp(tmp_path, sticky=True)
    taken = place / f"corpusforge-{os.getuid()}"
    taken.mkdir(mode=0o700)
    owned_by_other(taken)
    store = tmp_path / "store"
    write(tmp_path / "docs" / "a.txt", "alpha beta\ngamma delta\n")
    env = no_runtime_dir(server_env(), place)
    started = time.monotonic()
    res = run(["corpus", str(tmp_path / "docs"), "--name", "here", "--store", str(store), "--json"], env, timeout=150)
    assert res.returncode == 0, res.stderr[-3000:]
    assert json.loads(res.stdout.strip().splitlines()[-1])["accounting"]["kept"] == 2
    said = [line for line in res.stderr.splitlines() if "not using the local server" in line]
    assert len(said) == 1 and f"owned by uid {OTHER}" in said[0], res.stderr[-2000:]
    assert not (store / "prefect" / "local-server.json").exists()  # no server was started
    assert time.monotonic() - started < 120
    res = run(["server", "start", "--store", str(store)], env, timeout=60)
    assert res.returncode == 1 and "cannot run" in res.stderr and len(res.stderr.strip().splitlines()) == 1


# --- 4. the Prefect API's port --------------------------------------------------------------------------------

@as_root
def test_a_listener_that_took_the_prefect_port_gets_nothing(tmp_path, monkeypatch):
    """The port was free when chosen; another user binds it before Prefect does and answers every health
    check. The server must see that the port is not held by its own Prefect process, send it nothing, and
    start Prefect on another port."""
    from corpusforge.server import process
    from corpusforge.server.prefect_api import listens_on, url_port

    hits = tmp_path / "hits"
    hits.touch()
    hits.chmod(0o666)
    attacker = subprocess.Popen([sys.executable, "-c", f"""
import os, socket
from http.server import BaseHTTPRequestHandler, HTTPServer
class Yes(BaseHTTPRequestHandler):
    def do_GET(self):
        with open({str(hits)!r}, "a") as f:
            f.write(self.path + "\\n")
        self.send_response(200); self.end_headers(); self.wfile.write(b"true")
    def log_message(self, *a):
        pass
server = HTTPServer(("127.0.0.1", 0), Yes)
os.setgid({OTHER}); os.setuid({OTHER})
print(server.server_address[1], flush=True)
server.serve_forever()
"""], stdout=subprocess.PIPE, text=True)
    server = None
    try:
        taken = int(attacker.stdout.readline())
        monkeypatch.setattr(process, "free_port", lambda preferred, real=process.free_port:
                            taken if preferred != 0 else real(0))
        monkeypatch.delenv("PREFECT_API_URL", raising=False)
        monkeypatch.setenv("PREFECT_HOME", str(tmp_path / "prefect-home"))
        (tmp_path / "prefect-home").mkdir()
        (tmp_path / "store" / "prefect").mkdir(parents=True)
        server = process.LocalServer(tmp_path / "store", 60, run_command=lambda: None)
        server.start_prefect()
        assert server.prefect_url.endswith(f":{taken}")
        server.wait_prefect_ready()
        port = url_port(server.prefect_url)
        assert port != taken and listens_on(server.prefect.pid, port)
        assert hits.read_text() == ""  # not even a health check reached it
        assert not listens_on(server.prefect.pid, taken)
    finally:
        if server is not None:
            server.stop_prefect()
        attacker.kill()
        attacker.wait()


def test_two_stores_starting_together_get_their_own_prefect_apis(tmp_path):
    """Both servers prefer the same free port and start at the same moment: the one whose Prefect could not
    bind it moves to another port instead of using the other store's API."""
    from corpusforge.server.prefect_api import free_port, listens_on, url_port

    port = free_port(0)
    env = {**server_env(), "CORPUSFORGE_PREFECT_PORT": str(port)}
    stores = [tmp_path / "a", tmp_path / "b"]
    starts = [subprocess.Popen([CLI, "server", "start", "--store", str(s)], env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True) for s in stores]
    try:
        for proc in starts:
            assert proc.wait(timeout=300) == 0, proc.stderr.read()[-2000:]
        states = [state(s) for s in stores]
        urls = {st["prefect_url"] for st in states}
        assert len(urls) == 2, urls
        for st in states:
            assert listens_on(st["prefect_pid"], url_port(st["prefect_url"]))
    finally:
        for s in stores:
            run(["server", "stop", "--store", str(s)], env)


# --- 2 and 11: kill -9 of the server, malformed messages --------------------------------------------------------

def _serve(store: Path):
    env = server_env()
    started = run(["server", "start", "--store", str(store)], env)
    assert started.returncode == 0, started.stderr[-3000:]
    return env


@pytest.fixture(scope="module")
def served_store(tmp_path_factory):
    """One server for the tests that leave it running (a server start is ~15-40 s)."""
    store = tmp_path_factory.mktemp("served") / "store"
    env = _serve(store)
    yield store, env
    run(["server", "stop", "--store", str(store)], env)


def group_members(pgid: int) -> list[int]:
    members = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            if int(fields[2]) == pgid and fields[0] != "Z":
                members.append(int(entry))
    return members


def test_a_malformed_message_gets_a_refusal_and_the_server_goes_on(served_store):
    from corpusforge import door

    store, env = served_store
    st = state(store)
    for message in ({"cwd": "/", "env": {}, "code": "x"},  # no argv: the drill's KeyError
                    {"argv": "corpus", "cwd": "/", "env": {}, "code": "x", "umask": 18, "rlimits": {}},
                    {"argv": [], "cwd": "/", "env": {"A": 1}, "code": "x", "umask": 18, "rlimits": {}},
                    ["not", "an", "object"]):
        with door.connect_to_server(store, st) as sock, open(os.devnull, "rb") as null_in, \
                open(os.devnull, "wb") as null_out:
            door.send_message(sock, message, [null_in.fileno(), null_out.fileno(), null_out.fileno()])
            reply, _ = door.recv_message(sock)
            assert reply is not None and "refused" in reply, (message, reply)
    assert alive(st["pid"]) and state(store)["status"] == "ready"
    res = run(["artifacts", "find", "--json", "--store", str(store)], env)
    assert res.returncode == 0 and isinstance(json.loads(res.stdout), list)


# --- 6. umask and resource limits ---------------------------------------------------------------------------------

def proc_limits(pid: int) -> dict[str, str]:
    """Soft limits of a running process, as the kernel reports them (/proc/<pid>/limits)."""
    rows = Path(f"/proc/{pid}/limits").read_text().splitlines()[1:]
    return {row[:26].strip(): row[26:47].strip() for row in rows}


def test_a_command_in_the_server_keeps_the_clients_umask_and_limits(served_store, tmp_path):
    """`ulimit -n 123; umask 077; corpusforge ...`: the forked command runs with the client's umask (the files
    it writes are not world-readable) and resource limits, as it would in its own process. An address-space
    limit (`ulimit -v`) would count the warm server's imports too: that command runs in its own process."""
    store, env = served_store
    usage = tmp_path / "usage.jsonl"
    env = {**env, "CORPUSFORGE_SERVER_RUSAGE": str(usage)}
    write(tmp_path / "docs" / "a.txt", "alpha beta\ngamma delta\n")
    res = subprocess.run(["bash", "-c", f"umask 077; exec {CLI} corpus {tmp_path / 'docs'} --name limits "
                                        f"--store {store} --json"], capture_output=True, text=True, timeout=300,
                         env=env)
    assert res.returncode == 0, res.stderr[-2000:]
    assert usage.exists()  # it ran in the server
    artifact = Path(json.loads(res.stdout.strip().splitlines()[-1])["path"])
    for path in [artifact, *artifact.rglob("*")]:
        assert path.stat().st_mode & 0o077 == 0, path

    known = set(children_in_log(store))
    sample = REPO / "data" / "sample" / "tinyshakespeare.txt"
    client = subprocess.Popen(["bash", "-c", f"ulimit -n 123; ulimit -t 100000; umask 027; exec {CLI} lm train "
                               f"{sample} --preset shakespeare-char-cpu --store {store} "
                               "--set train.max_iters=1000000 --set train.eval_interval=1000000"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    try:
        wait_until(lambda: set(children_in_log(store)) - known, 60, "the server forked the command")
        (child,) = set(children_in_log(store)) - known
        wait_until(lambda: proc_limits(child)["Max open files"] == "123", 10, "the child applied the limits")
        assert proc_limits(child)["Max cpu time"] == "100000"
        umask = next(line.split()[1] for line in Path(f"/proc/{child}/status").read_text().splitlines()
                     if line.startswith("Umask:"))
        assert umask == "0027"
    finally:
        client.send_signal(signal.SIGTERM)
        client.wait(timeout=60)

    usage.unlink()
    res = subprocess.run(["bash", "-c", f"ulimit -v 40000000; exec {CLI} artifacts find --json --store {store}"],
                         capture_output=True, text=True, timeout=300, env=env)
    assert res.returncode == 0 and isinstance(json.loads(res.stdout), list), res.stderr[-2000:]
    assert not usage.exists()  # it ran in its own process


def test_kill_9_of_the_server_mid_command_ends_the_client_and_the_command(served_store, tmp_path):
    """The kill drill: the client ends within 10 s with one line, no process of the command survives, the store's
    lock is not inherited, and the next command gets a fresh server and the same ids. Last in this module: it kills
    the module's server (the fresh one it ends with is stopped by the fixture), instead of starting one of its own."""
    store, env = served_store
    write(tmp_path / "docs" / "a.txt", "alpha beta\ngamma delta\n")
    corpus = ["corpus", str(tmp_path / "docs"), "--name", "drill", "--store", str(store), "--json"]
    before = run(corpus, env)
    assert before.returncode == 0, before.stderr[-2000:]
    sample = REPO / "data" / "sample" / "tinyshakespeare.txt"
    known = set(children_in_log(store))
    client = subprocess.Popen([CLI, "lm", "train", str(sample), "--preset", "shakespeare-char-cpu", "--store",
                               str(store), "--set", "train.max_iters=1000000", "--set",
                               "train.eval_interval=1000000"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, env=env)
    try:
        wait_until(lambda: set(children_in_log(store)) - known, 60, "the server forked the command")
    finally:
        if not set(children_in_log(store)) - known:  # it ran in its own process: no drill, no orphan either
            client.kill()
    (child,) = set(children_in_log(store)) - known
    time.sleep(3)
    assert alive(child) and client.poll() is None
    first = state(store)
    os.kill(first["pid"], signal.SIGKILL)
    killed = time.monotonic()
    client.wait(timeout=10)
    assert time.monotonic() - killed < 10
    stderr = client.stderr.read()
    assert client.returncode == 1
    assert stderr.strip().splitlines()[-1].startswith("error: the local corpusforge server")
    assert stderr.count("died while running this command") == 1
    wait_until(lambda: not group_members(child), 15, "every process of the command ended")
    wait_until(lambda: not alive(first["prefect_pid"]), 30, "the Prefect API ended")
    after = run(corpus, env)
    assert after.returncode == 0, after.stderr[-2000:]
    assert json.loads(after.stdout.strip().splitlines()[-1])["id"] == json.loads(
        before.stdout.strip().splitlines()[-1])["id"]
    usage = tmp_path / "usage.jsonl"  # a command with work to do: a fresh server takes the lock and runs it
    fresh = run(["corpus", str(tmp_path / "docs"), "--name", "fresh", "--store", str(store), "--json"],
                {**env, "CORPUSFORGE_SERVER_RUSAGE": str(usage)})
    assert fresh.returncode == 0, fresh.stderr[-2000:]
    second = state(store)
    assert second["pid"] != first["pid"] and alive(second["pid"]) and usage.exists()
