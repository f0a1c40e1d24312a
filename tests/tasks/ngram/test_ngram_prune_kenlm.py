"""Pruning (``ngram.prune``, lmplz's ``--prune``) against KenLM's ``lmplz``, and in the ngram step.

The lmplz tests need the binary (``../shared/tools/build-kenlm.sh ../kenlm-build`` builds it; found on PATH, in
$KENLM_BIN, ../kenlm-build or ~/.cache/kenlm, as benchmarks/ngram_vs_kenlm.py finds it) and PTB (../shared);
they skip cleanly without them. lmplz refuses a literal ``<unk>``, so both sides read PTB with it renamed
``_unk_`` (as ../shared/reference/ptb.o3.kenlm.arpa.gz was built). tests/models/test_ngram_prune.py checks the
same rules without lmplz.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from corpusforge.models.ngram import estimate
from corpusforge.models.ngram_arpa import read_arpa
from corpusforge.storage.ngram_counts import count_ngram_tables
from corpusforge.storage.store import ArtifactStore, read_manifest
from corpusforge.tasks.config import ConfigError
from corpusforge.tasks.ngram.build import build_ngram, load_ngram_model
from corpusforge.tasks.ngram.config import identity_config, ngram_config_from_dict
from tests.conftest import REPO, SHARED
from tests.models.test_ngram import CORPUS
from tests.tasks.ngram.test_ngram import line_corpus

PTB = SHARED / "corpora" / "ptb"
needs_ptb = pytest.mark.skipif(not (PTB / "ptb.train.txt").exists(), reason="needs ../shared/corpora/ptb")


def find_lmplz() -> Path | None:
    dirs = [os.environ.get("KENLM_BIN", "")] + os.environ.get("PATH", "").split(os.pathsep)
    dirs += [str(REPO.parent / "kenlm-build" / "kenlm" / "build" / "bin"),
             str(Path.home() / ".cache/kenlm/kenlm/build/bin")]
    for d in dirs:
        if d and (Path(d) / "lmplz").is_file() and os.access(Path(d) / "lmplz", os.X_OK):
            return Path(d) / "lmplz"
    return None


LMPLZ = find_lmplz()
needs_lmplz = pytest.mark.skipif(LMPLZ is None, reason="needs KenLM's lmplz (../shared/tools/build-kenlm.sh)")


def ptb_lines(split: str, limit: int | None = None) -> list[str]:
    lines = [" ".join("_unk_" if w == "<unk>" else w for w in line.split())
             for line in (PTB / f"ptb.{split}.txt").read_text(encoding="utf-8").splitlines() if line.split()]
    return lines[:limit]


def run_lmplz(tmp: Path, lines: list[str], order: int, prune: list[int]) -> tuple[Path, dict[int, list[float]]]:
    """lmplz -o ORDER --prune ...: its ARPA and the discounts it printed ({order: [D1, D2, D3+]})."""
    text = tmp / "train.txt"
    text.write_text("\n".join(lines) + "\n", encoding="utf-8")
    arpa = tmp / f"lmplz-o{order}.arpa"
    res = subprocess.run([str(LMPLZ), "-o", str(order), "--prune", *map(str, prune), "-S", "200M", "-T", str(tmp),
                          "--text", str(text), "--arpa", str(arpa)], capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-2000:]
    discounts = {int(m[0]): [float(m[1]), float(m[2]), float(m[3])]
                 for m in re.findall(r"^(\d+) [\d/]+ D1=(\S+) D2=(\S+) D3\+=(\S+)$", res.stderr, re.M)}
    assert sorted(discounts) == list(range(1, order + 1)), res.stderr[-2000:]
    return arpa, discounts


def counts(tmp: Path, lines: list[str], order: int):
    """The ngram step's counting path (DuckDB) over ``lines``."""
    pq.write_table(pa.table({"text": lines}), tmp / "train.parquet")
    return count_ngram_tables([tmp / "train.parquet"], tmp / "c.duckdb", order)


def ours(counted, prune: list[int], discounts=None):
    return estimate(counted.words, counted.tables, "modified-kneser-ney", discounts=discounts,
                    contexts=counted.contexts, prune=prune)


def arpa_entries(path: Path) -> dict[int, dict[tuple[str, ...], tuple[float, float]]]:
    entries: dict[int, dict] = {}
    order = 0
    with (gzip.open(path, "rt", encoding="utf-8") if path.suffix == ".gz" else open(path, encoding="utf-8")) as f:
        for line in f:
            if line.startswith("\\") and line.strip().endswith("-grams:"):
                order = int(line[1:line.index("-")])
                entries[order] = {}
            elif order and "\t" in line:
                parts = line.rstrip("\n").split("\t")
                backoff = float(parts[2]) if len(parts) > 2 else 0.0
                entries[order][tuple(parts[1].split(" "))] = (float(parts[0]), backoff)
    return entries


@needs_ptb
@needs_lmplz
@pytest.mark.parametrize("order,prune", [(3, [0, 0, 1]), (4, [0, 1, 1, 2])])
def test_ptb_slice_arpa_entries_equal_lmplz(tmp_path, order, prune):
    """The same n-grams as lmplz's pruned ARPA, and every log10 probability and backoff within 1e-5 (lmplz computes
    in float32; measured <= 3e-6), with our own discounts and with the ones lmplz printed (6 digits). On the whole
    of PTB the two differ slightly at the unigrams: lmplz leaves one word out of its unigram counts-of-counts
    (test_ngram_parity.py); this slice's last word does not fall there."""
    lines = ptb_lines("train", 4000)
    arpa, lmplz_discounts = run_lmplz(tmp_path, lines, order, prune)
    ref = arpa_entries(arpa)
    counted = counts(tmp_path, lines, order)
    as_lmplz = ours(counted, prune, discounts=lmplz_discounts)
    exact = ours(counted, prune)
    assert exact.info["pruned"][order] > 0
    assert sorted(exact.info["discounts"]) == sorted(lmplz_discounts)
    for n, d in lmplz_discounts.items():
        assert exact.info["discounts"][n] == pytest.approx(d, rel=1e-5), n
    for model in (as_lmplz, exact):
        for n in range(1, order + 1):
            grams = {tuple(model.words[i] for i in row) for row in model.ids[n - 1].tolist()}
            assert grams == set(ref[n]), f"order {n}: n-grams differ from lmplz's"
            keys = list(ref[n])
            ids = np.array([[model.word_index[w] for w in g] for g in keys])
            rows = model.trie.index_of(ids)
            lp = np.array([ref[n][g][0] for g in keys])
            bo = np.array([ref[n][g][1] for g in keys])
            not_bos = np.array([g != ("<s>",) for g in keys])
            assert np.abs(model.logprob[n - 1][rows] - lp)[not_bos].max() < 1e-5, n
            if n < order:
                assert np.abs(model.backoff[n - 1][rows] - bo).max() < 1e-5, n


@needs_ptb
@needs_lmplz
def test_ptb_pruned_perplexity_equals_lmplz(tmp_path):
    """Order 3, --prune 0 0 1 on the whole of ptb.train: our perplexity on ptb.valid and ptb.test equals that of
    lmplz's pruned ARPA, to the unpruned parity test's tolerances (test_ngram_parity.py)."""
    train = ptb_lines("train")
    arpa, _ = run_lmplz(tmp_path, train, 3, [0, 0, 1])
    theirs = read_arpa(arpa)  # scored by our ARPA reader: the kenlm module scores it alike (test_ngram_parity.py)
    model = ours(counts(tmp_path, train, 3), [0, 0, 1])
    assert [len(i) for i in model.ids] == [len(i) for i in theirs.ids] == [10002, 264990, 81305]
    for split in ("valid", "test"):
        sents = [line.split() for line in ptb_lines(split)]
        expected = theirs.evaluate(sents)["perplexity"]
        got = model.evaluate(sents)["perplexity"]
        assert got == pytest.approx(expected, rel=5e-4), split
        assert got == pytest.approx(expected, rel=2e-5), split  # in fact much closer
    assert 150 < model.evaluate([line.split() for line in ptb_lines("valid")])["perplexity"] < 175


@pytest.mark.parametrize("prune,message", [
    ([0, 0, 1, 1], "ngram.prune: 4 thresholds for order 3"),
    ([2], "ngram.prune: the first (unigram) threshold must be 0"),
    ([0, 3, 1], "ngram.prune: thresholds must be non-decreasing"),
    ([0, -1], "ngram.prune: thresholds must be >= 0"),
    (["a"], "ngram.prune[0]"),
])
def test_prune_config_is_validated(prune, message):
    with pytest.raises(ConfigError, match=re.escape(message)) as err:
        ngram_config_from_dict({"order": 3, "prune": prune})
    assert "\n" not in str(err.value)
    with pytest.raises(ConfigError, match=re.escape("ngram.prune: only kneser-ney and modified-kneser-ney")):
        ngram_config_from_dict({"order": 3, "smoothing": "add-k", "prune": [0, 0, 1]})


def test_prune_is_part_of_the_artifact_id():
    ident = lambda data: identity_config(ngram_config_from_dict({"order": 3, **data}))  # noqa: E731
    assert ident({}) == ident({"prune": []}) == ident({"prune": [0, 0]})  # prunes nothing: the unpruned id
    assert "prune" not in ident({})
    assert ident({"prune": [0, 1]}) == ident({"prune": [0, 1, 1]}) == {**ident({}), "prune": [0, 1, 1]}
    assert ident({"prune": [0, 0, 1]}) != ident({"prune": [0, 1, 1]}) != ident({})


def test_ngram_step_with_prune(tmp_path):
    store = ArtifactStore(tmp_path / "store")
    corpus = line_corpus(tmp_path, "\n".join(" ".join(s) for s in CORPUS) + "\n", store)
    base = {"order": 3, "eval_splits": [], "threads": 1, "memory_limit": "512MB"}
    full = build_ngram(corpus, ngram_config_from_dict(base), store)
    pruned = build_ngram(corpus, ngram_config_from_dict({**base, "prune": [0, 0, 1]}), store)
    assert pruned.id != full.id
    stats = json.loads((Path(pruned.path) / "stats.json").read_text())
    assert stats["model"]["prune"] == [0, 0, 1] and stats["model"]["pruned"]["3"] > 0
    model = load_ngram_model(pruned.path)
    assert len(model.ids[2]) == stats["per_order"]["3"]["distinct"] - stats["model"]["pruned"]["3"]
    header = arpa_entries(Path(pruned.path) / "model.arpa.gz")
    assert [len(header[n]) for n in (1, 2, 3)] == [len(i) for i in model.ids]
    assert read_manifest(Path(pruned.path))["config"]["prune"] == [0, 0, 1]
    again = build_ngram(corpus, ngram_config_from_dict({**base, "prune": [0, 0, 1], "threads": 2}), store)
    assert again.id == pruned.id and again.reused
    shutil.rmtree(tmp_path / "store", ignore_errors=True)
