"""An in-process command always ends: on SIGTERM, and when a worker fails while another is stuck (issue 30, 7).

Under a memory limit a corpus run sat for 10+ minutes with 20 threads in futex waits and ignored SIGTERM: Prefect's
thread runner joins every task still running when the flow ends, failed or crashed, so one worker that never
returns holds the whole command. Here the stuck worker is real: a shard task waiting on its artifact's store lock,
which the test holds. Each command runs under a timeout, so the old behaviour fails the test instead of hanging it.
"""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import yaml

from corpusforge.pipeline_config import pipeline_config_from_dict
from corpusforge.plan import plan_pipeline
from tests.conftest import write
from tests.flows.cli.test_main import cli_env

CLI = str(Path(sys.executable).parent / "corpusforge")
ENDS_WITHIN_S = 60  # after SIGTERM or after the failure (the grace is 10 s); the old code never ended


def _hold_first_shard_lock(work: Path, cfg: dict):
    """Write ``cfg``, and lock the store lock of the first shard the run will build (what a concurrent writer of
    that shard holds): its task waits there. Returns (config path, store, open lock file, the lock's inode)."""
    path = work / "cfg.yaml"
    path.write_text(yaml.safe_dump(cfg), encoding="utf-8")
    store = work / "store"
    plan = plan_pipeline(pipeline_config_from_dict(cfg), store, work)
    assert plan.missing is not None and plan.missing.step == "corpus_shard"
    lock = store / ".locks" / f"{plan.missing.artifact_id}.lock"
    lock.parent.mkdir(parents=True, exist_ok=True)
    held = open(lock, "a+")
    fcntl.flock(held.fileno(), fcntl.LOCK_EX)
    return path, store, held, os.stat(lock).st_ino


def _waiting_on(inode: int) -> bool:
    """Some process is blocked on the flock of ``inode`` (/proc/locks lists waiters with '->')."""
    return any("->" in line and f":{inode} " in line for line in Path("/proc/locks").read_text().splitlines())


def _start(config: Path, store: Path, api_url: str) -> subprocess.Popen:
    return subprocess.Popen([CLI, "run", str(config), "--store", str(store)], env=cli_env(api_url),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _finish(proc: subprocess.Popen, timeout: float) -> tuple[int, str, float]:
    start = time.monotonic()
    try:
        _, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise AssertionError(f"the command was still running {timeout:.0f} s later (killed)") from None
    return proc.returncode, err, time.monotonic() - start


def test_sigterm_ends_a_command_whose_worker_is_stuck(prefect_harness, tmp_path):
    src = tmp_path / "src"
    for i in range(3):
        write(src / f"f{i}.txt", "".join(f"line {i} {j}\n" for j in range(50)))
    cfg = {"name": "stuck", "corpus": {"name": "stuck", "sources": [str(src)]}, "tracking": {"enabled": False}}
    config, store, held, inode = _hold_first_shard_lock(tmp_path, cfg)
    try:
        proc = _start(config, store, prefect_harness)
        deadline = time.monotonic() + 180
        while not _waiting_on(inode):
            assert proc.poll() is None, proc.communicate()[1][-2000:]
            assert time.monotonic() < deadline, "the shard task never reached the store lock"
            time.sleep(0.2)
        proc.send_signal(signal.SIGTERM)
        code, err, took = _finish(proc, ENDS_WITHIN_S)
    finally:
        held.close()
    assert code == 128 + signal.SIGTERM, err[-2000:]
    assert err.strip().splitlines()[-1].startswith("error: still running"), err[-2000:]
    assert took < ENDS_WITHIN_S


def test_a_failed_worker_ends_the_run_in_one_line_while_another_is_stuck(prefect_harness, tmp_path):
    """Shard a.txt waits on its store lock (held here) while shard b.txt fails a dataset-level expectation: the
    run fails at once with the validation's one line, as it would without the stuck shard."""
    src = tmp_path / "src"
    write(src / "a.txt", "".join(f"line a {j}\n" for j in range(50)))
    write(src / "b.txt", "".join(f"line b {j} poison\n" for j in range(50)))
    poison = {"type": "expect_column_values_to_not_match_regex", "kwargs": {"column": "text", "regex": "poison"},
              "level": "dataset"}
    cfg = {"name": "stuck", "tracking": {"enabled": False}, "runner": {"workers": 2},
           "corpus": {"name": "stuck", "sources": [str(src)], "shard_mb": 0, "validate": {"expectations": [poison]}}}
    config, store, held, _ = _hold_first_shard_lock(tmp_path, cfg)
    try:
        code, err, took = _finish(_start(config, store, prefect_harness), 180 + ENDS_WITHIN_S)
    finally:
        held.close()
    assert code == 1, err[-2000:]
    last = err.strip().splitlines()[-1]
    assert last.startswith("error: validation stopped the publish:") and "poison" in last, err[-2000:]
    assert "Traceback" not in err
