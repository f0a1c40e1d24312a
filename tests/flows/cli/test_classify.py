"""``corpusforge classify`` with transfer learning, through the real pipeline flows (real Prefect API and MLflow):
pre-train a tiny BERT (masked LM + next-sentence prediction) with ``lm train``, fine-tune it on labelled reviews with
``classify train --init`` (the checkpoint joins the lineage; its own tokenizer encodes the texts), then predict,
evaluate (the figure the training reported, recomputed from the file), load the registered MLflow model (labels and
probabilities), and get one-line errors for bad input."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from tests.commands import corpusforge
from tests.flows.cli.test_seq2seq import cli_env

REVIEWS = Path(__file__).resolve().parents[3] / "data" / "labelled" / "reviews.tsv"
TINY = {"n_layer": 2, "n_head": 2, "n_embd": 32, "block_size": 40, "dropout": 0.0}
TOKENIZER = {"kind": "wordpiece", "vocab_size": 200, "normalizers": ["lowercase"], "pre_tokenizer": "bert",
             "unk_token": "[UNK]", "roles": {"cls": "[CLS]", "sep": "[SEP]", "mask": "[MASK]", "pad": "[PAD]"}}
TRAIN = {"batch_size": 32, "lr": 3.0e-3, "min_lr": 3.0e-4, "warmup_iters": 10, "weight_decay": 0.0,
         "eval_iters": 0, "log_interval": 50, "cpu_threads": 1}


def write(path: Path, data: dict) -> Path:
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


@pytest.mark.e2e
def test_pretrain_fine_tune_predict_evaluate_and_the_registered_model(prefect_harness, tmp_path, monkeypatch):
    # the reviews whose label its polarity words decide (no negation, no contrast): what a 150-step checkpoint learns
    # to read from every start. The ones that need word order are for models trained to learn them (tests/models).
    rows = REVIEWS.read_text(encoding="utf-8").splitlines()
    plain = [r for r in rows[1:] if not re.search(r"\b(not|never|hardly|but)\b", r)]
    train, valid = tmp_path / "train.tsv", tmp_path / "valid.tsv"
    train.write_text("\n".join([rows[0], *plain[:-200]]) + "\n", encoding="utf-8")
    valid.write_text("\n".join([rows[0], *plain[-200:]]) + "\n", encoding="utf-8")
    store = tmp_path / "store"

    def run(*args, code=0, subprocess=False):
        """In this process (tests/commands.py); ``subprocess=True`` for the console script itself."""
        return corpusforge(*args, "--store", store, env=cli_env(prefect_harness), code=code, subprocess=subprocess)

    bert = write(tmp_path / "bert.yaml", {
        "corpus": {"reader": {"text_field": "text"}, "split": {"valid": 0.05, "test": 0.0, "seed": 0}},
        "tokenizer": TOKENIZER,
        "lm": {"name": "tiny-bert", "family": "bert", "model": TINY, "sample": {"max_new_tokens": 0},
               "train": {**TRAIN, "max_iters": 150, "eval_interval": 150}}})
    pre = json.loads(run("lm", "train", str(train), "--preset", str(bert), "--json").stdout.strip().splitlines()[-1])
    assert pre["metrics"]["val_nsp_accuracy"] > 0.0 and pre["metrics"]["val_mlm_loss"] < 5.0

    finetune = write(tmp_path / "finetune.yaml", {
        "requires": ["init"],
        "corpus": {"dedup": {"exact": False}, "split": {"valid": 0.0, "test": 0.0}},
        "tokenizer": {**TOKENIZER, "kind": "word", "vocab_size": 100},  # not the checkpoint's: it is not used
        # mean pooling: the [CLS] state of a 150-step checkpoint (NSP at chance) is a poor start. On all the reviews
        # (negation and "but" need word order) 1,000 steps at 3e-3 gave 0.8-1.0 over train seeds here and 0.65 on
        # CI's CPU: too close to the plateau to test. On the reviews that polarity words decide, 300 steps gave 1.00
        # (train loss 3e-4) for train seeds 0-2 with ATen's default kernels and seed 0 with avx2: a learning test
        # must learn from every start
        "classify": {"name": "tiny-bert-reviews", "family": "bert_classifier",
                     "model": {"n_layer": 9, "pooling": "mean"},
                     "train": {**TRAIN, "lr": 3.0e-3, "min_lr": 3.0e-4, "max_iters": 300, "eval_interval": 300}}})
    assert "give --init ID" in run("classify", "train", str(train), "--valid", str(valid), "--preset",
                                   str(finetune), code=2).stderr
    out = json.loads(run("classify", "train", str(train), "--valid", str(valid), "--preset", str(finetune),
                         "--init", pre["id"][:12], "--json", subprocess=True).stdout.strip().splitlines()[-1])
    m = out["metrics"]
    assert {"id", "metrics", "registered_model"} <= set(out) and {"accuracy", "f1"} <= set(m)
    assert m["accuracy"] == m["val_accuracy"] >= 0.9, m  # chance 0.535 (107 of 200 positive)
    model_dir = Path(out["path"])
    spec = json.loads((model_dir / "config.json").read_text())
    assert spec["family"] == "bert_classifier" and spec["model"]["n_layer"] == 2  # the checkpoint's shape won
    assert spec["model"]["pooling"] == "mean"  # the head is the preset's own
    assert spec["classify"]["init"]["id"] == pre["id"] and spec["classify"]["init"]["step"] == "lm"
    init = spec["classify"]["init"]
    assert not [k for k in init["missing"] if k.startswith("body.")] and init["loaded"] > 10  # the body loaded
    assert "classifier.weight" in init["missing"]  # the classifier is new
    pre_spec = json.loads((Path(pre["path"]) / "config.json").read_text())
    assert spec["tokenizer"]["id"] == pre_spec["tokenizer"]["id"]  # the texts were read with its tokenizer
    manifest = json.loads((model_dir / "manifest.json").read_text())
    assert pre["id"] in {i["id"] for i in manifest["inputs"]}  # the checkpoint is in the lineage

    def cli(*args, code=0, subprocess=False):
        return corpusforge("classify", *args, "--store", store, env=cli_env(None), code=code, subprocess=subprocess)

    texts = ["the plot was not dull", "the acting felt truly awful"]
    predicted = json.loads(cli("predict", out["id"][:10], *texts, "--json", subprocess=True).stdout)["predictions"]
    assert [p["text"] for p in predicted] == texts
    assert all(abs(sum(p["probabilities"].values()) - 1) < 1e-6 and p["label"] in ("negative", "positive")
               for p in predicted)
    png = tmp_path / "cm.png"
    scored = json.loads(cli("evaluate", out["id"][:10], str(valid), "--plot", str(png), "--json",
                            subprocess=True).stdout)
    assert scored["records"] == 200 and scored["accuracy"] == pytest.approx(m["val_accuracy"])
    assert sum(map(sum, scored["confusion_matrix"])) == 200 and png.stat().st_size > 1000
    # a .tsv has no quoting (issue 44, item 3): a line that starts with a quote is one record, and a ragged line
    # is dropped and counted, never folded into the next; read, scored and dropped are all reported
    body = valid.read_text(encoding="utf-8").splitlines()
    body[1] = '" ' + body[1]
    quoted = tmp_path / "quoted.tsv"
    quoted.write_text("\n".join([*body, "a text\twith a tab\tpositive"]) + "\n", encoding="utf-8")
    q = json.loads(cli("evaluate", out["id"][:10], str(quoted), "--json").stdout)
    assert (q["records"], q["records_read"], q["records_scored"]) == (200, 201, 200)
    assert q["records_dropped"] == {"ragged_row": 1} and q["dropped_lines"] == {"ragged_row": [202]}
    assert "201 records read, 200 scored, 1 dropped: ragged_row 1 (line 202)" in cli("evaluate", out["id"][:10],
                                                                                    str(quoted)).stdout

    # bad input: one line each, exit 2
    assert "not a classifier" in cli("predict", pre["id"][:12], "x", code=2).stderr
    nolabel = tmp_path / "nolabel.tsv"
    nolabel.write_text("text\nthe plot was dull\n", encoding="utf-8")
    assert "needs a text and a label column" in cli("evaluate", out["id"][:12], str(nolabel), code=2).stderr
    assert "no label column" in run("classify", "train", str(nolabel), "--preset", "sst2-bilstm", code=2).stderr

    # the registered model is a pyfunc that returns labels and probabilities, loaded with nothing pickled
    import mlflow

    uri = f"sqlite:///{store / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.setenv("MLFLOW_REGISTRY_URI", uri)
    frame = mlflow.pyfunc.load_model(out["registered_model"]["latest_uri"]).predict(texts)
    assert list(frame.columns) == ["label", "p_negative", "p_positive"]
    assert list(frame["label"]) == [p["label"] for p in predicted]
    assert frame["p_positive"].tolist() == pytest.approx([p["probabilities"]["positive"] for p in predicted])

    # the pre-trained BERT is registered too, as a mask filler (corpusforge.tasks.lm.fill_mask)
    import torch

    from corpusforge.tasks.encoded import load_with_tokenizer

    assert pre["registered_model_reason"] is None and pre["registered_model"]["name"] == "tiny-bert"
    filler = mlflow.pyfunc.load_model(pre["registered_model"]["latest_uri"])
    asked = ["the plot was [MASK]", "the acting felt"]  # the second gets its mask at the end
    filled = filler.predict(asked, params={"top_k": 3})
    assert list(filled.columns) == ["filled", "tokens", "probabilities"] and len(filled) == 2
    model, tok, _ = load_with_tokenizer(pre["path"])
    cfg = model.cfg
    special = sorted({cfg.mask_id, cfg.cls_id, cfg.sep_id, cfg.pad_id, tok.eot_id})
    for text, row in zip(asked, filled.itertuples()):
        ids = tok.encode(text)
        ids = ids if cfg.mask_id in ids else [*ids, cfg.mask_id]
        assert ids.count(cfg.mask_id) == 1  # "[MASK]" in the text is the mask token, not five characters
        with torch.no_grad():  # by hand from the store artifact's weights: [CLS] text [SEP], specials never proposed
            logits = model(torch.tensor([[cfg.cls_id, *ids, cfg.sep_id]]))[0][0, 1 + ids.index(cfg.mask_id)].float()
        logits[special] = float("-inf")
        top = torch.topk(torch.softmax(logits, -1), 3)
        assert list(row.probabilities) == pytest.approx(top.values.tolist(), abs=1e-5)
        assert list(row.tokens) == [tok.decode([int(i)]) or tok.id_to_token(int(i)) for i in top.indices]
        assert "[MASK]" not in row.filled.upper() and row.filled.endswith(row.tokens[0].lstrip("#"))
    assert "top_k must be >= 1" in str(pytest.raises(Exception, filler.predict, ["x"], params={"top_k": 0}).value)
    assert not [p for p in store.rglob("*") if p.suffix in (".pkl", ".pickle")]

    # the Python API is the same call: answered from the store, and the artifact loads as a classifier
    import corpusforge as cf

    again = cf.classify.train(train, preset=str(finetune), valid=valid, init=pre["id"], store=store)
    assert again.id == out["id"] and again.reused
    assert [r["label"] for r in again.load().predict(texts)] == [p["label"] for p in predicted]
