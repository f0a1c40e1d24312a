"""``corpusforge qa`` through the real pipeline flow (real Prefect API and MLflow): a tiny BERT pre-trained on the
bundled XQuAD slice's sentences (lm train), then a reader fine-tuned from it with cross-validation over the slice's
articles (qa train --init), asked a question over a corpus (retrieve, then read), evaluated on the file (SQuAD exact
match and F1, retrieval top-1/top-5/MRR, the gold paragraph's F1), its registered MLflow model answering; and the
bad inputs the issue names (an answer offset outside its context, an empty corpus, a question that leaves a window
no room, a stride past a window): one line, exit 2, nothing published."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from corpusforge.api import qa_config
from corpusforge.tasks.config import ConfigError
from tests.commands import corpusforge
from tests.flows.cli.test_seq2seq import cli_env

SAMPLE = Path(__file__).resolve().parents[3] / "data" / "qa" / "xquad-sample.json"
QUICK = ["train.max_iters=12", "train.eval_interval=12", "train.batch_size=8", "train.cpu_threads=1",
         "train.log_interval=6", "folds=2", "max_query_len=16", "stride=24"]


def sample_sentences(path: Path) -> Path:
    """The sample's contexts, one sentence per line (what a tiny BERT is pre-trained on before a reader)."""
    data = json.loads(SAMPLE.read_text(encoding="utf-8"))
    path.write_text("\n".join(s for a in data["data"] for p in a["paragraphs"]
                              for s in re.split(r"(?<=[.!?]) ", p["context"])) + "\n", encoding="utf-8")
    return path


def squad(path: Path, context: str, answer: str, start: int) -> Path:
    path.write_text(json.dumps({"version": "1.1", "data": [{"title": "T", "paragraphs": [
        {"context": context, "qas": [{"id": "q1", "question": "What?",
                                      "answers": [{"text": answer, "answer_start": start}]}]}]}]}), encoding="utf-8")
    return path


def test_the_config_reads_the_file_first_and_needs_init(tmp_path):
    config = qa_config(SAMPLE, "xquad-reader-cpu", init="abcd1234", overrides=["folds=3"])
    assert config["corpus"]["reader"] == {"squad": True} and config["corpus"]["clean"] == {"preset": "raw"}
    assert config["qa"]["init"] == "abcd1234" and config["qa"]["folds"] == 3
    with pytest.raises(ConfigError, match="give --init ID"):
        qa_config(SAMPLE, "xquad-reader-cpu")
    bad = squad(tmp_path / "bad.json", "Paris is in France.", "France", 3)
    with pytest.raises(ConfigError, match=r"question q1: answer 0 at 3.*answer_offset"):
        qa_config(bad, "xquad-reader-cpu", init="abcd1234")
    past = squad(tmp_path / "past.json", "Paris is in France.", "France", 40)
    with pytest.raises(ConfigError, match="q1"):
        qa_config(past, "xquad-reader-cpu", init="abcd1234")


@pytest.mark.e2e
def test_train_ask_evaluate_and_the_registered_model(prefect_harness, tmp_path, monkeypatch):
    import corpusforge as cf

    store = tmp_path / "store"
    monkeypatch.setenv("PREFECT_API_URL", prefect_harness)
    monkeypatch.setenv("CORPUSFORGE_LOCAL_SERVER", "off")
    data = json.loads(SAMPLE.read_text(encoding="utf-8"))
    text = sample_sentences(tmp_path / "sentences.txt")
    bert = tmp_path / "bert.yaml"
    bert.write_text(json.dumps({
        "corpus": {"reader": {"txt_mode": "line"}, "split": {"valid": 0.1, "test": 0.0, "seed": 0}},
        "tokenizer": {"kind": "wordpiece", "vocab_size": 400, "normalizers": ["nfc", "lowercase"],
                      "pre_tokenizer": "bert", "unk_token": "[UNK]",
                      "roles": {"cls": "[CLS]", "sep": "[SEP]", "mask": "[MASK]", "pad": "[PAD]"}},
        "lm": {"name": "tiny-bert", "family": "bert", "sample": {"max_new_tokens": 0},
               "model": {"n_layer": 2, "n_head": 2, "n_embd": 32, "block_size": 64, "dropout": 0.0},
               "train": {"max_iters": 10, "eval_interval": 10, "batch_size": 8, "cpu_threads": 1,
                         "log_interval": 5, "eval_iters": 0}}}), encoding="utf-8")
    pre = cf.lm.train([text], str(bert), store=store)

    def run(*args, code=0, subprocess=False):
        return corpusforge("qa", *args, "--store", store, env=cli_env(prefect_harness), code=code,
                           subprocess=subprocess)

    out = run("train", str(SAMPLE), "--preset", "xquad-reader-cpu", "--init", pre.id[:12],
              *[a for s in QUICK for a in ("--set", s)], "--json").json()
    assert {"id", "metrics", "registered_model"} <= set(out) and out["registered_model"]
    m = out["metrics"]
    for key in ("exact_match", "f1", "baseline_f1", "f1_retrieved"):
        assert 0.0 <= m[key] <= 100.0, key
    assert 0.5 < m["retrieval_top1"] <= m["retrieval_top5"] <= 1.0  # BM25 finds most questions' paragraph
    assert out["accounting"]["records_read"] == 12  # paragraphs
    path = Path(out["path"])
    spec = json.loads((path / "config.json").read_text())
    assert spec["family"] == "bert_reader" and spec["model"]["n_layer"] == 2  # the checkpoint's shape
    init = spec["qa"]["init"]
    assert init["id"] == pre.id and sorted(init["missing"]) == ["qa_outputs.bias", "qa_outputs.weight"]
    evaluation = json.loads((path / "evaluation.json").read_text())
    assert evaluation["headline"] == "cross_validated"
    assert evaluation["scores"]["cross_validated"]["questions"] == 69
    predictions = json.loads((path / "predictions.json").read_text())["cross_validated"]
    ids = {q["id"] for a in data["data"] for p in a["paragraphs"] for q in p["qas"]}
    assert set(predictions) == ids  # every question answered by a reader that never saw its article

    question = "Who was the world's second largest oil producer?"
    asked = run("ask", out["id"][:10], question, "--corpus", str(SAMPLE), "--top", "3", "--json",
                subprocess=True).json()
    assert asked["mode"] == "bm25" and len(asked["retrieved"]) == 3
    assert asked["passage"][asked["start"]:asked["end"]] == asked["answer"] != ""
    assert asked["passage_index"] in {r["passage_index"] for r in asked["retrieved"]}

    chunked = run("ask", out["id"][:10], question, "--corpus", str(SAMPLE), "--chunk-words", "40", "--overlap", "10",
                  "--json").json()
    assert chunked["passage"][chunked["start"]:chunked["end"]] == chunked["answer"] != ""  # in the whole passage
    contexts = [p["context"] for a in data["data"] for p in a["paragraphs"]]
    for r in chunked["retrieved"]:  # chunks of at most 40 words, with their place in their passage
        assert 0 < len(contexts[r["passage_index"]][r["start"]:r["end"]].split()) <= 40
    scored = run("evaluate", out["id"][:10], str(SAMPLE), "--json").json()
    for key in ("exact_match", "f1", "retrieval_top1", "retrieval_top5", "retrieval_mrr", "f1_gold_paragraph"):
        assert key in scored
    head = evaluation["scores"]["cross_validated"]
    # the same BM25 over the same paragraphs, the same baseline on the same questions
    assert scored["retrieval_top1"] == pytest.approx(head["retrieval_top1"])
    assert scored["retrieval_mrr"] == pytest.approx(head["retrieval_mrr"])
    assert scored["baseline_f1"] == pytest.approx(head["baseline_f1"])
    assert scored["questions"] == 69 and scored["mode"] == "bm25"
    by_chunk = run("evaluate", out["id"][:10], str(SAMPLE), "--chunk-words", "40", "--overlap", "10", "--json").json()
    assert by_chunk["chunk_words"] == 40 and 0.0 <= by_chunk["retrieval_top1"] <= by_chunk["retrieval_top5"] <= 1.0
    assert by_chunk["f1_gold_paragraph"] == pytest.approx(scored["f1_gold_paragraph"])  # the same reading of gold

    # bad input: one line, exit 2
    empty = tmp_path / "empty.txt"
    empty.write_text("\n", encoding="utf-8")
    assert "holds no passage" in run("ask", out["id"][:10], question, "--corpus", str(empty), code=2).stderr
    assert "needs a sentence encoder" in run("ask", out["id"][:10], question, "--corpus", str(SAMPLE),
                                             "--mode", "dense", code=2).stderr
    assert "cannot generate an answer" in run("ask", pre.id[:10], question, "--corpus", str(SAMPLE), code=2).stderr
    corpus_id = next(p.name.rsplit("-", 1)[-1] for p in (store / "corpus").iterdir())
    assert "not a reader (qa)" in run("ask", corpus_id, question, "--corpus", str(SAMPLE), code=2).stderr
    before = sorted(p.name for p in (store / "artifacts").glob("*/*"))
    bad = squad(tmp_path / "bad.json", "Paris is in France.", "France", 300)
    assert "answer_offset" in run("train", str(bad), "--preset", "xquad-reader-cpu", "--init", pre.id,
                                  code=2).stderr
    long_question = run("train", str(SAMPLE), "--preset", "xquad-reader-cpu", "--init", pre.id,
                        "--set", "max_query_len=60", code=2).stderr
    assert "lower max_query_len" in long_question
    wide = run("train", str(SAMPLE), "--preset", "xquad-reader-cpu", "--init", pre.id, "--set", "stride=60",
               code=2).stderr
    assert "qa.stride: 60" in wide and "never be read" in wide
    after = sorted(p.name for p in (store / "artifacts").glob("*/*"))
    assert [a for a in after if a not in before and "qa" in a] == []

    # retrieval-augmented generation: a GPT answers from the retrieved passages put in its prompt
    gpt = tmp_path / "gpt.yaml"
    gpt.write_text(json.dumps({
        "corpus": {"reader": {"txt_mode": "line"}, "split": {"valid": 0.4, "test": 0.0, "seed": 0}},
        "tokenizer": {"kind": "byte-bpe", "vocab_size": 400},
        "lm": {"name": "tiny-gpt", "family": "gpt", "sample": {"max_new_tokens": 0},
               "model": {"n_layer": 1, "n_head": 2, "n_embd": 32, "block_size": 512, "dropout": 0.0},
               "train": {"max_iters": 5, "eval_interval": 5, "batch_size": 4, "cpu_threads": 1,
                         "log_interval": 5, "eval_iters": 0}}}), encoding="utf-8")
    generator = cf.lm.train([text], str(gpt), store=store)
    made = run("ask", generator.id[:10], question, "--corpus", str(SAMPLE), "--top", "3", "--max-new-tokens", "8",
               "--json").json()
    assert made["reader"] == "generative" and made["passages_read"] + made["passages_left_out"] == 3
    assert made["passages_read"] >= 1 and isinstance(made["answer"], str)
    if made["passage_index"] is not None:  # it copied a passage's text: the source is that passage
        assert made["answer"].casefold() in made["passage"].casefold()
    api = cf.qa.ask(generator.id, question, SAMPLE, top=3, max_new_tokens=8, store=store)
    assert api["answer"] == made["answer"]  # greedy: the same answer from the API

    import mlflow

    uri = f"sqlite:///{store / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.setenv("MLFLOW_REGISTRY_URI", uri)
    frame = mlflow.pyfunc.load_model(out["registered_model"]["latest_uri"]).predict(
        [{"question": question, "context": asked["passage"]}])
    assert list(frame.columns) == ["answer", "score", "start", "end", "passage"]
    reader = cf.artifacts.load(out["id"], store=store)
    assert frame["answer"][0] == reader.answer(question, [asked["passage"]])["answer"]
