"""Relative paths inside a config file resolve against the file's directory, as the docs say, not against the
working directory (issue 13, item 6): corpus sources did; ngram.eval and embeddings.analogies/similarity did not."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.conftest import write


def test_stage_path_fields_resolve_against_the_config_directory(tmp_path):
    from corpusforge.pipeline_config import pipeline_config_from_dict

    cfg = pipeline_config_from_dict({
        "corpus": {"sources": ["text.txt"]},
        "ngram": {"eval": ["held.txt", "/abs/other.txt"]},
        "embeddings": {"analogies": "q.txt", "similarity": ["ws.tsv"]},
    })
    stages = dict((s.section, c) for s, c in cfg.stages(tmp_path / "conf"))
    assert stages["ngram"].eval == (str(tmp_path / "conf" / "held.txt"), "/abs/other.txt")
    assert stages["embeddings"].analogies == str(tmp_path / "conf" / "q.txt")
    assert stages["embeddings"].similarity == (str(tmp_path / "conf" / "ws.tsv"),)
    assert dict((s.section, c) for s, c in cfg.stages())["ngram"].eval == ("held.txt", "/abs/other.txt")


@pytest.mark.e2e
def test_a_config_elsewhere_finds_its_eval_file(prefect_harness, tmp_path, monkeypatch):
    import corpusforge as cf

    conf = tmp_path / "project"
    write(conf / "train.txt", "".join(f"the cat sat on mat number {i % 7}\n" for i in range(200)))
    write(conf / "held.txt", "the cat sat on the mat\n")
    config = write(conf / "pipeline.yaml", "name: paths\ntracking: {enabled: false}\n"
                   "corpus: {name: c, sources: [train.txt], split: {valid: 0, test: 0}}\n"
                   "ngram: {order: 2, eval: [held.txt], eval_splits: []}\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # the working directory holds no held.txt
    result = cf.run(config, store=tmp_path / "store")
    stats = json.loads((result["ngram"].path / "stats.json").read_text())
    (evaluation,) = stats["evaluations"].values()
    # found next to the config (its one sentence scored), and named by its file name only: the artifact's bytes
    # never say where the file lay (issue 35, item 6)
    assert evaluation["source"] == "held.txt" and evaluation["sentences"] == 1 and os.getcwd() == str(elsewhere)
