"""run_step: a step that builds re-hashes the files of the upstream artifacts it reads (issue 30, item 8): the
cheap reuse check (size, mtime, inode, ctime) is not all that stands between a changed upstream file and a new
artifact published under the clean id."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from corpusforge.storage.store import ArtifactStore, TamperedArtifact
from corpusforge.tasks.step import artifact_input, run_step


def upstream(store: ArtifactStore):
    def build(out: Path):
        (out / "tokenizer.json").write_text('{"vocab": {"a": 0, "b": 1}}')
        return {"metrics": {"vocab": 2}}

    return run_step(store, step="tokenizer", version=1, name="tok", config={"v": 2}, inputs=[], build=build)


def downstream(store: ArtifactStore, tok, during=None):
    read = []

    def build(out: Path):
        read.append((Path(tok.path) / "tokenizer.json").read_text())
        if during is not None:
            during()
        (out / "ids.txt").write_text("0 1\n")
        return {}

    result = run_step(store, step="encode", version=1, name="enc", config={}, inputs=[artifact_input(tok)],
                      build=build)
    return result, read


def swap_ids(path: Path) -> None:
    """The drill's edit: two ids swapped, same size, mtime restored."""
    st = path.stat()
    path.write_text(path.read_text().replace('"a": 0, "b": 1', '"a": 1, "b": 0'))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def test_a_changed_upstream_file_fails_the_step_that_reads_it_naming_the_file(store_root):
    store = ArtifactStore(store_root)
    tok = upstream(store)
    # changed after the tokenizer step handed its result on (or under a stale stat record): the encode step,
    # which builds, hashes what it reads before it publishes anything under the clean id
    swap_ids(Path(tok.path) / "tokenizer.json")
    with pytest.raises(TamperedArtifact, match=r"tokenizer\.json changed \(sha256 differs.*step 'encode'"):
        downstream(store, tok)
    assert not (store_root / "encode").exists() or not any((store_root / "encode").glob("enc-*"))


def test_an_upstream_file_changed_while_the_step_builds_fails_it(store_root):
    store = ArtifactStore(store_root)
    tok = upstream(store)
    with pytest.raises(TamperedArtifact, match=r"tokenizer\.json changed while step 'encode' read it"):
        downstream(store, tok, during=lambda: swap_ids(Path(tok.path) / "tokenizer.json"))
    assert not any((store_root / "encode").glob("enc-*"))


def test_an_intact_upstream_builds_and_a_reuse_does_not_rehash(store_root, monkeypatch):
    store = ArtifactStore(store_root)
    tok = upstream(store)
    first, read = downstream(store, tok)
    assert not first.reused and read == ['{"vocab": {"a": 0, "b": 1}}']
    import corpusforge.storage.store as store_module

    hashed = []
    real = store_module.sha256_file
    monkeypatch.setattr(store_module, "sha256_file", lambda p: hashed.append(Path(p).name) or real(p))
    again, read = downstream(store, tok)
    assert again.reused and read == [] and hashed == []  # reuse: the cheap check only, nothing re-hashed
