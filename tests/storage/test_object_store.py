"""The artifact store on object storage (``--store s3://bucket/prefix``), against a real S3 server: moto's,
started on 127.0.0.1 for this module. The promises are the local store's: nothing visible until the manifest
(written last, with a conditional put) exists; two writers of one id end with one intact artifact; find/show/
verify; reuse; incremental runs (README, "Object storage")."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import uuid
from pathlib import Path

import pytest

from tests.conftest import REPO, write

pytest.importorskip("s3fs")
moto_server = pytest.importorskip("moto.server")

_ENV = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_SESSION_TOKEN": None, "AWS_PROFILE": None, "AWS_ENDPOINT_URL_S3": None}


@pytest.fixture(scope="module")
def s3_endpoint():
    """moto's S3 server on a free port of 127.0.0.1, with the AWS environment pointing at it; stopped after."""
    import logging

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one line per request otherwise
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    saved = {key: os.environ.get(key) for key in (*_ENV, "AWS_ENDPOINT_URL")}
    for key, value in {**_ENV, "AWS_ENDPOINT_URL": endpoint}.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
    try:
        yield endpoint
    finally:
        server.stop()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@pytest.fixture
def url(s3_endpoint, tmp_path, monkeypatch) -> str:
    """A fresh bucket per test; the local caches go under tmp_path."""
    import s3fs

    bucket = f"cf-{uuid.uuid4().hex[:12]}"
    s3fs.S3FileSystem(endpoint_url=s3_endpoint, skip_instance_cache=True).mkdir(bucket)
    monkeypatch.setenv("CORPUSFORGE_CACHE_DIR", str(tmp_path / "cache"))
    return f"s3://{bucket}/team/store"


def other_machine(url: str, tmp_path: Path, name: str):
    """The same bucket seen from another machine: its own local cache (so its own locks)."""
    from corpusforge.storage.object_store import ObjectArtifactStore

    os.environ["CORPUSFORGE_CACHE_DIR"] = str(tmp_path / name)
    try:
        return ObjectArtifactStore(url)
    finally:
        os.environ["CORPUSFORGE_CACHE_DIR"] = str(tmp_path / "cache")


def builder(text: str = "hello", barrier: threading.Barrier | None = None):
    def build(tmp: Path):
        write(tmp / "data.txt", text)
        write(tmp / "sub" / "run.json", json.dumps({"writer": uuid.uuid4().hex}))  # differs per writer
        if barrier is not None:
            barrier.wait(timeout=30)
        return {"metrics": {"chars": len(text)}, "nondeterministic": {"sub/run.json": "names its writer"}}
    return build


def publish(store, name="x", config=None, build=None):
    return store.publish(step="corpus", name=name, version=1, config=config or {"k": 1}, inputs=[],
                         build=build or builder())


def objects(store) -> list[str]:
    return sorted(str(k)[len(store._base) + 1:] for k in store.fs.find(store._base))


def test_a_url_is_an_object_store_with_a_local_cache(url, tmp_path):
    from corpusforge.api import store_root
    from corpusforge.storage.object_store import REMOTE_MARKER, ObjectArtifactStore
    from corpusforge.storage.store import ArtifactStore, resolve_store_root

    root = resolve_store_root(url)
    assert root.is_relative_to(tmp_path / "cache") and (root / REMOTE_MARKER).is_file()
    assert store_root(url) == root == resolve_store_root(Path(url))  # Path() folds s3:// into s3:/
    for given in (url, root, str(root)):
        store = ArtifactStore(given)
        assert isinstance(store, ObjectArtifactStore) and store.url == url and store.root == root
    assert type(ArtifactStore(tmp_path / "local")) is ArtifactStore


def test_publish_uploads_files_then_the_manifest_and_another_machine_reuses(url, tmp_path):
    from corpusforge.storage.store import ArtifactStore, read_manifest

    store = ArtifactStore(url)
    first = publish(store)
    assert not first.reused and Path(first.path).is_relative_to(store.root)
    prefix = first.manifest["object_prefix"]
    dirname = Path(first.path).name
    assert objects(store) == sorted([f"corpus/{dirname}/manifest.json", f"corpus/{dirname}/{prefix}/README.md",
                                     f"corpus/{dirname}/{prefix}/data.txt", f"corpus/{dirname}/{prefix}/sub/run.json"])
    assert read_manifest(Path(first.path)) == first.manifest  # the cache dir reads like a local artifact

    elsewhere = other_machine(url, tmp_path, "cache-b")
    built = []
    again = publish(elsewhere, build=lambda tmp: built.append(tmp))
    assert again.reused and not built and again.manifest == first.manifest
    assert (Path(again.path) / "data.txt").read_text() == "hello"  # downloaded, checked against the sha256
    assert Path(again.path) != Path(first.path)


def test_a_crash_after_the_upload_leaves_nothing_visible_and_a_rerun_publishes(url, tmp_path, monkeypatch):
    """A writer killed between its uploads and its manifest: the objects are there, the artifact is not."""
    from corpusforge.storage.catalog import ArtifactNotFound, Catalog
    from corpusforge.storage.store import ArtifactStore

    script = f"""
import os, sys
sys.path.insert(0, {str(REPO)!r})
from corpusforge.storage.object_store import ObjectArtifactStore
from tests.storage.test_object_store import builder, publish
ObjectArtifactStore._put_manifest = lambda *a, **k: os._exit(17)  # killed just before the commit
publish(ObjectArtifactStore({url!r}))
"""
    crashed = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert crashed.returncode == 17, crashed.stderr
    store = ArtifactStore(url)
    uploaded = objects(store)
    assert uploaded and not any(k.endswith("manifest.json") for k in uploaded)
    assert Catalog(store).find() == []
    aid = ArtifactStore(tmp_path / "local").publish(step="corpus", name="x", version=1, config={"k": 1}, inputs=[],
                                                    build=builder()).manifest["id"]
    assert store.lookup("corpus", "x", aid) is None
    with pytest.raises(ArtifactNotFound):
        Catalog(store).get(aid[:8])

    monkeypatch.setenv("CORPUSFORGE_OBJECT_STORE_STALE_SECONDS", "0")  # the dead writer's upload may go
    rerun = publish(store)
    assert not rerun.reused and rerun.manifest["id"] == aid
    prefixes = {k.split("/")[2] for k in objects(store) if "/.data-" in k}
    assert prefixes == {rerun.manifest["object_prefix"]}  # the crashed upload was swept
    assert Catalog(store).verify(aid).ok


def test_gc_sweeps_the_uploads_of_killed_writers_after_a_rerun_committed_the_id(url, tmp_path):
    """Issue 30, item 15: a writer killed before its commit, then a rerun that commits the id: the killed writer's
    upload was too young to go at that commit, and no publish of that id comes again. The store-wide sweep
    (`artifacts gc`) removes uploads no manifest names once they are older than the stale age."""
    from typer.testing import CliRunner

    from corpusforge.cli import app
    from corpusforge.storage.catalog import Catalog
    from corpusforge.storage.store import ArtifactStore

    script = f"""
import os, sys
sys.path.insert(0, {str(REPO)!r})
from corpusforge.storage.object_store import ObjectArtifactStore
from tests.storage.test_object_store import publish
ObjectArtifactStore._put_manifest = lambda *a, **k: os._exit(17)  # killed just before the commit
publish(ObjectArtifactStore({url!r}))
"""
    crashed = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert crashed.returncode == 17, crashed.stderr
    store = ArtifactStore(url)
    rerun = publish(store)  # the stale age is the default (3600 s): the killed upload stays
    assert not rerun.reused and publish(store).reused
    uploads = lambda: {k.split("/")[2] for k in objects(store) if "/.data-" in k}  # noqa: E731
    (killed,) = uploads() - {rerun.manifest["object_prefix"]}
    dirname = Path(rerun.path).name

    assert store.sweep_leftovers(apply=False, max_age=3600) == []  # young: a writer may still be uploading
    listed = store.sweep_leftovers(apply=False, max_age=0)
    assert [item.where for item in listed] == [f"{url}/corpus/{dirname}/{killed}"] and listed[0].size > 0
    assert killed in uploads()  # a dry run removes nothing

    runner = CliRunner()
    # --older-than only ages leftovers (it never selects artifacts: the artifact policy is --keep-newer-than)
    dry = runner.invoke(app, ["artifacts", "gc", "--store", url, "--older-than", "0"])
    assert dry.exit_code == 0, dry.output
    assert f"{url}/corpus/{dirname}/{killed}" in dry.output and "--apply" in dry.output and killed in uploads()
    done = runner.invoke(app, ["artifacts", "gc", "--store", url, "--older-than", "0", "--apply",
                               "--json"])
    assert done.exit_code == 0, done.output
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert [item["where"] for item in report["leftovers"]] == [f"{url}/corpus/{dirname}/{killed}"]
    assert report["removed"] == []
    assert uploads() == {rerun.manifest["object_prefix"]}
    assert Catalog(store).verify(rerun.manifest["id"]).ok and publish(store).reused


@pytest.mark.parametrize("conditional", ["on", "off"])
def test_two_writers_of_one_id_end_with_one_intact_artifact(url, tmp_path, monkeypatch, conditional):
    """Two machines (own caches, so no shared lock) build the same id at once; each writes a file that names
    it, so their copies differ. With the conditional put one commits and the other adopts it; without (a
    backend that ignores If-None-Match), the last manifest stays and names its own complete upload."""
    from corpusforge.storage.catalog import Catalog

    monkeypatch.setenv("CORPUSFORGE_OBJECT_STORE_CONDITIONAL", conditional)
    stores = [other_machine(url, tmp_path, f"machine-{i}") for i in range(2)]
    barrier = threading.Barrier(2)
    results, errors = [None, None], []

    def run(i):
        try:
            results[i] = publish(stores[i], build=builder(barrier=barrier))
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    aid = results[0].manifest["id"]
    committed = stores[0].lookup("corpus", "x", aid)
    report = Catalog(stores[0]).verify(aid)
    assert report.ok and report.files_checked == 3, report.problems
    if conditional == "on":
        assert sorted(r.reused for r in results) == [False, True]
        assert all(r.manifest == committed for r in results)
        prefixes = {k.split("/")[2] for k in objects(stores[0]) if "/.data-" in k}
        assert prefixes == {committed["object_prefix"]}  # the loser removed its upload
        for r in results:  # both machines' copies are the winner's bytes
            stores[0].check_intact(Path(r.path), committed)
            assert json.loads((Path(r.path) / "sub" / "run.json").read_text()) == \
                json.loads((Path(results[0].path) / "sub" / "run.json").read_text())
    else:
        assert committed in [r.manifest for r in results]


def test_find_show_verify_and_tampered_objects(url, tmp_path):
    from corpusforge.storage.catalog import Catalog
    from corpusforge.storage.store import ArtifactStore, TamperedArtifact

    store = ArtifactStore(url)
    a = publish(store, name="a", config={"k": 1})
    b = store.publish(step="tokenizer", name="b", version=1, config={"k": 2},
                      inputs=[{"id": a.manifest["id"], "kind": "artifact", "step": "corpus", "name": "a"}],
                      build=builder("tok"))
    catalog = Catalog(store)
    assert [f.manifest["id"] for f in catalog.find()] == [a.manifest["id"], b.manifest["id"]]
    assert [f.manifest["id"] for f in catalog.find(step="tokenizer")] == [b.manifest["id"]]
    assert [f.manifest["id"] for f in catalog.find(input_id=a.manifest["id"][:6])] == [b.manifest["id"]]
    assert catalog.get(b.manifest["id"][:6]).manifest == b.manifest
    assert catalog.lineage(b.manifest["id"])["inputs"][0]["id"] == a.manifest["id"]
    assert catalog.verify(a.manifest["id"]).ok

    data = f"{store._base}/corpus/{Path(a.path).name}/{a.manifest['object_prefix']}"
    store.fs.pipe_file(f"{data}/data.txt", b"HELLO")  # same size, other bytes
    store.fs.pipe_file(f"{data}/extra.bin", b"?")
    report = catalog.verify(a.manifest["id"][:8])
    assert report.problems == ["content changed: data.txt (sha256 differs)", "unlisted object: extra.bin"]
    with pytest.raises(TamperedArtifact, match="data.txt changed"):  # the ETag changed: re-hashed before reuse
        publish(store, name="a", config={"k": 1})
    with pytest.raises(TamperedArtifact, match="data.txt changed"):  # a fresh machine's download is checked
        publish(other_machine(url, tmp_path, "cache-c"), name="a", config={"k": 1})
    store.fs.rm(f"{data}/README.md")
    assert "missing object: README.md" in catalog.verify(a.manifest["id"]).problems


def test_a_changed_local_copy_is_fetched_again(url):
    from corpusforge.storage.store import ArtifactStore

    store = ArtifactStore(url)
    first = publish(store)
    (Path(first.path) / "data.txt").write_text("HELLO")
    again = publish(store)
    assert again.reused and (Path(again.path) / "data.txt").read_text() == "hello"


def test_cli_find_show_verify_on_an_s3_store(url):
    from typer.testing import CliRunner

    from corpusforge.cli import app
    from corpusforge.storage.store import ArtifactStore

    aid = publish(ArtifactStore(url)).manifest["id"]
    runner = CliRunner()
    found = runner.invoke(app, ["artifacts", "find", "--store", url, "--json"])
    assert found.exit_code == 0, found.output
    assert [h["id"] for h in json.loads(found.output.strip().splitlines()[-1])] == [aid]
    shown = runner.invoke(app, ["artifacts", "show", aid[:8], "--store", url, "--json"])
    assert shown.exit_code == 0 and json.loads(shown.output.strip().splitlines()[-1])["id"] == aid
    verified = runner.invoke(app, ["artifacts", "verify", aid[:8], "--store", url])
    assert verified.exit_code == 0 and "OK" in verified.output
    missing = runner.invoke(app, ["artifacts", "find", "--store", "s3://no-such-bucket-cf/x", "--json"])
    assert missing.exit_code == 2 and "does not exist" in missing.output


@pytest.mark.server
def test_pipeline_on_s3_reuses_and_recomputes_only_the_changed_shard(prefect_harness, url, tmp_path):
    """The corpus stage through corpusforge.api with store="s3://...": three shards and the merge; a second
    run computes nothing; one of the three files changed recomputes that shard and the merge."""
    import polars as pl

    from corpusforge.api import run_config
    from corpusforge.storage.catalog import Catalog
    from corpusforge.storage.store import ArtifactStore

    corpus = tmp_path / "tiny"
    write(corpus / "a.txt", "the cat sat on the mat\nthe dog sat on the log\n")
    write(corpus / "b.txt", "a bird sang\nthe dog sat on the log\n")
    write(corpus / "c.txt", "colourless green ideas\nsleep furiously\n")
    config = {"name": "s3e2e", "corpus": {"name": "tiny", "sources": [str(corpus)], "reader": {"txt_mode": "line"},
                                          "shard_mb": 0,  # one shard per file: three shards, as said above
                                          "validate": {"min_chars": 1, "max_chars": 1000}},
              "runner": {"kind": "threads", "workers": 2}, "tracking": {"enabled": False}}
    first = run_config(config, store=url)
    assert first["steps_computed"] == 4 and first["steps_reused"] == 0
    store = ArtifactStore(url)
    published = Catalog(store).find()
    assert len(published) == 4 and all(Catalog(store).verify(f.manifest["id"]).ok for f in published)
    train = pl.read_parquet(Path(first["corpus"]["path"]) / "train.parquet")  # a verified local copy
    assert len(train) > 0

    second = run_config(config, store=url)
    assert second["steps_computed"] == 0 and all(s["reused"] for s in second["steps"])

    write(corpus / "c.txt", "colourless green ideas\nsleep furiously\nand a new line\n")
    third = run_config(config, store=url)
    shards = lambda summary: {s["name"]: s["id"] for s in summary["steps"] if s["step"] == "corpus_shard"}  # noqa: E731
    assert {n for n in shards(first) if shards(first)[n] != shards(third)[n]} == {"tiny__c.txt"}
    assert third["steps_computed"] == 2 and third["corpus"]["id"] != first["corpus"]["id"]
