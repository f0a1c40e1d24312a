"""The post_training stage through the real corpus, tokenizer and lm cores, on the bundled labelled reviews
(data/labelled, a rule labels them): a tiny GPT pre-trained on the review texts is fine-tuned as an instruction
follower ("Review: ...\\nSentiment:" -> " positive"/" negative"), with all weights and with LoRA adapters; the adapters
are their own small artifact naming their base, merge into plain weights that compute what the adapters did; DPO
from the SFT model raises the held-out preference accuracy without lowering the answer accuracy; continued
pre-training on new text starts from the parent."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from corpusforge.storage.store import ArtifactStore, read_manifest
from corpusforge.tasks.config import ConfigError
from corpusforge.tasks.post_training.build import build_merge, build_post_training
from corpusforge.tasks.post_training.config import post_training_config_from_dict

pytestmark = pytest.mark.learns  # the module's parent GPT and the SFT model are trained until they have learned

REVIEWS = Path(__file__).resolve().parents[3] / "data" / "labelled" / "reviews.tsv"
TRAIN = {"batch_size": 16, "lr": 3.0e-3, "min_lr": 3.0e-4, "warmup_iters": 10, "weight_decay": 0.0,
         "eval_interval": 100, "eval_iters": 5, "log_interval": 50, "cpu_threads": 1}
# The label hangs on one token's choice (" p" / " n") among the eight or so of " positive" + end: the model learns
# the fixed tokens at once and sits on the class prior (answer accuracy 0.425 or 0.575, ~0.69 nats per response)
# until it has learned to read the review; the parent's pre-training (600 steps, not 150) and lr 1e-3 (not 5e-3, at
# which it kept jumping between the two priors) make that take 300-500 steps on every seed and CPU tried (issue 52).
SFT = {"name": "reviews-sft", "method": "sft", "init": "lm", "prompt": "Review: {text}\nSentiment:",
       "response": " {label}", "eval_records": 160, "pack": False,
       "train": {**TRAIN, "max_iters": 800, "batch_size": 32, "lr": 1.0e-3, "min_lr": 1.0e-4, "eval_interval": 400}}


@pytest.fixture(scope="module")
def parent(tmp_path_factory):
    """The corpus (text + label), a byte-level BPE and a tiny GPT pre-trained on the review texts."""
    from corpusforge.pipeline_config import pipeline_config_from_dict
    from corpusforge.tasks.corpus.merge import build_corpus, resolve_packs
    from corpusforge.tasks.corpus.shard import build_corpus_shard
    from corpusforge.tasks.lm.train import build_lm
    from corpusforge.tasks.tokenizer.train import run_tokenizer_stage

    store = ArtifactStore(tmp_path_factory.mktemp("post") / "store")
    cfg = pipeline_config_from_dict({
        "name": "reviews",
        "corpus": {"name": "reviews", "sources": [str(REVIEWS)],
                   "reader": {"labels": {"label": {"column": "label", "type": "str"}}},
                   "split": {"valid": 0.1, "test": 0.0, "seed": 0}},
        "tokenizer": {"name": "bytes", "kind": "byte-bpe", "vocab_size": 320, "encode": True},
        "lm": {"name": "tiny", "family": "gpt", "sample": {"max_new_tokens": 0},
               "model": {"n_layer": 2, "n_head": 2, "n_embd": 64, "block_size": 64},
               "train": {**TRAIN, "max_iters": 600}},
        "post_training": SFT,
    })
    corpus = build_corpus([build_corpus_shard(p, cfg.corpus, store) for p in resolve_packs(cfg.corpus)], cfg.corpus,
                          store)
    enc = run_tokenizer_stage(corpus, cfg.tokenizer, store)[-1]
    lm = build_lm(enc, cfg.lm, store)[-1]
    return {"store": store, "corpus": corpus, "lm": lm}


def post(parent, section: dict, init=None, on_metrics=None):
    cfg = post_training_config_from_dict(section)
    return build_post_training(parent["corpus"], cfg, parent["store"], on_metrics=on_metrics,
                               refs={"init": init or parent["lm"]})


@pytest.fixture(scope="module")
def sft(parent):
    return post(parent, SFT)


def test_sft_learns_to_answer_with_the_parent_in_its_lineage(parent, sft):
    """Greedy answers right on >= 80% of 160 held-out prompts. Measured (issue 52, on 120 prompts) on an AMD EPYC
    (AVX2), one thread, for train seeds 0-6: 0.97, 1.00, 0.99, 0.93, 0.99, 1.00, 0.94; with
    ATEN_CPU_CAPABILITY=default (no SIMD kernels: other float sums) seeds 0, 1, 3: 1.00, 1.00, 0.92. The test's own
    seed passes with AVX2 and default kernels, one and two threads. Before the change (lr 5e-3, a parent of 150
    steps) seeds 0-2 gave 0.55, 0.59, 0.69 here and 0.8+ on other CPUs: the test passed by where a run left its
    plateau, not by what it learned.

    The figures agree with each other: ``val_exact_match`` (every response token the argmax under teacher forcing,
    on the same 160 prompts) is the greedy accuracy up to argmax ties, and ``val_response_nll`` (nats per whole
    response) is small only when the answers are right, while ``val_loss`` (nats per response token) is ~8 times
    smaller than it, because most of a response's tokens are fixed by the format."""
    manifest = read_manifest(Path(sft.path))
    m = manifest["metrics"]
    assert parent["lm"].id in {i["id"] for i in manifest["inputs"]}  # the start model is an input
    assert m["val_start_answer_accuracy"] <= 0.1  # the pre-trained model never saw the instruction
    assert m["val_answer_accuracy"] >= 0.8, m
    assert m["val_responses"] == 160 and abs(m["val_exact_match"] - m["val_answer_accuracy"]) <= 2 / 160, m
    per_response = m["val_loss"] * m["val_response_tokens"] / m["val_responses"]
    assert m["val_response_nll"] == pytest.approx(per_response, rel=1e-6)
    assert m["val_response_nll"] < 0.3  # a coin flip between the two answers would be ln 2 = 0.69
    assert m["trainable_params"] == m["total_params"]  # method sft without lora: every weight
    spec = json.loads((Path(sft.path) / "config.json").read_text())
    assert spec["post_training"]["template"]["prompt"] == SFT["prompt"]
    assert spec["post_training"]["init"]["id"] == parent["lm"].id
    answers = json.loads((Path(sft.path) / "answers.json").read_text())["valid"]
    assert answers["records"] == 160 and answers["accuracy"] == m["val_answer_accuracy"]
    assert all(row["prompt"].startswith("Review: ") for row in answers["examples"])
    # the same config and data again: the published artifact is reused
    assert post(parent, SFT).id == sft.id



def test_lm_generate_on_the_sft_model_stops_at_its_answer_as_the_registered_model_does(parent, sft, tmp_path):
    """Issue 50, item 7: `lm generate` on an SFT model ran past the answer (" positive\nPETRANUS: ...") while the
    served pyfunc stopped at the end token. The command now stops there too for a model trained on a template."""
    from corpusforge.tasks.encoded import model_tokenizer_dir
    from corpusforge.tasks.textgen import TextGenerator
    from tests.commands import corpusforge

    answers = json.loads((Path(sft.path) / "answers.json").read_text())["valid"]["examples"]
    right = [row for row in answers if row["answer"].strip() == row["gold"].strip()][:3]
    assert right, answers[:3]
    generator = None
    for row in right:
        said = corpusforge("lm", "generate", sft.id[:12], "--prompt", row["prompt"], "--greedy", "-n", "30",
                           "--json", "--store", parent["store"].root, code=0).json()
        assert said["text"].strip() == row["gold"].strip(), said  # the answer and nothing after it
        if generator is None:  # the registered model's loader on the same files (its data: lm/ and tokenizer/)
            (tmp_path / "lm").symlink_to(Path(sft.path))
            (tmp_path / "tokenizer").symlink_to(model_tokenizer_dir(Path(sft.path)))
            generator = TextGenerator(tmp_path)
        [served] = generator.predict([row["prompt"]], {"greedy": True, "max_new_tokens": 30, "template": False})
        assert served == said["text"], (served, said)  # the whole prompt sent: the same answer, the same end
        review = row["prompt"][len("Review: "):-len("\nSentiment:")]
        [filled] = generator.predict([review], {"greedy": True, "max_new_tokens": 30})  # the template filled
        assert filled == said["text"].strip(), (filled, said)


def test_lora_adapters_are_a_small_artifact_that_merges_into_the_same_model(parent, sft, monkeypatch):
    import copy

    from corpusforge.api import Artifact
    from corpusforge.tasks.post_training.inference import load_with_adapters

    section = {**SFT, "name": "reviews-lora", "lora": {"r": 4, "alpha": 8}, "eval_records": 20,
               "train": {**SFT["train"], "max_iters": 60, "lr": 1.0e-2}}
    copied, deepcopy = [], copy.deepcopy
    monkeypatch.setattr(copy, "deepcopy", lambda x, *a: (copied.append(type(x).__name__)
                                                          if isinstance(x, torch.nn.Module) else None) or deepcopy(x, *a))
    adapter = post(parent, section)
    monkeypatch.undo()
    assert copied == []  # no second copy of the model: the start model is the model before its adapters (issue 45)
    files = {p.name for p in Path(adapter.path).iterdir()}
    assert "adapter.safetensors" in files and "model.safetensors" not in files
    m = read_manifest(Path(adapter.path))["metrics"]
    assert m["trainable_params"] < 0.2 * m["total_params"]
    assert 0.0 <= m["val_start_answer_accuracy"] <= 1.0  # the start model's answers, read before the adapters
    spec = json.loads((Path(adapter.path) / "config.json").read_text())
    assert spec["base"]["id"] == parent["lm"].id and spec["lora"]["r"] == 4
    assert (Path(adapter.path) / "adapter.safetensors").stat().st_size < 0.2 * (
        Path(parent["lm"].path) / "model.safetensors").stat().st_size
    assert m["val_loss"] < 0.7 * m["val_start_loss"]  # the adapters learned the answer format
    merged = build_merge(adapter, parent["store"])
    assert merged.step == "lora_merge" and read_manifest(Path(merged.path))["inputs"][0]["id"] == adapter.id
    with_adapters, _ = load_with_adapters(Path(adapter.path))
    plain, tok = Artifact.from_dir(merged.path).load()
    ids = torch.tensor([tok.encode("Review: the plot was superb\nSentiment:")])
    with torch.no_grad():
        assert torch.allclose(with_adapters(ids)[0], plain(ids)[0], atol=1e-5)
        base, _ = Artifact.from_dir(parent["lm"].path).load()
        assert not torch.allclose(base(ids)[0], plain(ids)[0], atol=1e-3)  # the adapters changed the model
    assert build_merge(adapter, parent["store"]).id == merged.id  # merging again reuses


def test_dpo_from_sft_raises_preference_accuracy_and_keeps_the_answers(parent, sft):
    section = {**SFT, "name": "reviews-dpo", "method": "dpo", "rejected": None, "beta": 0.1,
               "train": {**SFT["train"], "max_iters": 60, "lr": 5.0e-5, "min_lr": 5.0e-6}}
    dpo = post(parent, section, init=sft)
    m = read_manifest(Path(dpo.path))["metrics"]
    assert sft.id in {i["id"] for i in read_manifest(Path(dpo.path))["inputs"]}
    assert m["val_preference_accuracy"] > 0.6 and m["val_reward_margin"] > 0, m
    # the SFT model it starts from already prefers the chosen answer on ~99% of the 160 held-out prompts (issue 52
    # made it learn): DPO must not lose more than two of them (one was lost with ATEN_CPU_CAPABILITY=default)
    assert "val_kl" in m and m["val_chosen_more_likely"] >= m["val_reference_chosen_more_likely"] - 2 / 160, m
    assert m["val_answer_accuracy"] >= m["val_start_answer_accuracy"] - 0.05


def test_continued_pretraining_and_config_errors(parent):
    full = post(parent, {"name": "more", "method": "full", "init": "lm", "train": {**TRAIN, "max_iters": 20}})
    m = read_manifest(Path(full.path))["metrics"]
    assert m["trainable_params"] == m["total_params"] and (Path(full.path) / "model.safetensors").is_file()
    with pytest.raises(ConfigError, match="init"):
        post_training_config_from_dict({"method": "sft"})
    with pytest.raises(ValueError, match="no field sentence"):
        post(parent, {**SFT, "name": "bad", "prompt": "{sentence}"})
    with pytest.raises(ConfigError, match="match no nn.Linear"):
        post(parent, {**SFT, "name": "bad", "lora": {"targets": ["attn.q_proj"]}})
