"""A store's manifests record no absolute path, so a moved store works in place and a moved project gives the same
artifact ids (issue 35, item 6): the corpus's ``shards[].path`` and ``embeddings_eval``'s ``embeddings_path`` are
store-relative, a shard's source path is relative to the working directory, and an evaluation file enters the
eval id by its name and digest, never by where it lies."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.conftest import write

pytestmark = pytest.mark.e2e

SENTENCES = ["the king rules the land", "the queen rules the land", "a man walks to the town",
             "a woman walks to the town", "the king and the queen", "the man and the woman"]


def _strings(value, where: str = ""):
    """Every string in a manifest (keys included), with where it is."""
    if isinstance(value, dict):
        for key, item in value.items():
            yield f"{where}.<key>", key
            yield from _strings(item, f"{where}.{key}")
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item, f"{where}[]")
    elif isinstance(value, str):
        yield where, value


def test_a_moved_store_holds_no_absolute_path_and_works_in_place(prefect_harness, tmp_path, monkeypatch):
    import corpusforge as cf
    from corpusforge.cli import app
    from corpusforge.storage.store import read_manifest, resolve_recorded
    from corpusforge.tasks.corpus.merge import shard_dirs

    project = tmp_path / "first" / "project"
    write(project / "data" / "a.txt", "".join(f"{SENTENCES[i % 6]}\n" for i in range(60)))
    write(project / "data" / "b.txt", "".join(f"{SENTENCES[(i + 3) % 6]} again\n" for i in range(30)))
    write(project / "eval" / "questions.txt", ": royalty\nking queen man woman\nman woman king queen\n")
    config = write(project / "pipeline.yaml", "name: moved\ntracking: {enabled: false}\n"
                   "corpus: {name: c, sources: [data], shard_mb: 0, split: {valid: 0.1, test: 0.1}}\n"
                   "embeddings: {kind: word2vec, name: w, dim: 8, min_count: 1, epochs: 1, workers: 1,\n"
                   "             analogies: eval/questions.txt, neighbors: [king]}\n")
    monkeypatch.chdir(project)
    first = cf.run(config, store=project / ".corpusforge")
    ids = {a.id: a.step for a in first.steps}
    assert {"corpus_shard", "corpus", "embeddings", "embeddings_eval"} <= set(ids.values())
    assert sum(step == "corpus_shard" for step in ids.values()) == 2  # shard_mb 0: a shard per file

    # Move the whole project (store, data and config) elsewhere; nothing may point at the old place.
    monkeypatch.chdir(tmp_path)
    moved = tmp_path / "second" / "place"
    moved.parent.mkdir()
    shutil.move(str(project), str(moved))
    store = moved / ".corpusforge"
    manifests = {path: json.loads(path.read_text()) for path in store.glob("*/*/manifest.json")}
    assert len(manifests) == len(ids)
    for path, manifest in manifests.items():
        for where, text in _strings(manifest):
            assert not text.startswith("/") and str(tmp_path) not in text, (path.parent.name, where, text)

    runner = CliRunner()
    for aid in ids:
        result = runner.invoke(app, ["artifacts", "verify", aid, "--store", str(store)])
        assert result.exit_code == 0 and "OK" in result.output, result.output

    corpus = cf.Artifact.from_dir(store / first["corpus"].path.relative_to(project / ".corpusforge"))
    splits = corpus.load()
    assert sum(frame.height for frame in splits.values()) == corpus.metrics["docs"] > 0
    shards = shard_dirs(corpus.path, corpus.manifest)
    assert [read_manifest(d)["id"] for d in shards] == [s["id"] for s in corpus.manifest["shards"]]
    assert all(d.is_relative_to(store) for d in shards)
    inputs = [i for m in manifests.values() if m["step"] == "corpus_shard" for i in m["inputs"]]
    assert sorted(i["path"] for i in inputs) == ["data/a.txt", "data/b.txt"]  # relative to where it ran
    (evaluation,) = [(p.parent, m) for p, m in manifests.items() if m["step"] == "embeddings_eval"]
    embeddings_dir = resolve_recorded(evaluation[1]["embeddings_path"], evaluation[0])
    assert embeddings_dir.is_relative_to(store) and read_manifest(embeddings_dir)["id"] == evaluation[1]["embeddings_id"]
    assert evaluation[1]["config"]["analogies"] == "questions.txt"

    # A manifest written before (absolute shard paths at the old place) still finds its shards in the moved store.
    old = dict(corpus.manifest, shards=[dict(s, path=str(project / ".corpusforge" / s["path"]))
                                        for s in corpus.manifest["shards"]])
    assert shard_dirs(corpus.path, old) == shards

    # The moved project, run from its new place against its moved store: the same ids, every step reused.
    monkeypatch.chdir(moved)
    again = cf.run(moved / "pipeline.yaml", store=store)
    assert {a.id: a.step for a in again.steps} == ids
    assert all(a.reused for a in again.steps), [(a.step, a.reused) for a in again.steps]
