"""``corpusforge tag`` through the real pipeline flow (real Prefect API and MLflow): train a BiLSTM-CRF on the
bundled EWT slice, predict (words, tags, offsets), evaluate (the figure the training reported, recomputed from the
file), load the registered MLflow model (words, tags and spans), the Python API answered from the store; and the
bad inputs the issue names (an untagged file, a tag column the file lacks, mixed BIO and BIOES, an empty sentence):
one line, exit 2, nothing published."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from corpusforge.api import tag_config
from corpusforge.tasks.config import ConfigError
from tests.commands import corpusforge
from tests.flows.cli.test_seq2seq import cli_env

DATA = Path(__file__).resolve().parents[3] / "data" / "tagged"
TRAIN_FILE, DEV_FILE = DATA / "ewt-sample.train.conllu", DATA / "ewt-sample.dev.conllu"
QUICK = ["train.max_iters=40", "train.eval_interval=40", "train.batch_size=16", "train.cpu_threads=1",
         "model.n_embd=32", "model.char_filters=16", "model.n_hidden=32"]


def entities(tmp_path: Path, lines: list[str], name: str = "ner.conll") -> Path:
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.mark.parametrize("make, expected", [
    (lambda tmp: entities(tmp, ["just some plain text", "with no tags at all"], "plain.txt"), "not a tagged file"),
    (lambda tmp: entities(tmp, ["Bob", "lives", "", "in", "York"]), "one column: no tags to learn from"),
    (lambda tmp: entities(tmp, ["Bob\tB-person", "Smith\tE-person", "", "in\tO", "Paris\tB-location", "now\tO"]),
     "mixes BIO and BIOES"),
])
def test_bad_tagged_files_are_one_line_config_errors(tmp_path, make, expected):
    bad = make(tmp_path)
    with pytest.raises(ConfigError, match=expected) as info:
        tag_config(bad, "wnut17-bilstm-crf-cpu")
    assert "\n" not in str(info.value)


def test_a_missing_tag_column_and_an_empty_sentence_are_config_errors(tmp_path):
    with pytest.raises(ConfigError, match="CoNLL-U has no tag column 'ner'"):
        tag_config(TRAIN_FILE, "ewt-upos-bilstm-cpu", valid=DEV_FILE,
                   overrides=["corpus.reader.tags={ner: ner}", "tags=ner"])
    text = TRAIN_FILE.read_text(encoding="utf-8").split("\n\n")
    empty = tmp_path / "empty.conllu"
    empty.write_text(text[0] + "\n\n# sent_id = nothing\n# text = \n\n" + text[1] + "\n\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="a sentence without a word"):
        tag_config(empty, "ewt-upos-bilstm-cpu", valid=DEV_FILE)
    with pytest.raises(ConfigError, match="give --init ID"):
        tag_config(TRAIN_FILE, "ewt-upos-bert-cpu", valid=DEV_FILE)
    from corpusforge.pipeline_config import pipeline_config_from_dict

    with pytest.raises(ConfigError, match="family tagger trains from scratch"):  # when the config is read
        pipeline_config_from_dict(tag_config(TRAIN_FILE, "ewt-upos-bilstm-cpu", valid=DEV_FILE, init="abcd1234"))


def test_the_preset_config_reads_the_file_and_pins_the_splits():
    config = tag_config(TRAIN_FILE, "ewt-upos-bilstm-crf-cpu", valid=DEV_FILE, overrides=["train.max_iters=5"])
    assert config["corpus"]["reader"]["tags"] == {"upos": "upos"}
    assert config["tag"]["model"]["head"] == "crf" and config["tag"]["train"]["max_iters"] == 5
    assert config["corpus"]["split"]["by_source"] == {DEV_FILE.name: "valid"}


@pytest.mark.e2e
def test_train_predict_evaluate_and_the_registered_model(prefect_harness, tmp_path, monkeypatch):
    store = tmp_path / "store"

    def run(*args, code=0, subprocess=False):
        return corpusforge("tag", *args, "--store", store, env=cli_env(prefect_harness), code=code,
                           subprocess=subprocess)

    out = run("train", str(TRAIN_FILE), "--valid", str(DEV_FILE), "--preset", "ewt-upos-bilstm-crf-cpu",
              *[a for s in QUICK for a in ("--set", s)], "--json").json()
    assert {"id", "metrics", "registered_model"} <= set(out)
    m = out["metrics"]
    assert 0.0 < m["accuracy"] <= 1.0 and 0.5 < m["baseline_accuracy"] < 0.95 and "f1" not in m
    assert out["accounting"]["records_read"] == 400  # sentences
    text = "The AP story comes from Washington."
    predicted = json.loads(run("predict", out["id"][:10], text, "--json", subprocess=True).stdout)["predictions"]
    (row,) = predicted
    assert row["words"] == ["The", "AP", "story", "comes", "from", "Washington", "."]
    assert [text[a:b] for a, b in row["offsets"]] == row["words"] and len(row["tags"]) == 7
    scored = run("evaluate", out["id"][:10], str(DEV_FILE), "--json").json()
    assert scored["sentences"] == 100 and scored["accuracy"] == pytest.approx(m["accuracy"])
    assert sum(map(sum, scored["confusion"]["counts"])) == scored["words"]
    # bad input to evaluate: one line, exit 2
    plain = entities(tmp_path, ["some text"], "plain.txt")
    assert "not a tagged file" in run("evaluate", out["id"][:10], str(plain), code=2).stderr
    assert "no such file" in run("evaluate", out["id"][:10], str(tmp_path / "absent.conllu"), code=2).stderr
    # nothing published for a bad train file
    bad = entities(tmp_path, ["Bob", "lives"])
    before = sorted(p.name for p in (store / "artifacts").glob("*/*")) if (store / "artifacts").exists() else []
    assert "no tags to learn from" in run("train", str(bad), "--preset", "wnut17-bilstm-crf-cpu", code=2).stderr
    after = sorted(p.name for p in (store / "artifacts").glob("*/*")) if (store / "artifacts").exists() else []
    assert before == after

    import mlflow

    uri = f"sqlite:///{store / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.setenv("MLFLOW_REGISTRY_URI", uri)
    frame = mlflow.pyfunc.load_model(out["registered_model"]["latest_uri"]).predict([text])
    assert list(frame.columns) == ["words", "tags", "spans"]
    assert frame["tags"][0].split(" ") == row["tags"] and json.loads(frame["spans"][0]) == []

    import corpusforge as cf

    again = cf.tag.train(TRAIN_FILE, preset="ewt-upos-bilstm-crf-cpu", valid=DEV_FILE, overrides=QUICK, store=store)
    assert again.id == out["id"] and again.reused
    assert again.load().tag(text)[0]["tags"] == row["tags"]


@pytest.mark.e2e
def test_bert_token_classification_from_our_own_pre_training(prefect_harness, tmp_path, monkeypatch):
    """A tiny BERT pre-trained on the slice's sentences (lm train), then fine-tuned as a tagger (--init): its body
    loads by name, its own WordPiece tokenizer splits the words, each word gets one tag (its first sub-word's), the
    model registers with a copy of that tokenizer and tags text through MLflow."""
    import corpusforge as cf

    store = tmp_path / "store"
    monkeypatch.setenv("PREFECT_API_URL", prefect_harness)
    monkeypatch.setenv("CORPUSFORGE_LOCAL_SERVER", "off")
    text = tmp_path / "sentences.txt"
    text.write_text("\n".join(line[len("# text = "):] for line in TRAIN_FILE.read_text(encoding="utf-8").splitlines()
                              if line.startswith("# text = ")) + "\n", encoding="utf-8")
    bert = tmp_path / "bert.yaml"
    bert.write_text(json.dumps({
        "corpus": {"reader": {"txt_mode": "line"}, "split": {"valid": 0.05, "test": 0.0, "seed": 0}},
        "tokenizer": {"kind": "wordpiece", "vocab_size": 300, "normalizers": ["nfc"], "pre_tokenizer": "bert",
                      "unk_token": "[UNK]", "roles": {"cls": "[CLS]", "sep": "[SEP]", "mask": "[MASK]",
                                                      "pad": "[PAD]"}},
        "lm": {"name": "tiny-bert", "family": "bert", "sample": {"max_new_tokens": 0},
               "model": {"n_layer": 2, "n_head": 2, "n_embd": 32, "block_size": 48, "dropout": 0.0},
               "train": {"max_iters": 30, "eval_interval": 30, "batch_size": 16, "cpu_threads": 1,
                         "log_interval": 10, "eval_iters": 0}}}), encoding="utf-8")
    pre = cf.lm.train([text], str(bert), store=store)
    tagger = cf.tag.train(TRAIN_FILE, preset="ewt-upos-bert-cpu", valid=DEV_FILE, init=pre.id, store=store,
                          overrides=["train.max_iters=30", "train.eval_interval=30", "train.cpu_threads=1",
                                     "train.batch_size=16", "model.max_len=20"])
    spec = json.loads((Path(tagger.path) / "config.json").read_text())
    assert spec["family"] == "bert_tagger" and spec["model"]["n_layer"] == 2  # the checkpoint's shape won
    init = spec["tag"]["init"]
    assert init["id"] == pre.id and init["loaded"] > 10 and not [k for k in init["missing"] if k.startswith("body.")]
    assert init["missing"] == ["classifier.bias", "classifier.weight"]  # the head is new
    pre_spec = json.loads((Path(pre.path) / "config.json").read_text())
    assert spec["tokenizer"]["id"] == pre_spec["tokenizer"]["id"]  # the words were read with its tokenizer
    assert pre.id in {i["id"] for i in json.loads((Path(tagger.path) / "manifest.json").read_text())["inputs"]}
    assert json.loads((Path(tagger.path) / "vocab.json").read_text())["subwords"] is True
    m = tagger.metrics
    assert 0.0 < m["accuracy"] <= 1.0 and "baseline_accuracy" in m
    loaded = tagger.load()
    sentence = "Unbelievably , the AP story comes from Washington ."  # a word split into several sub-words
    (row,) = loaded.tag(sentence)
    assert row["words"] == sentence.split() and len(row["tags"]) == len(row["words"])
    long = " ".join(["word"] * 50)  # past model.max_len (20 words): tagged in pieces, every word gets a tag
    assert len(loaded.tag(long)[0]["tags"]) == 50

    import mlflow

    uri = f"sqlite:///{store / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.setenv("MLFLOW_REGISTRY_URI", uri)
    # every sub-word trained on its word's tag (tag.subword_labels: all): a model of its own, predicting per word
    every = cf.tag.train(TRAIN_FILE, preset="ewt-upos-bert-cpu", valid=DEV_FILE, init=pre.id, store=store,
                         overrides=["train.max_iters=10", "train.eval_interval=10", "train.cpu_threads=1",
                                    "train.batch_size=16", "subword_labels=all", "tag.name=every-subword"])
    assert every.id != tagger.id and len(every.load().tag(sentence)[0]["tags"]) == len(row["words"])
    model = mlflow.pyfunc.load_model("models:/ewt-upos-bert-cpu@latest")  # the name is the preset's tag.name
    frame = model.predict([sentence])
    assert frame["tags"][0].split(" ") == row["tags"]
