"""Artifact lookup (storage/catalog.py): find, get by prefix, lineage and verify."""

from __future__ import annotations

import hashlib
import itertools
import json
import time
from pathlib import Path

import pytest

from corpusforge.storage.catalog import AmbiguousArtifactId, ArtifactNotFound, Catalog
from corpusforge.storage.hashing import artifact_id
from corpusforge.storage.store import MANIFEST, ArtifactStore
from tests.conftest import write

SOURCE = {"id": hashlib.sha256(b"raw source bytes").hexdigest(), "kind": "source", "path": "data/a.txt"}


def _files_build(files: dict[str, bytes]):
    def build(tmp: Path):
        for rel, data in files.items():
            write(tmp / rel, data)

    return build


def _pub(store, step, name, config, inputs=(), files=None, version=1):
    return store.publish(
        step=step,
        name=name,
        version=version,
        config=config,
        inputs=list(inputs),
        build=_files_build(files or {"data.txt": json.dumps(config).encode()}),
    )


@pytest.fixture
def populated(store_root):
    """Two corpus artifacts, two tokenizers (one per corpus)."""
    store = ArtifactStore(store_root)
    c1 = _pub(store, "corpus", "shard", {"reader": {"txt_mode": "line"}, "min_chars": 5}, [SOURCE])
    time.sleep(0.005)  # created_at has millisecond resolution
    c2 = _pub(store, "corpus", "shard", {"reader": {"txt_mode": "paragraph"}, "min_chars": 5}, [SOURCE])
    time.sleep(0.005)
    t1 = _pub(store, "tokenize", "bpe", {"vocab": 100}, [{"id": c1.manifest["id"], "kind": "artifact"}])
    time.sleep(0.005)
    t2 = _pub(store, "tokenize", "bpe", {"vocab": 100}, [{"id": c2.manifest["id"], "kind": "artifact"}])
    return store, {"c1": c1, "c2": c2, "t1": t1, "t2": t2}


def _ids(found):
    return [f.manifest["id"] for f in found]


def test_find_filters(populated):
    store, a = populated
    cat = Catalog(store)
    ids = {k: v.manifest["id"] for k, v in a.items()}
    assert sorted(_ids(cat.find())) == sorted(ids.values())
    assert _ids(cat.find(step="corpus")) == [ids["c1"], ids["c2"]]  # oldest first
    assert _ids(cat.find(step="tokenize")) == [ids["t1"], ids["t2"]]
    assert _ids(cat.find(name="bpe")) == [ids["t1"], ids["t2"]]
    assert cat.find(step="nope") == []
    assert cat.find(step="corpus", name="bpe") == []
    # Config subset with dotted keys.
    assert _ids(cat.find(config={"reader.txt_mode": "paragraph"})) == [ids["c2"]]
    assert _ids(cat.find(config={"reader.txt_mode": "line", "min_chars": 5})) == [ids["c1"]]
    assert _ids(cat.find(config={"min_chars": 5})) == [ids["c1"], ids["c2"]]
    assert cat.find(config={"reader.txt_mode": "file"}) == []
    assert cat.find(config={"reader.missing": "line"}) == []
    assert cat.find(config={"min_chars.deeper": 5}) == []  # descending into a non-mapping
    # Input id, full or prefix.
    assert _ids(cat.find(input_id=ids["c1"])) == [ids["t1"]]
    assert _ids(cat.find(input_id=ids["c2"][:8])) == [ids["t2"]]
    assert _ids(cat.find(input_id=SOURCE["id"][:10])) == [ids["c1"], ids["c2"]]
    # Latest.
    assert _ids(cat.find(step="corpus", latest=True)) == [ids["c2"]]
    assert _ids(cat.find(latest=True)) == [ids["t2"]]
    assert cat.find(step="nope", latest=True) == []
    found = cat.find(step="corpus")[0]
    assert found.path == a["c1"].path


def test_get_by_full_id_and_unique_prefix(populated):
    store, a = populated
    cat = Catalog(store)
    target = a["t1"].manifest["id"]
    others = [v.manifest["id"] for k, v in a.items() if k != "t1"]
    # Shortest prefix (>= 4) that no other artifact shares, computed independently.
    n = next(k for k in range(4, 65) if not any(o.startswith(target[:k]) for o in others))
    for prefix in (target, target[:n], target[:20], target[:n].upper(), f"  {target[:n]} "):
        found = cat.get(prefix)
        assert found.manifest["id"] == target
        assert found.path == a["t1"].path


@pytest.mark.parametrize("bad", ["", "ab", "abc", "zzzzzz", "../..", "*"])
def test_get_rejects_short_or_non_hex(populated, bad):
    store, _ = populated
    with pytest.raises(ArtifactNotFound):
        Catalog(store).get(bad)


def test_get_unknown_id(populated):
    store, a = populated
    known = {v.manifest["id"] for v in a.values()}
    unknown = next(h for h in (hashlib.sha256(str(i).encode()).hexdigest() for i in itertools.count()) if h not in known)
    with pytest.raises(ArtifactNotFound):
        Catalog(store).get(unknown)
    with pytest.raises(ArtifactNotFound):
        Catalog(ArtifactStore(Path(store.root) / "does-not-exist")).get(unknown[:8])


def test_get_ignores_temp_dirs_and_incomplete_artifacts(store_root):
    store = ArtifactStore(store_root)
    aid = artifact_id("corpus", 1, {"x": 1}, [])
    # A half-written temp dir and a visible dir without a manifest are not artifacts.
    write(store_root / "corpus" / f".tmp-{aid[:12]}-123-abcd" / "data.txt", b"x")
    write(store_root / "corpus" / f"shard-{aid[:12]}" / "data.txt", b"x")
    cat = Catalog(store)
    with pytest.raises(ArtifactNotFound):
        cat.get(aid[:8])
    assert cat.find() == []


def test_ambiguous_prefix(store_root):
    store = ArtifactStore(store_root)
    # Brute-force configs (hashing only, no I/O) until two ids share their first 4 hex characters.
    seen: dict[str, int] = {}
    for i in itertools.count():
        prefix = artifact_id("corpus", 1, {"seed": i}, [])[:4]
        if prefix in seen:
            pair = (seen[prefix], i)
            break
        seen[prefix] = i
    first = _pub(store, "corpus", "shard", {"seed": pair[0]})
    second = _pub(store, "corpus", "shard", {"seed": pair[1]})
    id1, id2 = first.manifest["id"], second.manifest["id"]
    assert id1[:4] == id2[:4] and id1 != id2
    cat = Catalog(store)
    with pytest.raises(AmbiguousArtifactId):
        cat.get(id1[:4])
    common = next(k for k in range(4, 65) if id1[:k] != id2[:k])  # first length where they differ
    assert cat.get(id1[:common]).manifest["id"] == id1
    assert cat.get(id2[:common]).manifest["id"] == id2


def test_lineage_tree_across_two_steps(populated):
    store, a = populated
    cat = Catalog(store)
    c1, t1 = a["c1"].manifest["id"], a["t1"].manifest["id"]
    tree = cat.lineage(t1[:10])
    assert tree == {
        "id": t1,
        "step": "tokenize",
        "name": "bpe",
        "inputs": [{"id": c1, "step": "corpus", "name": "shard", "inputs": [SOURCE]}],
    }


def test_lineage_marks_missing_upstream(store_root):
    store = ArtifactStore(store_root)
    ghost = hashlib.sha256(b"never published").hexdigest()
    t = _pub(store, "tokenize", "bpe", {"vocab": 10}, [{"id": ghost, "kind": "artifact"}])
    tree = Catalog(store).lineage(t.manifest["id"])
    assert tree["inputs"] == [{"id": ghost, "kind": "artifact", "missing": True}]


@pytest.fixture
def one_artifact(store_root):
    store = ArtifactStore(store_root)
    files = {"data.txt": b"0123456789\n", "sub/part.bin": bytes(range(200))}
    result = _pub(store, "corpus", "shard", {"min_chars": 5}, [SOURCE], files=files)
    return Catalog(store), result


def test_verify_passes_untouched(one_artifact):
    cat, result = one_artifact
    report = cat.verify(result.manifest["id"][:8])
    assert report.ok, report.problems
    assert report.problems == []
    assert report.id == result.manifest["id"]
    assert report.files_checked == 3  # the step's two files and the store's card (README.md)


def test_verify_detects_same_size_content_change(one_artifact):
    cat, result = one_artifact
    path = result.path / "data.txt"
    original = path.read_bytes()
    path.write_bytes(b"9876543210\n")
    assert len(path.read_bytes()) == len(original)
    report = cat.verify(result.manifest["id"])
    assert not report.ok
    assert len(report.problems) == 1 and "data.txt" in report.problems[0]
    assert "content changed" in report.problems[0]


def test_verify_detects_deleted_file(one_artifact):
    cat, result = one_artifact
    (result.path / "sub" / "part.bin").unlink()
    report = cat.verify(result.manifest["id"])
    assert not report.ok
    assert len(report.problems) == 1 and "sub/part.bin" in report.problems[0]
    assert "missing" in report.problems[0]


def test_verify_detects_extra_file(one_artifact):
    cat, result = one_artifact
    write(result.path / "sub" / "sneaky.txt", b"not in the manifest")
    report = cat.verify(result.manifest["id"])
    assert not report.ok
    assert len(report.problems) == 1 and "sub/sneaky.txt" in report.problems[0]
    assert "unlisted" in report.problems[0]


def test_verify_detects_edited_config(one_artifact):
    cat, result = one_artifact
    manifest_path = result.path / MANIFEST
    manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    manifest["config"]["min_chars"] = 6
    manifest_path.write_text(json.dumps(manifest), encoding="utf-8")
    report = cat.verify(result.manifest["id"])
    assert not report.ok
    assert len(report.problems) == 2  # the id it does not give, and the manifest digest (issue 30, item 9)
    assert "manifest.json was edited since it was published" in report.problems[1]
    assert result.manifest["id"] in report.problems[0]
    assert artifact_id("corpus", 1, {"min_chars": 6}, [SOURCE["id"]]) in report.problems[0]


def swap(a: Path, b: Path) -> None:
    tmp = a.with_name(".swapping")
    a.rename(tmp)
    b.rename(a)
    tmp.rename(b)


def test_swapped_folders_are_named_by_verify_and_find(populated):
    """Issue 30, item 17: two artifact folders swapped. Each folder's name says one id, its manifest another:
    verify finds the artifact where it is and fails naming the folder, find flags both."""
    store, a = populated
    c1, c2 = a["c1"], a["c2"]
    swap(c1.path, c2.path)
    cat = Catalog(store)
    for moved, now_at in ((c1, c2.path), (c2, c1.path)):
        report = cat.verify(moved.manifest["id"][:8])  # not "no artifact"
        assert not report.ok and report.path == now_at
        assert any(f"{now_at} holds artifact {moved.manifest['id'][:12]}" in p and "its name says" in p
                   for p in report.problems), report.problems
    flagged = {f.manifest["id"]: f.summary().get("problem") for f in cat.find(step="corpus")}
    assert all(flagged.values()) and len(flagged) == 2
    assert all(f.summary().get("problem") is None for f in cat.find(step="tokenize"))
    swap(c1.path, c2.path)
    assert cat.verify(c1.manifest["id"]).ok and all(f.summary().get("problem") is None for f in cat.find())
