"""`artifacts gc` and `du` on an object store (issue 35, item 12), against moto's real S3 server: a removed
artifact's manifest (its commit) and objects leave the bucket, its local copy leaves the cache, another machine no
longer finds it, and what is kept still verifies."""

from __future__ import annotations

import json
import time

import pytest
from typer.testing import CliRunner

from tests.storage.test_gc import publish
from tests.storage.test_object_store import objects, other_machine, s3_endpoint, url  # noqa: F401 - fixtures


def test_gc_removes_from_the_bucket_and_keeps_what_kept_artifacts_need(url, tmp_path):  # noqa: F811
    from corpusforge.cli import app
    from corpusforge.storage.catalog import Catalog
    from corpusforge.storage.store import ArtifactStore

    store = ArtifactStore(url)
    c1 = publish(store, "corpus", "x", 1)
    time.sleep(0.01)
    c2 = publish(store, "corpus", "x", 2, size=20_000)
    time.sleep(0.01)
    t = publish(store, "tokenizer", "t", 1, (c1,))  # the tokenizer is on the first corpus
    time.sleep(0.01)
    c3 = publish(store, "corpus", "x", 3)
    runner = CliRunner()

    du = runner.invoke(app, ["artifacts", "du", "--store", url, "--json"])
    assert du.exit_code == 0, du.output
    sizes = {e["id"]: e["bytes"] for e in json.loads(du.stdout.strip().splitlines()[-1])["artifacts"]}
    assert sizes[c2.manifest["id"]] == sum(m["size"] for m in c2.manifest["files"].values()) > 20_000

    dry = runner.invoke(app, ["artifacts", "gc", "--store", url, "--keep-latest", "1"])
    assert dry.exit_code == 0 and f"would remove corpus x {c2.manifest['id'][:12]}" in dry.output, dry.output
    dirname, prefix = c2.path.name, c2.manifest["object_prefix"]
    assert f"corpus/{dirname}/manifest.json" in objects(store)

    done = runner.invoke(app, ["artifacts", "gc", "--store", url, "--keep-latest", "1", "--yes", "--json"])
    assert done.exit_code == 0, done.output
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert [r["id"] for r in report["removed"]] == [c2.manifest["id"]]
    assert not [k for k in objects(store) if k.startswith(f"corpus/{dirname}/")]  # manifest and objects gone
    assert not c2.path.exists()  # and the local copy
    elsewhere = other_machine(url, tmp_path, "cache-b")
    assert {f.manifest["id"] for f in Catalog(elsewhere).all()} == \
        {c1.manifest["id"], t.manifest["id"], c3.manifest["id"]}
    for kept in (c1, t, c3):
        assert Catalog(store).verify(kept.manifest["id"]).ok
    with pytest.raises(LookupError):
        Catalog(elsewhere).get(c2.manifest["id"])
    assert prefix not in "".join(objects(store))
