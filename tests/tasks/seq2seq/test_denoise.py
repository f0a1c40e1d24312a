"""BART-style denoising pre-training in the seq2seq stage (issue 47, item 3): the corruption itself (text infilling
and sentence permutation, checked property by property), the stage's ``task: denoise`` on plain text (the mask role
added to the tokenizer, the tokens it read counted, nothing registered), and fine-tuning a summarizer from it with
``seq2seq.init`` (its weights, shape and tokenizer)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from corpusforge.models.objectives.seq2seq import corrupt
from corpusforge.storage.store import ArtifactStore, read_manifest
from corpusforge.tasks.seq2seq.build import build_seq2seq
from tests.tasks.seq2seq.pairs_fixtures import encoded
from tests.tasks.seq2seq.test_summarize import pipeline_cfg, section

MASK = 3


def test_infilling_hides_the_ratio_in_separate_spans_each_one_mask():
    doc = [list(range(100, 140)), list(range(200, 240)), list(range(300, 320))]
    n = sum(len(s) for s in doc)
    for seed in range(20):
        out = corrupt(doc, torch.Generator().manual_seed(seed), MASK, 0.3, 3.0, permute_sentences=False)
        kept = [t for t in out if t != MASK]
        assert kept == [t for t in sum(doc, []) if t in set(kept)]  # order kept, nothing invented
        assert n - len(kept) == round(0.3 * n)  # exactly the ratio hidden
        assert all(not (a == b == MASK) for a, b in zip(out, out[1:]))  # spans apart: no two masks side by side
        assert out.count(MASK) >= 1
    same = [corrupt(doc, torch.Generator().manual_seed(7), MASK) for _ in range(2)]
    assert same[0] == same[1]  # the generator alone draws the noise


def test_permutation_shuffles_whole_sentences_and_the_cut_comes_first():
    doc = [[10 + i] * 4 for i in range(6)]
    orders = set()
    for seed in range(30):
        out = corrupt(doc, torch.Generator().manual_seed(seed), MASK, 0.0, 3.0, permute_sentences=True)
        assert sorted(out) == sorted(sum(doc, []))  # ratio 0: the same tokens, sentences moved whole
        orders.add(tuple(out[::4]))
        assert all(len(set(out[i: i + 4])) == 1 for i in range(0, len(out), 4))
    assert len(orders) > 10
    cut = corrupt(doc, torch.Generator().manual_seed(0), MASK, 0.5, 3.0, permute_sentences=False, cut=10)
    assert len([t for t in cut if t != MASK]) == 5  # half of the 10 tokens the encoder reads


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("denoise")
    denoise = section(task="denoise", objective={"kind": "denoising", "mask_ratio": 0.3},
                      name="digits-bart", train={**section()["train"], "max_iters": 120})
    denoise.pop("max_target_len")
    cfg, files = pipeline_cfg(tmp / "data", {**denoise, "max_source_len": 12})
    store = ArtifactStore(tmp / "store")
    evaluation, model = build_seq2seq(encoded(cfg, store), cfg.seq2seq, store)
    return {"tmp": tmp, "store": store, "cfg": cfg, "model": model, "evaluation": evaluation}


def test_a_denoise_config_needs_its_objective_and_adds_the_mask_role():
    from corpusforge.pipeline_config import pipeline_config_from_dict
    from corpusforge.tasks.seq2seq.config import seq2seq_config_from_dict

    with pytest.raises(ValueError, match="denoising"):
        seq2seq_config_from_dict({"task": "denoise"})
    with pytest.raises(ValueError, match="denoising"):
        seq2seq_config_from_dict({"objective": {"kind": "denoising"}})
    cfg = pipeline_config_from_dict({"name": "p", "corpus": {"name": "c", "sources": ["x.txt"]},
                                     "tokenizer": {"name": "t", "kind": "word", "vocab_size": 50},
                                     "seq2seq": {"task": "denoise", "source": "text",
                                                 "objective": {"kind": "denoising"}}})
    assert cfg.tokenizer.roles["mask"] == "<mask>" and cfg.tokenizer.fields == ("text",)


@pytest.mark.learns
def test_denoise_pretrains_on_text_counts_its_tokens_and_is_not_served(pretrained):
    model, evaluation = pretrained["model"], pretrained["evaluation"]
    m = read_manifest(Path(model.path))["metrics"]
    # 120 steps of up to 32 texts of 9 digits each
    assert m["tokens_seen"] % 9 == 0 and 120 * 16 * 9 <= m["tokens_seen"] <= 120 * 32 * 9, m["tokens_seen"]
    assert m["documents_train"] == 600 and m["tokens_train"] == 600 * 9
    assert m["val_loss"] < 2.0, m  # below ln(10) = 2.30, a model that could not even copy the digits it reads
    spec = json.loads((Path(model.path) / "config.json").read_text())
    assert spec["translation"]["task"] == "denoise" and spec["objective"]["kind"] == "denoising"
    samples = json.loads((Path(evaluation.path) / "samples.json").read_text())["denoise"]
    assert samples and all("<mask>" in row["corrupted"] for row in samples)
    from corpusforge.tasks.seq2seq.register import translates

    assert not translates(Path(model.path))  # a starting point, not a model to serve


@pytest.mark.learns
def test_a_summarizer_starts_from_the_pretrained_model(pretrained):
    tmp, store = pretrained["tmp"], pretrained["store"]
    init = pretrained["model"].id[:12]
    cfg, _ = pipeline_cfg(tmp / "data2", section(init=init, train={**section()["train"], "max_iters": 30}))
    scratch_cfg, _ = pipeline_cfg(tmp / "data2", section(train={**section()["train"], "max_iters": 30}))
    upstream = encoded(cfg, store)
    evaluation, model = build_seq2seq(upstream, cfg.seq2seq, store)
    spec = json.loads((Path(model.path) / "config.json").read_text())
    started = spec["started_from"]["init"]
    assert started["id"] == pretrained["model"].id and started["task"] == "denoise"
    assert started["loaded"] > 0 and not started.get("missing") and not started.get("mismatched")
    manifest = read_manifest(Path(model.path))
    assert pretrained["model"].id in [i["id"] for i in manifest["inputs"]]  # the checkpoint is an input of its id
    _, scratch = build_seq2seq(encoded(scratch_cfg, store), scratch_cfg.seq2seq, store)
    assert scratch.id != model.id
    # the run's tokenizer (no mask role) is not the checkpoint's: the pairs were read with the checkpoint's, so the
    # model's embeddings and its vocabulary agree
    assert any("checkpoint's tokenizer" in w for w in read_manifest(Path(model.path)).get("warnings") or [])
    assert spec["tokenizer"]["id"] == json.loads((Path(pretrained["model"].path) / "config.json").read_text())[
        "tokenizer"]["id"]
    # every weight came from the checkpoint (none fresh), then training moved them
    from safetensors.torch import load_file

    before = load_file(str(Path(pretrained["model"].path) / "model.safetensors"))
    after = load_file(str(Path(model.path) / "model.safetensors"))
    assert started["loaded"] == len(before) == len(after)
    assert any(not torch.equal(before[k], after[k]) for k in before)
    assert read_manifest(Path(evaluation.path))["metrics"]["rouge1"] >= 0.0  # it summarizes and is scored
