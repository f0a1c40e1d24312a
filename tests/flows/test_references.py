"""Stages with several inputs (issue 31 item 2), through the pipeline and the planner: ``ngram.tokenizer`` names
the tokenizer section of the same run or a published tokenizer by id/prefix; the ngram step's inputs and lineage
hold both the corpus and the tokenizer, an edit to either changes its id, and the three ways of naming one
tokenizer give one id. A reference to nothing, to the wrong step or to a later stage is a one-line config error."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from corpusforge.storage.catalog import Catalog
from corpusforge.storage.store import ArtifactStore, read_manifest
from corpusforge.tasks.config import ConfigError, artifact_ref
from tests.conftest import write
from tests.flows.test_plan import cli

CORPUS = {"name": "chars", "sources": ["docs"], "reader": {"txt_mode": "line"}, "clean": {"preset": "raw"},
          "dedup": {"exact": False}, "split": {"valid": 0, "test": 0}}
NGRAM = {"order": 2, "smoothing": "mle", "eval_splits": ["train"], "arpa": False, "threads": 1}
TOKENIZER = {"name": "chars", "kind": "char", "vocab_size": 50, "encode": False}


def run(config: dict, store: Path, base: Path) -> dict:
    """What ``corpusforge run`` does: the planner first (a fully published run is answered from the store),
    else the flow."""
    from corpusforge.pipeline import run_pipeline
    from corpusforge.pipeline_config import pipeline_config_from_dict
    from corpusforge.plan import answer_from_store, plan_pipeline

    cfg = pipeline_config_from_dict(config)
    return answer_from_store(cfg, store, plan_pipeline(cfg, store, base)) or run_pipeline(config, store, base)


def step_id(summary: dict, step: str) -> str:
    return next(s["id"] for s in summary["steps"] if s["step"] == step)


def input_ids(summary: dict) -> list[tuple[str, str]]:
    manifest = read_manifest(Path(summary["stages"]["ngram"]["path"]))
    return [(i["step"], i["id"]) for i in manifest["inputs"]]


@pytest.mark.e2e
def test_ngram_with_a_tokenizer_of_this_run_or_of_the_store(prefect_harness, tmp_path):
    write(tmp_path / "docs" / "a.txt", "abba\nab\n")
    store = tmp_path / "store"
    same_run = {"name": "refs", "corpus": CORPUS, "tokenizer": TOKENIZER, "ngram": {**NGRAM, "tokenizer": "tokenizer"}}
    first = run(same_run, store, tmp_path)
    tok, corpus = step_id(first, "tokenizer"), step_id(first, "corpus")
    ngram = first["stages"]["ngram"]
    assert input_ids(first) == [("corpus", corpus), ("tokenizer", tok)]
    assert ngram["metrics"]["tokens"] == 4 + 2 + 2  # the step got the tokenizer: characters, plus </s> per line
    tree = Catalog(ArtifactStore(store)).lineage(ngram["id"])
    assert [(n["step"], n["id"]) for n in tree["inputs"]] == [("corpus", corpus), ("tokenizer", tok)]
    assert [n["step"] for n in tree["inputs"][1]["inputs"]] == ["corpus"]  # the tokenizer's own lineage

    again = run(same_run, store, tmp_path)  # the planner resolves the section too: same id, nothing runs
    assert again.get("answered_from_store") and again["stages"]["ngram"]["id"] == ngram["id"]

    # the same tokenizer by full id or by prefix, from a run without a tokenizer section: the same artifact
    for ref in (tok, tok[:8]):
        by_id = run({"name": "by-id", "corpus": CORPUS, "ngram": {**NGRAM, "tokenizer": ref}}, store, tmp_path)
        assert by_id.get("answered_from_store") and by_id["stages"]["ngram"]["id"] == ngram["id"]

    # an edit to the tokenizer input (its config) gives another tokenizer, and another ngram id
    edited_tok = run({**same_run, "tokenizer": {**TOKENIZER, "vocab_size": 40}}, store, tmp_path)
    tok2 = step_id(edited_tok, "tokenizer")
    assert tok2 != tok and input_ids(edited_tok) == [("corpus", corpus), ("tokenizer", tok2)]
    assert edited_tok["stages"]["ngram"]["id"] != ngram["id"]

    # an edit to the upstream input (the corpus) with the tokenizer fixed by id: another ngram id
    write(tmp_path / "docs" / "a.txt", "abba\nab\nba\n")
    edited_corpus = run({"name": "by-id", "corpus": CORPUS, "ngram": {**NGRAM, "tokenizer": tok[:8]}}, store,
                        tmp_path)
    corpus2 = step_id(edited_corpus, "corpus")
    assert corpus2 != corpus and input_ids(edited_corpus) == [("corpus", corpus2), ("tokenizer", tok)]
    assert edited_corpus["stages"]["ngram"]["id"] not in (ngram["id"], edited_tok["stages"]["ngram"]["id"])

    # the CLI: a reference to nothing, to another step's artifact, to an absent section: exit 2, one line
    config = tmp_path / "bad.yaml"
    for ref, message in {"nosuch": "ngram.tokenizer: 'nosuch' is neither a section of a pipeline",
                         corpus[:10]: f"ngram.tokenizer: {corpus[:12]} is a corpus artifact (chars), not a tokenizer",
                         "0000aaaa": "ngram.tokenizer: no artifact with id '0000aaaa'",
                         "embeddings": "ngram.tokenizer: the embeddings section makes no tokenizer artifact"}.items():
        config.write_text(json.dumps({"name": "bad", "corpus": CORPUS, "ngram": {**NGRAM, "tokenizer": ref}}))
        proc = cli(["run", str(config), "--store", str(store)], prefect_harness)
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == 2 and len(lines) == 1 and message in lines[0], (proc.returncode, proc.stderr)


def test_a_section_reference_must_name_a_stage_of_the_run_that_runs_before():
    from corpusforge.pipeline_config import pipeline_config_from_dict

    base = {"corpus": {"sources": ["x"]}, "ngram": {"tokenizer": "tokenizer"}}
    with pytest.raises(ConfigError, match=r"^ngram\.tokenizer: names the tokenizer section, which this pipeline "
                                          r"does not have; add one, or give the id of a published tokenizer"):
        pipeline_config_from_dict(base)
    assert pipeline_config_from_dict({**base, "tokenizer": {}}).ngram.tokenizer == "tokenizer"
    with pytest.raises(ConfigError, match=r"^ngram\.tokenizer: the lm section makes no tokenizer artifact"):
        pipeline_config_from_dict({**base, "ngram": {"tokenizer": "lm"}})


@dataclass(frozen=True)
class EarlyConfig:
    start: str | None = field(default=None, metadata=artifact_ref(("late", "early"), doc="An artifact."))


def test_a_reference_to_a_stage_that_runs_later_or_to_itself_is_refused():
    from corpusforge.stages import STAGES, _check, check_references
    from corpusforge.tasks.stage import Stage, StepOutputs

    early = Stage(section="early", config=EarlyConfig, doc="", task="m:t", core="m:c",
                  steps={"early": StepOutputs()})
    late = Stage(section="late", config=EarlyConfig, doc="", task="m:t", core="m:c", steps={"late": StepOutputs()})
    stages = (STAGES[0], early, late)
    _check(stages)
    corpus = STAGES[0].from_dict({"sources": ["x"]})
    for ref, message in (("late", "the late section runs after early, not before it"),
                         ("early", "a stage cannot read an artifact of its own section in the same run")):
        with pytest.raises(ConfigError, match=f"^early.start: {message}"):
            check_references({"corpus": corpus, "early": EarlyConfig(start=ref), "late": EarlyConfig()}, stages)
    check_references({"corpus": corpus, "early": EarlyConfig(), "late": EarlyConfig(start="early")}, stages)
    check_references({"corpus": corpus, "early": EarlyConfig(start="abcd1234")}, stages)  # an id: the store's

    # the registry's own check: a reference to a step no stage makes, a section that reads as an id
    with pytest.raises(RuntimeError, match="references step 'late', which no registered stage makes"):
        _check((STAGES[0], early))
    with pytest.raises(RuntimeError, match="cannot be all hex digits"):
        _check((STAGES[0], Stage(section="beef", config=EarlyConfig, doc="", task="m:t", core="m:c")))
