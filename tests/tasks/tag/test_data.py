"""The tag stage's pieces that need no training: the vocabularies, raw text split into words with offsets, and
the scores a split gets (entity tags by seqeval, part of speech by accuracy and confusion counts)."""

from __future__ import annotations

import pytest

from corpusforge.tasks.tag.data import Vocab, is_entity_tags, scheme_of, split_words
from corpusforge.tasks.tag.inference import score


def test_vocab_keeps_frequent_words_and_every_character():
    words = [["the", "cat", "sat"], ["the", "dog"]]
    tags = [["DET", "NOUN", "VERB"], ["DET", "NOUN"]]
    v = Vocab.build(words, tags, min_count=2)
    assert v.words == ["<pad>", "<unk>", "the"] and v.tags == ["DET", "NOUN", "VERB"]
    ids, chars = v.encode(["the", "cow"])
    assert ids == [2, 1]  # an unseen word is <unk> ...
    assert chars[1] == [v.char_id["c"], v.char_id["o"], 1]  # ... its characters still read ('w' unseen: unknown)
    assert Vocab.build(words, tags, min_count=1, lowercase=True).encode(["The"])[0] == [Vocab.build(
        words, tags, min_count=1, lowercase=True).word_id["the"]]
    with pytest.raises(ValueError, match="'ADJ' is not one the training split has"):
        v.tag_ids(["ADJ"], "valid")
    assert v.coverage([["the", "cow"]]) == 0.5


def test_vocab_round_trips(tmp_path):
    v = Vocab.build([["a", "b"]], [["X", "Y"]], min_count=1)
    v.save(tmp_path / "vocab.json")
    w = Vocab.load(tmp_path / "vocab.json")
    assert w.to_dict() == v.to_dict()


@pytest.mark.parametrize("text, words", [
    ("I don't know.", ["I", "do", "n't", "know", "."]),
    ("It's 3.5 km to @bob's #party http://x.org/a?b=1 now!", ["It", "'s", "3.5", "km", "to", "@bob", "'s", "#party",
                                                              "http://x.org/a?b=1", "now", "!"]),
    ("well-known e-mail...", ["well-known", "e-mail", "..."]),
    ("", []),
])
def test_split_words_gives_words_and_their_offsets(text, words):
    got, offsets = split_words(text)
    assert got == words
    assert [text[a:b] for a, b in offsets] == words


def test_entity_tags_are_told_apart():
    assert is_entity_tags(["O", "B-person", "I-person"]) and scheme_of(["O", "B-x", "I-x"]) == "IOB2"
    assert scheme_of(["O", "S-x", "B-y", "E-y"]) == "IOBES"
    assert not is_entity_tags(["NOUN", "VERB"]) and not is_entity_tags(["O"])


def test_score_entities_and_part_of_speech():
    words = [["Bob", "lives", "in", "New", "York"]]
    gold = [["B-person", "O", "O", "B-location", "I-location"]]
    pred = [["B-person", "O", "O", "B-location", "O"]]  # the location cut short: a wrong entity
    tags = ["B-location", "B-person", "I-location", "O"]
    s = score(words, gold, pred, tags, train=(words, gold))
    assert s["precision"] == 0.5 and s["recall"] == 0.5 and s["f1"] == 0.5 and s["entities"] == 2
    assert s["per_type"]["person"]["f1"] == 1.0 and s["per_type"]["location"]["f1"] == 0.0
    assert s["accuracy"] == 0.8 and s["baseline_accuracy"] == 1.0  # the baseline saw these very words
    assert s["frequent_errors"] == [{"word": "York", "gold": "I-location", "predicted": "O", "count": 1}]
    pos = score([["a", "b"]], [["X", "Y"]], [["X", "X"]], ["X", "Y"])
    assert pos["confusion"] == {"tags": ["X", "Y"], "counts": [[1, 0], [1, 0]]} and "f1" not in pos


def test_a_tagged_sentence_is_rendered_with_its_spans(tmp_path):
    from corpusforge.models.tag_eval import spans
    from corpusforge.tasks.tag.render import plot_tagged, terminal

    words, tags = ["Bob", "lives", "in", "New", "York"], ["B-person", "O", "O", "B-location", "I-location"]
    text = "Bob lives in New York"
    offsets = [[0, 3], [4, 9], [10, 12], [13, 16], [17, 21]]
    row = {"words": words, "tags": tags, "spans": spans(words, tags, offsets, text)}
    assert terminal(row) == "[Bob]person lives in [New York]location"
    assert "\x1b[" in terminal(row, colour=True) and terminal(row, colour=True).count("\x1b[0m") == 2
    assert terminal({"words": ["a", "cat"], "tags": ["DET", "NOUN"], "spans": []}) == "a/DET cat/NOUN"
    png = plot_tagged({**row, "gold": tags, "text": text, "offsets": offsets}, tmp_path / "t.png", "a sentence")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 2000
    pos = plot_tagged({"words": ["a", "cat"], "tags": ["DET", "NOUN"], "gold": ["DET", "VERB"]}, tmp_path / "p.png", "x")
    assert pos.stat().st_size > 1000


def test_a_tag_section_needs_a_tagged_corpus_with_its_field():
    from corpusforge.pipeline_config import pipeline_config_from_dict
    from corpusforge.tasks.config import ConfigError

    corpus = {"name": "c", "sources": ["x.conllu"]}
    with pytest.raises(ConfigError, match=r"no tagged records; set corpus.reader.tags"):
        pipeline_config_from_dict({"name": "p", "corpus": corpus, "tag": {}})
    with pytest.raises(ConfigError, match=r"tag.tags: 'upos' is not a tag field of the corpus \(corpus.reader.tags has ner\)"):
        pipeline_config_from_dict({"name": "p", "corpus": {**corpus, "reader": {"tags": {"ner": -1}}}, "tag": {}})
    cfg = pipeline_config_from_dict({"name": "p", "corpus": {**corpus, "reader": {"tags": {"ner": -1}}},
                                     "tag": {"tags": "ner", "model": {"head": "crf"}}})
    assert cfg.tag.model.head == "crf" and cfg.tag.family == "tagger"
    with pytest.raises(ConfigError, match="subword_labels: all is for a family that reads sub-words"):
        pipeline_config_from_dict({"name": "p", "corpus": {**corpus, "reader": {"tags": {"ner": -1}}},
                                   "tag": {"tags": "ner", "subword_labels": "all"}})
    with pytest.raises(ConfigError, match="family bert_tagger starts from a pre-trained BERT"):
        pipeline_config_from_dict({"name": "p", "corpus": {**corpus, "reader": {"tags": {"ner": -1}}},
                                   "tag": {"tags": "ner", "family": "bert_tagger"}})
