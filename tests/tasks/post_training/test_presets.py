"""The post_training presets (configs/post_training/) validate as ``lm finetune`` builds them, with the record
fields their templates read kept by the corpus reader; --set templates are taken verbatim."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from corpusforge.api import finetune_config, preset_names
from corpusforge.tasks.config import ConfigError

PRESETS = ["dpo", "full", "lora", "multi30k-sft", "sft", "sst2-dpo", "sst2-sft"]


def test_every_preset_validates_with_the_fields_its_templates_read(tmp_path):
    from corpusforge.pipeline_config import pipeline_config_from_dict

    assert preset_names("post_training") == PRESETS
    sst2 = tmp_path / "train.tsv"
    sst2.write_text("sentence\tlabel\na fine film\t1\n", encoding="utf-8")
    pairs = tmp_path / "m30k.tsv"
    pairs.write_text("en\tde\na dog runs\tein hund rennt\n", encoding="utf-8")
    records = tmp_path / "records.jsonl"
    records.write_text(json.dumps({"prompt": "p", "response": "r", "chosen": "c", "rejected": "x"}) + "\n")
    text = tmp_path / "text.txt"
    text.write_text("some text\n")
    for name in PRESETS:
        data = (sst2 if name.startswith("sst2") else pairs if name.startswith("multi30k")
                else text if name in ("full", "lora") else records)
        cfg = pipeline_config_from_dict(finetune_config("abcd1234", [data], preset=name))
        post = cfg.post_training
        assert post.init == "abcd1234" and cfg.corpus.sources
        if post.objective != "lm":
            reader = cfg.corpus.reader
            kept = set(reader.fields) | set(reader.labels)
            assert set(post.fields()) <= kept, (name, kept)
    sst = pipeline_config_from_dict(finetune_config("abcd1234", [sst2], preset="sst2-sft"))
    assert set(sst.corpus.reader.labels) == {"label"} and set(sst.corpus.reader.fields) == {"sentence"}
    assert sst.post_training.values == {"label": {"0": "negative", "1": "positive"}}


def test_method_flag_and_verbatim_templates(tmp_path):
    from corpusforge.pipeline_config import pipeline_config_from_dict

    records = tmp_path / "qa.jsonl"
    records.write_text(json.dumps({"question": "2+2?", "answer": "4"}) + "\n")
    cfg = pipeline_config_from_dict(finetune_config(
        "abcd1234", [records], method="sft", overrides=["prompt=Q: {question}\\nA:", "response= {answer}",
                                                        "lora.r=4"]))
    assert cfg.post_training.prompt == "Q: {question}\nA:" and cfg.post_training.response == " {answer}"
    assert cfg.post_training.lora.r == 4 and set(cfg.corpus.reader.fields) == {"question", "answer"}
    with pytest.raises(ConfigError, match="no nothing column"):
        finetune_config("abcd1234", [tmp_path / "qa.jsonl"], method="sft", overrides=["prompt={question}",
                                                                                      "response={nothing}"])
    with pytest.raises(ConfigError, match="--method"):
        finetune_config("abcd1234", [records], method="rlhf")
    with pytest.raises(ConfigError, match="no such file"):
        finetune_config("abcd1234", [Path(tmp_path / "missing.jsonl")], method="sft")
