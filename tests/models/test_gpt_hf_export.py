"""A GPT exported for transformers (models/gpt/hf.py): ``AutoModelForCausalLM.from_pretrained`` gives a
GPT2LMHeadModel with our logits and our greedy text, ``AutoTokenizer`` knows the special tokens and encodes as we
do, and the variants GPT-2 cannot express (or a used target folder) are refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from corpusforge.models.gpt.config import GPTConfig
from corpusforge.models.gpt.hf import ExportRefused, export_hf
from corpusforge.models.gpt.model import GPT
from corpusforge.models.sampling import generate
from corpusforge.models.tokenization import make_tokenizer
from corpusforge.models.zoo import save_model
from tests.conftest import REPO

transformers = pytest.importorskip("transformers")

SAMPLE = REPO / "data" / "sample" / "tinyshakespeare.txt"
SENTENCE = "First Citizen: we are accounted poor citizens, the patricians good."
ROLES = {"pad": "<pad>", "bos": "<s>", "eos": "</s>"}


@pytest.fixture(scope="module")
def lines() -> list[str]:
    return SAMPLE.read_text(encoding="utf-8").splitlines()[:1500]


def trained_tokenizer(kind: str, lines: list[str], directory: Path, roles=None):
    tok = make_tokenizer(kind, **({"roles": roles} if roles else {}))
    if kind == "classic-bpe":
        tok.train(lines, merges=150)
    elif kind in ("word", "char"):
        tok.train(lines)
    else:
        tok.train(lines, vocab_size=400)
    tok.save(directory)
    return tok


@pytest.fixture(scope="module")
def byte_tok(lines, tmp_path_factory):
    d = tmp_path_factory.mktemp("tok")
    return trained_tokenizer("byte-bpe", lines, d), d


def saved_gpt(directory: Path, vocab_size: int, seed: int = 0, scale: float | None = None, **cfg) -> GPT:
    torch.manual_seed(seed)
    model = GPT(GPTConfig(**{"vocab_size": vocab_size, "block_size": 64, "n_layer": 2, "n_head": 2, "n_embd": 32,
                             **cfg}))
    if scale is not None:  # larger weights: clear argmax margins for the greedy comparison
        with torch.no_grad():
            for p in model.parameters():
                p.normal_(0.0, scale)
    save_model(model, directory)
    return model.eval()


def load_hf(out: Path):
    model = transformers.AutoModelForCausalLM.from_pretrained(out)
    return model.eval()


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("tie", [True, False])
def test_logits_match_ours(bias, tie, byte_tok, tmp_path):
    tok, tok_dir = byte_tok
    ours = saved_gpt(tmp_path / "m", tok.vocab_size, bias=bias, tie_weights=tie, dropout=0.1)
    summary = export_hf(tmp_path / "m", tmp_path / "hf", tokenizer_dir=tok_dir)
    assert summary["architecture"] == "GPT2LMHeadModel" and summary["family"] == "gpt"
    assert {"config.json", "model.safetensors", "generation_config.json", "tokenizer.json",
            "tokenizer_config.json"} <= set(summary["files"])
    hf = load_hf(tmp_path / "hf")
    assert type(hf).__name__ == "GPT2LMHeadModel"
    config = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert config["activation_function"] == "gelu" and config["tie_word_embeddings"] is tie
    assert config["resid_pdrop"] == config["embd_pdrop"] == config["attn_pdrop"] == 0.1
    assert (hf.lm_head.weight.data_ptr() == hf.transformer.wte.weight.data_ptr()) is tie
    x = torch.randint(0, tok.vocab_size, (3, 40), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        theirs = hf(input_ids=x).logits
        mine = ours(x)[0]
    assert theirs.dtype == torch.float32
    torch.testing.assert_close(theirs, mine, atol=1e-4, rtol=0)
    # through the exported tokenizer's own output (no token_type_ids handed to GPT2Model)
    at = transformers.AutoTokenizer.from_pretrained(tmp_path / "hf")
    enc = at([SENTENCE], return_tensors="pt")
    assert "token_type_ids" not in enc
    with torch.no_grad():
        torch.testing.assert_close(hf(**enc).logits, ours(enc["input_ids"])[0], atol=1e-4, rtol=0)


def test_greedy_text_matches_ours(byte_tok, tmp_path):
    tok, tok_dir = byte_tok
    ours = saved_gpt(tmp_path / "m", tok.vocab_size, seed=3, scale=0.3, bias=True)
    export_hf(tmp_path / "m", tmp_path / "hf", tokenizer_dir=tok_dir)
    hf = load_hf(tmp_path / "hf")
    at = transformers.AutoTokenizer.from_pretrained(tmp_path / "hf")
    prompt = tok.encode("First Citizen:")
    mine = generate(ours, prompt, 20, greedy=True, stop_id=tok.eot_id)
    with torch.no_grad():
        theirs = hf.generate(torch.tensor([prompt]), attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
                             do_sample=False, max_new_tokens=20)[0, len(prompt):].tolist()
    assert len(mine) == 20 and theirs == mine
    assert at.decode(theirs, skip_special_tokens=True) == tok.decode(mine)


@pytest.mark.parametrize("kind, roles", [("byte-bpe", None), ("bpe", ROLES), ("classic-bpe", None),
                                         ("wordpiece", ROLES), ("char", None)])
def test_tokenizer_knows_its_tokens_and_encodes_as_ours(kind, roles, lines, tmp_path):
    tok = trained_tokenizer(kind, lines, tmp_path / "tok", roles)
    saved_gpt(tmp_path / "m", tok.vocab_size)
    summary = export_hf(tmp_path / "m", tmp_path / "hf", tokenizer_dir=tmp_path / "tok")
    at = transformers.AutoTokenizer.from_pretrained(tmp_path / "hf")
    eot = tok.eot_token
    want = {"bos": (roles or {}).get("bos", eot), "eos": (roles or {}).get("eos", eot),
            "pad": (roles or {}).get("pad", (roles or {}).get("eos", eot)),
            "unk": tok.unk_token if tok.role_tokens.get("unk") else eot}
    for role, token in want.items():
        assert getattr(at, f"{role}_token") == token, role
        assert getattr(at, f"{role}_token_id") == tok.token_to_id(token), role
        assert summary["tokens"][role] == {"token": token, "id": tok.token_to_id(token)}
    assert len(at) == len(at.get_vocab())  # naming the roles added no token
    mapped = {r for r in ("bos", "eos", "pad", "unk")
              if r not in (roles or {}) and not (r == "unk" and tok.role_tokens.get("unk"))}
    assert {n.split("_token")[0] for n in summary["notes"] if n.split(":")[0].endswith("_token")} == mapped
    assert at(SENTENCE, add_special_tokens=False)["input_ids"] == tok.encode(SENTENCE)
    assert at(SENTENCE)["input_ids"] == tok.encode(SENTENCE, add_special_tokens=True)
    ids = tok.encode(SENTENCE)
    assert at.decode(ids, skip_special_tokens=True) == tok.decode(ids)
    config = json.loads((tmp_path / "hf" / "config.json").read_text())
    generation = json.loads((tmp_path / "hf" / "generation_config.json").read_text())
    assert config["eos_token_id"] == generation["eos_token_id"] == tok.eot_id  # where our generate stops
    assert config["pad_token_id"] == generation["pad_token_id"] == tok.token_to_id(want["pad"])


@pytest.mark.parametrize("field, value", [("positional", "rope"), ("positional", "alibi"),
                                          ("positional", "sinusoidal"), ("norm", "post"), ("activation", "relu")])
def test_variants_gpt2_cannot_express_are_refused(field, value, byte_tok, tmp_path):
    tok, tok_dir = byte_tok
    saved_gpt(tmp_path / "m", tok.vocab_size, **{field: value})
    with pytest.raises(ExportRefused, match=rf"^cannot export to GPT2LMHeadModel: {field}: {value}") as info:
        export_hf(tmp_path / "m", tmp_path / "hf", tokenizer_dir=tok_dir)
    assert "\n" not in str(info.value)
    assert not (tmp_path / "hf").exists()


def test_a_used_out_dir_is_refused_an_empty_one_taken(byte_tok, tmp_path):
    tok, tok_dir = byte_tok
    saved_gpt(tmp_path / "m", tok.vocab_size)
    used = tmp_path / "used"
    used.mkdir()
    (used / "keep.txt").write_text("mine")
    with pytest.raises(ExportRefused, match="not an empty folder"):
        export_hf(tmp_path / "m", used, tokenizer_dir=tok_dir)
    assert sorted(p.name for p in used.iterdir()) == ["keep.txt"]
    empty = tmp_path / "empty"
    empty.mkdir()
    assert "model.safetensors" in export_hf(tmp_path / "m", empty, tokenizer_dir=tok_dir)["files"]


def test_the_tokenizer_config_json_records_is_found(byte_tok, tmp_path):
    """Without tokenizer_dir: the store-relative path config.json records (``tokenizer/<dir>``)."""
    import shutil

    tok, tok_dir = byte_tok
    store = tmp_path / "store"
    shutil.copytree(tok_dir, store / "tokenizer" / "t1")
    model_dir = store / "lm" / "m1"
    saved_gpt(model_dir, tok.vocab_size)
    spec = json.loads((model_dir / "config.json").read_text())
    spec["tokenizer"] = {"path": "tokenizer/t1", "id": "x"}
    (model_dir / "config.json").write_text(json.dumps(spec))
    assert export_hf(model_dir, tmp_path / "hf")["tokens"]["eos"]["token"] == "<|endoftext|>"
    spec["tokenizer"] = {"path": "tokenizer/gone"}
    (model_dir / "config.json").write_text(json.dumps(spec))
    with pytest.raises(ExportRefused, match="tokenizer/gone"):
        export_hf(model_dir, tmp_path / "hf2")
