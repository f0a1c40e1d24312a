"""Token-aligned records (issue 46, item 1): CoNLL-U and CoNLL column files read into sentences whose words each
carry their tags, and every sentence that cannot be aligned quarantined with its reason and line, never dropped
silently; what cannot be read at all (a missing tag column, an untagged file, BIO mixed with BIOES) is one line.
On ../shared: the counts of the corpora's READMEs, and every EWT sentence's text as its `# text` comment."""

from __future__ import annotations

from pathlib import Path

import pytest

from corpusforge.storage.tagged import TagColumns, TaggedError, read_columns, read_conllu
from tests.conftest import REPO

SHARED = REPO.parent / "shared" / "corpora"

CONLLU = """# sent_id = 1
# text = They didn't go.
1\tThey\tthey\tPRON\tPRP\t_\t4\tnsubj\t_\t_
2-3\tdidn't\t_\t_\t_\t_\t_\t_\t_\t_
2\tdid\tdo\tAUX\tVBD\t_\t4\taux\t_\t_
3\tn't\tnot\tPART\tRB\t_\t4\tadvmod\t_\t_
4\tgo\tgo\tVERB\tVB\t_\t0\troot\t_\tSpaceAfter=No
4.1\tgone\tgo\tVERB\tVBN\t_\t_\t_\t4:conj\t_
5\t.\t.\tPUNCT\t.\t_\t4\tpunct\t_\t_

# sent_id = 2
1\tHello\thello\tINTJ\tUH\t_\t0\troot\t_\t_
2\tthere\tthere\tADVV\tRB\t_\t1\tadvmod\t_\t_

# sent_id = 3
1\tbroken\tbroken\tADJ
2\tline\tline\tNOUN\tNN\t_\t0\troot\t_\t_

# sent_id = 4
# text = nothing here

1\tOk\tok\tINTJ\tUH\t_\t0\troot\t_\t_
"""


def write(tmp_path: Path, name: str, text: str | bytes) -> Path:
    path = tmp_path / name
    path.write_bytes(text if isinstance(text, bytes) else text.encode("utf-8"))
    return path


def test_conllu_words_tags_text_and_each_bad_sentence_quarantined_with_its_line(tmp_path):
    records = list(read_conllu(write(tmp_path, "a.conllu", CONLLU), TagColumns({"upos": "upos", "xpos": 4})))
    assert [r.locator for r in records] == ["a.conllu:1", "a.conllu:11", "a.conllu:15", "a.conllu:19", "a.conllu:22"]
    first = records[0]
    assert first.ok and first.fields == {"tokens": ["They", "did", "n't", "go", "."],
                                         "upos": ["PRON", "AUX", "PART", "VERB", "PUNCT"],
                                         "xpos": ["PRP", "VBD", "RB", "VB", "."]}  # the empty node 4.1 is no word
    # the text as written: the multiword token's surface form, SpaceAfter=No kept; its words share its span
    assert first.text == "They didn't go."
    assert first.meta["offsets"] == [[0, 4], [5, 11], [5, 11], [12, 14], [14, 15]]
    bad = {r.locator: (r.reason, r.detail) for r in records if not r.ok}
    assert bad["a.conllu:11"][0] == "unknown_tag" and "'ADVV'" in bad["a.conllu:11"][1]  # not one of the 17 UPOS
    assert bad["a.conllu:15"] == ("malformed_line", "line 16: 4 tab-separated columns, CoNLL-U has 10")
    assert bad["a.conllu:19"] == ("empty_sentence", "line 19: a sentence without a word")  # comments only
    assert records[4].ok and records[4].fields["tokens"] == ["Ok"]
    assert all(r.raw for r in records if not r.ok)  # the quarantine keeps the sentence's bytes


def test_column_files_entity_tags_and_their_problems(tmp_path):
    lines = [b"-DOCSTART-\tO", b"", b"EU\tB-ORG", b"rejects\tO", b"German\tB-MISC", b"call\tO",
             b"\t",  # a line holding only a tab ends a sentence too (WNUT-17's train file)
             b"Peter\tB-PER", b"Blackburn\tI-PER", b"", b"bad\tB_PER", b"", b"short", b"", b"na\xefve\tO", b"",
             b"last\tO"]
    path = write(tmp_path, "ner.conll", b"\n".join(lines) + b"\n")
    records = list(read_columns(path, TagColumns({"ner": 1})))
    good = [r for r in records if r.ok]
    assert [r.fields["tokens"] for r in good] == [["EU", "rejects", "German", "call"], ["Peter", "Blackburn"],
                                                 ["last"]]
    assert good[0].fields["ner"] == ["B-ORG", "O", "B-MISC", "O"] and good[0].text == "EU rejects German call"
    assert good[0].meta["offsets"][2] == [11, 17]
    bad = {r.reason: r for r in records if not r.ok}
    assert set(bad) == {"unknown_tag", "malformed_line", "invalid_utf8"}
    assert bad["unknown_tag"].locator == "ner.conll:11" and "'B_PER'" in bad["unknown_tag"].detail
    assert bad["malformed_line"].detail == "line 13: 1 columns, the file's lines have 2"
    assert bad["invalid_utf8"].detail.startswith("line 15: invalid UTF-8")
    assert [r.locator for r in records] == [f"ner.conll:{n}" for n in (3, 8, 11, 13, 15, 17)]


def test_what_cannot_be_read_is_one_line(tmp_path):
    conll = write(tmp_path, "x.conll", "a\tO\nb\tB-LOC\n")
    with pytest.raises(TaggedError, match=r"column 3 \(ner\) does not exist: its lines have 2 columns"):
        list(read_columns(conll, TagColumns({"ner": 3})))
    with pytest.raises(TaggedError, match="no column named 'ner'.*unnamed"):
        list(read_columns(conll, TagColumns({"ner": "ner"})))
    assert list(read_columns(conll, TagColumns({"ner": "ner"}), names=["token", "ner"]))[0].fields["ner"] == ["O", "B-LOC"]
    with pytest.raises(TaggedError, match="one column: no tags to learn from"):
        list(read_columns(write(tmp_path, "plain.txt", "just\nwords\n"), TagColumns({"tag": -1})))
    with pytest.raises(TaggedError, match="CoNLL-U has no tag column 'ner'"):
        list(read_conllu(write(tmp_path, "y.conllu", "1\tA\ta\tX\t_\t_\t0\troot\t_\t_\n"), TagColumns({"ner": "ner"})))
    mixed = write(tmp_path, "mixed.conll", "New\tB-LOC\nYork\tE-LOC\n\nParis\tB-LOC\nis\tO\n")
    with pytest.raises(TaggedError, match="ner mixes BIO and BIOES: an E-/S- tag on line 2, an entity ending "
                                          "without E- on line 4"):
        list(read_columns(mixed, TagColumns({"ner": 1})))
    bioes = write(tmp_path, "bioes.conll", "New\tB-LOC\nYork\tE-LOC\n\nParis\tS-LOC\nis\tO\n")
    assert len(list(read_columns(bioes, TagColumns({"ner": 1})))) == 2


@pytest.mark.skipif(not (SHARED / "ud-ewt").is_dir(), reason="needs ../shared/corpora/ud-ewt")
@pytest.mark.parametrize("split, sentences", [("dev", 2001), pytest.param("train", 12544, marks=pytest.mark.corpus)])
def test_ewt_reads_whole_with_the_text_of_every_sentence(split, sentences):
    import conllu

    path = SHARED / "ud-ewt" / f"en_ewt-ud-{split}.conllu"
    records = list(read_conllu(path, TagColumns({"upos": "upos"})))
    assert len(records) == sentences and all(r.ok for r in records)  # the README's counts, nothing quarantined
    with open(path, encoding="utf-8") as fh:
        texts = [s.metadata["text"] for s in conllu.parse_incr(fh)]
    assert [r.text for r in records] == texts  # rebuilt from the words and SpaceAfter=No, as UD wrote it
    words = differ = 0
    for r in records:
        ends = [0]
        for word, (a, b) in zip(r.fields["tokens"], r.meta["offsets"]):
            assert ends[-1] <= a < b <= len(r.text)  # in order, inside the text, never empty
            ends.append(a)
            words, differ = words + 1, differ + (r.text[a:b] != word)
    assert 0 < differ < 0.03 * words  # only the words of multiword tokens ("did", "n't" of "didn't") differ


@pytest.mark.skipif(not (SHARED / "wnut17").is_dir(), reason="needs ../shared/corpora/wnut17")
def test_wnut17_counts_as_its_readme():
    from seqeval.metrics.sequence_labeling import get_entities

    # ../shared/corpora/wnut17/README.md: sentences, tokens, entities (seqeval's get_entities)
    for name, sentences, tokens, entities in (("wnut17train.conll", 3394, 62730, 1975),
                                              ("emerging.dev.conll", 1009, 15733, 836)):
        records = list(read_columns(SHARED / "wnut17" / name, TagColumns({"ner": 1})))
        assert all(r.ok for r in records) and len(records) == sentences
        assert sum(len(r.fields["tokens"]) for r in records) == tokens
        assert len(get_entities([r.fields["ner"] for r in records])) == entities


def test_the_corpus_form_read_from_a_stream_joined_and_bounded(tmp_path):
    """What the corpus stage reads (storage/readers.py): the lines of the stream it hashes and decompresses, each
    sentence's words and tags joined by single spaces (a word or tag that could not be: ``token_whitespace``, naming
    its line), the text and offsets in meta, and no sentence held past ``limit`` bytes (``too_large``)."""
    import io

    path = write(tmp_path, "a.conllu", CONLLU)
    tags = TagColumns({"upos": "upos"})
    records = list(read_conllu("d/a.conllu", tags, "line", stream=io.BufferedReader(io.BytesIO(CONLLU.encode())),
                               joined=True))
    listed = list(read_conllu(path, tags))
    assert [r.locator for r in records] == [r.locator.replace("a.conllu", "line") for r in listed]
    assert [r.reason for r in records] == [r.reason for r in listed]
    first = records[0]
    assert first.fields == {"tokens": "They did n't go .", "upos": "PRON AUX PART VERB PUNCT"}
    assert first.meta == {"text": "They didn't go.", "offsets": listed[0].meta["offsets"]}
    with pytest.raises(TaggedError, match="^d/a.conllu: CoNLL-U has no tag column"):  # the stream's name in errors
        list(read_conllu("d/a.conllu", TagColumns({"ner": "ner"}), stream=io.BytesIO(b"")))

    lines = [b"New York\tNNP", b"is\tVBZ", b"", b"word\t", b"", b"fine\tJJ", b""]  # an iterable of lines works too
    bad = {r.locator: (r.reason, r.detail) for r in read_columns("c.conll", TagColumns({"pos": 1}), stream=lines,
                                                                 joined=True)}
    assert bad["c.conll:1"][0] == "token_whitespace"
    assert bad["c.conll:1"][1].startswith("line 1: word 1 'New York' holds whitespace")
    assert bad["c.conll:4"][0] == "token_whitespace" and bad["c.conll:4"][1].startswith("line 4: pos tag 1 '' is empty")
    assert bad["c.conll:6"] == (None, "")

    long = b"".join(b"w%d\tX\n" % i for i in range(200)) + b"\nshort\tX\n"
    out = list(read_columns("big.conll", TagColumns({"pos": 1}), stream=io.BufferedReader(io.BytesIO(long)),
                            joined=True, limit=300))
    assert [(r.locator, r.reason) for r in out] == [("big.conll:1", "too_large"), ("big.conll:202", None)]
    assert out[0].detail == f"line 1: a sentence of {len(long) - 10} bytes > max_document_bytes 300"
    assert out[0].raw.startswith(b"w0\tX\nw1\tX") and len(out[0].raw) < 4200
    # with a stream the path only names the file: it need not exist
    assert [r.fields for r in read_columns(tmp_path / "none.conll", TagColumns({"pos": 1}), stream=[b"a\tX"])] == [
        {"tokens": ["a"], "pos": ["X"]}]
