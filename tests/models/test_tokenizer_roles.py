"""Special tokens by role (issue 31 item 4): pad/bos/eos/cls/sep/mask saved with every kind, visible to
``tokenizers`` (added special tokens, the post-processor template) and to ``transformers`` (the folder loads with
AutoTokenizer / PreTrainedTokenizerFast, which knows each role), pair encoding with segment ids, and a tokenizer
without roles unchanged byte for byte."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from corpusforge.models.tokenization import KINDS, load_tokenizer, make_tokenizer
from tests.conftest import REPO

SAMPLE = REPO / "data" / "sample" / "tinyshakespeare.txt"
BERT_ROLES = {"pad": "[PAD]", "cls": "[CLS]", "sep": "[SEP]", "mask": "[MASK]", "bos": "<s>", "eos": "</s>"}


@pytest.fixture(scope="module")
def lines() -> list[str]:
    return SAMPLE.read_text(encoding="utf-8").splitlines()[:2000]


def trained(kind: str, lines: list[str], roles=None, **kw):
    tok = make_tokenizer(kind, **({"roles": roles} if roles else {}), **kw)
    if kind == "classic-bpe":
        tok.train(lines, merges=200)
    else:
        tok.train(lines, vocab_size=400)
    return tok


@pytest.mark.parametrize("kind", KINDS)
def test_transformers_loads_the_folder_and_knows_every_role(kind, lines, tmp_path):
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    tok = trained(kind, lines, BERT_ROLES, extra_special_tokens=("<x>",))
    tok.save(tmp_path)
    ids = {role: tok.token_to_id(t) for role, t in BERT_ROLES.items()}
    assert all(i is not None for i in ids.values()) and len(set(ids.values())) == 6
    for loader in (AutoTokenizer, PreTrainedTokenizerFast):
        hf = loader.from_pretrained(str(tmp_path))
        for role, token in BERT_ROLES.items():
            assert getattr(hf, f"{role}_token") == token, (loader, role)
            assert getattr(hf, f"{role}_token_id") == ids[role], (loader, role)
        if kind != "byte-bpe":
            assert hf.unk_token == "<unk>" and hf.unk_token_id == tok.unk_id
        # eot and the extra token are special too (skipped on decode), never split
        assert {"<|endoftext|>", "<x>"} <= set(hf.all_special_tokens)
        text = "First Citizen: we are accounted poor citizens."
        assert hf(text, add_special_tokens=False)["input_ids"] == tok.encode(text)
    # the roles are in our own metadata too: role -> token -> id
    meta = json.loads((tmp_path / "tokenizer_meta.json").read_text())
    assert {r: (v["token"], v["id"]) for r, v in meta["roles"].items() if r in BERT_ROLES} == \
        {r: (BERT_ROLES[r], ids[r]) for r in BERT_ROLES}
    assert meta["roles"]["eot"] == {"token": "<|endoftext|>", "id": tok.eot_id}
    loaded = load_tokenizer(tmp_path)
    assert loaded.role_ids == tok.role_ids and loaded.role_ids["mask"] == ids["mask"]


@pytest.mark.parametrize("kind", ["wordpiece", "word", "classic-bpe"])
def test_a_pair_gets_cls_sep_and_segment_ids(kind, lines, tmp_path):
    from transformers import AutoTokenizer

    tok = trained(kind, lines, {"pad": "[PAD]", "cls": "[CLS]", "sep": "[SEP]", "mask": "[MASK]"})
    tok.save(tmp_path)
    a, b = "poor citizens", "the patricians good"
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    ea, eb = tok.encode(a), tok.encode(b)
    assert ea and eb and cls not in ea + eb
    # by hand: [CLS] a [SEP] b [SEP], segment 0 up to and with the first [SEP], 1 after
    want_ids = [cls, *ea, sep, *eb, sep]
    want_types = [0] * (len(ea) + 2) + [1] * (len(eb) + 1)
    assert tok.encode_pair(a, b) == (want_ids, want_types)
    assert tok.encode(a, add_special_tokens=True) == [cls, *ea, sep]
    assert tok.encode(a) == ea  # the default is unchanged: no template
    hf = AutoTokenizer.from_pretrained(str(tmp_path))
    enc = hf(a, b)
    assert enc["input_ids"] == want_ids and enc["token_type_ids"] == want_types
    assert hf(a)["input_ids"] == [cls, *ea, sep]
    # padding uses the pad role
    batch = hf([a, a + " " + b], padding=True)
    pad = tok.token_to_id("[PAD]")
    assert batch["input_ids"][0][-1] == pad and batch["attention_mask"][0][-1] == 0
    from tokenizers import Tokenizer

    raw = Tokenizer.from_file(str(tmp_path / "tokenizer.json")).encode(a, b)
    assert raw.ids == want_ids and raw.type_ids == want_types


@pytest.mark.parametrize("kind", ["byte-bpe", "classic-bpe"])
def test_bos_eos_template_for_single_sequences_and_pairs(kind, lines):
    tok = trained(kind, lines, {"bos": "<s>", "eos": "</s>", "pad": "<pad>"})
    bos, eos = tok.token_to_id("<s>"), tok.token_to_id("</s>")
    ea, eb = tok.encode("poor"), tok.encode("rich")
    assert tok.encode("poor", add_special_tokens=True) == [bos, *ea, eos]
    assert tok.encode_batch(["poor", "rich"], add_special_tokens=True) == [[bos, *ea, eos], [bos, *eb, eos]]
    assert tok.encode_pair("poor", "rich") == ([bos, *ea, eos, bos, *eb, eos],
                                               [0] * (len(ea) + 2) + [1] * (len(eb) + 2))


def test_role_ids_cover_unk_eot_and_configured_roles_only(lines):
    tok = trained("word", lines, {"mask": "[MASK]", "pad": "[PAD]"}, eot_token="<eos>")
    assert tok.role_ids == {"unk": tok.unk_id, "eot": tok.eot_id, "pad": tok.token_to_id("[PAD]"),
                            "mask": tok.token_to_id("[MASK]")}
    assert max(tok.role_ids.values()) < tok.vocab_size  # ids inside the vocabulary, none "one past" it
    # the specials keep their order: unk, eot, then the roles in role order, then the extras
    assert tok.special_token_list() == ["<unk>", "<eos>", "[PAD]", "[MASK]"]
    plain = trained("word", lines)
    assert plain.role_ids == {"unk": plain.unk_id, "eot": plain.eot_id}
    assert tok.encode_pair("a", "b") == (tok.encode("a") + tok.encode("b"), [0] * len(tok.encode("a"))
                                         + [1] * len(tok.encode("b")))  # no template: the two, typed 0 and 1


def test_a_role_may_share_the_eot_token(lines, tmp_path):
    # GPT-2's convention: one <|endoftext|> is eot, bos and eos at once; it stays one token with one id
    from transformers import AutoTokenizer

    tok = trained("byte-bpe", lines, {"bos": "<|endoftext|>", "eos": "<|endoftext|>", "pad": "<|endoftext|>"})
    assert tok.special_token_list() == ["<|endoftext|>"]
    assert tok.role_ids == {"eot": tok.eot_id, "pad": tok.eot_id, "bos": tok.eot_id, "eos": tok.eot_id}
    tok.save(tmp_path)
    hf = AutoTokenizer.from_pretrained(str(tmp_path))
    assert hf.eos_token == hf.bos_token == hf.pad_token == "<|endoftext|>" and hf.eos_token_id == tok.eot_id


@pytest.mark.parametrize("roles, message", [
    ({"unk": "[UNK]"}, "unk_token"),
    ({"eot": "<e>"}, "eot_token"),
    ({"padding": "[PAD]"}, "padding"),
    ({"cls": ""}, "cls"),
    ({"sep": "[S E P]"}, "sep"),
    ({"bos": "a:b"}, "bos"),
])
def test_bad_roles_are_refused_naming_the_role(roles, message):
    with pytest.raises(ValueError, match=message):
        make_tokenizer("word", roles=roles)


def _digests(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest()[:16] for p in sorted(folder.iterdir())}


# Digests of the files that the code before tokenizer roles (commit 2b4654c) saved for these trainings: a tokenizer
# without roles must keep writing exactly these bytes (the artifact ids of every preset assume it). WordPiece's and
# Unigram's tokenizer.json differ from run to run in tokenizers 0.23 (their trainers break ties in no fixed order),
# so for them the meta is pinned and the file list.
BEFORE_ROLES = {
    "byte-bpe": {"tokenizer.json": "5224df1311c301df", "tokenizer_meta.json": "1d06d57e91246595"},
    "word": {"tokenizer.json": "d2bcdec015058375", "tokenizer_meta.json": "8a26c0877acb69fa"},
    "classic-bpe": {"classic_bpe.json": "7c6637fe862224c9", "tokenizer.json": "762df83fd6ab08e8",
                    "tokenizer_meta.json": "b0fe6e7de82d5b0c"},
    "char": {"tokenizer.json": "278fec173c0889e8", "tokenizer_meta.json": "6e2d97159917a7b5"},
    "bpe": {"tokenizer.json": "2a816e203e7f7ad2", "tokenizer_meta.json": "ce13fa1962e38771"},
    "wordpiece": {"tokenizer.json": None, "tokenizer_meta.json": "8b27c155dd734c58"},
    "unigram": {"tokenizer.json": None, "tokenizer_meta.json": "034b596b7c47467e"},
}


@pytest.mark.parametrize("kind", sorted(BEFORE_ROLES))
def test_without_roles_the_saved_files_are_the_same_bytes_as_before(kind, lines, tmp_path):
    tok = trained(kind, lines[:800], extra_special_tokens=("<pad>",) if kind == "word" else ())
    tok.save(tmp_path)
    got = _digests(tmp_path)
    assert sorted(got) == sorted(BEFORE_ROLES[kind])  # no tokenizer_config.json
    assert {f: d for f, d in got.items() if BEFORE_ROLES[kind][f]} == \
        {f: d for f, d in BEFORE_ROLES[kind].items() if d}
