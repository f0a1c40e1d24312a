"""Issue 45, item 8: LoRA for any family whose spec names targets. ``classify.finetune: lora`` puts adapters on a
pre-trained BERT's attention projections (the bert_classifier family's ``lora_targets``) and trains them with the
whole task head (pooler and classifier), the setting of the LoRA paper's GLUE runs; the saved classifier has the
adapters folded in. Checked against the pre-trained checkpoint's own tensors: every weight outside the adapted
Linears and the head is bit for bit the checkpoint's, each adapted Linear moved, the head trained, and the counts
recorded are the model's."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.flows.cli.test_classify import REVIEWS, TINY, TOKENIZER, TRAIN, write


@pytest.fixture(scope="module")
def lora_run(prefect_harness, tmp_path_factory):
    import corpusforge.api as cf

    tmp = tmp_path_factory.mktemp("lora")
    rows = REVIEWS.read_text(encoding="utf-8").splitlines()
    plain = [r for r in rows[1:] if not re.search(r"\b(not|never|hardly|but)\b", r)]  # polarity words decide
    train, valid = tmp / "train.tsv", tmp / "valid.tsv"
    train.write_text("\n".join([rows[0], *plain[:-200]]) + "\n", encoding="utf-8")
    valid.write_text("\n".join([rows[0], *plain[-200:]]) + "\n", encoding="utf-8")
    store = tmp / "store"
    bert = write(tmp / "bert.yaml", {
        "corpus": {"reader": {"text_field": "text"}, "split": {"valid": 0.05, "test": 0.0, "seed": 0}},
        "tokenizer": TOKENIZER,
        "lm": {"name": "tiny-bert", "family": "bert", "model": TINY, "sample": {"max_new_tokens": 0},
               "train": {**TRAIN, "max_iters": 100, "eval_interval": 100}}})
    pre = cf.lm.train([train], str(bert), store=store)
    lora = write(tmp / "lora.yaml", {
        "requires": ["init"],
        "corpus": {"dedup": {"exact": False}, "split": {"valid": 0.0, "test": 0.0}},
        "tokenizer": TOKENIZER,
        "classify": {"name": "tiny-bert-lora", "family": "bert_classifier", "finetune": "lora",
                     "lora": {"r": 4, "alpha": 8.0},
                     "model": {"pooling": "mean"},
                     "train": {**TRAIN, "lr": 3.0e-3, "min_lr": 3.0e-4, "max_iters": 300, "eval_interval": 300}}})
    model = cf.classify.train(train, str(lora), valid=valid, init=pre.id, store=store)
    return {"pre": pre, "model": model, "preset": lora, "train": train, "valid": valid, "store": store}


def test_lora_trains_the_adapters_and_the_head_and_leaves_the_rest_as_pre_trained(lora_run):
    from safetensors.torch import load_file

    pre = load_file(str(Path(lora_run["pre"].path) / "model.safetensors"))
    model_dir = Path(lora_run["model"].path)
    after = load_file(str(model_dir / "model.safetensors"))
    spec = json.loads((model_dir / "config.json").read_text())
    lora = spec["classify"]["lora"]
    assert spec["classify"]["finetune"] == "lora" and lora["settings"]["targets"] == ["attn.c_attn", "attn.c_proj"]
    assert lora["head"] == ["pooler.", "classifier."] and lora["settings"]["r"] == 4
    adapted = {k for k in after if re.search(r"\.attn\.c_(attn|proj)\.weight$", k)}
    head = {k for k in after if k.startswith(("pooler.", "classifier."))}
    assert len(adapted) == 2 * TINY["n_layer"] and {"classifier.weight", "pooler.weight"} <= head
    frozen = set(after) - adapted - head
    assert frozen and frozen <= set(pre), sorted(frozen - set(pre))  # the body's other weights: the checkpoint's
    assert all(after[k].equal(pre[k]) for k in frozen), [k for k in frozen if not after[k].equal(pre[k])]
    assert all(not after[k].equal(pre[k]) for k in adapted)  # W + (alpha / r) B A with B trained away from 0
    # the adapted matrices moved by a low-rank update: W_after - W_pre has rank <= r
    import torch

    for k in adapted:
        assert torch.linalg.matrix_rank((after[k] - pre[k]).double(), rtol=1e-6) <= 4, k
    # the counts: r * (in + out) per adapted Linear, the whole head, over the parameters of the adapted model
    C = TINY["n_embd"]
    adapters = TINY["n_layer"] * (4 * (C + 3 * C) + 4 * (C + C))
    head_params = sum(after[k].numel() for k in head)
    assert lora["per_target"] == {"attn.c_attn": TINY["n_layer"] * 4 * (C + 3 * C),
                                  "attn.c_proj": TINY["n_layer"] * 4 * (C + C)}
    assert lora["also"] == head_params and lora["trainable"] == adapters + head_params
    m = lora_run["model"].metrics
    assert m["trainable_params"] == lora["trainable"] and 0 < m["trainable_percent"] < 50


@pytest.mark.learns
def test_lora_learns_the_polarity_words(lora_run):
    # 300 steps on a frozen 100-step body: mean pooling, adapters r 4 and the head learn the reviews that polarity
    # words decide (chance 0.535). lr 3e-3 gave 0.87 and 0.96 for train seeds 0 and 1 here; lr 1e-2 passed here
    # (0.925) and collapsed to 0.565 on a clean-clone CI run: LoRA's learning rate has a narrow window
    m = lora_run["model"].metrics
    assert m["val_accuracy"] >= 0.75, m
    rows = [line.split("\t") for line in lora_run["valid"].read_text(encoding="utf-8").splitlines()[1:]]
    scored = lora_run["model"].load().evaluate([r[0] for r in rows], [r[1] for r in rows])
    assert scored["accuracy"] == pytest.approx(m["val_accuracy"])  # the merged weights score as training did


def test_lora_settings_are_refused_where_they_cannot_apply():
    from corpusforge.pipeline_config import pipeline_config_from_dict
    from corpusforge.tasks.config import ConfigError

    def classify(section):
        return pipeline_config_from_dict({"name": "x", "corpus": {"name": "x", "sources": [str(REVIEWS)]},
                                          "tokenizer": {"name": "w", "kind": "word", "vocab_size": 50},
                                          "classify": section}).classify

    with pytest.raises((ValueError, ConfigError), match="finetune: lora adapts a pre-trained body"):
        classify({"family": "bert_classifier", "finetune": "lora"})
    with pytest.raises((ValueError, ConfigError), match="lora: adapters are for finetune: lora"):
        classify({"family": "bert_classifier", "init": "abcd1234", "lora": {"r": 4}})
    with pytest.raises((ValueError, ConfigError), match="rnn_classifier family names no LoRA targets"):
        classify({"family": "rnn_classifier", "init": "abcd1234", "finetune": "lora"})
    named = classify({"family": "rnn_classifier", "init": "abcd1234", "finetune": "lora",
                      "lora": {"targets": ["classifier"]}})
    assert named.lora.targets == ("classifier",)
    assert classify({"family": "bert_classifier", "init": "abcd1234", "finetune": "lora"}).lora.targets is None
