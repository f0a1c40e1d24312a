"""Summarization in the seq2seq stage (issue 47, item 1): records whose source is a list of sentences and whose target
is one or more reference summaries, read with reader.join_lists; the model learns one pair per (document, reference),
its summaries go to summaries/ and are scored with ROUGE against all references, beside Lead-1 and the one-sentence
oracle; the CLI's `seq2seq summarize` and `seq2seq evaluate --metric rouge` read the same model.

The rule the tiny model learns: a document is three "sentences" of digits and its summary is the middle one, so the
oracle (the best single sentence) is the middle sentence, ROUGE 100, and Lead-1 (the first sentence) shares only
chance digits with it."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from corpusforge.storage.store import ArtifactStore, read_manifest
from corpusforge.tasks.seq2seq.build import build_seq2seq, lines
from tests.tasks.seq2seq.pairs_fixtures import GRU, TRAIN, WORD_TOKENIZER, encoded


def documents(n: int, seed: int, references: int) -> list[dict]:
    """``n`` records: ``source`` three sentences of 3 digits (no token marks a sentence end: the middle one is found by
    position); ``target`` the middle one, and with ``references``
    2 also the middle one reversed (a second, worse reference, as SciTLDR's dev set has several)."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        sentences = [" ".join(str(rng.randrange(10)) for _ in range(3)) for _ in range(3)]
        refs = [sentences[1], " ".join(sentences[1].split()[::-1])][:references]
        out.append({"source": [s + " " for s in sentences], "target": refs, "paper_id": f"p{rng.random()}"})
    return out


def write_jsonl(path: Path, records: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def section(**extra) -> dict:
    model = {**GRU["model"], "max_len": 12}
    return {**GRU, "model": model, "name": "middle", "task": "summarize", "train": {**TRAIN, "max_iters": 250},
            "max_source_len": 16, "max_target_len": 8, "decode": {"beam": 2, "max_len": 8}, **extra}


def pipeline_cfg(folder: Path, seq2seq: dict):
    from corpusforge.pipeline_config import pipeline_config_from_dict

    files = {"train": write_jsonl(folder / "train.jsonl", documents(600, 1, 1)),
             "valid": write_jsonl(folder / "valid.jsonl", documents(40, 2, 2))}
    return pipeline_config_from_dict({
        "name": "summaries",
        "corpus": {"name": "docs", "sources": [str(p) for p in files.values()], "dedup": {"exact": False},
                   "reader": {"fields": {"src": "source", "tgt": "target"}, "join_lists": "\n"},
                   "split": {"valid": 0.0, "test": 0.0, "by_source": {"valid.jsonl": "valid"}}},
        "tokenizer": dict(WORD_TOKENIZER),
        "seq2seq": seq2seq,
    }), files


@pytest.fixture(scope="module")
def middle(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("summarize")
    cfg, files = pipeline_cfg(tmp / "data", section())
    store = ArtifactStore(tmp / "store")
    upstream = encoded(cfg, store)
    evaluation, model = build_seq2seq(upstream, cfg.seq2seq, store)
    return {"tmp": tmp, "cfg": cfg, "store": store, "upstream": upstream, "evaluation": evaluation, "model": model,
            "files": files}


def test_join_lists_reads_a_list_of_sentences_as_lines_and_refuses_other_lists():
    from corpusforge.storage.readers import ReaderConfig

    spec = ReaderConfig(fields={"src": "source", "tgt": "target"}, join_lists="\n").field_spec()
    record = spec.record("r1", lambda k: (True, {"source": [" One.\n", "", "Two "], "target": "T"}[k]), b"")
    assert record.fields == {"src": "One.\nTwo", "tgt": "T"}  # stripped, the separator inside an item a space
    bad = spec.record("r2", lambda k: (True, {"source": ["a", 3], "target": "T"}[k]), b"")
    assert bad.reason == "text_not_string" and "int" in bad.detail
    plain = ReaderConfig(fields={"src": "source", "tgt": "target"}).field_spec()
    refused = plain.record("r3", lambda k: (True, {"source": ["a"], "target": "T"}[k]), b"")
    assert refused.reason == "text_not_string" and "join_lists" in refused.detail
    with pytest.raises(ValueError, match="join_lists"):
        ReaderConfig(join_lists="")
    # the option joins a record's identity only when set: every existing corpus keeps its id
    from corpusforge.tasks.config import identity

    assert "join_lists" not in json.dumps(identity(ReaderConfig(fields={"a": "a"})))


def test_a_summarize_config_is_checked_and_translation_ids_stay_as_they_were():
    from corpusforge.tasks.config import identity
    from corpusforge.tasks.seq2seq.config import Seq2SeqStageConfig, seq2seq_config_from_dict

    with pytest.raises(ValueError, match="forward"):
        seq2seq_config_from_dict({"task": "summarize", "direction": "both"})
    with pytest.raises(ValueError, match="max_source_len"):
        seq2seq_config_from_dict({"max_source_len": 1})
    with pytest.raises(ValueError, match="rouge_rule"):
        seq2seq_config_from_dict({"decode": {"rouge_rule": "worst"}})
    plain = json.dumps(identity(Seq2SeqStageConfig(), "seq2seq")) + json.dumps(identity(Seq2SeqStageConfig(), "seq2seq_eval"))
    assert not any(k in plain for k in ("task", "max_source_len", "max_target_len", "rouge_rule"))
    summ = seq2seq_config_from_dict({"task": "summarize", "max_source_len": 300})
    assert identity(summ, "seq2seq") != identity(Seq2SeqStageConfig(), "seq2seq")


def test_the_objective_cuts_source_and_target_apart():
    from corpusforge.models.objectives.seq2seq import Seq2Seq

    obj = Seq2Seq({"train": ([list(range(3, 13))], [list(range(3, 9))])}, pad_id=0, bos_id=1, eos_id=2,
                  max_len=20, max_source_len=4, max_target_len=3)
    src, _, tgt_in, _, target = obj.collate(*obj.splits["train"])
    assert src.tolist() == [[3, 4, 5, 6]]
    assert tgt_in.tolist() == [[1, 3, 4]] and target.tolist() == [[3, 4, 5]]  # cut: no eos
    whole = Seq2Seq({"train": ([[3, 4]], [[5]])}, pad_id=0, bos_id=1, eos_id=2, max_len=20, max_target_len=3)
    assert whole.collate(*whole.splits["train"])[4].tolist() == [[5, 2]]  # short enough: its eos kept


@pytest.mark.learns
def test_the_stage_learns_the_middle_sentence_and_scores_rouge_between_lead_and_oracle(middle):
    model, evaluation = middle["model"], middle["evaluation"]
    mm = read_manifest(Path(model.path))["metrics"]
    assert (mm["documents_train"], mm["references_train"]) == (600, 600)
    assert (mm["documents_valid"], mm["references_valid"]) == (40, 80)  # one pair per (document, reference)
    m = read_manifest(Path(evaluation.path))["metrics"]
    assert m["rouge_split"] == "valid" and m["rouge_rule"] == "best"
    assert m["rouge1"] == m["val_rouge1"] >= 90.0 and m["rougeL"] >= 90.0, m
    assert m["oracle_rouge1"] == pytest.approx(100.0) and m["lead1_rouge1"] < 60.0, m
    # the summaries on disk are what was scored, against the corpus's references (recomputed here)
    from corpusforge.models.summ_eval import rouge

    out = Path(evaluation.path)
    assert not (out / "translations").exists()
    hyps = (out / "summaries" / "valid.src-tgt.txt").read_text(encoding="utf-8").splitlines()
    records = [json.loads(x) for x in middle["files"]["valid"].read_text().splitlines()]
    refs = [[r.strip() for r in rec["target"]] for rec in records]
    assert len(hyps) == 40
    assert rouge(hyps, refs)["rouge1"] == pytest.approx(m["rouge1"])
    scores = json.loads((out / "scores.json").read_text())
    assert scores["task"] == "summarize" and scores["scores"]["valid"]["src-tgt"]["references"] == 80
    samples = json.loads((out / "samples.json").read_text())["src-tgt"]
    assert samples[0]["references"] == refs[0] and samples[0]["summary"] == hyps[0]
    spec = json.loads((Path(model.path) / "config.json").read_text())
    assert spec["translation"]["task"] == "summarize" and spec["translation"]["max_source_len"] == 16
    from corpusforge.tasks.seq2seq.report import highlights, report_plots

    assert any("ROUGE-1/2/L" in line and "Lead-1" in line for line in highlights(out))
    plots = report_plots(out, middle["tmp"] / "plots")
    assert len(plots) == 1 and plots[0][1].stat().st_size > 5000


@pytest.mark.learns
def test_the_artifact_summarizes_sentence_lists_and_the_cli_scores_rouge(middle, capsys):
    from typer.testing import CliRunner

    from corpusforge.api import Artifact
    from corpusforge.cli import app

    summarizer = Artifact.from_dir(middle["model"].path).load()
    assert summarizer.task == "summarize"
    assert summarizer.summarize([["1 2 3", "4 5 6", "7 8 9"]], beam=1) == ["4 5 6"]
    assert summarizer.summarize("1 2 3\n4 5 6\n7 8 9", beam=1) == ["4 5 6"]
    store, mid = str(middle["store"].root), middle["model"].id[:12]
    runner = CliRunner()
    result = runner.invoke(app, ["seq2seq", "evaluate", mid, str(middle["files"]["valid"]), "--json",
                                 "--store", store])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output.strip().splitlines()[-1])
    assert {"rouge1", "rouge2", "rougeL", "lead1_rouge1", "lead1_rouge2", "lead1_rougeL", "oracle_rouge1"} <= set(report)
    m = read_manifest(Path(middle["evaluation"].path))["metrics"]
    assert report["rouge1"] == pytest.approx(m["rouge1"]) and report["lead1_rouge1"] == pytest.approx(m["lead1_rouge1"])
    assert report["documents"] == 40 and report["references"] == 80 and report["rule"] == "best"
    result = runner.invoke(app, ["seq2seq", "summarize", mid, "2 2 2\n7 1 0\n3 3 3", "--json", "--beam", "1",
                                 "--store", store])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output.strip().splitlines()[-1])["summaries"] == ["7 1 0"]
    result = runner.invoke(app, ["seq2seq", "summarize", mid, str(middle["files"]["valid"]), "--store", store])
    assert result.exit_code == 0 and len(result.output.strip().splitlines()) == 40
    result = runner.invoke(app, ["seq2seq", "evaluate", mid, str(middle["files"]["valid"]), "--metric", "meteor",
                                 "--store", store])
    assert result.exit_code == 2 and "--metric" in result.output


def test_lines_are_the_non_empty_stripped_lines():
    assert lines(" a \n\n b\n") == ["a", "b"] and lines(None) == [] and lines("") == []


def test_the_extractive_model_scores_real_sentences_only():
    import torch

    from corpusforge.models.extractive.config import ExtractiveConfig
    from corpusforge.models.extractive.model import Extractive
    from corpusforge.models.objectives.extractive import Extractive as Objective

    model = Extractive(ExtractiveConfig(vocab_size=20, pad_id=0, n_embd=8, n_hidden=8, n_doc_hidden=8))
    docs = [[[5, 6], [7], []], [[8, 9, 10]]]  # an empty sentence, and a document of one sentence
    objective = Objective({"train": (docs, [[0, 1, 0], [1]])}, pad_id=0)
    ids, token_mask, sentence_mask, target = objective._collate("train", [0, 1])
    assert ids.shape == (2, 3, 3) and sentence_mask.tolist() == [[True, True, True], [True, False, False]]
    logits = model(ids, token_mask, sentence_mask)
    assert torch.isinf(logits[1, 1:]).all() and torch.isfinite(logits[0]).all() and torch.isfinite(logits[1, 0])
    loss, _ = objective.loss_module(model)(ids, token_mask, sentence_mask, target)
    loss.backward()
    assert torch.isfinite(loss) and model.wte.weight.grad is not None
    # the padding sentence changes nothing: the first document alone scores the same
    alone = model.eval()(*objective._collate("train", [0])[:3])
    assert torch.allclose(alone[0], model(ids, token_mask, sentence_mask)[0])
    with pytest.raises(ValueError, match="one label per sentence"):
        Objective({"train": (docs, [[0, 1], [1]])}, pad_id=0)


@pytest.mark.learns
def test_the_extractive_summarizer_learns_the_oracle_sentence(middle, tmp_path):
    """task extract on the same documents: the labels are each document's oracle sentence (here the middle one),
    the model learns to pick it, and its summaries are scored by the same ROUGE step."""
    from typer.testing import CliRunner

    from corpusforge.api import Artifact
    from corpusforge.cli import app

    extract = {"family": "extractive", "task": "extract", "name": "middle-extract",
               "model": {"n_embd": 16, "n_hidden": 16, "n_doc_hidden": 16, "dropout": 0.0},
               "train": {**TRAIN, "max_iters": 150, "lr": 1.0e-2}}
    cfg, files = pipeline_cfg(tmp_path / "data", extract)
    store = middle["store"]
    evaluation, model = build_seq2seq(encoded(cfg, store), cfg.seq2seq, store)
    mm = read_manifest(Path(model.path))["metrics"]
    assert mm["val_top1"] >= 0.95 and mm["documents_train"] == 600, mm
    m = read_manifest(Path(evaluation.path))["metrics"]
    assert m["rouge1"] >= 95.0 and m["rouge1"] > m["lead1_rouge1"] and m["sentences"] == 1.0, m
    scores = json.loads((Path(evaluation.path) / "scores.json").read_text())
    assert scores["task"] == "extract"
    extractor = Artifact.from_dir(model.path).load()
    assert extractor.task == "extract"
    assert extractor.summarize([["1 2 3", "4 5 6", "7 8 9"]]) == ["4 5 6"]
    assert extractor.summarize(["1 2 3\n4 5 6\n7 8 9"], sentences=2) == ["1 2 3 4 5 6"] or \
        extractor.summarize(["1 2 3\n4 5 6\n7 8 9"], sentences=2) == ["4 5 6 7 8 9"]  # in document order
    assert extractor.summarize([["1 2 3", "4 5 6", "7 8 9"]], sentences=3, max_words=3) == ["4 5 6"]  # the budget
    runner = CliRunner()
    result = runner.invoke(app, ["seq2seq", "summarize", model.id[:12], "2 2 2\n7 1 0\n3 3 3", "--json",
                                 "--store", str(store.root)])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output.strip().splitlines()[-1])["summaries"] == ["7 1 0"]
    result = runner.invoke(app, ["seq2seq", "summarize", model.id[:12], "2 2 2\n7 1 0\n3 3 3", "--sentences", "3",
                                 "--store", str(store.root)])
    assert result.exit_code == 0 and result.output.strip() == "2 2 2 7 1 0 3 3 3"  # all three, in document order
    result = runner.invoke(app, ["seq2seq", "summarize", middle["model"].id[:12], "1 2 3", "--sentences", "2",
                                 "--store", str(store.root)])
    assert result.exit_code == 2 and "only an extractive model" in result.output
    from corpusforge.tasks.seq2seq.register import translates

    assert translates(Path(model.path))  # registered as a pyfunc that summarizes
