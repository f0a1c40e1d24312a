"""Bad input at the door and kills (issue 14): the real `corpusforge` command in its own process."""

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

CLI = str(Path(sys.executable).parent / "corpusforge")


def cold_env() -> dict[str, str]:
    """No Prefect API configured and the local server off: the command starts Prefect's ephemeral API."""
    env = {k: v for k, v in os.environ.items() if k not in ("PREFECT_API_URL",)}
    env["CORPUSFORGE_LOCAL_SERVER"] = "off"
    return env


def test_a_store_that_is_a_file_is_refused_in_one_line(tmp_path):
    source = write(tmp_path / "a.txt", "one line\n")
    blocker = write(tmp_path / "not-a-dir", "x")
    for store, words in ((blocker, "is a file, not a directory"), (blocker / "sub", "cannot be created")):
        for args in (["corpus", str(source), "--name", "a"], ["artifacts", "find"]):
            res = subprocess.run([CLI, *args, "--store", str(store)], capture_output=True, text=True,
                                 env=cold_env(), timeout=120)
            if args[0] == "artifacts" and store != blocker:
                assert res.returncode == 0  # reading a store that does not exist: nothing found
                continue
            assert res.returncode == 2, res.stderr
            assert words in " ".join(res.stderr.split()) and "Traceback" not in res.stderr


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write into a read-only directory")
def test_a_read_only_store_is_refused_in_one_line(tmp_path):
    source = write(tmp_path / "a.txt", "one line\n")
    store = tmp_path / "ro"
    store.mkdir()
    store.chmod(0o555)
    try:
        res = subprocess.run([CLI, "corpus", str(source), "--name", "a", "--store", str(store)],
                             capture_output=True, text=True, env=cold_env(), timeout=120)
    finally:
        store.chmod(0o755)
    assert res.returncode == 2 and "not writable" in res.stderr and "Traceback" not in res.stderr


def _children(pid: int) -> list[int]:
    out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout
    return [int(p) for p in out.split()]


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.e2e
def test_kill_9_of_a_cold_command_takes_its_ephemeral_prefect_api_along(tmp_path):
    sample = REPO / "data" / "sample" / "tinyshakespeare.txt"
    client = subprocess.Popen([CLI, "lm", "train", str(sample), "--preset", "shakespeare-char-cpu", "--store",
                               str(tmp_path / "store"), "--set", "train.max_iters=1000000"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=cold_env())
    server = None
    deadline = time.monotonic() + 120
    while server is None and time.monotonic() < deadline and client.poll() is None:
        for pid in _children(client.pid):
            if "uvicorn" in Path(f"/proc/{pid}/cmdline").read_text(errors="replace"):
                server = pid
        time.sleep(0.2)
    assert server is not None, "the command did not start an ephemeral Prefect API"
    os.kill(client.pid, signal.SIGKILL)
    client.wait(timeout=30)
    deadline = time.monotonic() + 30
    while _alive(server) and time.monotonic() < deadline:
        time.sleep(0.2)
    alive = _alive(server)
    if alive:
        os.kill(server, signal.SIGKILL)
    assert not alive, "the ephemeral Prefect API outlived its command"


UNKNOWN_ID_COMMANDS = [["artifacts", "show", "ffff0000"], ["artifacts", "verify", "ffff0000"],
                       ["ngram", "query", "ffff0000", "--context", "a"], ["lm", "generate", "ffff0000", "--prompt", "a"],
                       ["lm", "inspect", "ffff0000", "--prompt", "a"], ["tokenizer", "encode", "ffff0000", "a"],
                       ["embed", "neighbors", "ffff0000", "a"], ["embed", "eval", "ffff0000"]]


@pytest.mark.parametrize("args", UNKNOWN_ID_COMMANDS, ids=lambda a: " ".join(a[:2]))
def test_an_unknown_id_is_bad_usage_everywhere(tmp_path, args):
    res = subprocess.run([CLI, *args, "--store", str(tmp_path)], capture_output=True, text=True, env=cold_env(),
                         timeout=120)
    assert res.returncode == 2, res.stderr  # docs (Command line): 2 = bad usage or config
    assert "no artifact with id 'ffff0000'" in res.stderr and "Traceback" not in res.stderr


@pytest.mark.parametrize("args", [["lm", "generate", "ffff", "--prompt", "a", "--top-p", "1.5"],
                                  ["lm", "generate", "ffff", "--prompt", "a", "--top-p", "0"],
                                  ["lm", "generate", "ffff", "--prompt", "a", "--temperature", "0"],
                                  ["lm", "generate", "ffff", "--prompt", "a", "--top-k", "0"],
                                  ["ngram", "estimate", "x.txt", "--order", "0"],
                                  ["ngram", "estimate", "x.txt", "--smoothing", "add-k", "--k", "-1"],
                                  ["embed", "neighbors", "ffff", "a", "--top", "0"]],
                         ids=lambda a: " ".join(a[-2:]))
def test_flag_ranges_are_checked_before_any_work(tmp_path, args):
    res = subprocess.run([CLI, *args, "--store", str(tmp_path)], capture_output=True, text=True, env=cold_env(),
                         timeout=120)
    assert res.returncode == 2, res.stderr
    flag = args[-2]
    assert flag in res.stderr and "no artifact" not in res.stderr and "Traceback" not in res.stderr


@pytest.mark.e2e
def test_sources_that_yield_no_document_fail_unless_allowed(prefect_harness, tmp_path):
    write(tmp_path / "only" / "picture.png", bytes(range(256)) * 4)
    from tests.commands import corpusforge  # in this process: the corpus command's console script is tested elsewhere

    env = {"PREFECT_API_URL": prefect_harness, "CORPUSFORGE_LOCAL_SERVER": "off"}
    args = ["corpus", str(tmp_path / "only"), "--name", "pics", "--store", str(tmp_path / "store")]
    res = corpusforge(*args, env=env)
    assert res.returncode == 2 and res.exception is None, res.stderr[-2000:]
    said = " ".join(res.stderr.split())
    assert "yielded no document" in said and "quarantined unsupported_format" in said and "Traceback" not in said
    assert not list((tmp_path / "store").glob("corpus/pics-*"))  # nothing published
    allowed = corpusforge(*args, "--set", "allow_empty=true", "--json", env=env)
    assert allowed.returncode == 0, allowed.stderr[-2000:]
    assert json.loads(allowed.stdout.strip().splitlines()[-1])["accounting"]["kept"] == 0


@pytest.fixture
def tiny_disk(tmp_path):
    """A 3 MiB tmpfs (needs the right to mount: root in a container that allows it; skipped otherwise)."""
    mount = tmp_path / "disk"
    mount.mkdir()
    res = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(mount)], capture_output=True)
    if res.returncode != 0:
        pytest.skip("cannot mount a small tmpfs here: " + res.stderr.decode(errors="replace").strip())
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], capture_output=True)


@pytest.mark.e2e
def test_a_full_disk_is_said_once_and_leaves_the_store_usable(prefect_harness, tiny_disk, tmp_path):
    lines = "".join(f"line {i} " + " ".join(f"w{(i * 7 + j) % 5003}" for j in range(12)) + "\n" for i in range(60000))
    big = write(tmp_path / "big" / "big.txt", lines)  # 4+ MB of text: its shard cannot fit on the disk
    store = tiny_disk / "store"
    env = {**os.environ, "PREFECT_API_URL": prefect_harness, "CORPUSFORGE_LOCAL_SERVER": "off"}

    # before any work: the free space is checked
    res = subprocess.run([CLI, "corpus", str(big), "--name", "big", "--store", str(store)], capture_output=True,
                         text=True, env=env, timeout=300)
    said = " ".join(res.stderr.split())
    assert res.returncode == 1 and "no space left on device" in said and "Nothing was written" in said
    # during the work: the disk fills while the shard is written
    env["CORPUSFORGE_MIN_FREE_MB"] = "0"
    res = subprocess.run([CLI, "corpus", str(big), "--name", "big", "--store", str(store)], capture_output=True,
                         text=True, env=env, timeout=300)
    assert res.returncode == 1, res.stderr[-2000:]
    said = " ".join(res.stderr.split())
    assert said.count("error: no space left on device") == 1 and "Traceback" not in said
    assert not list(store.glob("*/.tmp-*")) and not list(store.glob("corpus*/*/manifest.json"))
    # the store is usable: a corpus that fits is built in it
    small = write(tmp_path / "small.txt", "a small corpus\nthat fits\n")
    res = subprocess.run([CLI, "corpus", str(small), "--name", "small", "--store", str(store)], capture_output=True,
                         text=True, env=env, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]


def test_piped_output_is_not_wrapped_at_80_columns(tmp_path):
    deep = tmp_path / ("a-rather-long-directory-name-" * 4) / "store"
    env = {k: v for k, v in cold_env().items() if k != "COLUMNS"}
    res = subprocess.run([CLI, "artifacts", "show", "ffff0000", "--store", str(deep)], capture_output=True,
                         text=True, env=env, timeout=120)
    line = f"error: no artifact with id 'ffff0000' in {deep}"
    assert len(line) > 80 and line in res.stderr.splitlines(), res.stderr


def test_a_bad_cron_is_said_in_the_users_words(tmp_path):
    res = subprocess.run([CLI, "schedule", str(REPO / "configs" / "demo.yaml"), "--cron", "61 * * * *", "--store",
                          str(tmp_path)], capture_output=True, text=True, env=cold_env(), timeout=120)
    said = " ".join(res.stderr.split())
    assert res.returncode == 2 and "is not a valid cron expression" in said and "'61 * * * *'" in said
    assert "validation error for" not in said and "Traceback" not in said


def test_missing_sources_are_refused_before_prefect_or_mlflow_start(tmp_path):
    """A missing source path or `sources: []` was retried twice as a transient error (two tracebacks, ~35 s).
    It is checked before any server starts: exit 2, one line, and nothing left behind (no Prefect run, no
    MLflow database, no local server)."""
    store = tmp_path / "store"
    config = write(tmp_path / "empty.yaml", "name: empty\ncorpus:\n  name: c\n  sources: []\n")
    cases = [([CLI, "corpus", str(tmp_path / "missing"), "--name", "x"], "does not exist"),
             ([CLI, "run", str(config)], "corpus.sources: give at least one file or directory")]
    for args, words in cases:
        res = subprocess.run([*args, "--store", str(store)], capture_output=True, text=True, env=os.environ,
                             timeout=120)
        assert res.returncode == 2, res.stderr
        assert words in res.stderr and "Traceback" not in res.stderr and len(res.stderr.strip().splitlines()) == 1
    left = sorted(p.name for p in store.iterdir()) if store.exists() else []
    assert not any(name.startswith(("mlflow", "prefect", ".server", "server")) for name in left), left


def one_line_exit_2(res: subprocess.CompletedProcess) -> str:
    assert res.returncode == 2, (res.returncode, res.stderr[-2000:])
    lines = [line for line in res.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in res.stderr, res.stderr[-2000:]
    return lines[0]


@pytest.mark.parametrize("case", ["latin-1", "nested", "unclosed"])
def test_a_bad_config_file_is_one_line_with_exit_2(tmp_path, case):
    """A non-UTF-8 YAML config gave a 45-line traceback and YAML nested 5,000 deep a RecursionError of 2,990
    lines; PyYAML's own messages span several lines."""
    body = {"latin-1": "corpus:\n  name: caf\xe9\n".encode("latin-1"),
            "nested": ("a: " + "[" * 5000 + "]" * 5000 + "\n").encode(),
            "unclosed": b"corpus: {name: x\n"}[case]
    config = write(tmp_path / "bad.yaml", body)
    res = subprocess.run([CLI, "run", str(config), "--store", str(tmp_path / "s")], capture_output=True, text=True,
                         env=cold_env(), timeout=120)
    line = one_line_exit_2(res)
    assert str(config) in line and {"latin-1": "not UTF-8", "nested": "nested too deeply",
                                    "unclosed": "not valid YAML"}[case] in line


def test_bad_ports_and_an_empty_store_are_refused_in_one_line(tmp_path):
    res = subprocess.run([CLI, "ui", "--prefect-port", "99999", "--store", str(tmp_path / "s")], capture_output=True,
                         text=True, env=cold_env(), timeout=60)
    assert res.returncode == 2 and "--prefect-port" in res.stderr and "Traceback" not in res.stderr
    assert not (tmp_path / "s").exists()
    source = write(tmp_path / "a.txt", "one line\n")
    res = subprocess.run([CLI, "corpus", str(source), "--name", "x", "--store", ""], capture_output=True, text=True, env=cold_env(),
                         timeout=60, cwd=tmp_path)
    assert "--store is empty" in one_line_exit_2(res)
    assert not (tmp_path / ".corpusforge").exists()
