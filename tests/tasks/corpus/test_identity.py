"""The identity columns (DuckDB-vectorized, or hashlib for small frames) equal their Python definitions, row
for row."""

from __future__ import annotations

import hashlib

import polars as pl
import pytest

from corpusforge.tasks.corpus import identity
from corpusforge.tasks.corpus.identity import add_identity, content_hash_for, doc_id_for, split_for
from corpusforge.tasks.corpus.split import SplitConfig


@pytest.mark.parametrize("path", ["duckdb", "small-frame"])
def test_vectorized_identity_matches_the_python_definitions(path, monkeypatch):
    # frames up to SMALL_FRAME rows are hashed in Python (cheaper than opening DuckDB), larger ones in DuckDB
    monkeypatch.setattr(identity, "SMALL_FRAME", 0 if path == "duckdb" else 10_000)
    texts = ["plain", "caf\u00e9 \U0001F44B", "", "tab\tand\nnewline", "same", "same"] * 50
    df = pl.DataFrame({"locator": [f"line:{i}" for i in range(len(texts))], "text": texts})
    cfg = SplitConfig(valid=0.2, test=0.3, seed=7)
    out = add_identity(df, "dir/\u00e4.txt", "ab" * 32, cfg)
    assert out["doc_id"].to_list() == [doc_id_for("dir/\u00e4.txt", "ab" * 32, loc) for loc in df["locator"]]
    assert out["content_hash"].to_list() == [content_hash_for(t) for t in texts]
    assert out["split"].to_list() == [split_for(d, cfg) for d in out["doc_id"]]
    assert set(out["split"]) == {"train", "valid", "test"}
    assert out.schema == {"locator": pl.Utf8, "text": pl.Utf8, "doc_id": pl.Utf8, "content_hash": pl.Utf8,
                          "split": pl.Utf8}


def test_definitions_are_plain_sha256_and_md5():
    # independent restatement of the documented formulas
    expected = hashlib.sha256("s\x1fd\x1fline:1".encode()).hexdigest()[:20]
    assert doc_id_for("s", "d", "line:1") == expected
    assert content_hash_for("x") == "9dd4e461268c8034f5c8564e155c67a6"  # md5("x"), RFC 1321 test tooling
    u = int(hashlib.md5(b"0:abc").hexdigest()[:8], 16) / 2**32
    assert split_for("abc", SplitConfig(valid=u + 1e-9, test=0.0)) == "valid"
    assert split_for("abc", SplitConfig(valid=max(u - 1e-9, 0.0), test=0.0)) == "train"


def test_empty_frame_gets_the_columns():
    df = pl.DataFrame(schema={"locator": pl.Utf8, "text": pl.Utf8})
    out = add_identity(df, "s", "d", SplitConfig())
    assert out.columns == ["locator", "text", "doc_id", "content_hash", "split"] and out.height == 0


@pytest.mark.parametrize("small", [0, 10_000])
def test_without_held_out_splits_every_document_is_train(small, monkeypatch):
    monkeypatch.setattr(identity, "SMALL_FRAME", small)
    texts = [f"text {i}" for i in range(40)]
    df = pl.DataFrame({"locator": [f"line:{i}" for i in range(40)], "text": texts})
    cfg = SplitConfig(valid=0.0, test=0.0, seed=3)
    out = add_identity(df, "a.txt", "cd" * 32, cfg)
    assert out["split"].to_list() == ["train"] * 40 == [split_for(d, cfg) for d in out["doc_id"]]
    assert out["doc_id"].to_list() == [doc_id_for("a.txt", "cd" * 32, f"line:{i}") for i in range(40)]
    assert out["content_hash"].to_list() == [content_hash_for(t) for t in texts]
    assert out.schema["split"] == pl.Utf8


def test_threads_hashing_at_once_share_one_database_and_get_their_own_rows(monkeypatch):
    """One DuckDB database per process, a cursor per thread: eight threads hashing different frames at the
    same time (each registers its frame under the same name) get exactly the rows of their own frame."""
    import threading

    monkeypatch.setattr(identity, "SMALL_FRAME", 0)
    cfg = SplitConfig(valid=0.1, test=0.1, seed=1)
    frames = [pl.DataFrame({"locator": [f"line:{i}" for i in range(3000)], "text": [f"doc {k} {i}" for i in range(3000)]})
              for k in range(8)]
    got: dict[int, list[pl.DataFrame]] = {k: [] for k in range(8)}

    def work(k: int) -> None:
        for _ in range(4):
            got[k].append(add_identity(frames[k], f"s{k}.txt", "ef" * 32, cfg))

    threads = [threading.Thread(target=work, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for k, frame in enumerate(frames):
        assert len(got[k]) == 4
        want = [doc_id_for(f"s{k}.txt", "ef" * 32, loc) for loc in frame["locator"]]
        for out in got[k]:
            assert out["doc_id"].to_list() == want
            assert out["content_hash"].to_list() == [content_hash_for(t) for t in frame["text"]]
    assert len(identity._DATABASE) == 1
