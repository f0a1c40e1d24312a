"""What a killed process leaves behind is cleaned up by the next run (issue 14, item 10): temp dirs of dead
writers, and MLflow runs left RUNNING by a dead process."""

from __future__ import annotations

import subprocess
import sys
import os

from corpusforge.storage.store import ArtifactStore
from corpusforge.storage.tracking import Tracker
from tests.conftest import REPO


def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_sweep_removes_only_temp_dirs_of_dead_writers(store_root):
    step = store_root / "corpus_shard"
    dead = step / f".tmp-aaaaaaaaaaaa-{dead_pid()}-0123abcd"
    live = step / f".tmp-bbbbbbbbbbbb-{os.getpid()}-4567ef01"
    other = step / ".tmp-not-a-writer"
    for d in (dead, live, other):
        (d / "sub").mkdir(parents=True)
        (d / "sub" / "half-written.parquet").write_bytes(b"x" * 100)
    removed = ArtifactStore(store_root).sweep_stale_temps()
    assert removed == [str(dead)]
    assert not dead.exists() and live.exists() and other.exists()


KILLED_MID_RUN = """
import os, sys
from pathlib import Path
from corpusforge.storage.tracking import Tracker
tracker = Tracker(Path(sys.argv[1]), "orphans")
run = tracker.start_pipeline_run("doomed", {"k": 1}, {})
step = tracker.start_step_run(run, "lm", "m")
print(run, step, flush=True)
os._exit(9)  # as if killed: nothing terminates the runs
"""


def test_runs_of_a_dead_process_are_marked_killed_by_the_next_tracker(store_root):
    out = subprocess.run([sys.executable, "-c", KILLED_MID_RUN, str(store_root)], capture_output=True, text=True,
                         cwd=REPO, timeout=300)
    doomed = out.stdout.split()
    assert len(doomed) == 2, out.stderr[-2000:]
    live = Tracker(store_root, "orphans")
    mine = live.start_pipeline_run("alive", {"k": 2}, {})  # this process is alive: its run must stay RUNNING
    assert sorted(live.killed_orphans) == sorted(doomed)
    for run_id in doomed:
        run = live.client.get_run(run_id)
        assert run.info.status == "KILLED" and "its process died" in run.data.tags["corpusforge.ended_by"]
    again = Tracker(store_root, "orphans")
    assert again.killed_orphans == [] and again.client.get_run(mine).info.status == "RUNNING"
