"""Progress events of tokenizer training, embeddings epochs and embeddings evaluation (issue 16 item 4).

Only that the events are emitted, in order, with the right totals: no timing.
"""

from __future__ import annotations

import numpy as np
import pytest

from corpusforge.models.tokenization.classic_bpe import ClassicBPETokenizer
from corpusforge.storage.store import ArtifactStore
from corpusforge.tasks.embeddings.build import build_embeddings, phase_progress
from corpusforge.tasks.embeddings.config import EmbeddingsConfig
from corpusforge.tasks.embeddings.eval import evaluate_vectors
from corpusforge.tasks.step import StepResult
from corpusforge.tasks.tokenizer.config import TokenizerConfig
from corpusforge.tasks.tokenizer.train import train_tokenizer
from tests.conftest import write

TEXTBOOK = " ".join(["low"] * 5 + ["lower"] * 2 + ["newest"] * 6 + ["widest"] * 3 + ["highest"] * 2)


def test_classic_bpe_reports_merges_start_and_end():
    events = []
    ClassicBPETokenizer().train([TEXTBOOK], merges=10, on_progress=lambda d, t: events.append((d, t)))
    assert events[0] == (0, 10) and events[-1] == (10, 10)
    assert all(a[0] <= b[0] for a, b in zip(events, events[1:]))


def test_classic_bpe_reports_every_hundred_merges_and_an_early_stop():
    words = [f"w{i:04d}x{i % 7}" for i in range(400)]
    events = []
    tok = ClassicBPETokenizer()
    tok.train([" ".join(words * 3)], merges=5000, min_frequency=1, on_progress=lambda d, t: events.append((d, t)))
    done = [d for d, _ in events]
    assert done[0] == 0 and {t for _, t in events} == {5000}
    assert [d for d in done[1:-1]] == list(range(100, done[-1] + 1, 100))[: len(done) - 2]
    assert done[-1] == len(tok.merges) < 5000  # stopped early: the last event says how far it got


def test_train_tokenizer_passes_progress_through():
    events = []
    train_tokenizer([TEXTBOOK], TokenizerConfig(kind="classic-bpe", merges=5), on_progress=lambda d, t: events.append(d))
    assert events[0] == 0 and events[-1] == 5


@pytest.mark.parametrize("show", [True, False])
def test_hf_trainers_get_show_progress(show, monkeypatch):
    from tokenizers import Tokenizer

    seen = []
    real = Tokenizer.train_from_iterator

    def spy(self, iterator, trainer=None, **kwargs):
        seen.append(trainer.show_progress)
        return real(self, iterator, trainer=trainer, **kwargs)

    monkeypatch.setattr(Tokenizer, "train_from_iterator", spy)
    train_tokenizer([TEXTBOOK] * 3, TokenizerConfig(kind="byte-bpe", vocab_size=300), show_progress=show)
    assert seen == [show]


def _corpus(tmp_path, lines):
    import polars as pl

    path = tmp_path / "corpus"
    path.mkdir()
    pl.DataFrame({"text": lines}).write_parquet(path / "train.parquet")
    return StepResult(id="c" * 64, step="corpus", name="c", path=str(path), reused=True, seconds=0.0)


def _lines():
    rng = np.random.default_rng(0)
    vocab = ["king", "queen", "man", "woman", "boy", "girl", "prince", "princess", "the", "a", "is", "of"]
    return [" ".join(rng.choice(vocab, 12)) for _ in range(300)]


@pytest.mark.parametrize("kind", ["word2vec", "fasttext"])
def test_gensim_epochs_are_reported(kind, tmp_path):
    events, again = [], []
    cfg = EmbeddingsConfig(kind=kind, dim=8, epochs=3, min_count=1, workers=1, seed=1, bucket=1000)
    corpus, store = _corpus(tmp_path, _lines()), ArtifactStore(tmp_path / "s")
    build_embeddings(corpus, cfg, store, on_progress=lambda *e: events.append(e))
    assert events == [("epochs", 0, 3), ("epochs", 1, 3), ("epochs", 2, 3), ("epochs", 3, 3)]
    build_embeddings(corpus, cfg, store, on_progress=lambda *e: again.append(e))
    assert again == []  # reused from the store: nothing is trained, nothing reported


def test_glove_epochs_and_evaluation_are_reported(tmp_path):
    analogies = write(tmp_path / "q.txt", ": family\nking queen man woman\nboy girl man woman\n"
                                          ": royal\nprince princess king queen\nfoo bar baz qux\n")
    pairs = write(tmp_path / "ws.txt", "king queen 9\nman woman 8\nboy girl 7\nthe a 1\n")
    events = []
    cfg = EmbeddingsConfig(kind="glove", dim=8, epochs=2, min_count=1, seed=1, device="cpu",
                           analogies=str(analogies), similarity=(str(pairs),), neighbors=("king",))
    build_embeddings(_corpus(tmp_path, _lines()), cfg, ArtifactStore(tmp_path / "s"),
                     on_progress=lambda *e: events.append(e))
    assert [e for e in events if e[0] == "epochs"] == [("epochs", 0, 2), ("epochs", 1, 2), ("epochs", 2, 2)]
    evaluation = [e[1:] for e in events if e[0] == "evaluation"]
    # 4 analogy questions (2 sections), 4 word pairs, 1 neighbour word: 9 units
    assert evaluation == [(0, 9), (2, 9), (4, 9), (8, 9), (9, 9)]
    assert events.index(("epochs", 2, 2)) < events.index(("evaluation", 0, 9))


def test_evaluation_by_section_gives_the_same_report_as_all_at_once(tmp_path):
    from corpusforge.models.embedding_eval import WordVectors, evaluate_analogies, read_analogies

    rng = np.random.default_rng(3)
    words = [f"w{i}" for i in range(40)]
    vectors = rng.normal(size=(40, 6)).astype(np.float32)
    lines = []
    for section in ("a", "b", "c"):
        lines.append(f": {section}")
        lines += [" ".join(rng.choice(words + ["oov"], 4)) for _ in range(30)]
    q = write(tmp_path / "q.txt", "\n".join(lines) + "\n")
    events = []
    report, metrics = evaluate_vectors(words, vectors, analogies=str(q), on_progress=lambda d, t: events.append(d))
    whole = evaluate_analogies(WordVectors(words, vectors), read_analogies(q))
    assert {k: v for k, v in report["analogies"].items() if k != "file"} == whole
    assert events == [0, 30, 60, 90]


def test_phase_progress_is_silent_off_a_terminal(capfd):
    with phase_progress("embeddings x") as update:
        update("epochs", 0, 2)
        update("epochs", 2, 2)
        update("evaluation", 1, 1)
    captured = capfd.readouterr()
    assert captured.out == "" and captured.err == ""


def test_phase_progress_draws_one_bar_per_phase_on_a_terminal(monkeypatch):
    import corpusforge.tasks.progress as progress

    opened = []

    class Bar:
        def __init__(self, description):
            self.description, self.updates = description, []
            opened.append(self)

        def __enter__(self):
            return lambda done, total: self.updates.append((done, total))

        def __exit__(self, *exc):
            self.closed = True

    monkeypatch.setattr(progress, "shard_progress", Bar)
    with phase_progress("embeddings x") as update:
        update("epochs", 0, 2)
        update("epochs", 2, 2)
        update("evaluation", 1, 1)
    assert [b.description for b in opened] == ["embeddings x: epochs", "embeddings x: evaluation"]
    assert opened[0].updates == [(0, 2), (2, 2)] and opened[1].updates == [(1, 1)]
    assert all(getattr(b, "closed", False) for b in opened)
