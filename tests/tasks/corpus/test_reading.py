"""Issue 44, item 5, at the tokenizer: a model's config.json that records its corpus's cleaning (``input.clean``)
gets a tokenizer from the loaders that cleans every text it encodes that way first; one without gets the tokenizer
itself, as before. A prompt keeps its trailing whitespace (it is the start of a document, not a whole one)."""

from __future__ import annotations

from corpusforge.models.tokenization import make_tokenizer
from corpusforge.tasks.corpus.reading import CleaningTokenizer, as_loaded, reading_as_trained

PTB = {"ops": ["lowercase", "ptb_mikolov"]}


def word_tokenizer():
    tok = make_tokenizer("word", pre_tokenizer="whitespace_split")
    tok.train([" mr. smith 's firm paid $ N up N N ", " the company said it wo n't grow "])
    return tok


def test_a_recorded_cleaning_is_applied_before_the_tokenizer():
    tok = word_tokenizer()
    reading = reading_as_trained(tok, {"input": {"clean": PTB}})
    assert isinstance(reading, CleaningTokenizer) and as_loaded(reading) is tok
    raw, treebank = "Mr. Smith's firm paid $3.50, up 25%.", "mr. smith 's firm paid $ N up N N"
    assert reading.encode(raw) == tok.encode(treebank) != tok.encode(raw)
    assert reading.encode_batch([raw, "The company said it won't grow."]) == \
        tok.encode_batch([treebank, "the company said it wo n't grow"])
    assert tok.unk_id not in reading.encode(raw)  # every word known once cleaned
    assert reading.tokenize(raw) == tok.tokenize(treebank)
    assert reading.vocab_size == tok.vocab_size and reading.decode(tok.encode("the company")) == "the company"


def test_a_prompt_keeps_its_trailing_whitespace():
    reading = reading_as_trained(word_tokenizer(), {"input": {"clean": {"preset": "lm"}}})
    assert reading.clean(["ROMEO:\n", "the  end ", "  ", "\n"]) == ["ROMEO:\n", "the end ", " ", "\n"]


def test_no_recorded_cleaning_or_raw_gives_the_tokenizer_itself():
    tok = word_tokenizer()
    assert reading_as_trained(tok, {}) is tok  # a model trained before input.clean was recorded: as before
    assert reading_as_trained(tok, {"input": {"clean": {"preset": "raw"}}}) is tok
