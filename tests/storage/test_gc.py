"""Store hygiene (issue 35, item 12): `artifacts du` and `artifacts gc` on a real store of hand-published
artifacts with lineage, a real MLflow registry (sqlite in tmp) and real flocks. What gc keeps: the policy's roots
(--keep-latest N per step and name, --keep-newer-than AGE), artifacts registered models were made from, and everything a
kept artifact depends on; what it removes, it removes wholly (a killed gc leaves trash the next one finishes)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from corpusforge.storage.catalog import Catalog
from corpusforge.storage.gc import GcError, StoreBusy, du, gc, parse_age
from corpusforge.storage.locks import store_in_use
from corpusforge.storage.store import ArtifactStore, PublishResult
from corpusforge.tasks.step import StepResult, artifact_input
from tests.conftest import REPO

DAY = 86400


def publish(store: ArtifactStore, step: str, name: str, k: int, inputs: tuple[PublishResult, ...] = (),
            days_old: float = 0, size: int = 1000) -> PublishResult:
    """A real artifact of ``size`` bytes whose inputs are ``inputs``, its created_at set ``days_old`` back (an
    informational field: the manifest's digest does not cover it, so verify still passes)."""

    def build(out: Path):
        (out / "data.bin").write_bytes(bytes([k % 251]) * size)
        return {}

    deps = [artifact_input(StepResult(id=r.manifest["id"], step=r.manifest["step"], name=r.manifest["name"],
                                      path=str(r.path), reused=True, seconds=0.0)) for r in inputs]
    result = store.publish(step=step, name=name, version=1, config={"k": k}, inputs=deps, build=build)
    if days_old:
        path = result.path / "manifest.json"
        manifest = json.loads(path.read_text())
        manifest["created_at"] = (datetime.now(timezone.utc) - timedelta(days=days_old)).isoformat()
        path.write_text(json.dumps(manifest, indent=2))
        result = PublishResult(result.path, manifest, result.reused)
    return result


@pytest.fixture
def lineage(store_root: Path) -> dict[str, PublishResult]:
    """Two shards, three corpora, two tokenizers. The newest tokenizer (t1) was trained on the OLDEST corpus
    (c1); the older tokenizer t0 on c2, which nothing newer uses.

        s1 (30d) <- c1 (30d) <- t1 (5d)
        s2 (20d) <- c2 (20d) <- t0 (25d)
        s2       <- c3 (10d)
    """
    store = ArtifactStore(store_root)
    a: dict[str, PublishResult] = {}
    a["s1"] = publish(store, "corpus_shard", "a.txt", 1, days_old=30)
    a["s2"] = publish(store, "corpus_shard", "a.txt", 2, days_old=20)
    a["c1"] = publish(store, "corpus", "c", 1, (a["s1"],), days_old=30)
    a["c2"] = publish(store, "corpus", "c", 2, (a["s2"],), days_old=20, size=50_000)
    a["c3"] = publish(store, "corpus", "c", 3, (a["s2"],), days_old=10)
    a["t0"] = publish(store, "tokenizer", "t", 0, (a["c2"],), days_old=25, size=7000)
    a["t1"] = publish(store, "tokenizer", "t", 1, (a["c1"],), days_old=5)
    return a


def ids(results) -> set[str]:
    return {r.manifest["id"] if isinstance(r, PublishResult) else r.id for r in results}


def listed(store_root: Path) -> set[str]:
    return {f.manifest["id"] for f in Catalog(ArtifactStore(store_root)).all()}


def test_parse_age():
    assert parse_age("7d") == 7 * DAY and parse_age("12h") == 43200 and parse_age("30m") == 1800
    assert parse_age("2w") == 14 * DAY and parse_age("45s") == 45 and parse_age("3600") == 3600
    assert parse_age(0) == 0.0 and parse_age(None) is None
    for bad in ("7 days", "-1d", "d", "1y"):
        with pytest.raises(ValueError, match="--keep-newer-than"):
            parse_age(bad)


def test_a_dry_run_removes_nothing_and_says_what_would_go(store_root, lineage):
    before = listed(store_root)
    files = sorted(p for p in store_root.rglob("*") if p.is_file() and ".locks" not in p.parts)
    report = gc(ArtifactStore(store_root), keep_latest=1)
    assert report.dry_run and ids(report.removed) == ids([lineage["t0"], lineage["c2"]])
    assert report.bytes_freed == sum(e.bytes for e in report.removed) > 57_000
    assert listed(store_root) == before  # nothing went
    assert sorted(p for p in store_root.rglob("*") if p.is_file() and ".locks" not in p.parts) == files


def test_keep_latest_keeps_what_kept_artifacts_depend_on(store_root, lineage):
    report = gc(ArtifactStore(store_root), keep_latest=1, dry_run=False)
    kept = {e.id: e.why for e in report.kept}
    a = {k: v.manifest["id"] for k, v in lineage.items()}
    # the roots: the newest of each step and name; then their inputs, transitively
    assert kept[a["t1"]] == "one of the 1 newest tokenizer t"
    assert kept[a["c3"]] == "one of the 1 newest corpus c"
    assert kept[a["c1"]] == f"an input of kept tokenizer t {a['t1'][:12]}"  # the oldest corpus: t1 needs it
    assert kept[a["s1"]] == f"an input of kept corpus c {a['c1'][:12]}"
    assert set(kept) == {a["t1"], a["c3"], a["c1"], a["s1"], a["s2"]}
    # removed: dependents before their inputs
    assert [e.id for e in report.removed] == [a["t0"], a["c2"]]
    assert all("not among the 1 newest" in e.why for e in report.removed)
    assert listed(store_root) == set(kept)
    assert not lineage["t0"].path.exists() and not lineage["c2"].path.exists()
    assert not (store_root / ".verified" / f"{a['c2']}.json").exists()  # its reuse record went too
    assert not list(store_root.glob("*/.gc-*"))  # no trash left
    catalog = Catalog(ArtifactStore(store_root))
    for aid in kept:
        assert catalog.verify(aid).ok, catalog.verify(aid).problems
    # a second gc with the same policy finds nothing more
    again = gc(ArtifactStore(store_root), keep_latest=1, dry_run=False)
    assert again.removed == [] and again.leftovers == []


def test_keep_newer_than_and_keep_latest_together(store_root, lineage):
    a = {k: v.manifest["id"] for k, v in lineage.items()}
    only_age = gc(ArtifactStore(store_root), keep_newer_than="15d")
    assert ids(only_age.removed) == {a["t0"], a["c2"]}  # c3 and t1 are newer than 15 days; c1, s1, s2 their inputs
    both = gc(ArtifactStore(store_root), keep_latest=1, keep_newer_than="21d")  # c2 (20 days) is newer than 21 days
    assert ids(both.removed) == {a["t0"]}
    assert {e.id: e.why for e in both.kept}[a["c2"]] == "newer than 3w"
    everything = gc(ArtifactStore(store_root), keep_newer_than=0)
    assert ids(everything.removed) == set(a.values())
    nothing = gc(ArtifactStore(store_root))  # no policy: no artifact is a candidate
    assert nothing.removed == [] and len(nothing.kept) == 7 and "no artifact policy given" in nothing.notes[0]
    with pytest.raises(ValueError, match="--keep-latest"):
        gc(ArtifactStore(store_root), keep_latest=0)


def test_an_artifact_a_registered_model_was_made_from_is_kept(store_root, lineage):
    """A version in the store's real MLflow registry tagged with t0's id: t0 and its input c2 stay, named."""
    from corpusforge.storage.tracking import Tracker

    a = {k: v.manifest["id"] for k, v in lineage.items()}
    tracker = Tracker(store_root, "gc-test")  # makes the store's mlflow.db as a pipeline run does
    tracker.client.create_registered_model("tok-model")
    source = store_root / "mlartifacts" / "tok-model"
    source.mkdir(parents=True)
    version = tracker.client.create_model_version("tok-model", source.as_uri(),
                                                  tags={"corpusforge.artifact_id": a["t0"]}).version
    report = gc(ArtifactStore(store_root), keep_latest=1, dry_run=False)
    kept = {e.id: e for e in report.kept}
    assert kept[a["t0"]].why == f"referenced by registered model tok-model v{version}"
    assert kept[a["t0"]].registered == [f"tok-model v{version}"]
    assert kept[a["c2"]].why == f"an input of kept tokenizer t {a['t0'][:12]}"
    assert report.removed == [] and listed(store_root) == set(a.values())
    brief = {k["id"]: k for k in report.to_dict()["kept"]}
    assert brief[a["t0"]]["registered"] == [f"tok-model v{version}"] and "registered" not in brief[a["c2"]]


def test_what_a_pipelines_latest_run_used_is_kept_whatever_its_name_shares(store_root, lineage):
    """Issue 50, item 3: two pipelines whose tokenizers share a (step, name) (t0 and t1 are both "tokenizer t");
    --keep-latest 1 kept only the newest, removing the other pipeline's t0 and the c2 it stands on. A pipeline's
    latest run is recorded (.runs/), and gc keeps what it used, saying so."""
    from corpusforge.storage.gc import latest_runs, record_run

    a = {k: v.manifest["id"] for k, v in lineage.items()}
    record_run(store_root, "demo", [a["s1"], a["c1"], a["t1"]])
    record_run(store_root, "sst2-bilstm", [a["s2"], a["c2"], a["t0"]])
    record_run(store_root, "sst2-bilstm", [a["s2"], a["c2"], a["t0"]])  # its latest run replaces the one before
    assert latest_runs(store_root) == {"demo": [a["s1"], a["c1"], a["t1"]], "sst2-bilstm": [a["s2"], a["c2"], a["t0"]]}
    (store_root / ".runs" / "broken.json").write_text("{not json", encoding="utf-8")  # skipped, protects nothing
    report = gc(ArtifactStore(store_root), keep_latest=1, dry_run=False)
    kept = {e.id: e.why for e in report.kept}
    assert kept[a["t0"]] == "used by pipeline sst2-bilstm's latest run"
    assert kept[a["c2"]] == "used by pipeline sst2-bilstm's latest run"
    assert report.removed == [] and listed(store_root) == set(a.values())
    # a later run of that pipeline that no longer uses t0 lets it go
    record_run(store_root, "sst2-bilstm", [a["s2"], a["c3"]])
    report = gc(ArtifactStore(store_root), keep_latest=1, dry_run=False)
    assert ids(report.removed) == {a["t0"], a["c2"]}
    other = {row["where"]: row["what"] for row in du(ArtifactStore(store_root)).to_dict()["other"]}
    assert other[".runs"].startswith("each pipeline's latest run")


def test_an_unreadable_registry_stops_gc_before_it_removes(store_root, lineage):
    (store_root / "mlflow.db").write_bytes(b"this is not a sqlite database" * 100)
    with pytest.raises(GcError, match="cannot read the MLflow registry"):
        gc(ArtifactStore(store_root), keep_latest=1, dry_run=False)
    assert len(listed(store_root)) == 7


def test_artifacts_named_by_a_kept_artifacts_json_are_kept(store_root):
    """A model's config.json names its tokenizer's folder (a store-relative path) without listing it as an
    input: gc keeps that folder."""
    store = ArtifactStore(store_root)
    tok = publish(store, "tokenizer", "tok", 1, days_old=40)

    def build(out: Path):
        (out / "config.json").write_text(json.dumps({"tokenizer": {"path": f"tokenizer/{tok.path.name}"}}))
        return {}

    model = store.publish(step="lm", name="m", version=1, config={}, inputs=[], build=build)
    report = gc(store, keep_newer_than="30d")
    assert report.removed == []
    assert {e.id: e.why for e in report.kept}[tok.manifest["id"]] == \
        f"named in config.json of kept lm m {model.manifest['id'][:12]}"


def test_du_counts_bytes_per_step_and_name_and_what_depends_on_what(store_root, lineage):
    report = du(ArtifactStore(store_root))
    a = {k: v.manifest["id"] for k, v in lineage.items()}
    groups = {(g["step"], g["name"]): g for g in report.groups()}
    assert groups[("corpus", "c")]["count"] == 3 and groups[("tokenizer", "t")]["count"] == 2
    assert report.groups()[0]["step"] == "corpus"  # the largest first (c2 holds 50 kB)
    on_disk = sum(f.stat().st_size for f in lineage["c2"].path.rglob("*") if f.is_file())
    assert {e.id: e.bytes for e in report.artifacts}[a["c2"]] == on_disk > 50_000
    used_by = {e.id: set(e.used_by) for e in report.artifacts}
    assert used_by[a["s2"]] == {a["c2"], a["c3"]} and used_by[a["c1"]] == {a["t1"]} and used_by[a["t1"]] == set()
    assert ids(report.roots()) == {a["t0"], a["t1"], a["c3"]}
    other = {o["where"]: o for o in report.other}
    assert other[".verified"]["bytes"] > 0
    assert report.total_bytes == report.artifact_bytes + sum(o["bytes"] for o in report.other)
    data = report.to_dict()
    assert set(data) == {"store", "total_bytes", "artifact_bytes", "groups", "artifacts", "other"}


def test_a_running_pipeline_holds_off_gc(store_root, lineage):
    """A run holds the store's lock shared (run_pipeline, training flows, lm merge): gc --yes stops at once with
    one line and removes nothing; a dry run still answers; --wait waits for the run to end."""
    release, held = threading.Event(), threading.Event()

    def pipeline():
        with store_in_use(store_root):
            held.set()
            release.wait(30)

    runner = threading.Thread(target=pipeline)
    runner.start()
    try:
        assert held.wait(10)
        with pytest.raises(StoreBusy, match="in use by a running pipeline"):
            gc(ArtifactStore(store_root), keep_latest=1, dry_run=False)
        assert len(listed(store_root)) == 7
        assert len(gc(ArtifactStore(store_root), keep_latest=1).removed) == 2  # the dry run takes no lock
        threading.Timer(1.0, release.set).start()
        waited = gc(ArtifactStore(store_root), keep_latest=1, dry_run=False, wait=True)
        assert release.is_set() and len(waited.removed) == 2
    finally:
        release.set()
        runner.join()


def test_a_killed_gc_leaves_each_artifact_whole_or_gone_and_the_next_gc_finishes(store_root, lineage):
    """gc killed right after its first rename (before deleting the files): that artifact is gone from every
    listing, the others are whole, and the trash folder is what the next gc lists and removes."""
    a = {k: v.manifest["id"] for k, v in lineage.items()}
    script = f"""
import os, shutil, sys
sys.path.insert(0, {str(REPO)!r})
import corpusforge.storage.store as store_module
store_module.shutil.rmtree = lambda *a, **k: os._exit(17)  # killed once the artifact is renamed to its trash
from corpusforge.storage.gc import gc
from corpusforge.storage.store import ArtifactStore
gc(ArtifactStore({str(store_root)!r}), keep_latest=1, dry_run=False)
"""
    killed = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                            env={**os.environ, "PYTHONPATH": str(REPO)})
    assert killed.returncode == 17, killed.stderr[-2000:]
    assert listed(store_root) == set(a.values()) - {a["t0"]}  # t0 (removed first) is wholly gone, c2 whole
    (trash,) = store_root.glob("tokenizer/.gc-*")
    assert (trash / "manifest.json").is_file()
    catalog = Catalog(ArtifactStore(store_root))
    assert all(catalog.verify(aid).ok for aid in listed(store_root))
    with pytest.raises(LookupError):
        catalog.get(a["t0"])
    dry = gc(ArtifactStore(store_root), keep_latest=1)
    assert [item.where for item in dry.leftovers] == [str(trash)] and "interrupted" in dry.leftovers[0].why
    done = gc(ArtifactStore(store_root), keep_latest=1, dry_run=False)
    assert ids(done.removed) == {a["c2"]} and not trash.exists()
    assert done.bytes_freed == sum(e.bytes for e in done.removed) + done.leftovers[0].size


def test_gc_collects_abandoned_scratch_by_the_same_rules_and_du_shows_it(store_root, lineage):
    """Issue 44, item 14: the checkpoints stopped trainings leave in `.scratch` and `embed search`'s vector caches
    were never collected. `artifacts du` lists each with its age; gc removes them under --keep-newer-than and
    --keep-latest (per kind) as it does artifacts, and nothing without a policy."""
    import time

    now = time.time()

    def scratch(rel: str, days_old: float, size: int = 500) -> Path:
        path = store_root / ".scratch" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"x" * size)
        os.utime(path, (now - days_old * DAY, now - days_old * DAY))
        return path

    old_ckpt = scratch("lm/gpt-tiny-aaaa/checkpoint.safetensors", 10)
    new_ckpt = scratch("lm/gpt-tiny-bbbb/checkpoint.safetensors", 1)
    old_cache = scratch("sentence_index/model-corpus.npy", 30)
    store = ArtifactStore(store_root)
    rows = {row["where"]: row for row in du(store).to_dict()["other"]}
    assert rows[".scratch/lm/gpt-tiny-aaaa"]["what"].endswith(", 1 week old") and rows[".scratch/lm/gpt-tiny-aaaa"]["bytes"] == 500
    assert "search-vector cache" in rows[".scratch/sentence_index/model-corpus.npy"]["what"]
    assert not [item for item in gc(store, dry_run=True).leftovers if ".scratch" in item.where]  # no policy: kept
    planned = {item.where for item in gc(store, keep_newer_than="7d", dry_run=True).leftovers}
    assert {str(old_ckpt.parent), str(old_cache)} <= planned and str(new_ckpt.parent) not in planned
    assert old_ckpt.exists()  # a dry run
    assert {str(old_ckpt.parent)} <= {i.where for i in gc(store, keep_latest=1, dry_run=True).leftovers}
    report = gc(store, keep_newer_than="7d", dry_run=False)
    assert report.bytes_freed >= 1000
    assert not old_ckpt.parent.exists() and not old_cache.exists() and new_ckpt.exists()
