"""How good is a tokenizer on held-out text? The numbers every kind is compared on.

- ``fertility``: tokens per word (words = whitespace-separated strings); lower is better;
- ``bytes_per_token``: UTF-8 bytes per token (compression); higher is better;
- ``unk_rate``: share of tokens that are ``<unk>``;
- ``oov_rate``: share of word occurrences whose encoding holds at least one ``<unk>``;
- ``vocab_used``: share of the vocabulary that occurs in the encoded text;
- ``roundtrip_exact``: share of documents with ``decode(encode(doc)) == doc``;
- ``encode_mb_per_s``: throughput of batch encoding (MB of UTF-8 per second, wall clock).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence
from typing import Any

from corpusforge.models.tokenization.base import Tokenizer

METRICS = ("fertility", "bytes_per_token", "unk_rate", "oov_rate", "vocab_used", "roundtrip_exact",
           "encode_mb_per_s")


def evaluate_tokenizer(tok: Tokenizer, texts: Sequence[str]) -> dict[str, Any]:
    """All metrics of ``tok`` on ``texts`` (documents), plus the raw counts they derive from."""
    texts = list(texts)
    start = time.perf_counter()
    encoded = tok.encode_batch(texts)
    seconds = time.perf_counter() - start
    n_bytes = sum(len(t.encode("utf-8")) for t in texts)
    n_tokens = sum(len(ids) for ids in encoded)
    word_counts = Counter(w for t in texts for w in t.split())
    n_words = sum(word_counts.values())
    unk = tok.unk_id
    used = {i for ids in encoded for i in ids}
    n_unk = sum(ids.count(unk) for ids in encoded) if unk is not None else 0
    oov_words = 0
    if unk is not None and word_counts:
        words = list(word_counts)
        for w, ids in zip(words, tok.encode_batch(words)):
            if unk in ids:
                oov_words += word_counts[w]
    exact = sum(tok.decode(ids) == t for t, ids in zip(texts, encoded))
    return {
        "fertility": n_tokens / n_words if n_words else 0.0,
        "bytes_per_token": n_bytes / n_tokens if n_tokens else 0.0,
        "unk_rate": n_unk / n_tokens if n_tokens else 0.0,
        "oov_rate": oov_words / n_words if n_words else 0.0,
        "vocab_used": len(used) / tok.vocab_size if tok.vocab_size else 0.0,
        "roundtrip_exact": exact / len(texts) if texts else 1.0,
        "encode_mb_per_s": n_bytes / 1e6 / seconds if seconds > 0 else 0.0,
        "eval_docs": len(texts),
        "eval_words": n_words,
        "eval_bytes": n_bytes,
        "eval_tokens": n_tokens,
        "vocab_size": tok.vocab_size,
    }


def comparison_rows(results: dict[str, dict[str, Any]]) -> tuple[list[str], list[list[str]]]:
    """(header, rows) of the comparison table: one row per tokenizer, one column per metric."""
    header = ["tokenizer", "kind", "vocab", *METRICS]
    rows = []
    for name, m in results.items():
        rows.append([name, str(m.get("kind", "")), str(m.get("vocab_size", ""))]
                    + [f"{m[k]:.4f}" if isinstance(m.get(k), float) else str(m.get(k, "")) for k in METRICS])
    return header, rows


def format_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A plain-text table (for logs and RESULTS files)."""
    widths = [max(len(str(c)) for c in col) for col in zip(header, *rows)]
    line = lambda cells: "| " + " | ".join(str(c).ljust(w) for c, w in zip(cells, widths)) + " |"  # noqa: E731
    return "\n".join([line(header), "|" + "|".join("-" * (w + 2) for w in widths) + "|", *map(line, rows)])
