"""Every kind of artifact the demo makes passes `artifacts verify` (issue 14, item 6), a build step cannot take
over the manifest fields the store owns, and the demo built twice gives byte-identical files (item 17) except
those a manifest declares nondeterministic, with the reason."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.commands import corpusforge
from tests.conftest import REPO

pytestmark = pytest.mark.e2e

# The demo's chain, made small: fewer LM steps and embedding epochs (every stage and artifact kind kept).
SMALL = ["--set", "lm.train.max_iters=20", "--set", "lm.train.eval_interval=10", "--set", "lm.train.log_interval=10",
         "--set", "lm.sample.max_new_tokens=10", "--set", "embeddings.epochs=1"]
# and its translation pipeline (configs/demo-translation.yaml), into the same store, as `make demo` runs it
SMALL_TRANSLATION = ["--set", "seq2seq.train.max_iters=30", "--set", "seq2seq.train.eval_interval=15",
                     "--set", "seq2seq.train.log_interval=15", "--set", "sentence_embeddings.train.max_iters=20",
                     "--set", "sentence_embeddings.train.eval_interval=10"]
# and its classification pipeline (configs/demo-classification.yaml)
SMALL_CLASSIFICATION = ["--set", "classify.train.max_iters=20", "--set", "classify.train.eval_interval=10",
                        "--set", "classify.train.log_interval=10", "--set", "embeddings.epochs=1"]


# and its tagging pipeline (configs/demo-tagging.yaml)
SMALL_TAGGING = ["--set", "tag.train.max_iters=20", "--set", "tag.train.eval_interval=10",
                 "--set", "tag.train.log_interval=10"]


# and its question-answering pipeline (configs/demo-qa.yaml)
SMALL_QA = ["--set", "lm.train.max_iters=20", "--set", "lm.train.eval_interval=10", "--set", "qa.train.max_iters=10",
            "--set", "qa.train.eval_interval=5"]


PIPELINES = (("demo.yaml", SMALL), ("demo-translation.yaml", SMALL_TRANSLATION),
             ("demo-classification.yaml", SMALL_CLASSIFICATION), ("demo-tagging.yaml", SMALL_TAGGING),
             ("demo-qa.yaml", SMALL_QA))

# The four `corpusforge run` commands in one fresh interpreter, through the console script's own entry point
# (corpusforge.cli:main, as `corpusforge` calls it): one process of its own (its own hash seed, nothing imported,
# cached or seeded by the first build), paying the imports once instead of once per command (issue 43).
IN_ONE_PROCESS = """
import json, os, sys
from corpusforge import door
from corpusforge.cli import main
for key, value in door.CLI_DEFAULTS.items():
    os.environ.setdefault(key, value)
for args in json.loads(sys.argv[1]):
    sys.argv = ["corpusforge", *args]
    try:
        main()
    except SystemExit as done:
        if done.code not in (0, None):
            raise
"""


def build_demo(prefect_harness: str, store: Path, subprocess: bool) -> Path:
    env = {"PREFECT_API_URL": prefect_harness, "CORPUSFORGE_LOCAL_SERVER": "off"}
    commands = [["run", str(REPO / "configs" / config), "--store", str(store), "--json", *small]
                for config, small in PIPELINES]
    if not subprocess:
        for args in commands:
            corpusforge(*args, env=env, code=0)
        return store
    import os
    import subprocess as sp
    import sys

    done = sp.run([sys.executable, "-c", IN_ONE_PROCESS, json.dumps(commands)], env={**os.environ, **env},
                  capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    assert done.stdout.count('"id"') >= len(PIPELINES), done.stdout[-2000:]  # every run printed its JSON
    return store


@pytest.fixture(scope="module")
def demo_store(prefect_harness, tmp_path_factory) -> Path:
    """The demo's four pipelines, built in this process (tests/commands.py); the byte-identity test builds them
    again in a fresh interpreter of their own, through the console script's entry point."""
    return build_demo(prefect_harness, tmp_path_factory.mktemp("demo") / "store", subprocess=False)


def file_table(store: Path) -> tuple[dict, dict]:
    digests, declared = {}, {}
    for path in store.glob("*/*/manifest.json"):
        m = json.loads(path.read_text())
        for rel, entry in m["files"].items():
            digests[(m["step"], m["id"], rel)] = entry["sha256"]
        for rel, why in (m.get("nondeterministic") or {}).items():
            assert rel in m["files"] and why, (m["step"], rel)
            declared[(m["step"], m["id"], rel)] = why
    return digests, declared


def test_the_demo_built_twice_gives_byte_identical_files(prefect_harness, demo_store, tmp_path):
    again = build_demo(prefect_harness, tmp_path / "again", subprocess=True)
    first, declared = file_table(demo_store)
    second, declared_again = file_table(again)
    assert set(first) == set(second)  # the same artifact ids and the same files in each
    assert declared == declared_again
    differ = sorted(k for k in first if first[k] != second[k] and k not in declared)
    assert differ == [], differ
    # what may differ is said plainly, and it is only side files: the DuckDB counts file and the Data Docs pages
    assert {rel.split("/")[0] for (_, _, rel) in declared} <= {"counts.duckdb", "gx", "data_docs.html"}, declared


def test_every_artifact_of_the_demo_verifies(demo_store):
    from corpusforge.storage.catalog import Catalog
    from corpusforge.storage.store import ArtifactStore

    store = ArtifactStore(demo_store)
    dirs = list(store.iter_artifact_dirs())
    steps = {json.loads((d / "manifest.json").read_text())["step"] for d in dirs}
    assert {"corpus_shard", "corpus", "tokenizer", "encode", "embeddings", "ngram", "lm", "lm_sample", "seq2seq",
            "seq2seq_eval", "classify", "sentence_embeddings", "tag"} <= steps, steps
    for d in dirs:
        manifest = json.loads((d / "manifest.json").read_text())
        on_disk = {p.relative_to(d).as_posix() for p in d.rglob("*") if p.is_file() and p.name != "manifest.json"}
        assert on_disk <= set(manifest["files"]), (manifest["step"], on_disk - set(manifest["files"]))
        assert all("sha256" in entry for entry in manifest["files"].values()), manifest["step"]
        res = corpusforge("artifacts", "verify", manifest["id"], "--store", demo_store,
                          subprocess=d == dirs[0])  # the console script once, then in this process
        assert res.returncode == 0, (manifest["step"], res.stdout, res.stderr)
        assert Catalog(store).verify(manifest["id"]).ok


def test_each_pipelines_latest_run_is_recorded_for_gc(demo_store):
    """Issue 50, item 3: every pipeline of the demo recorded the artifacts its run used (storage/gc.py record_run),
    so `artifacts gc --keep-latest 1` keeps each pipeline's word2vec although two share a name elsewhere."""
    from corpusforge.storage.gc import latest_runs
    from corpusforge.storage.store import ArtifactStore

    runs = latest_runs(demo_store)
    assert set(runs) == {"demo", "demo-translation", "demo-classification", "demo-tagging", "demo-qa"}
    published = {json.loads((d / "manifest.json").read_text())["id"]: json.loads((d / "manifest.json").read_text())["step"]
                 for d in ArtifactStore(demo_store).iter_artifact_dirs()}
    for pipeline, used in runs.items():
        assert used and set(used) <= set(published), pipeline
    assert "tag" in {published[i] for i in runs["demo-tagging"]}
    assert "qa" in {published[i] for i in runs["demo-qa"]}


def test_a_step_cannot_return_the_fields_the_store_owns(store_root):
    from corpusforge.storage.store import ArtifactStore, StoreError

    def build(out: Path):
        (out / "a.txt").write_text("a")
        return {"files": {"model": "a.txt"}}

    with pytest.raises(StoreError, match="files"):
        ArtifactStore(store_root).publish(step="demo", name="d", version=1, config={}, inputs=[], build=build)
    assert not (store_root / "demo").exists() or not any((store_root / "demo").iterdir())


def test_a_copied_store_uses_its_own_registered_model_and_tampering_with_it_is_caught(demo_store, tmp_path):
    import shutil

    from mlflow import MlflowClient

    from corpusforge.storage.catalog import Catalog
    from corpusforge.storage.store import ArtifactStore
    from corpusforge.storage.tracking import Tracker, check_registered_copy

    copy = tmp_path / "copied-store"
    shutil.copytree(demo_store, copy, symlinks=True)
    (lm_dir,) = copy.glob("lm/sample-gpt-*")  # the demo's GPT (demo-qa's BERT is an lm artifact too)
    manifest = json.loads((lm_dir / "manifest.json").read_text())
    # before the copy has been opened, its registry still names the original's files: refused, not followed
    assert any("outside this store" in p for p in check_registered_copy(copy, manifest))

    Tracker(copy, "demo")  # the first tracked use of a moved or copied store rebases its MLflow paths
    client = MlflowClient(tracking_uri=f"sqlite:///{copy / 'mlflow.db'}")
    (version,) = client.search_model_versions("name = 'sample-gpt'")
    assert version.source.startswith(f"file://{copy.resolve()}/")
    assert check_registered_copy(copy, manifest) == []
    assert Catalog(ArtifactStore(copy)).verify(manifest["id"]).ok

    registered = Path(version.source[len("file://"):])
    mlmodel = registered / "MLmodel"
    mlmodel.write_text(mlmodel.read_text().replace("loader_module: corpusforge_model_code", "loader_module: evil"))
    (registered / "code").mkdir(exist_ok=True)  # the registered lm carries its corpusforge code (bundle_code)
    (registered / "code" / "evil.py").write_text("import os\n")
    report = Catalog(ArtifactStore(copy)).verify(manifest["id"])
    said = "\n".join(report.problems)
    assert not report.ok
    assert "MLmodel loads ['evil']" in said and "code/ folder" in said and "unexpected file code/evil.py" in said
    assert "MLmodel changed since it was registered" in said
    assert Catalog(ArtifactStore(demo_store)).verify(manifest["id"]).ok  # the original is untouched


def test_every_command_that_reads_a_model_refuses_a_tampered_one(demo_store, tmp_path):
    """Issue 44, item 9: `lm generate`, `lm inspect`, `lm evaluate`, `classify predict`, `seq2seq translate`,
    `embed search`, `embed sentences` (and `embed neighbors`, `tokenizer encode`, `ngram query`) served tampered
    weights with exit 0 while the Python API refused them. One byte flipped in the largest file of each kind of
    artifact (and in the tokenizer an lm reads): every command stops, exit 1, one line naming the artifact."""
    import shutil

    text = tmp_path / "lines.txt"
    text.write_text("to be or not to be\nthe king is dead\n", encoding="utf-8")
    commands = {
        "lm": [("lm", "generate", "{id}", "--max-new-tokens", "2"), ("lm", "inspect", "{id}", "--prompt", "to be"),
               ("lm", "evaluate", "{id}", str(text))],
        "seq2seq": [("seq2seq", "translate", "{id}", "a small dog")],
        "classify": [("classify", "predict", "{id}", "a fine film")],
        "sentence_embeddings": [("embed", "sentences", "{id}", str(text)),
                                ("embed", "search", "{id}", "the king", "--corpus", str(text))],
        "embeddings": [("embed", "neighbors", "{id}", "king")],
        "tokenizer": [("tokenizer", "encode", "{id}", "to be")],
        "ngram": [("ngram", "query", "{id}", "--context", "to be")],
    }
    refused = []
    for step, runs in commands.items():
        copy = tmp_path / f"store-{step}"
        shutil.copytree(demo_store, copy, symlinks=True)
        manifest_path = sorted(copy.glob(f"{step}/*/manifest.json"))[0]
        manifest = json.loads(manifest_path.read_text())
        largest = max(manifest["files"], key=lambda rel: manifest["files"][rel]["size"])
        target = manifest_path.parent / largest
        data = bytearray(target.read_bytes())
        data[len(data) // 2] ^= 0x01  # same size: only the digest tells
        target.write_bytes(bytes(data))
        for args in runs:
            args = [a.format(id=manifest["id"][:12]) for a in args]
            done = corpusforge(*args, "--store", copy)
            error = done.stderr.strip()
            assert done.returncode == 1 and "\n" not in error and manifest["id"][:12] in error, (args, done.stdout,
                                                                                              error)
            refused.append(args[:2])
    assert len(refused) == 10
    # the tokenizer an lm reads is checked too (item 7's other half): the model's own files are intact here
    copy = tmp_path / "store-lm-tokenizer"
    shutil.copytree(demo_store, copy, symlinks=True)
    lm_dir = sorted(copy.glob("lm/sample-gpt-*/manifest.json"))[0].parent
    from corpusforge.tasks.encoded import model_tokenizer_dir

    tok_file = model_tokenizer_dir(lm_dir) / "tokenizer.json"
    tok_file.write_text(tok_file.read_text(encoding="utf-8").replace('"', "'", 1), encoding="utf-8")  # same size
    lm_id = json.loads((lm_dir / "manifest.json").read_text())["id"][:12]
    done = corpusforge("lm", "generate", lm_id, "--max-new-tokens", "2", "--store", copy)
    assert done.returncode == 1 and "tokenizer" in done.stderr and "\n" not in done.stderr.strip(), done.stderr
