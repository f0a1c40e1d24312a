"""Named-field corpora through the tokenizer stage (issue 31, item 3, end to end): a pipeline YAML with line-aligned
files run by ``corpusforge run`` (real Prefect, GX) trains one vocabulary on both fields and encodes each into its
``<field>_ids`` column; a labelled corpus, encoded through the Python API, passes its int labels through."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

from tests.conftest import SHARED, write

pytestmark = pytest.mark.e2e
DE = ["Ein Hund läuft.", "Zwei Katzen schlafen.", "Ein Vogel singt.", "Der Hund schläft.", ""]
EN = ["A dog runs.", "Two cats sleep.", "A bird sings.", "The dog sleeps.", "Only English."]  # de is empty: filtered


def run_cli(args: list[str], api_url: str) -> dict:
    """`corpusforge ARGS` in this process (tests/commands.py: `run`'s console script is tested elsewhere)."""
    from tests.commands import corpusforge

    return corpusforge(*args, env={"PREFECT_API_URL": api_url}, code=0).json()


def test_corpusforge_run_encodes_line_aligned_pairs_into_field_ids(prefect_harness, tmp_path):
    from corpusforge.models.tokenization import load_tokenizer
    from corpusforge.storage.store import read_manifest

    write(tmp_path / "data" / "train.de", "\n".join(DE) + "\n")
    write(tmp_path / "data" / "train.en", "\n".join(EN) + "\n")
    config = write(tmp_path / "pairs.yaml", """\
name: pairs
corpus:
  name: de-en
  sources:
    - {fields: {de: data/train.de, en: data/train.en}}   # relative to this file
  reader: {fields: {src: de, tgt: en}}
  split: {valid: 0, test: 0}
runner: {kind: threads, workers: 1}
tracking: {enabled: false}
tokenizer:
  name: joint
  kind: word
  vocab_size: 100
  pre_tokenizer: whitespace_split
  format: parquet
  fields: [src, tgt]
  roles: {pad: "<pad>", bos: "<s>", eos: "</s>"}
  add_special_tokens: true
""")
    summary = run_cli(["run", str(config), "--store", str(tmp_path / "store"), "--json"], prefect_harness)
    steps = {s["step"]: s for s in summary["steps"]}
    corpus = read_manifest(Path(steps["corpus"]["path"]))
    acc = corpus["accounting"]
    assert (acc["records_read"], acc["kept"], acc["filtered"]) == (5, 4, {"empty": 1})
    encoded = Path(steps["encode"]["path"])
    frame = pl.read_parquet(encoded / "train.parquet")
    assert frame.columns == ["doc_id", "src_ids", "tgt_ids"] and frame.height == 4
    tok = load_tokenizer(steps["tokenizer"]["path"])
    bos, eos = tok.token_to_id("<s>"), tok.token_to_id("</s>")
    assert frame["src_ids"].to_list() == [[bos, *tok.encode(t), eos] for t in DE[:4]]
    assert frame["tgt_ids"].to_list() == [[bos, *tok.encode(t), eos] for t in EN[:4]]
    assert tok.token_to_id("Hund") is not None and tok.token_to_id("dog") is not None  # one vocabulary for both
    corpus_rows = pl.read_parquet(Path(steps["corpus"]["path"]) / "train.parquet")
    assert frame["doc_id"].to_list() == corpus_rows["doc_id"].to_list()
    meta = json.loads((encoded / "meta.json").read_text())
    assert meta["fields"] == {"src": "src_ids", "tgt": "tgt_ids"}


def test_a_labelled_corpus_encodes_with_its_int_labels(tmp_path):
    from corpusforge.storage.store import ArtifactStore
    from corpusforge.tasks.corpus.config import corpus_config_from_dict
    from corpusforge.tasks.corpus.merge import build_corpus, resolve_packs
    from corpusforge.tasks.corpus.shard import build_corpus_shard
    from corpusforge.tasks.tokenizer.config import tokenizer_config_from_dict
    from corpusforge.tasks.tokenizer.encode import build_encode
    from corpusforge.tasks.tokenizer.train import build_tokenizer

    # SST-2's layout: a header, a space before each tab, labels 0/1
    write(tmp_path / "train.tsv", "sentence\tlabel\na charming journey \t1\na dull ride \t0\na dull ride \t0\n"
                                  "charming and dull \t1\n")
    store = ArtifactStore(tmp_path / "store")
    cfg = corpus_config_from_dict({"name": "sst", "sources": [str(tmp_path / "train.tsv")],
                                   "reader": {"fields": {"text": "sentence"}, "labels": {"label": "label"}},
                                   "split": {"valid": 0, "test": 0}})
    corpus = build_corpus([build_corpus_shard(p, cfg, store) for p in resolve_packs(cfg)], cfg, store)
    tok_cfg = tokenizer_config_from_dict({"name": "sst", "kind": "word", "vocab_size": 50, "format": "parquet",
                                          "fields": ["text"], "labels": ["label"], "pre_tokenizer": "whitespace_split"})
    encoded = build_encode(corpus, build_tokenizer(corpus, tok_cfg, store), tok_cfg, store)
    frame = pl.read_parquet(Path(encoded.path) / "train.parquet")
    assert frame.columns == ["doc_id", "text_ids", "label"]
    assert frame.schema["label"] == pl.Int64 and frame["label"].to_list() == [1, 0, 1]


@pytest.mark.skipif(not (SHARED / "corpora" / "multi30k" / "val.de").is_file(), reason="needs ../shared/corpora")
def test_multi30k_val_pairs_read_whole(tmp_path):
    from corpusforge.storage.store import ArtifactStore, read_manifest
    from corpusforge.tasks.corpus.config import aligned_files, corpus_config_from_dict
    from corpusforge.tasks.corpus.merge import build_corpus, resolve_packs
    from corpusforge.tasks.corpus.shard import build_corpus_shard

    root = SHARED / "corpora" / "multi30k"
    cfg = corpus_config_from_dict({"name": "m30k", "sources": [aligned_files(root / "val.de", root / "val.en")]})
    store = ArtifactStore(tmp_path / "store")
    corpus = build_corpus([build_corpus_shard(p, cfg, store) for p in resolve_packs(cfg)], cfg, store)
    acc = read_manifest(Path(corpus.path))["accounting"]
    assert acc["records_read"] == 1014 == acc["kept"]  # DATA.md: 1,014 line-aligned pairs
