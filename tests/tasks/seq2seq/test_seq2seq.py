"""The seq2seq stage on tiny pairs made by a rule, through the real corpus and tokenizer cores: it learns to reverse
digit sequences and scores it with sacreBLEU; a rerun reuses both steps; editing the decoding re-scores without
retraining; a model field retrains; the artifact loads as a translator; T5-style both directions from one pair
corpus, each scored."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

from corpusforge.storage.store import ArtifactStore, read_manifest
from corpusforge.tasks.seq2seq.build import build_seq2seq, corpus_dir
from corpusforge.tasks.seq2seq.inference import load_translator
from tests.tasks.seq2seq.pairs_fixtures import (
    GRU,
    TRAIN,
    digit_pairs,
    encoded,
    exact_match,
    pipeline,
    reverse,
    shift,
)


@pytest.fixture(scope="module")
def reversed_digits(tmp_path_factory):
    """A model trained once for the module: 800 training pairs, 60 validation and 60 test pairs."""
    tmp = tmp_path_factory.mktemp("reverse")
    splits = {"train": digit_pairs(800, reverse, 1), "valid": digit_pairs(60, reverse, 2),
              "test": digit_pairs(60, reverse, 3)}
    section = {**GRU, "name": "reverser", "train": TRAIN, "decode": {"beam": 4}}
    cfg = pipeline(tmp / "data", splits, section)
    store = ArtifactStore(tmp / "store")
    upstream = encoded(cfg, store)
    seen: list[int] = []
    evaluation, model = build_seq2seq(upstream, cfg.seq2seq, store, on_metrics=lambda step, m: seen.append(step))
    return {"tmp": tmp, "splits": splits, "section": section, "store": store, "upstream": upstream,
            "evaluation": evaluation, "model": model, "cfg": cfg, "seen": seen}


@pytest.mark.learns
def test_the_stage_learns_to_reverse_and_scores_with_sacrebleu(reversed_digits):
    r = reversed_digits
    model, evaluation = r["model"], r["evaluation"]
    assert (model.step, evaluation.step) == ("seq2seq", "seq2seq_eval") and not model.reused
    assert r["seen"] and max(r["seen"]) == TRAIN["max_iters"]  # the trainer reported as it trained
    m = read_manifest(Path(evaluation.path))["metrics"]
    assert m["bleu_split"] == "test" and m["bleu"] == m["test_bleu"] >= 90.0, m
    assert m["val_bleu"] >= 90.0 and m["chrf"] >= 90.0 and m["bleu_tok_lc"] >= 90.0
    assert m["bleu_signature"].startswith("nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.")
    assert "case:lc" in m["bleu_tok_lc_signature"] and m["chrf_signature"].startswith("nrefs:1|case:mixed")
    model_metrics = read_manifest(Path(model.path))["metrics"]
    assert m["val_ppl"] == model_metrics["val_ppl"] < 1.5 and "test_ppl" in model_metrics
    # the scored translations are the detokenized outputs; the references are the corpus's own text
    hyps = (Path(evaluation.path) / "translations" / "test.src-tgt.txt").read_text(encoding="utf-8").splitlines()
    refs = [t for _, t in r["splits"]["test"]]
    assert len(hyps) == 60 and exact_match(hyps, refs) >= 0.9
    from sacrebleu.metrics import BLEU

    assert BLEU().corpus_score(hyps, [refs]).score == pytest.approx(m["test_bleu"])
    scores = json.loads((Path(evaluation.path) / "scores.json").read_text())
    assert scores["decode"]["beam"] == 4 and set(scores["scores"]) == {"valid", "test"}
    spec = json.loads((Path(model.path) / "config.json").read_text())
    assert spec["family"] == "seq2seq" and spec["translation"]["directions"] == [
        {"source": "src", "target": "tgt", "prefix": "", "prefix_ids": []}]
    assert (Path(model.path) / "loss_curve.png").is_file() and (Path(model.path) / "model.safetensors").is_file()


@pytest.mark.learns
def test_the_artifact_loads_as_a_translator(reversed_digits):
    from corpusforge.api import Artifact

    translator = Artifact.from_dir(reversed_digits["model"].path).load()
    assert translator.translate("1 2 3 4", beam=1) == ["4 3 2 1"]
    sources = [s for s, _ in reversed_digits["splits"]["valid"]]
    refs = [t for _, t in reversed_digits["splits"]["valid"]]
    greedy, beam = translator.translate(sources, beam=1), translator.translate(sources, beam=4)
    assert exact_match(greedy, refs) >= 0.9 and exact_match(beam, refs) >= 0.9
    assert translator.translate([]) == [] and translator.direction("forward").key == "src-tgt"
    with pytest.raises(ValueError, match="translates src-tgt"):
        translator.translate("1 2", direction="backward")
    source, output, attention, text = translator.alignment("5 6 7")
    assert source == ["5", "6", "7"] and output[-1] == "</s>" and tuple(attention.shape) == (1, len(output), 3)
    assert [text] == translator.translate("5 6 7", beam=1)
    # issue 50, item 10: the heatmap draws the decode that is printed, beam search included
    for sentence in sources[:5]:
        *_, attention, text = translator.alignment(sentence, beam=4)
        assert [text] == translator.translate(sentence, beam=4) and attention.shape[1] >= len(text.split())


@pytest.mark.learns
def test_a_rerun_reuses_and_a_decode_edit_rescores_without_retraining(reversed_digits):
    from corpusforge.tasks.seq2seq.config import seq2seq_config_from_dict

    r = reversed_digits
    again = build_seq2seq(r["upstream"], r["cfg"].seq2seq, r["store"])
    assert [x.id for x in again] == [r["evaluation"].id, r["model"].id] and all(x.reused for x in again)
    greedy = seq2seq_config_from_dict({**r["section"], "decode": {"beam": 1}})
    evaluation, model = build_seq2seq(r["upstream"], greedy, r["store"])
    assert model.reused and model.id == r["model"].id
    assert not evaluation.reused and evaluation.id != r["evaluation"].id
    assert read_manifest(Path(evaluation.path))["metrics"]["beam"] == 1.0
    # issue 50, item 10: `seq2seq translate` decodes as the model's newest evaluation did (here greedy), not beam 5
    from corpusforge.cli.seq2seq import _decode_defaults

    assert _decode_defaults(Path(model.path), r["store"].root)["beam"] == 1
    assert _decode_defaults()["beam"] == 5  # no model named: seq2seq.decode's defaults
    batch = seq2seq_config_from_dict({**r["section"], "decode": {"beam": 4, "batch_size": 7}})
    assert build_seq2seq(r["upstream"], batch, r["store"])[0].id == r["evaluation"].id  # speed only: same id
    retrained = seq2seq_config_from_dict({**r["section"], "train": {**TRAIN, "max_iters": 20}})
    evaluation, model = build_seq2seq(r["upstream"], retrained, r["store"])
    assert not model.reused and model.id != r["model"].id and evaluation.id != r["evaluation"].id


@pytest.mark.learns
def test_references_are_the_corpus_text_of_the_same_records(reversed_digits):
    """The evaluation scores against the corpus's text of the encoded records, in the same order (not the
    tokenizer's round trip of the ids, which would hide what the tokenizer cannot spell)."""
    r = reversed_digits
    frame = pl.read_parquet(Path(r["upstream"].path) / "test.parquet")
    assert frame.columns == ["doc_id", "src_ids", "tgt_ids"]
    text = pl.read_parquet(corpus_dir(Path(r["upstream"].path)) / "test.parquet")
    assert text["doc_id"].to_list() == frame["doc_id"].to_list()
    assert text["tgt"].to_list() == [t for _, t in r["splits"]["test"]]


@pytest.mark.learns
def test_t5_style_one_model_learns_both_directions_each_scored(tmp_path):
    """Pairs (x, x + 1 digit by digit): forward adds one, backward subtracts one. The sources of both directions
    look alike, so only the task prefix tells the model which to do."""
    splits = {"train": digit_pairs(800, shift, 1), "valid": digit_pairs(60, shift, 2)}
    section = {**GRU, "name": "shifter", "train": TRAIN, "direction": "both",
               "languages": {"src": "plain", "tgt": "shifted"}, "decode": {"beam": 1}}
    cfg = pipeline(tmp_path / "data", splits, section)
    assert cfg.tokenizer.special_tokens == ("translate plain to shifted: ", "translate shifted to plain: ")
    store = ArtifactStore(tmp_path / "store")
    evaluation, model = build_seq2seq(encoded(cfg, store), cfg.seq2seq, store)
    m = read_manifest(Path(evaluation.path))["metrics"]
    assert m["bleu_split"] == "valid" and "test_bleu" not in m
    assert m["bleu_src_tgt"] >= 90.0 and m["bleu_tgt_src"] >= 90.0, m
    assert m["bleu"] == m["bleu_src_tgt"] and m["chrf_tgt_src"] >= 90.0
    translator = load_translator(model.path)
    assert [d.key for d in translator.directions] == ["src-tgt", "tgt-src"]
    assert translator.translate("3 4 5", beam=1) == ["4 5 6"]
    assert translator.translate("3 4 5", beam=1, direction="backward") == ["2 3 4"]
    assert translator.translate("3 4 5", beam=1, direction="tgt-src") == ["2 3 4"]
    for key in ("src-tgt", "tgt-src"):
        assert (Path(evaluation.path) / "translations" / f"valid.{key}.txt").is_file()
    samples = json.loads((Path(evaluation.path) / "samples.json").read_text())
    assert set(samples) == {"src-tgt", "tgt-src"} and samples["tgt-src"][0]["source"] == splits["valid"][0][1]


def test_no_validation_pairs_is_one_clear_error(tmp_path):
    cfg = pipeline(tmp_path / "data", {"train": digit_pairs(40, reverse, 1)}, {**GRU, "train": {**TRAIN, "max_iters": 2}})
    store = ArtifactStore(tmp_path / "store")
    with pytest.raises(ValueError, match="needs a validation .* --valid SRC TGT"):
        build_seq2seq(encoded(cfg, store), cfg.seq2seq, store)
