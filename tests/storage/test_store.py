"""Publishing to the content-addressed artifact store (storage/store.py): reuse, manifests, atomicity."""

from __future__ import annotations

import hashlib
import json
import os
import select
import signal
import subprocess
import sys
import textwrap
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from corpusforge.storage.catalog import Catalog
from corpusforge.storage.hashing import artifact_id
from corpusforge.storage.store import MANIFEST, ArtifactStore, StoreError
from tests.conftest import REPO, write

CONFIG = {"min_chars": 5, "nested": {"lower": True}}
INPUTS = [{"id": "a" * 64, "kind": "source", "path": "data/a.txt"}]


class CountingBuild:
    def __init__(self, files: dict[str, bytes] | None = None, sleep: float = 0.0):
        self.calls = 0
        self.files = files or {"data.txt": b"hello\n"}
        self.sleep = sleep
        self._lock = threading.Lock()

    def __call__(self, tmp: Path):
        with self._lock:
            self.calls += 1
        if self.sleep:
            time.sleep(self.sleep)
        for rel, data in self.files.items():
            write(tmp / rel, data)
        return {"accounting": {"records_read": 1}}


def _publish(store: ArtifactStore, build, step="tok", name="out", version=1, config=CONFIG, inputs=INPUTS):
    return store.publish(step=step, name=name, version=version, config=config, inputs=inputs, build=build)


def _visible(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if not p.name.startswith("."))


def _temps(root: Path) -> list[Path]:
    return sorted(root.glob("*/.tmp-*"))


def test_publish_builds_once_then_reuses(store_root):
    store = ArtifactStore(store_root)
    build = CountingBuild()
    first = _publish(store, build)
    assert first.reused is False
    assert build.calls == 1
    expected_id = artifact_id("tok", 1, CONFIG, ["a" * 64])
    assert first.manifest["id"] == expected_id
    assert first.path == store_root.resolve() / "tok" / f"out-{expected_id[:12]}"
    assert (first.path / "data.txt").read_bytes() == b"hello\n"

    second = _publish(store, build)
    assert second.reused is True
    assert build.calls == 1
    assert second.manifest["id"] == expected_id
    assert second.path == first.path

    # A fresh store object on the same root also reuses (the store is the cache, not process memory).
    third = _publish(ArtifactStore(store_root), build, config={"nested": {"lower": True}, "min_chars": 5})
    assert third.reused is True and third.path == first.path
    assert build.calls == 1


def test_changed_config_builds_a_new_artifact(store_root):
    store = ArtifactStore(store_root)
    build = CountingBuild()
    a = _publish(store, build)
    b = _publish(store, build, config={**CONFIG, "min_chars": 6})
    assert build.calls == 2
    assert a.manifest["id"] != b.manifest["id"]
    assert a.path != b.path and a.path.is_dir() and b.path.is_dir()


def test_manifest_contents_match_disk(store_root):
    store = ArtifactStore(store_root)
    files = {"data.txt": b"hello\n", "sub/dir/part-0.bin": bytes(range(256)) * 3, "empty": b""}
    result = _publish(store, CountingBuild(files))
    on_disk = json.loads((result.path / MANIFEST).read_text(encoding="utf-8"))
    assert on_disk == result.manifest
    for key in ("id", "step", "name", "version", "config", "inputs", "files", "timings", "created_at"):
        assert key in on_disk, key
    assert on_disk["id"] == artifact_id("tok", 1, CONFIG, [i["id"] for i in INPUTS])
    assert (on_disk["step"], on_disk["name"], on_disk["version"]) == ("tok", "out", 1)
    assert on_disk["config"] == CONFIG
    assert on_disk["inputs"] == INPUTS
    assert on_disk["accounting"] == {"records_read": 1}  # fields returned by build land in the manifest
    assert set(on_disk["files"]) == set(files) | {"README.md"}  # the store adds the artifact's card
    for rel, data in files.items():
        entry = on_disk["files"][rel]
        assert (result.path / rel).read_bytes() == data
        assert entry["size"] == len(data)
        assert entry["sha256"] == hashlib.sha256(data).hexdigest()
    # Every regular file in the dir except the manifest is listed.
    present = {p.relative_to(result.path).as_posix() for p in result.path.rglob("*") if p.is_file()}
    assert present - {MANIFEST} == set(files) | {"README.md"}
    assert on_disk["timings"]["seconds"] >= 0


def test_step_file_named_like_manifest_is_listed_and_verifies(store_root):
    """A step may legitimately write e.g. ``manifest.jsonl``; only ``manifest.json`` itself is special."""
    store = ArtifactStore(store_root)
    result = _publish(store, CountingBuild({"manifest.jsonl": b'{"shard": 0}\n', "data.txt": b"x"}))
    assert "manifest.jsonl" in result.manifest["files"]
    report = Catalog(store).verify(result.manifest["id"])
    assert report.ok, report.problems


def test_failed_build_leaves_nothing_visible(store_root):
    store = ArtifactStore(store_root)

    def build(tmp: Path):
        write(tmp / "half.txt", b"half written")
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        _publish(store, build)
    step_dir = store_root / "tok"
    assert not step_dir.exists() or _visible(step_dir) == []
    assert _temps(store_root) == []
    assert Catalog(store).find() == []
    # And the same artifact can be published afterwards.
    ok = _publish(store, CountingBuild())
    assert ok.reused is False and (ok.path / "data.txt").is_file()


@pytest.mark.parametrize("bad", ["../x", "a/b", "", ".", "..", ".hidden", "-dash", "x" * 65, "a b", "a\\b"])
@pytest.mark.parametrize("which", ["step", "name"])
def test_invalid_names_raise_store_error(store_root, which, bad):
    store = ArtifactStore(store_root)
    build = CountingBuild()
    kwargs = {"step": "tok", "name": "out", which: bad}
    with pytest.raises(StoreError):
        _publish(store, build, **kwargs)
    assert build.calls == 0
    assert list(store_root.iterdir()) == []  # nothing created, in particular nothing outside the root
    assert not (store_root.parent / "x").exists()


def _child_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def _read_line(proc: subprocess.Popen, timeout: float) -> str:
    deadline = time.monotonic() + timeout
    ready, _, _ = select.select([proc.stdout], [], [], max(0.0, deadline - time.monotonic()))
    if not ready:
        raise AssertionError(f"child printed nothing within {timeout}s")
    return proc.stdout.readline().decode().strip()


CRASH_SCRIPT = textwrap.dedent(
    """
    import sys, time
    from corpusforge.storage.store import ArtifactStore

    def build(tmp):
        (tmp / "data.txt").write_bytes(b"partial output")
        print("WRITING", flush=True)
        time.sleep(60)

    ArtifactStore(sys.argv[1]).publish(
        step="crash", name="out", version=1, config={"k": 1}, inputs=[], build=build
    )
    print("FINISHED", flush=True)
    """
)


def test_crash_during_build_leaves_no_artifact_and_is_recovered(store_root):
    proc = subprocess.Popen(
        [sys.executable, "-c", CRASH_SCRIPT, str(store_root)], stdout=subprocess.PIPE, env=_child_env()
    )
    try:
        assert _read_line(proc, timeout=30) == "WRITING"
        os.kill(proc.pid, signal.SIGKILL)
        assert proc.wait(timeout=10) == -signal.SIGKILL
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()

    store = ArtifactStore(store_root)
    aid = artifact_id("crash", 1, {"k": 1}, [])
    final = store.artifact_dir("crash", "out", aid)
    assert not final.exists()
    assert Catalog(store).find() == []
    assert Catalog(store).find(step="crash") == []
    stale = _temps(store_root)
    assert len(stale) == 1 and stale[0].name.startswith(f".tmp-{aid[:12]}-{proc.pid}-")  # the dead writer's dir

    build = CountingBuild({"data.txt": b"complete output"})
    result = store.publish(step="crash", name="out", version=1, config={"k": 1}, inputs=[], build=build)
    assert result.reused is False and build.calls == 1
    assert result.path == final
    assert (final / "data.txt").read_bytes() == b"complete output"
    assert not stale[0].exists()
    assert _temps(store_root) == []
    assert Catalog(store).verify(aid).ok


RACE_SCRIPT = textwrap.dedent(
    """
    import json, os, sys, time
    from pathlib import Path
    from corpusforge.storage.store import ArtifactStore

    root, sync = sys.argv[1], Path(sys.argv[2])
    (sync / f"ready-{os.getpid()}").touch()
    deadline = time.monotonic() + 30
    while not (sync / "go").exists():
        if time.monotonic() > deadline:
            sys.exit("never released")
        time.sleep(0.002)

    def build(tmp):
        time.sleep(1)
        (tmp / "owner.txt").write_text(str(os.getpid()))

    r = ArtifactStore(root).publish(
        step="race", name="out", version=1, config={"k": 1}, inputs=[], build=build
    )
    print(json.dumps({"pid": os.getpid(), "reused": r.reused, "id": r.manifest["id"], "path": str(r.path)}), flush=True)
    """
)


def test_two_processes_publishing_the_same_artifact(store_root, tmp_path):
    sync = tmp_path / "sync"
    sync.mkdir()
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", RACE_SCRIPT, str(store_root), str(sync)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=_child_env(),
        )
        for _ in range(2)
    ]
    try:
        deadline = time.monotonic() + 30
        while len(list(sync.glob("ready-*"))) < 2:
            assert time.monotonic() < deadline, "children never became ready"
            assert all(p.poll() is None for p in procs), "a child exited early"
            time.sleep(0.005)
        (sync / "go").touch()
        outputs = [p.communicate(timeout=60) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    for p, (out, err) in zip(procs, outputs):
        assert p.returncode == 0, err.decode()
    reports = [json.loads(out.decode().strip().splitlines()[-1]) for out, _ in outputs]
    assert sorted(r["reused"] for r in reports) == [False, True]
    assert reports[0]["id"] == reports[1]["id"] == artifact_id("race", 1, {"k": 1}, [])
    assert reports[0]["path"] == reports[1]["path"]

    step_dir = store_root / "race"
    assert _visible(step_dir) == [Path(reports[0]["path"]).name]
    assert _temps(store_root) == []
    builder = next(r for r in reports if not r["reused"])
    assert (step_dir / _visible(step_dir)[0] / "owner.txt").read_text() == str(builder["pid"])
    report = Catalog(ArtifactStore(store_root)).verify(reports[0]["id"])
    assert report.ok, report.problems
    assert report.files_checked == 2  # owner.txt and the card


def test_threads_publishing_the_same_artifact_build_once(store_root):
    store = ArtifactStore(store_root)
    build = CountingBuild(sleep=0.2)
    barrier = threading.Barrier(4)

    def worker(_):
        barrier.wait(timeout=10)
        return _publish(store, build)

    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(worker, range(4)))
    assert build.calls == 1
    assert sorted(r.reused for r in results) == [False, True, True, True]
    assert len({r.path for r in results}) == 1
    assert len({r.manifest["id"] for r in results}) == 1
    assert _visible(store_root / "tok") == [results[0].path.name]
    assert _temps(store_root) == []
