"""The tokenizer stage with roles and named fields (issue 31 items 3 and 4): the tokenizer artifact declares its
roles (tokenizer_config.json for transformers, role ids in its meta and manifest), the encode artifact's meta.json
gives ``special_ids`` for models to derive pad/mask ids from, a named-field corpus is trained on all its fields and
encoded into ``<field>_ids`` columns with labels passed through, and configs without any of it keep their ids."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from corpusforge.storage.hashing import artifact_id
from corpusforge.storage.store import ArtifactStore, read_manifest
from corpusforge.tasks.config import ConfigError, identity
from corpusforge.tasks.step import run_step
from corpusforge.tasks.tokenizer.encode import ENCODE_STEP, ENCODE_VERSION, build_encode
from corpusforge.tasks.tokenizer.config import identity_config, tokenizer_config_from_dict
from corpusforge.tasks.tokenizer.train import TOKENIZER_STEP, TOKENIZER_VERSION, build_tokenizer
from tests.tasks.tokenizer.test_tokenizer import make_corpus, split_texts

BERT = {"pad": "[PAD]", "cls": "[CLS]", "sep": "[SEP]", "mask": "[MASK]"}
PAIRS = {  # a named-field corpus as the corpus stage writes it: one column per field, a label passed along
    "train": [("der hund schläft", "the dog sleeps", 1), ("die katze isst", "the cat eats", 0),
              ("der vogel singt", "the bird sings", 1), ("ein hund bellt", "a dog barks", 0)],
    "valid": [("die katze schläft", "the cat sleeps", 1), ("ein vogel isst", "a bird eats", 0)],
    "test": [("der hund singt", "the dog sings", 1)],
}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return make_corpus(tmp_path_factory.mktemp("roles"))


@pytest.fixture
def pairs(tmp_path):
    """A corpus artifact with the columns doc_id, de, en, label (written directly: what encode reads)."""
    store = ArtifactStore(tmp_path / "store")

    def build(out: Path):
        for split, rows in PAIRS.items():
            pl.DataFrame({"doc_id": [f"{split}-{i}" for i in range(len(rows))], "de": [r[0] for r in rows],
                          "en": [r[1] for r in rows], "label": pl.Series([r[2] for r in rows], dtype=pl.Int8)}
                         ).write_parquet(out / f"{split}.parquet")
        return {}

    result = run_step(store, step="corpus", version=1, name="pairs", config={"fields": ["de", "en"]}, inputs=[],
                      build=build)
    return result, store


def test_roles_reach_the_tokenizer_artifact_and_the_encode_meta(corpus):
    from transformers import AutoTokenizer

    result, store = corpus
    cfg = tokenizer_config_from_dict({"name": "bert-ish", "kind": "wordpiece", "vocab_size": 300, "roles": BERT})
    tok = build_tokenizer(result, cfg, store)
    hf = AutoTokenizer.from_pretrained(tok.path)
    assert (hf.pad_token, hf.cls_token, hf.sep_token, hf.mask_token) == ("[PAD]", "[CLS]", "[SEP]", "[MASK]")
    manifest = read_manifest(Path(tok.path))
    want = {"unk": hf.unk_token_id, "eot": hf.convert_tokens_to_ids("<|endoftext|>"), "pad": hf.pad_token_id,
            "cls": hf.cls_token_id, "sep": hf.sep_token_id, "mask": hf.mask_token_id}
    assert manifest["roles"] == want
    meta = json.loads((Path(tok.path) / "tokenizer_meta.json").read_text())
    assert {r: v["id"] for r, v in meta["roles"].items()} == want
    enc = build_encode(result, tok, cfg, store)
    emeta = json.loads((Path(enc.path) / "meta.json").read_text())
    assert emeta["special_ids"] == want and max(want.values()) < emeta["vocab_size"]
    # the default encoding is unchanged by roles: no template, eot after each document
    texts = split_texts(result.path, "valid")
    got = list(map(int, np.memmap(Path(enc.path) / "valid.bin", dtype=emeta["dtype"], mode="r")))
    assert got == [i for t in texts for i in (*hf(t, add_special_tokens=False)["input_ids"], want["eot"])]


def test_wordpiece_has_berts_tokens_unless_its_section_names_others(corpus):
    """Issue 50, item 11: `tokenizer train --kind wordpiece` gave <unk> and <|endoftext|> only. A WordPiece section
    without unk_token and roles now gets [UNK] and [PAD] [CLS] [SEP] [MASK] as the pad, cls, sep and mask roles
    (the same tokenizer, id included, as the section that names them); named tokens win."""
    from transformers import AutoTokenizer

    result, store = corpus
    plain = tokenizer_config_from_dict({"name": "wp", "kind": "wordpiece", "vocab_size": 300})
    assert plain.unk_token == "[UNK]" and plain.roles == BERT
    named = tokenizer_config_from_dict({"name": "wp", "kind": "wordpiece", "vocab_size": 300, "unk_token": "[UNK]",
                                        "roles": BERT})
    tok = build_tokenizer(result, plain, store)
    assert build_tokenizer(result, named, store).id == tok.id
    hf = AutoTokenizer.from_pretrained(tok.path)
    assert (hf.unk_token, hf.pad_token, hf.cls_token, hf.sep_token, hf.mask_token) == (
        "[UNK]", "[PAD]", "[CLS]", "[SEP]", "[MASK]")
    assert hf("the dog", add_special_tokens=True)["input_ids"][0] == hf.cls_token_id
    own = tokenizer_config_from_dict({"kind": "wordpiece", "unk_token": "<?>", "roles": {"pad": "<pad>"}})
    assert own.unk_token == "<?>" and own.roles == {"pad": "<pad>"}
    assert tokenizer_config_from_dict({"kind": "bpe"}).roles == {}  # other kinds: as before


def test_add_special_tokens_wraps_each_document_before_the_eot(corpus):
    from corpusforge.models.tokenization import load_tokenizer

    result, store = corpus
    cfg = tokenizer_config_from_dict({"name": "bos-eos", "kind": "byte-bpe", "vocab_size": 300,
                                      "roles": {"bos": "<s>", "eos": "</s>", "pad": "<pad>"},
                                      "add_special_tokens": True})
    tok = build_tokenizer(result, cfg, store)
    loaded = load_tokenizer(tok.path)
    bos, eos, eot = loaded.token_to_id("<s>"), loaded.token_to_id("</s>"), loaded.eot_id
    enc = build_encode(result, tok, cfg, store)
    emeta = json.loads((Path(enc.path) / "meta.json").read_text())
    texts = split_texts(result.path, "test")
    got = list(map(int, np.memmap(Path(enc.path) / "test.bin", dtype=emeta["dtype"], mode="r")))
    assert got == [i for t in texts for i in (bos, *loaded.encode(t), eos, eot)]
    assert emeta["add_special_tokens"] is True and emeta["special_ids"]["pad"] == loaded.token_to_id("<pad>")
    # the template is part of the encode id, not of the tokenizer's
    plain = tokenizer_config_from_dict({**cfg_dict(cfg), "add_special_tokens": False})
    assert build_tokenizer(result, plain, store).id == tok.id
    assert build_encode(result, tok, plain, store).id != enc.id


def cfg_dict(cfg) -> dict:
    from corpusforge.tasks.config import to_dict

    return to_dict(cfg)


def test_named_fields_train_together_and_encode_into_field_ids_columns(pairs):
    from corpusforge.models.tokenization import load_tokenizer
    from corpusforge.storage.records import ids_column

    result, store = pairs
    cfg = tokenizer_config_from_dict({"name": "de-en", "kind": "word", "vocab_size": 100, "format": "parquet",
                                      "fields": ["de", "en"], "labels": ["label"], "roles": BERT,
                                      "add_special_tokens": True, "pre_tokenizer": "whitespace_split"})
    tok_result = build_tokenizer(result, cfg, store)
    tok = load_tokenizer(tok_result.path)
    for word in ("hund", "dog", "katze", "cat"):  # both fields' words are in the one vocabulary
        assert tok.token_to_id(word) is not None, word
    assert read_manifest(Path(tok_result.path))["metrics"]["train_docs"] == 8  # 4 records x 2 fields
    enc = build_encode(result, tok_result, cfg, store)
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    for split, rows in PAIRS.items():
        frame = pl.read_parquet(Path(enc.path) / f"{split}.parquet")
        assert frame.columns == ["doc_id", ids_column("de"), ids_column("en"), "label"] == \
            ["doc_id", "de_ids", "en_ids", "label"]
        assert frame["de_ids"].to_list() == [[cls, *tok.encode(r[0]), sep] for r in rows]
        assert frame["en_ids"].to_list() == [[cls, *tok.encode(r[1]), sep] for r in rows]
        assert frame["label"].to_list() == [r[2] for r in rows] and frame["label"].dtype == pl.Int8
        assert frame["doc_id"].to_list() == [f"{split}-{i}" for i in range(len(rows))]
    meta = json.loads((Path(enc.path) / "meta.json").read_text())
    assert meta["fields"] == {"de": "de_ids", "en": "en_ids"} and meta["labels"] == ["label"]
    assert meta["documents"]["train"] == 4 and meta["special_ids"]["pad"] == tok.token_to_id("[PAD]")
    n_valid = sum(len(tok.encode(t)) + 2 for r in PAIRS["valid"] for t in r[:2])
    assert meta["tokens"]["valid"] == n_valid == sum(meta["field_tokens"]["valid"].values())


def test_a_named_field_the_corpus_lacks_is_one_error_naming_it(pairs):
    result, store = pairs
    cfg = tokenizer_config_from_dict({"kind": "word", "format": "parquet", "fields": ["de", "fr"]})
    with pytest.raises(ValueError, match=r"no column 'fr'.*doc_id, de, en, label"):
        build_tokenizer(result, cfg, store)
    ok = tokenizer_config_from_dict({"kind": "word", "format": "parquet", "fields": ["de", "en"],
                                     "labels": ["score"]})
    tok = build_tokenizer(result, ok, store)
    with pytest.raises(ValueError, match="no column 'score'"):
        build_encode(result, tok, ok, store)


@pytest.mark.parametrize("data, field", [
    ({"roles": {"unk": "[UNK]"}}, "roles.unk: .* unk_token"),
    ({"roles": {"padding": "[PAD]"}}, "roles.padding: not a role; use pad, bos, eos, cls, sep, mask"),
    ({"roles": {"cls": "[C LS]"}}, "roles.cls: .* cannot stand in a template"),
    ({"add_special_tokens": True}, "add_special_tokens: needs a template role"),
    ({"add_special_tokens": True, "roles": {"pad": "[PAD]"}}, "add_special_tokens: needs a template role"),
    ({"fields": ["src", "tgt"]}, "fields/labels: need format parquet"),
    ({"labels": ["label"], "format": "parquet", "fields": ["label"]}, "labels: a column cannot be both"),
    ({"fields": ["src", "src"], "format": "parquet"}, "fields: column names must be non-empty and distinct"),
])
def test_config_errors_name_the_field(data, field):
    with pytest.raises((ConfigError, ValueError), match=field):
        tokenizer_config_from_dict(data)


# The ids the code before roles and fields (commit 2b4654c) gave these configs on an input id of "0" * 64: every
# preset's tokenizer and encode artifacts keep their ids (and bytes: models/test_tokenizer_roles.py).
BEFORE = {
    "demo": ({"kind": "byte-bpe", "vocab_size": 512},
             "9f3d2254eaf2fde90d25c571c256648b266d3def15b605408b6f4f77e899d879",
             "88326e6e41d7a07afb2093c04390fa74d9c1308f734fb42124d217a78031d71f"),
    "ptb": ({"kind": "word", "vocab_size": 10010, "eot_token": "<eos>", "pre_tokenizer": "whitespace_split"},
            "ff9192115c6fd578394a29ca4e72f6f98086502ec29259005e9c97c8ae1822db",
            "88326e6e41d7a07afb2093c04390fa74d9c1308f734fb42124d217a78031d71f"),
    "parquet": ({"kind": "char", "vocab_size": 256, "format": "parquet"},
                "77aa28998d5f5b6e0deebfa66b2a3584bb65da30748f2d79ef2672a5c32babf2",
                "92c7a67cf89a3d9dad4f0593d9140f8138fccaa5f3b17fde25faa18c9eccd11e"),
}


@pytest.mark.parametrize("name", sorted(BEFORE))
def test_configs_without_roles_or_fields_keep_their_ids(name):
    data, tokenizer_id, encode_id = BEFORE[name]
    cfg = tokenizer_config_from_dict(data)
    assert artifact_id(TOKENIZER_STEP, TOKENIZER_VERSION, identity_config(cfg), ["0" * 64]) == tokenizer_id
    assert artifact_id(ENCODE_STEP, ENCODE_VERSION, identity(cfg, "encode"), ["0" * 64, "1" * 64]) == encode_id
