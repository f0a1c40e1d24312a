"""The exact cosine search behind `corpusforge embed search` (tasks/sentence_embeddings/inference.py top_cosines):
the same rows and scores as sorting every dot product, across its blocks and on a memory-mapped corpus."""

from __future__ import annotations

import numpy as np
import pytest

from corpusforge.tasks.sentence_embeddings.inference import top_cosines


def _unit(rng, shape):
    v = rng.standard_normal(shape).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


@pytest.mark.parametrize("dim", [4, 384])  # dim 4: ~4M rows per block (one block); 384: 43,690 rows per block
def test_top_rows_are_the_full_sort_across_blocks(tmp_path, dim):
    rng = np.random.default_rng(dim)
    vectors = _unit(rng, (100_003, dim))
    queries = _unit(rng, (3, dim))
    path = tmp_path / "v.npy"
    np.save(path, vectors)
    mapped = np.load(path, mmap_mode="r")
    full = queries @ vectors.T
    for corpus in (vectors, mapped):
        got = top_cosines(corpus, queries, 12)
        for q, hits in enumerate(got):
            want = np.argsort(-full[q], kind="stable")[:12]
            assert [r for r, _ in hits] == want.tolist()
            assert [s for _, s in hits] == pytest.approx(full[q][want].tolist(), abs=1e-5)
            assert all(a[1] >= b[1] for a, b in zip(hits, hits[1:]))


def test_fewer_rows_than_asked_and_one_query_as_a_vector():
    vectors = np.eye(3, dtype=np.float32)
    (hits,) = top_cosines(vectors, np.array([0.0, 1.0, 0.0], dtype=np.float32), 10)
    assert [r for r, _ in hits] == [1, 0, 2]  # all three; equal scores by row
    assert hits[0][1] == pytest.approx(1.0)
