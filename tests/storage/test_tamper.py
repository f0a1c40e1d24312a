"""A published artifact is checked before it is reused (issue 14, item 7): tampering fails the reuse, naming the
file; `artifacts verify` refuses symlinks."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from corpusforge.storage.catalog import Catalog
from corpusforge.storage.store import ArtifactStore, TamperedArtifact
from tests.commands import corpusforge
from tests.conftest import write


def publish(store: ArtifactStore, built: list | None = None):
    def build(out: Path):
        if built is not None:
            built.append(out)
        (out / "data.bin").write_bytes(bytes(range(256)) * 40)
        (out / "sub").mkdir()
        (out / "sub" / "note.txt").write_text("hello\n")
        return {"metrics": {"n": 1}}

    return store.publish(step="demo", name="d", version=1, config={"k": 1}, inputs=[], build=build)


def overwrite_same_size(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[100:110] = b"X" * 10
    path.write_bytes(bytes(data))


def test_reuse_after_an_edit_of_the_same_size_fails_naming_the_file(store_root):
    store = ArtifactStore(store_root)
    first = publish(store)
    assert publish(store).reused  # untouched: reused
    overwrite_same_size(first.path / "data.bin")
    with pytest.raises(TamperedArtifact, match=r"data\.bin changed \(sha256"):
        publish(store)


def test_a_size_change_a_missing_file_and_a_symlink_are_caught(store_root, tmp_path):
    store = ArtifactStore(store_root)
    first = publish(store)
    note = first.path / "sub" / "note.txt"
    note.write_text("hello, changed\n")
    with pytest.raises(TamperedArtifact, match=r"sub/note\.txt changed size"):
        publish(store)
    note.write_text("hello\n")
    publish(store)  # same bytes again: re-hashed once, accepted
    outside = write(tmp_path / "outside.txt", "hello\n")
    note.unlink()
    note.symlink_to(outside)
    with pytest.raises(TamperedArtifact, match="symlinks are refused"):
        publish(store)
    report = Catalog(store).verify(first.manifest["id"])
    assert not report.ok and any("symlink refused: sub/note.txt" in p for p in report.problems)
    note.unlink()
    with pytest.raises(TamperedArtifact, match="is missing"):
        publish(store)


def test_an_edit_that_restores_size_and_mtime_is_caught_by_the_ctime(store_root, monkeypatch):
    """Issue 30, item 8: `touch` can restore a file's mtime but not its ctime, which the cheap check compares."""
    store = ArtifactStore(store_root)
    first = publish(store)
    target = first.path / "data.bin"
    st = target.stat()
    overwrite_same_size(target)
    os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns))  # a deliberate cover-up; the inode is unchanged
    assert (target.stat().st_size, target.stat().st_mtime_ns, target.stat().st_ino) == \
        (st.st_size, st.st_mtime_ns, st.st_ino)
    with pytest.raises(TamperedArtifact, match=r"data\.bin changed \(sha256"):
        publish(store)
    monkeypatch.setenv("CORPUSFORGE_VERIFY_INPUTS", "1")
    with pytest.raises(TamperedArtifact, match=r"data\.bin"):
        publish(store)


def test_a_copied_store_is_rehashed_once_and_then_trusted(store_root, tmp_path):
    built: list = []
    publish(ArtifactStore(store_root), built)
    copy = tmp_path / "copy"
    shutil.copytree(store_root, copy, ignore=shutil.ignore_patterns(".verified"))
    store = ArtifactStore(copy)
    assert publish(store, built).reused and len(built) == 1
    assert (copy / ".verified").is_dir()


@pytest.mark.e2e
def test_a_tampered_corpus_stops_the_next_run_with_the_file_named(prefect_harness, tmp_path):
    write(tmp_path / "docs" / "a.txt", "".join(f"line number {i} of the corpus\n" for i in range(200)))
    config = write(tmp_path / "p.yaml", "name: t\ncorpus: {name: c, sources: [docs], reader: {txt_mode: line}}\n"
                                        "ngram: {order: 2, eval_splits: []}\n")
    store = tmp_path / "store"
    env = {"PREFECT_API_URL": prefect_harness, "CORPUSFORGE_LOCAL_SERVER": "off"}
    corpusforge("run", config, "--store", store, env=env, code=0)  # in this process (tests/commands.py)
    (train,) = (store / "corpus").glob("c-*/train.parquet")
    overwrite_same_size(train)
    again = corpusforge("run", config, "--store", store, env=env)
    assert again.returncode == 1 and again.exception is None
    assert "train.parquet changed" in " ".join(again.stderr.split()) and "Traceback" not in again.stderr


def edit_manifest(directory: Path, change) -> None:
    import json

    path = directory / "manifest.json"
    manifest = json.loads(path.read_text())
    change(manifest)
    path.write_text(json.dumps(manifest, indent=2))


@pytest.mark.parametrize("field, change", [
    ("metrics", lambda m: m["metrics"].update(n=999)),  # the drill printed a forged perplexity this way
    ("accounting", lambda m: m.update(accounting={"records_read": 10, "kept": 10})),
    ("config", lambda m: m["config"].update(k=2)),
    ("files", lambda m: m["files"]["sub/note.txt"].update(sha256="0" * 64)),
])
def test_an_edited_manifest_is_not_reused_and_fails_verify(store_root, field, change):
    """Issue 30, item 9: the manifest's fields (all but the informational ones) are digested; a reuse checks the
    digest and re-derives the id from config, inputs and version; verify covers the whole manifest."""
    store = ArtifactStore(store_root)
    first = publish(store)
    aid = first.manifest["id"]
    assert Catalog(store).verify(aid).ok
    edit_manifest(first.path, change)
    with pytest.raises(TamperedArtifact, match=r"manifest\.json was edited"):
        publish(store)
    from corpusforge.tasks.step import lookup_only, run_step

    with lookup_only(), pytest.raises(TamperedArtifact, match=r"manifest\.json was edited"):  # `run` answered
        run_step(store, step="demo", version=1, name="d", config={"k": 1}, inputs=[], build=lambda out: None)
    report = Catalog(store).verify(aid)
    assert not report.ok and any("manifest.json was edited" in p for p in report.problems), report.problems


def test_informational_fields_are_not_digested_and_verify_says_which(store_root):
    store = ArtifactStore(store_root)
    first = publish(store)
    edit_manifest(first.path, lambda m: m["timings"].update(seconds=123.0))
    assert publish(store).reused
    report = Catalog(store).verify(first.manifest["id"])
    assert report.ok and report.notes == ["not covered by the manifest digest (informational): timings, created_at, "
                                          "environment, library_versions, git_commit"]


def test_a_manifest_from_before_the_digest_is_still_reused_and_its_identity_checked(store_root):
    store = ArtifactStore(store_root)
    first = publish(store)
    aid = first.manifest["id"]
    edit_manifest(first.path, lambda m: (m.pop("manifest_sha256"), m.update(schema=1)))
    assert publish(store).reused  # old manifests stay usable
    report = Catalog(store).verify(aid)
    assert report.ok and any("no digest" in n for n in report.notes), report.notes
    edit_manifest(first.path, lambda m: m["config"].update(k=2))  # its identity is still re-derived on reuse
    with pytest.raises(TamperedArtifact, match=r"manifest\.json was edited: its config, inputs or version"):
        publish(store)


def test_two_names_of_one_id_swapped_are_not_reused(store_root):
    """The name is no part of the id: two artifacts of one id under two names, their folders swapped. The id check
    alone passes; the folder's name against the manifest's does not (issue 30, item 17)."""
    store = ArtifactStore(store_root)

    def pub(name):
        return store.publish(step="demo", name=name, version=1, config={"k": 1}, inputs=[],
                             build=lambda out: (out / "x.txt").write_text("x") and None)

    a, b = pub("a"), pub("b")
    assert a.manifest["id"] == b.manifest["id"]
    tmp = a.path.with_name(".swap")
    a.path.rename(tmp)
    b.path.rename(a.path)
    tmp.rename(b.path)
    with pytest.raises(TamperedArtifact, match="folders were swapped or renamed"):
        pub("a")
