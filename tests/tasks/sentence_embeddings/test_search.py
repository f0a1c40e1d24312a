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


class ByteIds:
    """Bytes as ids (3..62): a whole tokenizer for a model that only has to read the lines."""

    def encode_batch(self, texts):
        return [[3 + b % 60 for b in t.encode("utf-8")] for t in texts]


def test_the_search_index_is_encoded_block_by_block(tmp_path, monkeypatch):
    """Issue 44, item 12: `embed search` tokenized and encoded the whole --corpus at once (7.09 GB RSS for 1M
    lines). It now encodes INDEX_BLOCK lines at a time into the memory-mapped index: no call sees more than a
    block, and the vectors are the whole-file encoding's (up to float sums in other batches)."""
    import torch

    from corpusforge.cli import sentences
    from corpusforge.models.sbert.config import SBertConfig
    from corpusforge.models.sbert.model import SentenceEncoder
    from corpusforge.tasks.sentence_embeddings.inference import SentenceEmbedder

    torch.manual_seed(0)
    model = SentenceEncoder(SBertConfig(vocab_size=64, n_layer=1, n_head=2, n_embd=16, block_size=24, dropout=0.0,
                                        cls_id=1, sep_id=2, pad_id=0))
    embedder = SentenceEmbedder(model, ByteIds(), {})
    lines = [f"line {i} says {'x' * (i % 13)}" for i in range(1000)]
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(lines) + "\n", encoding="utf-8")
    seen = []
    encode = embedder.encode
    monkeypatch.setattr(embedder, "encode", lambda texts, **kw: seen.append(len(texts)) or encode(texts, **kw))
    monkeypatch.setattr(sentences, "INDEX_BLOCK", 128)

    class Found:
        path = tmp_path / "store" / "sentence_embeddings" / "tiny-0123"
        manifest = {"id": "0123" * 16}

    vectors, cached = sentences._index(Found, embedder, corpus, lines)
    assert not cached and max(seen) == 128 and sum(seen) == 1000 and isinstance(vectors, np.memmap)
    assert np.allclose(np.asarray(vectors), encode(lines), atol=1e-5)
    again, cached = sentences._index(Found, embedder, corpus, lines)
    assert cached and len(seen) == 8  # the second search embeds nothing
    assert not list((tmp_path / "store" / ".scratch" / "sentence_index").glob("*.tmp.npy"))
