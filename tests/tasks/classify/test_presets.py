"""The issue's classify presets exist, validate as `classify train` builds them (with --valid, and --init where the
preset requires it), and keep the shapes they promise; bert-mlm-small is an lm preset of the bert family."""

from __future__ import annotations

import pytest

from corpusforge.api import classify_config, load_preset, preset_names
from corpusforge.tasks.config import ConfigError

PRESETS = ["sst2-bert-finetune", "sst2-bert-scratch", "sst2-bilstm"]


def test_every_preset_validates(tmp_path):
    from corpusforge.pipeline_config import pipeline_config_from_dict

    train, valid = tmp_path / "train.tsv", tmp_path / "dev.tsv"
    for path in (train, valid):
        path.write_text("sentence\tlabel\na fine film\t1\na dull one\t0\n", encoding="utf-8")
    assert preset_names("classify") == PRESETS
    for name in PRESETS:
        cfg = pipeline_config_from_dict(classify_config(train, name, valid=valid, init="abcd1234"))
        assert cfg.classify.name == name and cfg.corpus.reader.text_field == "sentence"
        assert cfg.corpus.reader.labels["label"].type == "int"  # 0/1 stay integers
        assert cfg.classify.init == "abcd1234"
    bilstm = pipeline_config_from_dict(classify_config(train, "sst2-bilstm", valid=valid))
    assert bilstm.classify.embeddings == "embeddings" and bilstm.embeddings.kind == "word2vec"
    assert bilstm.classify.model.bidirectional and bilstm.classify.model.cell == "lstm"
    with pytest.raises(ConfigError, match="give --init ID"):
        classify_config(train, "sst2-bert-finetune", valid=valid)
    with pytest.raises(ConfigError, match="no validation records"):
        classify_config(train, "sst2-bilstm")
    scratch, finetune = load_preset("sst2-bert-scratch", "classify"), load_preset("sst2-bert-finetune", "classify")
    shape = ("n_layer", "n_head", "n_embd", "block_size")
    bert = load_preset("bert-mlm-small")["lm"]
    assert bert["family"] == "bert" and bert["model"]["nsp"] is True
    assert [scratch["classify"]["model"][k] for k in shape] == [bert["model"][k] for k in shape] \
        == [finetune["classify"]["model"][k] for k in shape]  # the same encoder, pre-trained or not


def test_columns_are_found_by_name_or_given(tmp_path):
    data = tmp_path / "reviews.csv"
    data.write_text("review,sentiment,score\ngood,pos,1\nbad,neg,0\n", encoding="utf-8")
    cfg = classify_config(data, "sst2-bilstm", overrides=["corpus.split.valid=0.5"])
    reader = cfg["corpus"]["reader"]
    assert reader["text_field"] == "review" and reader["labels"]["label"] == {"column": "sentiment", "type": "str"}
    cfg = classify_config(data, "sst2-bilstm", overrides=["corpus.split.valid=0.5"], label_column="score")
    assert cfg["corpus"]["reader"]["labels"]["label"] == {"column": "score", "type": "int"}
    with pytest.raises(ConfigError, match="no label column"):
        classify_config(data, "sst2-bilstm", overrides=["corpus.split.valid=0.5"], label_column="stars")
