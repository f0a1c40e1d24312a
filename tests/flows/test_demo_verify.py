"""Every kind of artifact the demo makes passes `artifacts verify` (issue 14, item 6), and a build step cannot
take over the manifest fields the store owns."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

CLI = str(Path(sys.executable).parent / "corpusforge")
pytestmark = pytest.mark.slow

# The demo's chain, made small: fewer LM steps and embedding epochs (every stage and artifact kind kept).
SMALL = ["--set", "lm.train.max_iters=20", "--set", "lm.train.eval_interval=10", "--set", "lm.train.log_interval=10",
         "--set", "lm.sample.max_new_tokens=10", "--set", "embeddings.epochs=1"]


@pytest.fixture(scope="module")
def demo_store(prefect_harness, tmp_path_factory) -> Path:
    store = tmp_path_factory.mktemp("demo") / "store"
    env = {**os.environ, "PREFECT_API_URL": prefect_harness, "CORPUSFORGE_LOCAL_SERVER": "off"}
    res = subprocess.run([CLI, "run", str(REPO / "configs" / "demo.yaml"), "--store", str(store), "--json", *SMALL],
                         capture_output=True, text=True, env=env, timeout=900)
    assert res.returncode == 0, res.stderr[-3000:]
    return store


def test_every_artifact_of_the_demo_verifies(demo_store):
    from storage.catalog import Catalog
    from storage.store import ArtifactStore

    store = ArtifactStore(demo_store)
    dirs = list(store.iter_artifact_dirs())
    steps = {json.loads((d / "manifest.json").read_text())["step"] for d in dirs}
    assert {"corpus_shard", "corpus", "tokenizer", "encode", "embeddings", "ngram", "lm"} <= steps, steps
    for d in dirs:
        manifest = json.loads((d / "manifest.json").read_text())
        on_disk = {p.relative_to(d).as_posix() for p in d.rglob("*") if p.is_file() and p.name != "manifest.json"}
        assert on_disk <= set(manifest["files"]), (manifest["step"], on_disk - set(manifest["files"]))
        assert all("sha256" in entry for entry in manifest["files"].values()), manifest["step"]
        res = subprocess.run([CLI, "artifacts", "verify", manifest["id"], "--store", str(demo_store)],
                             capture_output=True, text=True, env={**os.environ, "CORPUSFORGE_LOCAL_SERVER": "off"},
                             timeout=120)
        assert res.returncode == 0, (manifest["step"], res.stdout, res.stderr)
        assert Catalog(store).verify(manifest["id"]).ok


def test_a_step_cannot_return_the_fields_the_store_owns(store_root):
    from storage.store import ArtifactStore, StoreError

    def build(out: Path):
        (out / "a.txt").write_text("a")
        return {"files": {"model": "a.txt"}}

    with pytest.raises(StoreError, match="files"):
        ArtifactStore(store_root).publish(step="demo", name="d", version=1, config={}, inputs=[], build=build)
    assert not (store_root / "demo").exists() or not any((store_root / "demo").iterdir())
