"""The seq2seq section: families checked against the registry, the model typed by its family, directions and task
prefixes, what enters each step's id, what the stage asks of the run's tokenizer (adjust_upstream), and the config
``seq2seq train`` builds (pairs pinned to their splits, a preset that needs a split it will not get)."""

from __future__ import annotations

from pathlib import Path

import pytest

from corpusforge.api import load_preset, preset_names, seq2seq_config
from corpusforge.pipeline_config import pipeline_config_from_dict
from corpusforge.tasks.config import ConfigError, identity
from corpusforge.tasks.seq2seq.config import EVAL_STEP, MODEL_STEP, seq2seq_config_from_dict, tokenizer_for
from corpusforge.tasks.tokenizer.config import tokenizer_config_from_dict

PAIRS = {"corpus": {"sources": [{"fields": {"src": "a.de", "tgt": "a.en"}}]}, "tokenizer": {"kind": "bpe"}}
PRESETS = ["multi30k-gru", "multi30k-gru-bahdanau", "multi30k-gru-luong", "multi30k-transformer",
           "multi30k-transformer-cpu"]


def test_families_come_from_the_registry_and_type_the_model():
    from corpusforge.models.seq2seq.config import Seq2SeqConfig as RNNConfig
    from corpusforge.models.transformer.config import TransformerConfig

    cfg = seq2seq_config_from_dict({"family": "transformer", "model": {"d_model": 64, "n_head": 4}})
    assert type(cfg.model) is TransformerConfig and cfg.model.d_model == 64
    assert type(seq2seq_config_from_dict({}).model) is RNNConfig  # the default family, its defaults
    with pytest.raises(ConfigError, match="family: 'gpt' is not allowed"):  # an lm family trains on tokens
        seq2seq_config_from_dict({"family": "gpt", "model": {}})
    with pytest.raises(ConfigError, match="family: one of .*seq2seq.*transformer"):
        seq2seq_config_from_dict({"family": "gpt"})
    with pytest.raises(ConfigError, match="seq2seq.model.d_model: unknown key"):  # the RNN's config has no d_model
        seq2seq_config_from_dict({"model": {"d_model": 64}})
    with pytest.raises(ConfigError, match="vocab_size: set from the tokenizer"):
        seq2seq_config_from_dict({"model": {"vocab_size": 10}})
    with pytest.raises(ConfigError, match="seq2seq.train.max_itres: unknown key"):  # the lm's train.* keys
        seq2seq_config_from_dict({"train": {"max_itres": 5}})


def test_directions_and_prefixes():
    one = seq2seq_config_from_dict({})
    assert one.directions() == [("src", "tgt")] and one.prefix_for("src", "tgt") == ""
    back = seq2seq_config_from_dict({"direction": "backward"})
    assert back.directions() == [("tgt", "src")]
    both = seq2seq_config_from_dict({"direction": "both", "languages": {"src": "German", "tgt": "English"}})
    assert [both.prefix_for(*d) for d in both.directions()] == ["translate German to English: ",
                                                                "translate English to German: "]
    named = seq2seq_config_from_dict({"source": "de", "target": "en", "direction": "both"})  # field names by default
    assert named.prefix_for("en", "de") == "translate en to de: "
    t5 = seq2seq_config_from_dict({"prefix": "summarize {source}: "})  # a prefix for one direction, T5-style
    assert t5.prefix_for("src", "tgt") == "summarize src: "
    for bad, why in (({"direction": "both", "prefix": ""}, "both directions need a task prefix"),
                     ({"direction": "both", "prefix": "translate: "}, "both prefixes are the same"),
                     ({"prefix": "{lang}: "}, "only {source} and {target}"),
                     ({"languages": {"fr": "French"}}, "languages: names the fields src and tgt"),
                     ({"source": "x", "target": "x"}, "two different fields"),
                     ({"decode": {"beam": 0}}, "decode.beam: must be >= 1"),
                     ({"direction": "sideways"}, "direction: 'sideways' is not allowed")):
        with pytest.raises(ConfigError, match=why):
            seq2seq_config_from_dict(bad)


def test_decoding_is_the_evaluations_id_not_the_models():
    base = seq2seq_config_from_dict({"decode": {"beam": 5}})
    greedy = seq2seq_config_from_dict({"decode": {"beam": 1}})
    assert identity(base, MODEL_STEP) == identity(greedy, MODEL_STEP)  # rescoring retrains nothing
    assert identity(base, EVAL_STEP) != identity(greedy, EVAL_STEP)
    assert "batch_size" not in identity(base, EVAL_STEP)["decode"]  # speed only
    trained = seq2seq_config_from_dict({"train": {"max_iters": 7}})
    assert identity(trained, MODEL_STEP) != identity(base, MODEL_STEP)
    assert identity(trained, EVAL_STEP) == identity(base, EVAL_STEP)  # the model's id is the evaluation's input
    # the languages name the prefixes; without a prefix they change nothing
    assert identity(seq2seq_config_from_dict({"languages": {"src": "German"}}), MODEL_STEP) == identity(base, MODEL_STEP)
    both = {"direction": "both"}
    assert (identity(seq2seq_config_from_dict({**both, "languages": {"src": "German"}}), MODEL_STEP)
            != identity(seq2seq_config_from_dict(both), MODEL_STEP))


def test_the_run_tokenizer_gets_roles_fields_and_prefix_tokens():
    cfg = pipeline_config_from_dict({**PAIRS, "seq2seq": {"direction": "both", "languages": {"src": "German"}}})
    tok = cfg.tokenizer
    assert tok.roles == {"pad": "<pad>", "bos": "<s>", "eos": "</s>"}
    assert tok.fields == ("src", "tgt") and tok.format == "parquet"
    assert tok.special_tokens == ("translate German to tgt: ", "translate tgt to German: ")
    # the tokenizer section's own roles and fields win; only what is missing is added
    own = tokenizer_config_from_dict({"kind": "bpe", "roles": {"pad": "[PAD]", "bos": "[BOS]", "eos": "[EOS]"},
                                      "format": "parquet", "fields": ["de", "en", "note"]})
    kept = tokenizer_for(seq2seq_config_from_dict({"source": "de", "target": "en"}), own)
    assert kept == own
    with pytest.raises(ConfigError, match="tokenizer.fields: .* lacks the seq2seq stage's src/tgt"):
        tokenizer_for(seq2seq_config_from_dict({}), own)
    with pytest.raises(ConfigError, match="add_special_tokens"):
        pipeline_config_from_dict({**PAIRS, "tokenizer": {"kind": "bpe", "roles": {"bos": "<s>", "eos": "</s>"},
                                                          "add_special_tokens": True}, "seq2seq": {}})
    with pytest.raises(ConfigError, match="tokenizer.encode: true"):
        pipeline_config_from_dict({**PAIRS, "tokenizer": {"kind": "bpe", "encode": False}, "seq2seq": {}})
    # a pipeline without the stage keeps its tokenizer as it was (same config, same id)
    assert pipeline_config_from_dict(PAIRS).tokenizer == tokenizer_config_from_dict({"kind": "bpe"})


def test_every_preset_validates_with_its_splits():
    from corpusforge.models.family import family

    assert preset_names("seq2seq") == PRESETS + SUMMARIZATION_PRESETS
    for name in PRESETS:
        data = seq2seq_config("tr.de", "tr.en", name, valid=("va.de", "va.en"), test=("te.de", "te.en"))
        cfg = pipeline_config_from_dict(data)
        assert cfg.seq2seq.name == name and family(cfg.seq2seq.family).can("translate")
        assert cfg.tokenizer.kind == "bpe" and cfg.tokenizer.fields == ("src", "tgt")
        assert set(cfg.tokenizer.roles) == {"pad", "bos", "eos"}
        assert not cfg.corpus.dedup.exact  # every test pair is scored
    attention = {n: load_preset(n, "seq2seq")["seq2seq"]["model"].get("attention") for n in PRESETS[:3]}
    assert attention == {"multi30k-gru": "none", "multi30k-gru-bahdanau": "bahdanau",
                         "multi30k-gru-luong": "luong-general"}
    cpu = load_preset("multi30k-transformer-cpu", "seq2seq")
    assert cpu["tokenizer"]["vocab_size"] <= 8000 and cpu["seq2seq"]["model"]["d_model"] <= 256


SUMMARIZATION_PRESETS = ["scitldr-bart", "scitldr-bart-cpu", "scitldr-extractive", "scitldr-extractive-cpu",
                         "scitldr-transformer", "scitldr-transformer-cpu"]


def test_summarization_presets_read_one_records_file_and_bart_pretrains_first(tmp_path, monkeypatch):
    from corpusforge.api import split_pretraining
    from corpusforge.tasks.config import ConfigError

    monkeypatch.chdir(tmp_path)
    (tmp_path / "d").mkdir()
    for name in ("train.jsonl", "dev.jsonl"):
        (tmp_path / "d" / name).write_text('{"source": ["A."], "target": ["B."]}\n', encoding="utf-8")
    for name in SUMMARIZATION_PRESETS:
        pretraining, data = split_pretraining(seq2seq_config("d/train.jsonl", None, name, valid="d/dev.jsonl",
                                                             overrides=["pretrain.train.max_iters=3"]
                                                             if "bart" in name else []))
        assert data["corpus"]["sources"] == ["d/train.jsonl", "d/dev.jsonl"]
        assert data["corpus"]["split"]["by_source"] == {"dev.jsonl": "valid"}
        cfg = pipeline_config_from_dict(data)
        assert cfg.corpus.reader.join_lists == "\n" and cfg.seq2seq.name == name
        if "extractive" in name:
            assert cfg.seq2seq.task == "extract" and cfg.seq2seq.family == "extractive"
        else:
            assert cfg.seq2seq.task == "summarize" and cfg.seq2seq.decode.no_repeat_ngram_size == 3
            assert cfg.seq2seq.max_source_len > cfg.seq2seq.max_target_len
        assert (pretraining is not None) == ("bart" in name)
        if pretraining is not None:  # the same corpus and tokenizer, the same model, another task
            pre = pipeline_config_from_dict(pretraining)
            assert pre.seq2seq.task == "denoise" and pre.seq2seq.objective.kind == "denoising"
            assert pre.seq2seq.train.max_iters == 3 and pre.tokenizer == cfg.tokenizer and pre.corpus == cfg.corpus
            assert pre.seq2seq.model == cfg.seq2seq.model and pre.seq2seq.name == f"{name}-denoise"
        with pytest.raises(ConfigError, match="one file of records"):
            seq2seq_config("a.de", "a.en", name)
        with pytest.raises(ConfigError, match="--valid: .* one file"):
            seq2seq_config("d/train.jsonl", None, name, valid=("a", "b"))
    with pytest.raises(ConfigError, match="line-aligned pairs"):
        seq2seq_config("d/train.jsonl", None, "multi30k-gru")
    with pytest.raises(ConfigError, match="no pre-training step"):
        seq2seq_config("d/train.jsonl", None, "scitldr-transformer-cpu", overrides=["pretrain.train.max_iters=3"])


def test_valid_takes_two_files_or_one_records_file_on_the_command_line():
    from corpusforge.cli.seq2seq import _PAIR, join_pairs

    assert join_pairs(["a.de", "a.en", "--valid", "v.de", "v.en", "--preset", "p"]) == [
        "a.de", "a.en", "--valid", f"v.de{_PAIR}v.en", "--preset", "p"]
    assert join_pairs(["t.jsonl", "--valid", "d.jsonl", "--preset", "p"]) == ["t.jsonl", "--valid", "d.jsonl",
                                                                             "--preset", "p"]
    assert join_pairs(["--valid", "d.jsonl.gz", "t.jsonl"]) == ["--valid", "d.jsonl.gz", "t.jsonl"]  # records: one
    assert join_pairs(["t.jsonl", "--valid", "d.txt"]) == ["t.jsonl", "--valid", "d.txt"]  # nothing follows: one
    assert join_pairs(["a", "b", "--test", "x", "y", "--", "--valid", "v", "w"]) == [
        "a", "b", "--test", f"x{_PAIR}y", "--", "--valid", "v", "w"]


def test_train_config_pins_the_given_files_to_their_splits():
    data = seq2seq_config(Path("d/train.de"), Path("d/train.en"), "multi30k-gru", valid=("d/val.de", "d/val.en"),
                          test=("d/test_2016_flickr.de", "d/test_2016_flickr.en"),
                          overrides=["train.max_iters=5", "corpus.split.seed=3", "decode.beam=1"])
    corpus = data["corpus"]
    assert corpus["sources"] == [{"fields": {"src": "d/train.de", "tgt": "d/train.en"}},
                                 {"fields": {"src": "d/val.de", "tgt": "d/val.en"}},
                                 {"fields": {"src": "d/test_2016_flickr.de", "tgt": "d/test_2016_flickr.en"}}]
    assert corpus["split"]["by_source"] == {"val.de+val.en": "valid",
                                            "test_2016_flickr.de+test_2016_flickr.en": "test"}
    assert corpus["split"]["seed"] == 3 and data["seq2seq"]["train"]["max_iters"] == 5
    assert data["seq2seq"]["decode"]["beam"] == 1
    cfg = pipeline_config_from_dict(data)
    assert cfg.corpus.split.split_for_source("val.de+val.en") == "valid"
    assert cfg.corpus.split.split_for_source("train.de+train.en") is None
    # a glob character in a file name is matched literally
    odd = seq2seq_config("a.de", "a.en", "multi30k-gru", valid=("v[1].de", "v[1].en"))
    assert pipeline_config_from_dict(odd).corpus.split.split_for_source("v[1].de+v[1].en") == "valid"


def test_a_preset_that_holds_out_nothing_needs_valid_files():
    with pytest.raises(ConfigError, match="holds out no validation pairs .* give --valid"):
        seq2seq_config("a.de", "a.en", "multi30k-gru")
    # a held-out fraction instead of files is fine
    data = seq2seq_config("a.de", "a.en", "multi30k-gru", overrides=["corpus.split.valid=0.1"])
    assert data["corpus"]["split"]["valid"] == 0.1
    with pytest.raises(ConfigError, match="names of their own"):
        seq2seq_config("x/a.de", "x/a.en", "multi30k-gru", valid=("y/a.de", "y/a.en"))
    with pytest.raises(ConfigError, match="no such preset"):
        seq2seq_config("a.de", "a.en", "nope", valid=("v.de", "v.en"))


def test_decoding_options_for_summaries_enter_the_id_only_when_set():
    """Issue 47 item 1: ``decode.min_len`` and ``decode.no_repeat_ngram_size`` (0: off) leave the id of every
    evaluation that does not use them as it was; set, they are in it; negative values are refused in one line."""
    from corpusforge.tasks.seq2seq.config import DecodeConfig

    plain = identity(DecodeConfig())
    assert "min_len" not in plain and "no_repeat_ngram_size" not in plain
    assert identity(DecodeConfig(min_len=5, no_repeat_ngram_size=3)) == {**plain, "min_len": 5,
                                                                         "no_repeat_ngram_size": 3}
    for name in ("min_len", "no_repeat_ngram_size"):
        with pytest.raises(ValueError, match=f"{name}: must be >= 0"):
            DecodeConfig(**{name: -1})
