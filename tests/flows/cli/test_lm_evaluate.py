"""``corpusforge lm evaluate ID FILE...`` and ``cf.lm.evaluate``: a neural LM's perplexity on new text.

The scoring core is checked against a hand-written forward pass (tiny GPT and GRU, random weights); the command on
a tiny model trained through the real pipeline must give, for the file held out as its test split, the test
perplexity the lm stage reported.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from corpusforge.tasks.lm.evaluate import encode_documents, read_documents, score_stream
from tests.commands import corpusforge
from tests.conftest import REPO, write
from tests.flows.cli.test_lm import TINY, cli_env


def tiny_model(family: str, block: int = 8, vocab: int = 20):
    from corpusforge.models.zoo import build_model
    from corpusforge.tasks.lm.config import lm_config_from_dict

    model_cfg = {"gpt": {"n_layer": 1, "n_head": 2, "n_embd": 16, "block_size": block, "dropout": 0.0},
                 "rnn": {"cell": "gru", "n_layer": 1, "n_embd": 16, "n_hidden": 16, "block_size": block,
                         "dropout": 0.0}}[family]
    cfg = lm_config_from_dict({"family": family, "model": model_cfg})
    torch.manual_seed(0)
    return build_model(family, cfg.model_config(vocab, {})).eval()


def hand_nll(model, ids: np.ndarray) -> float:
    """Mean next-token cross-entropy of one window holding the whole stream, state starting empty."""
    x = torch.tensor(ids[None, :-1], dtype=torch.long)
    y = torch.tensor(ids[None, 1:], dtype=torch.long)
    with torch.no_grad():
        logits, _ = model(x, None)
    return float(F.cross_entropy(logits.float().flatten(0, 1), y.flatten()))


@pytest.mark.parametrize("family", ["gpt", "rnn"])
def test_score_stream_is_the_mean_next_token_cross_entropy(family):
    model = tiny_model(family)
    ids = np.random.default_rng(1).integers(0, 20, 7)  # shorter than one window of 8: scored as one window
    scored = score_stream(model, {"family": family, "train": {"batch_size": 4}}, ids)
    # a recurrent model reads a stream of n > block steps (corpusforge.models.objectives.StreamBatches): its last
    # prediction goes when the text is shorter than a window
    n = 6 if family == "gpt" else 5
    assert scored["tokens"] == n
    assert scored["nll"] == pytest.approx(hand_nll(model, ids[:n + 1]), rel=1e-5)
    assert scored["perplexity"] == pytest.approx(math.exp(scored["nll"]), rel=1e-12)
    if family == "gpt":  # 4 windows of 8 (33 tokens: 32 predictions), each scored from its own start
        long = np.random.default_rng(2).integers(0, 20, 35)
        scored = score_stream(model, {"family": family, "train": {"batch_size": 3}}, long)
        windows = [hand_nll(model, long[i * 8: i * 8 + 9]) for i in range(4)]
        assert scored["tokens"] == 32 and scored["nll"] == pytest.approx(np.mean(windows), rel=1e-5)
    with pytest.raises(ValueError, match="at least 3"):
        score_stream(model, {"family": family}, ids[:2])


def test_documents_are_read_as_the_corpus_reads_them(tmp_path):
    path = write(tmp_path / "t.txt", "a b\n\n  \nc d e\nf\n\ng h\n")
    assert read_documents(path) == ["a b", "c d e", "f", "g h"]
    assert read_documents(path, "paragraph") == ["a b", "c d e\nf", "g h"]
    assert read_documents(path, "file") == ["a b\n\n  \nc d e\nf\n\ng h"]  # the reader drops the final newline
    assert read_documents(path, "line", clean={"preset": "classic"}) == ["b", "c d e", "f", "g h"]

    class Tok:  # an end-of-text id follows every document, as the encode step writes the stream
        eot_id = 9

        def encode_batch(self, texts, add_special_tokens=False):
            return [[len(w) for w in t.split()] for t in texts]

    assert encode_documents(Tok(), ["aa b", "ccc"]).tolist() == [2, 1, 9, 3, 9]
    with pytest.raises(ValueError, match="documents: use one of"):
        read_documents(path, "sentence")


@pytest.mark.e2e
def test_lm_evaluate_gives_the_lm_stages_test_perplexity(prefect_harness, tmp_path, monkeypatch):
    text = (REPO / "data" / "sample" / "tinyshakespeare.txt").read_text(encoding="utf-8")
    train = write(tmp_path / "tiny.txt", text[:20000])
    held = write(tmp_path / "held.txt", text[40000:46000])  # pinned as the test split (paragraph documents)
    other = write(tmp_path / "other.txt", text[50000:52000])
    store = tmp_path / "store"
    res = corpusforge("lm", "train", train, "--preset", "shakespeare-char-cpu", *TINY, "--test", held, "--store",
                      store, "--json", env=cli_env(prefect_harness), cwd=tmp_path, code=0)
    trained = json.loads(res.stdout.strip().splitlines()[-1])
    metrics = trained["metrics"]

    def cli(*args, code=0, subprocess=False):  # in this process unless asked (tests/commands.py)
        return corpusforge("lm", "evaluate", *args, "--store", store, env=cli_env(None), cwd=tmp_path, code=code,
                           subprocess=subprocess)

    report = json.loads(cli(trained["id"][:10], "./held.txt", "other.txt", "--json", subprocess=True).stdout.strip()
                        .splitlines()[-1])
    assert report["id"] == trained["id"] and report["family"] == "gpt" and report["step"] == "lm"
    assert list(report["results"]) == ["./held.txt", "other.txt"]  # keyed by the paths as given
    held_result = report["results"]["./held.txt"]
    assert held_result["perplexity"] == pytest.approx(metrics["test_ppl"], rel=1e-6)
    assert held_result["nll"] == pytest.approx(metrics["test_loss"], rel=1e-6)
    paragraphs = [p for p in held.read_text(encoding="utf-8").split("\n\n") if p.strip()]
    assert held_result["documents"] == len(paragraphs)
    # chars + one end-of-text per speech, cut into windows of 16 (the tiny block): all but the tail is scored
    stream = sum(len(p.strip("\n")) for p in paragraphs) + len(paragraphs)
    assert stream - 16 <= held_result["tokens"] <= stream - 1 and held_result["tokens"] % 16 == 0
    assert 1 < report["results"]["other.txt"]["perplexity"] < 60
    lines = json.loads(cli(trained["id"][:10], "held.txt", "--documents", "line", "--json").stdout.strip()
                       .splitlines()[-1])["results"]["held.txt"]
    assert lines["documents"] > held_result["documents"]

    human = cli(trained["id"][:10], "held.txt").stdout
    assert "held.txt: perplexity" in human and "scored tokens" in human

    monkeypatch.chdir(tmp_path)
    import corpusforge as cf

    api = cf.lm.evaluate(trained["id"], ["held.txt"], store=store)
    assert api["results"]["held.txt"]["perplexity"] == pytest.approx(held_result["perplexity"], rel=1e-9)

    assert "no such file" in cli(trained["id"][:10], "missing.txt", code=2).stderr
    assert "not an lm" in cli(trained["steps"]["encode"][:10], "held.txt", code=2).stderr
    assert "documents: use one of" in cli(trained["id"][:10], "held.txt", "--documents", "sentence", code=2).stderr
    cli("ffff0000", "held.txt", code=2)
