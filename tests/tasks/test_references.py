"""Artifact references (issue 31 item 2): a config field names an artifact besides the step's upstream, either a
section of the same run or an id/prefix in the store. It is checked for shape by the config, resolved by
corpusforge.tasks.step.resolve_references, joins the step's inputs (its id and its lineage) through run_step, and
enters the config part of the id as "input", so a prefix and the full id give the same artifact."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest

from corpusforge.storage.catalog import Catalog
from corpusforge.storage.store import ArtifactStore, read_manifest
from corpusforge.tasks.config import ConfigError, artifact_ref, from_dict, identity, references
from corpusforge.tasks.step import StepResult, artifact_input, resolve_references, run_step


@dataclass(frozen=True)
class Inner:
    start: str | None = field(default=None, metadata=artifact_ref(("model",), doc="Weights to start from."))


@dataclass(frozen=True)
class JoinConfig:
    """A toy step that reads its upstream and a second artifact, a "vocab" named by ``vocab``."""

    vocab: str | None = field(default=None, metadata=artifact_ref(("vocab",), doc="The vocabulary to use."))
    k: int = field(default=1, metadata={"doc": "A plain setting."})
    inner: Inner = field(default_factory=Inner, metadata={"doc": "Nested settings."})


def publish(store: ArtifactStore, step: str, text: str, name: str = "x") -> StepResult:
    def build(out: Path):
        (out / "data.txt").write_text(text)
        return {}

    return run_step(store, step=step, version=1, name=name, config={"text": text}, inputs=[], build=build)


def join(store: ArtifactStore, upstream: StepResult, cfg: JoinConfig, refs=None, sections=None) -> StepResult:
    """The core of the toy step, written as a stage's core is: references resolved, then handed to run_step."""
    refs = resolve_references(cfg, store, section="join", given=refs, sections=sections)
    seen = []

    def build(out: Path):
        seen.append((Path(refs["vocab"].path) / "data.txt").read_text())  # the step receives the artifact
        (out / "joined.txt").write_text((Path(upstream.path) / "data.txt").read_text() + seen[-1])
        return {}

    return run_step(store, step="join", version=1, name="j", config=identity(cfg), inputs=[artifact_input(upstream)],
                    build=build, references=refs)


def test_a_step_with_two_artifact_inputs(tmp_path):
    """Both artifacts are in the manifest's inputs (upstream first, then the reference) and in the lineage
    tree; an edit to either changes the step's id; a prefix, the full id and the run's section give one id."""
    store = ArtifactStore(tmp_path / "store")
    corpus, vocab = publish(store, "corpus", "abc"), publish(store, "vocab", "xyz")
    cfg = from_dict(JoinConfig, {"vocab": vocab.id[:8]}, "join")
    result = join(store, corpus, cfg)
    manifest = read_manifest(Path(result.path))
    assert [(i["id"], i["step"]) for i in manifest["inputs"]] == [(corpus.id, "corpus"), (vocab.id, "vocab")]
    assert manifest["config"]["vocab"] == "input"  # what was typed is not in the id: the full id is an input
    assert (Path(result.path) / "joined.txt").read_text() == "abcxyz"
    tree = Catalog(store).lineage(result.id[:10])
    assert [(n["id"], n["step"]) for n in tree["inputs"]] == [(corpus.id, "corpus"), (vocab.id, "vocab")]

    full = join(store, corpus, from_dict(JoinConfig, {"vocab": vocab.id.upper()}, "join"))
    assert full.id == result.id and full.reused
    by_section = join(store, corpus, from_dict(JoinConfig, {"vocab": "vocabs"}, "join"),
                      sections={"vocabs": [publish(store, "other", "q"), vocab, publish(store, "other", "r")]})
    assert by_section.id == result.id

    other_vocab = publish(store, "vocab", "xyzw")
    edited_ref = join(store, corpus, from_dict(JoinConfig, {"vocab": other_vocab.id}, "join"))
    other_corpus = publish(store, "corpus", "abcd")
    edited_upstream = join(store, other_corpus, cfg)
    assert len({result.id, edited_ref.id, edited_upstream.id}) == 3
    assert read_manifest(Path(edited_ref.path))["inputs"][0]["id"] == corpus.id
    assert read_manifest(Path(edited_upstream.path))["inputs"][1]["id"] == vocab.id
    # the not-referenced config is another id: the reference is part of the identity
    assert identity(from_dict(JoinConfig, {}, "join")) == {"k": 1, "inner": {}}


def test_a_reference_that_names_nothing_or_the_wrong_step_is_a_one_line_config_error(tmp_path):
    store = ArtifactStore(tmp_path / "store")
    corpus = publish(store, "corpus", "abc")
    publish(store, "vocab", "v1", name="a")
    cases = {
        "deadbeef": "no artifact with id 'deadbeef'",
        corpus.id[:6]: f"join.vocab: {corpus.id[:12]} is a corpus artifact (x), not a vocab",
        "vocabs": "names a pipeline section; only a pipeline that runs it can resolve it",
    }
    for ref, message in cases.items():
        with pytest.raises(ConfigError, match="^join.vocab: ") as err:
            join(store, corpus, from_dict(JoinConfig, {"vocab": ref}, "join"))
        assert message in str(err.value) and "\n" not in str(err.value)
    with pytest.raises(ConfigError, match="the vocabs section made no vocab artifact in this run"):
        join(store, corpus, from_dict(JoinConfig, {"vocab": "vocabs"}, "join"), sections={"vocabs": [corpus]})
    # the shape is checked with the config, before any store is read
    for bad, message in {"a b": "neither a section name nor an artifact id", "12a": "neither",
                         12345678: "quote it", True: "expected a vocab artifact"}.items():
        with pytest.raises(ConfigError, match=f"^join.vocab: .*{message}"):
            from_dict(JoinConfig, {"vocab": bad}, "join")


def test_references_are_found_in_nested_settings_in_field_order(tmp_path):
    cfg = from_dict(JoinConfig, {"inner": {"start": "lm"}, "vocab": "ABCDEF"}, "join")
    assert references(cfg) == [("vocab", "abcdef", ("vocab",)), ("inner.start", "lm", ("model",))]
    assert identity(cfg) == {"vocab": "input", "k": 1, "inner": {"start": "input"}}
    assert references(from_dict(JoinConfig, {"vocab": ""}, "join")) == []
    store = ArtifactStore(tmp_path / "store")
    model, vocab = publish(store, "model", "w"), publish(store, "vocab", "v")
    got = resolve_references(from_dict(JoinConfig, {"inner": {"start": model.id}, "vocab": "run"}, "join"), store,
                             section="join", sections={"run": [vocab]})
    assert list(got) == ["vocab", "inner.start"] and got["inner.start"].id == model.id
    # ids_only: only the references by id are resolved (the check a pipeline makes before it starts)
    assert list(resolve_references(from_dict(JoinConfig, {"inner": {"start": model.id}, "vocab": "run"}, "join"),
                                   store, section="join", ids_only=True)) == ["inner.start"]


def test_init_of_a_family_the_stage_cannot_start_from_is_refused_before_a_run(tmp_path):
    """Issue 50, item 6: `classify train --preset sst2-bert-finetune --init <a GPT>` ran the corpus and tokenizer
    steps for 16 s and then asked for tokenizer.roles.cls. A family declares the checkpoints it starts from
    (FamilySpec.starts_from); an init of another family is one line at the check before the run."""
    import json

    from corpusforge.tasks.classify.config import classify_config_from_dict
    from corpusforge.tasks.sentence_embeddings.config import sentence_embeddings_config_from_dict

    store = ArtifactStore(tmp_path / "store")

    def checkpoint(step: str, family: str) -> StepResult:
        def build(out: Path):
            (out / "config.json").write_text(json.dumps({"family": family, "model": {}}))
            return {}

        return run_step(store, step=step, version=1, name=f"tiny-{family}", config={"family": family}, inputs=[],
                        build=build)

    gpt, bert, rnn = checkpoint("lm", "gpt"), checkpoint("lm", "bert"), checkpoint("classify", "rnn_classifier")
    bert_classifier = {"name": "c", "family": "bert_classifier"}
    for parent in (gpt, rnn):
        with pytest.raises(ConfigError) as err:
            resolve_references(classify_config_from_dict({**bert_classifier, "init": parent.id[:8]}), store,
                               section="classify", ids_only=True)
        said = str(err.value)
        family = json.loads((Path(parent.path) / "config.json").read_text())["family"]
        assert said.startswith(f"classify.init: {parent.id[:12]} is a {family} {parent.step}") and "\n" not in said
        assert "a bert_classifier starts from a bert, a bert_classifier, a sbert" in said
    ok = resolve_references(classify_config_from_dict({**bert_classifier, "init": bert.id[:8]}), store,
                            section="classify", ids_only=True)
    assert ok["init"].id == bert.id
    # a family that declares nothing is not checked here (the rnn classifier loads what fits and reports the rest)
    assert resolve_references(classify_config_from_dict({"name": "r", "family": "rnn_classifier", "init": gpt.id}),
                              store, section="classify", ids_only=True)["init"].id == gpt.id
    with pytest.raises(ConfigError, match="is a gpt lm .*a sbert starts from a bert, a sbert"):
        resolve_references(sentence_embeddings_config_from_dict({"name": "s", "family": "sbert", "init": gpt.id}),
                           store, section="sentence_embeddings", ids_only=True)
