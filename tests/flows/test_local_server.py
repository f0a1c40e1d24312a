"""The store's local server for real: a Prefect API and warm forked workers, driven through the CLI."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import REPO, write

CLI = str(Path(sys.executable).parent / "corpusforge")
pytestmark = pytest.mark.server


def server_env(**extra: str) -> dict[str, str]:
    """The tests' environment with the local server turned on, no Prefect API configured, and Prefect's
    state in the store (as for a user), on a random port."""
    env = {k: v for k, v in os.environ.items() if k not in ("PREFECT_API_URL", "PREFECT_HOME")}
    env.update(CORPUSFORGE_LOCAL_SERVER="on", CORPUSFORGE_PREFECT_PORT="0", **extra)
    return env


def run(args: list[str], env: dict[str, str], cwd: Path | None = None, timeout: float = 300):
    return subprocess.run([CLI, *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=timeout)


def state(store: Path) -> dict:
    return json.loads((store / "prefect" / "local-server.json").read_text())


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is dead for our purposes
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


def wait_until(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.2)
    pytest.fail(f"timed out waiting until {what}")


def children_in_log(store: Path) -> list[int]:
    log = (store / "logs" / "local-server.log").read_text()
    return [int(pid) for pid in re.findall(r"-> child (\d+)", log)]


FIRST: dict = {}  # the fixture's first command: its JSON answer, the server's log when it returned, warm or not


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """A store whose server the first command on it started (as for a user: no `server start`; the idle test starts
    one by hand), warm before the tests: what that first command did is in ``FIRST`` (one server start for the
    module's tests, issue 43)."""
    root = tmp_path_factory.mktemp("served")
    store = root / "store"
    env = server_env()
    write(root / "first" / "a.txt", "alpha beta\ngamma delta\n")
    try:
        started = run(["corpus", str(root / "first"), "--name", "first", "--store", str(store), "--json"], env)
        assert started.returncode == 0, started.stderr[-3000:]
        FIRST.update(json.loads(started.stdout.strip().splitlines()[-1]), log_at_return=(
            store / "logs" / "local-server.log").read_text())
        wait_until(lambda: state(store).get("warm"), 180, "the server imported the later modules")
        FIRST["warm"] = state(store)["warm"]  # (a later test reloads the server, which warms up again)
        yield root, store, env
    finally:
        run(["server", "stop", "--store", str(store)], env)
    assert not (store / "prefect" / "local-server.json").exists()


def test_a_command_runs_in_the_warm_server_as_it_would_here(served):
    root, store, env = served
    write(root / "docs" / "a.txt", "alpha beta\ngamma delta\n")
    usage = root / "usage.jsonl"
    # a relative source (the client's working directory) and the store from the environment, not a flag
    here = run(["corpus", "docs", "--name", "small", "--json"],
               {**env, "CORPUSFORGE_STORE": str(store), "CORPUSFORGE_SERVER_RUSAGE": str(usage)}, cwd=root)
    assert here.returncode == 0, here.stderr[-3000:]
    result = json.loads(here.stdout.strip().splitlines()[-1])
    assert result["accounting"]["records_read"] == 2 and Path(result["path"]).is_dir()
    reports = [json.loads(line) for line in usage.read_text().splitlines()]
    assert reports[-1]["exit"] == 0 and reports[-1]["pid"] in children_in_log(store)
    # the flow run went to the server's Prefect API (whose database is in the store)
    import httpx

    runs = httpx.post(state(store)["prefect_url"] + "/api/flow_runs/filter", json={}, timeout=10).json()
    assert [r["state"]["type"] for r in runs if r["flow_id"]] == ["COMPLETED", "COMPLETED"]  # the fixture's, this
    assert (store / "prefect" / "prefect.db").is_file()

    # the same answers, byte for byte, and the same exit codes as a command run in its own process
    cold = {**env, "CORPUSFORGE_LOCAL_SERVER": "off"}
    for args in (["artifacts", "show", result["id"][:12], "--json"], ["artifacts", "find", "--json"],
                 ["artifacts", "show", "ffff0000"], ["corpus", "no/such/file", "--name", "x"]):
        warm = run([*args, "--store", str(store)], {**env, "CORPUSFORGE_SERVER_RUSAGE": str(usage)}, cwd=root)
        plain = run([*args, "--store", str(store)], cold, cwd=root)
        assert (warm.returncode, warm.stdout, warm.stderr) == (plain.returncode, plain.stdout, plain.stderr), args
    assert len(usage.read_text().splitlines()) == 5  # each of the four ran in the server


def test_help_in_the_warm_server_names_the_command(served):
    """Issue 35 item 8: through the warm server the usage line read `python -m corpusforge...` (click's guess from
    how the server process started)."""
    root, store, env = served
    usage = root / "usage-help.jsonl"
    res = run(["artifacts", "find", "--help", "--store", str(store)], {**env, "CORPUSFORGE_SERVER_RUSAGE": str(usage)})
    assert res.returncode == 0, res.stderr[-2000:]
    assert usage.is_file()  # it ran in the server
    assert "Usage: corpusforge artifacts find [OPTIONS]" in " ".join(res.stdout.split()), res.stdout
    assert "python -m" not in res.stdout
    bad = run(["artifacts", "find", "--no-such-flag", "--store", str(store)], env)
    assert bad.returncode == 2 and "python -m" not in bad.stderr and "corpusforge artifacts find --help" in bad.stderr

def test_status_reports_the_server(served):
    _, store, env = served
    res = run(["server", "status", "--store", str(store), "--json"], env)
    report = json.loads(res.stdout)
    assert report["running"] and report["status"] == "ready" and report["same_environment"]
    assert report["warm"] is True  # `server start` waits for the modules imported after ready, too
    import httpx

    assert httpx.get(report["prefect_url"] + "/api/health", timeout=5).status_code == 200



def test_a_copied_store_never_reaches_the_originals_server(served, tmp_path):
    """Issue 50, item 2: `cp -a STORE COPY` copies the server's state file too. Status on the copy reported the
    original's pid, a run on the copy went to the original's Prefect API, and `server stop --store COPY` stopped
    the original. A state file that names another store is not the copy's."""
    import shutil

    from corpusforge.door import read_state

    _, store, env = served
    original = state(store)
    copy = tmp_path / "copy"
    shutil.copytree(store, copy, symlinks=True)
    assert state(copy)["pid"] == original["pid"]  # the original's file, copied
    assert read_state(copy) is None and read_state(store)["pid"] == original["pid"]
    status = json.loads(run(["server", "status", "--store", str(copy), "--json"], env).stdout)
    assert status["running"] is False and status.get("pid") in (None, 0), status
    stopped = run(["server", "stop", "--store", str(copy)], env)
    assert stopped.returncode == 0, stopped.stderr[-2000:]
    assert alive(original["pid"]) and alive(original["prefect_pid"])  # the original's server is untouched
    report = json.loads(run(["server", "status", "--store", str(store), "--json"], env).stdout)
    assert report["running"] and report["pid"] == original["pid"]

def test_another_environment_runs_in_its_own_process(served):
    root, store, env = served
    usage = root / "usage-other.jsonl"
    threads = str(int(env.get("OMP_NUM_THREADS", "1")) + 1)  # not the server's
    res = run(["artifacts", "find", "--json", "--store", str(store)],
              {**env, "OMP_NUM_THREADS": threads, "CORPUSFORGE_SERVER_RUSAGE": str(usage)})
    assert res.returncode == 0 and isinstance(json.loads(res.stdout), list)
    assert not usage.exists()  # OMP_* is read when torch is imported: the warm server's value would be wrong
    status = run(["server", "status", "--store", str(store)], {**env, "OMP_NUM_THREADS": threads})
    assert "environment differs" in status.stderr
    # an allocator setting is read when a process starts (polars' jemalloc): the forked command would ignore it
    res = run(["artifacts", "find", "--json", "--store", str(store)],
              {**env, "_RJEM_MALLOC_CONF": "dirty_decay_ms:-1", "CORPUSFORGE_SERVER_RUSAGE": str(usage)})
    assert res.returncode == 0 and not usage.exists()


def test_killed_client_stops_its_command_and_ctrl_c_is_forwarded(served):
    root, store, env = served
    sample = REPO / "data" / "sample" / "tinyshakespeare.txt"
    args = ["lm", "train", str(sample), "--preset", "shakespeare-char-cpu", "--store", str(store),
            "--set", "train.max_iters=1000000", "--set", "train.eval_interval=1000000"]
    for how, signum in (("killed", signal.SIGKILL), ("interrupted", signal.SIGINT)):
        known = set(children_in_log(store))
        # SIGINT as on a terminal, also when pytest itself was started in the background (where the shell
        # makes SIGINT ignored, and children inherit that)
        client = subprocess.Popen([CLI, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                                  preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        wait_until(lambda: set(children_in_log(store)) - known, 60, "the server forked the command")
        (child,) = set(children_in_log(store)) - known
        time.sleep(3)
        assert alive(child) and client.poll() is None
        client.send_signal(signum)
        client.wait(timeout=60)
        wait_until(lambda: not alive(child), 30, f"the {how} client's command stopped")
        if how == "interrupted":
            assert client.returncode == 130, client.stderr.read()[-2000:]  # KeyboardInterrupt in the command
    assert state(store)["status"] == "ready"  # the server itself carries on


def test_new_code_makes_the_server_reload(served):
    from corpusforge.door import recv_message, send_message

    root, store, env = served
    log = store / "logs" / "local-server.log"
    reloads = log.read_text().count("re-executing")
    before = state(store)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.connect(before["socket"])
        with open(os.devnull, "rb") as null_in, open(os.devnull, "wb") as null_out:
            send_message(sock, {"argv": ["--version"], "cwd": str(root), "env": env, "code": "not-this-code",
                                "umask": 0o022, "rlimits": {}},
                         [null_in.fileno(), null_out.fileno(), null_out.fileno()])
        reply, _ = recv_message(sock)
    assert "refused" in reply
    wait_until(lambda: log.read_text().count("re-executing") > reloads, 30, "the reload")
    wait_until(lambda: state(store)["status"] == "ready", 120, "the reloaded server was warm")
    after = state(store)
    assert after["pid"] == before["pid"] and after["prefect_url"] == before["prefect_url"]  # same API, kept
    usage = root / "usage-reload.jsonl"
    res = run(["artifacts", "find", "--json"], {**env, "CORPUSFORGE_STORE": str(store),
                                                "CORPUSFORGE_SERVER_RUSAGE": str(usage)})
    assert res.returncode == 0 and isinstance(json.loads(res.stdout), list) and usage.exists()


def test_a_command_on_a_new_store_does_not_wait_for_the_neural_libraries(served):
    """A command that starts the store's server (the fixture's first command, on a new store) runs there as soon as
    the server has imported what every pipeline uses; the tokenizer, embedding and neural libraries
    (LATER_MODULES) come after, while no command runs, and then the state says warm (the fixture waited for it)."""
    from corpusforge.server.warm import LATER_MODULES

    _, store, _ = served
    assert FIRST["accounting"]["kept"] == 2
    assert children_in_log(store)  # it ran in the server
    assert "-> child" in FIRST["log_at_return"]  # it had run there when it returned
    assert FIRST["warm"] is True
    log = (store / "logs" / "local-server.log").read_text()
    assert f"after ready: {len(LATER_MODULES)} more modules" in log
    assert log.index("serving commands") < log.index("-> child") < log.index("warm-up, after ready")


def test_a_server_still_warming_up_stops_when_asked(tmp_path):
    """`server stop` right after the first command on a new store, while the server may still be importing
    LATER_MODULES: it stops (its state file and Prefect API gone), it does not finish warming first."""
    store = tmp_path / "store"
    env = server_env()
    write(tmp_path / "docs" / "a.txt", "alpha beta\n")
    res = run(["corpus", str(tmp_path / "docs"), "--name", "first", "--store", str(store), "--json"], env)
    assert res.returncode == 0, res.stderr[-3000:]
    first = state(store)
    started = time.monotonic()
    assert run(["server", "stop", "--store", str(store)], env).returncode == 0
    assert time.monotonic() - started < 30
    wait_until(lambda: not alive(first["pid"]) and not alive(first["prefect_pid"]), 30, "the server stopped")
    assert not (store / "prefect" / "local-server.json").exists()


def test_idle_server_stops_and_a_killed_server_takes_its_prefect_api_along(tmp_path):
    store = tmp_path / "store"
    env = server_env()
    assert run(["server", "start", "--store", str(store), "--idle", "3"], env).returncode == 0
    first = state(store)
    wait_until(lambda: not alive(first["pid"]), 60, "the idle server stopped")
    assert not alive(first["prefect_pid"]) and not (store / "prefect" / "local-server.json").exists()

    assert run(["server", "start", "--store", str(store)], env).returncode == 0
    second = state(store)
    # the same port as before (remembered in logs/prefect-port.json; CORPUSFORGE_PREFECT_PORT=0 would otherwise
    # draw a new one), so the flow-run links the first server's runs printed open this store's runs again
    assert second["prefect_url"] == first["prefect_url"]
    os.kill(second["pid"], signal.SIGKILL)
    wait_until(lambda: not alive(second["prefect_pid"]), 30, "the orphaned Prefect API exited")
    status = run(["server", "status", "--store", str(store), "--json"], env)
    assert json.loads(status.stdout)["running"] is False


def test_the_socket_directory_must_be_private(tmp_path, monkeypatch):
    from corpusforge.door import UnsafeSocketPlace
    from corpusforge.server.process import socket_path_for

    shared = tmp_path / f"corpusforge-{os.getuid()}"
    shared.mkdir(mode=0o777)
    shared.chmod(0o777)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    with pytest.raises(UnsafeSocketPlace, match="mode 777"):
        socket_path_for(tmp_path / "store")
    shared.chmod(0o700)
    assert socket_path_for(tmp_path / "store").startswith(str(shared))
