"""corpusforge.tasks.tokenizer.train + corpusforge.tasks.tokenizer.encode on a real corpus artifact: training on the train split, metrics,
nanoGPT-style shards checked against an independent encoding through ``tokenizers``, reuse, config errors."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from corpusforge.storage.store import ArtifactStore, read_manifest
from corpusforge.tasks.config import ConfigError
from corpusforge.tasks.corpus.config import corpus_config_from_dict
from corpusforge.tasks.corpus.merge import build_corpus, resolve_sources
from corpusforge.tasks.corpus.shard import build_corpus_shard
from corpusforge.tasks.tokenizer.encode import build_encode, dtype_for
from corpusforge.tasks.tokenizer.config import tokenizer_config_from_dict
from corpusforge.tasks.tokenizer.train import build_tokenizer
from tests.conftest import REPO, write

SAMPLE = REPO / "data" / "sample" / "tinyshakespeare.txt"


def make_corpus(root: Path, valid: float = 0.1, text: str | None = None):
    src = write(root / "src" / "shakespeare.txt", text if text is not None else
                "\n".join(SAMPLE.read_text(encoding="utf-8").splitlines()[:1500]) + "\n")
    cfg = corpus_config_from_dict({"name": "shk", "sources": [str(src)], "reader": {"txt_mode": "line"},
                                   "clean": {"preset": "raw"}, "dedup": {"exact": False},
                                   "split": {"valid": valid, "test": valid}, "validate": {"data_docs": False}})
    store = ArtifactStore(root / "store")
    shards = [build_corpus_shard(r, cfg, store) for r in resolve_sources(cfg)]
    return build_corpus(shards, cfg, store), store


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return make_corpus(tmp_path_factory.mktemp("tok"))


def split_texts(corpus_path: str, split: str) -> list[str]:
    return pl.read_parquet(Path(corpus_path) / f"{split}.parquet")["text"].to_list()


@pytest.mark.parametrize("kind", ["byte-bpe", "classic-bpe", "char"])
def test_tokenizer_and_encode_shards(corpus, kind):
    from tokenizers import Tokenizer

    result, store = corpus
    cfg = tokenizer_config_from_dict({"name": f"t-{kind}", "kind": kind, "vocab_size": 300})
    tok = build_tokenizer(result, cfg, store)
    manifest = read_manifest(Path(tok.path))
    assert manifest["inputs"][0]["id"] == result.id and manifest["eval_split"] == "valid"
    metrics = manifest["metrics"]
    assert metrics["train_docs"] == len(split_texts(result.path, "train"))
    assert metrics["eval_docs"] == len(split_texts(result.path, "valid"))
    assert 0 < metrics["vocab_used"] <= 1 and metrics["fertility"] > 0
    if kind in ("byte-bpe", "char"):
        assert metrics["roundtrip_exact"] == 1.0  # lossless kinds (raw preset keeps the text as read)
    meta = json.loads((Path(tok.path) / "tokenizer_meta.json").read_text())
    assert meta["kind"] == kind and meta["vocab_size"] <= 300

    enc = build_encode(result, tok, cfg, store)
    enc_manifest = read_manifest(Path(enc.path))
    assert [i["id"] for i in enc_manifest["inputs"]] == [result.id, tok.id]
    emeta = json.loads((Path(enc.path) / "meta.json").read_text())
    hf = Tokenizer.from_file(str(Path(tok.path) / "tokenizer.json"))
    eot = hf.token_to_id("<|endoftext|>")
    assert emeta["eot_id"] == eot and emeta["dtype"] == "uint16" and emeta["tokenizer_id"] == tok.id
    # recorded relative to the store (the same bytes in any store), resolving to the tokenizer artifact
    from corpusforge.storage.store import resolve_recorded

    assert not Path(emeta["tokenizer_path"]).is_absolute()
    assert resolve_recorded(emeta["tokenizer_path"], Path(enc.path)) == Path(tok.path).resolve()
    for split in ("train", "valid", "test"):
        texts = split_texts(result.path, split)
        expected = [i for t in texts for i in (*hf.encode(t, add_special_tokens=False).ids, eot)]
        got = np.memmap(Path(enc.path) / f"{split}.bin", dtype=emeta["dtype"], mode="r") if expected else []
        assert list(map(int, got)) == expected, split
        assert emeta["tokens"][split] == len(expected) and emeta["documents"][split] == len(texts)
    # same inputs -> same ids, nothing recomputed
    assert build_tokenizer(result, cfg, store).reused and build_encode(result, tok, cfg, store).reused


def test_classic_bpe_trace_files_and_train_fallback_for_eval(tmp_path):
    words = " ".join(["low"] * 5 + ["lower"] * 2 + ["newest"] * 6 + ["widest"] * 3 + ["highest"] * 2)
    result, store = make_corpus(tmp_path, valid=0.0, text=words + "\n")
    cfg = tokenizer_config_from_dict({"kind": "classic-bpe", "merges": 5, "trace": True, "workers": 1})
    tok = build_tokenizer(result, cfg, store)
    trace = json.loads((Path(tok.path) / "trace.json").read_text())
    assert [it["merge"] for it in trace["iterations"][1:]] == [["e", "s"], ["es", "t"], ["est", "</w>"],
                                                                 ["l", "o"], ["lo", "w"]]
    assert trace["initial_corpus"][0] == {"word": "l o w </w>", "count": 5}
    assert "Action: Merge ('e', 's')" in (Path(tok.path) / "trace.txt").read_text()
    assert read_manifest(Path(tok.path))["eval_split"] == "train"  # valid split is empty


def test_process_pool_encoding_equals_serial(tmp_path):
    from corpusforge.models.tokenization import load_tokenizer
    from corpusforge.tasks.tokenizer.encode import BATCH_DOCS, encode_documents

    lines = SAMPLE.read_text(encoding="utf-8").splitlines()[: BATCH_DOCS * 2 + 10]
    result, store = make_corpus(tmp_path, valid=0.0, text="\n".join(lines[:300]) + "\n")
    tok_result = build_tokenizer(result, tokenizer_config_from_dict({"kind": "classic-bpe", "merges": 50}), store)
    tok = load_tokenizer(tok_result.path)
    parallel = [ids for b in encode_documents(tok, tok_result.path, lines, workers=2) for ids in b]
    assert parallel == [tok.encode(t) for t in lines]


def test_parquet_format_holds_one_id_list_per_document(corpus):
    from corpusforge.models.tokenization import load_tokenizer

    result, store = corpus
    cfg = tokenizer_config_from_dict({"name": "pq", "kind": "wordpiece", "vocab_size": 300, "format": "parquet"})
    tok = build_tokenizer(result, cfg, store)
    enc = build_encode(result, tok, cfg, store)
    loaded = load_tokenizer(tok.path)
    frame = pl.read_parquet(Path(enc.path) / "valid.parquet")
    texts = split_texts(result.path, "valid")
    assert frame["ids"].to_list() == [loaded.encode(t) for t in texts]
    assert frame["doc_id"].to_list() == pl.read_parquet(Path(result.path) / "valid.parquet")["doc_id"].to_list()
    assert frame["ids"].dtype == pl.List(pl.UInt16)


def test_progress_callback_reports_merges():
    from corpusforge.models.tokenization.classic_bpe import count_words, learn_bpe

    seen = []
    counts = count_words([SAMPLE.read_text(encoding="utf-8")[:50000]])
    learn_bpe(counts, 250, on_progress=lambda done, total: seen.append((done, total)))
    assert seen == [(100, 250), (200, 250)]


def test_dtype_by_vocab_size():
    assert dtype_for(65535) == "uint16" and dtype_for(65536) == "uint32"


@pytest.mark.parametrize("data, field", [
    ({"kind": "bytes"}, "tokenizer.kind"),
    ({"kind": "bpe", "merges": 10}, "merges"),
    ({"kind": "byte-bpe", "trace": True}, "trace"),
    ({"kind": "classic-bpe", "pre_tokenizer": "bert"}, "pre_tokenizer"),
    ({"kind": "bpe", "normalizers": ["nfc", "upper"]}, "normalizers"),
    ({"vocab_size": 0}, "vocab_size"),
    ({"vocab_sise": 10}, "vocab_sise"),
])
def test_config_errors_name_the_field(data, field):
    with pytest.raises((ConfigError, ValueError), match=field):
        tokenizer_config_from_dict(data)
