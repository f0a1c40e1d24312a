"""corpusforge.tasks.config: YAML/dict -> frozen dataclasses, with errors that name the dotted path and what is allowed."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from corpusforge.tasks.corpus.clean import CleanConfig
from corpusforge.tasks.config import ConfigError, apply_overrides, from_dict, load_yaml, parse_override, to_dict
from corpusforge.tasks.corpus.config import CorpusConfig, DedupConfig, corpus_config_from_dict
from corpusforge.tasks.corpus.split import SplitConfig
from corpusforge.tasks.corpus.validate import ValidationConfig
from corpusforge.storage.readers import ReaderConfig
from tests.conftest import REPO, write


def error_of(data: dict) -> str:
    with pytest.raises(ConfigError) as info:
        from_dict(CorpusConfig, data, "corpus")
    return str(info.value)


# --- unknown keys -------------------------------------------------------------------------------------


def test_unknown_nested_key_names_dotted_path_and_lists_allowed_keys():
    msg = error_of({"split": {"vaild": 0.1}})
    assert msg.startswith("corpus.split.vaild:")
    assert "unknown key" in msg
    allowed = msg.split("are:", 1)[1]
    assert [k.strip() for k in allowed.split(",")] == ["by_source", "seed", "test", "valid"]


def test_unknown_top_level_key_lists_every_corpus_field():
    msg = error_of({"nmae": "x"})
    assert msg.startswith("corpus.nmae:")
    for key in ("name", "sources", "reader", "clean", "dedup", "split", "validate"):
        assert key in msg


def test_unknown_key_without_path_says_top_level():
    with pytest.raises(ConfigError, match=r"^bogus: unknown key; allowed keys under the top level"):
        from_dict(SplitConfig, {"bogus": 1})


# --- wrong types ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "path", "expected"),
    [
        ({"split": {"valid": "x"}}, "corpus.split.valid", "expected a number"),
        ({"split": {"seed": 1.5}}, "corpus.split.seed", "expected an integer"),
        ({"split": {"seed": True}}, "corpus.split.seed", "expected an integer"),  # bool is not an int here
        ({"dedup": {"exact": "yes"}}, "corpus.dedup.exact", "expected true or false"),
        ({"name": 3}, "corpus.name", "expected a string"),
        ({"sources": "data/sample"}, "corpus.sources", "expected a list of str"),
        ({"sources": ["ok", 5]}, "corpus.sources[1]", "expected a string"),
        ({"split": [0.1]}, "corpus.split", "expected a mapping (SplitConfig)"),
    ],
)
def test_wrong_type_names_field_and_expected_type(data, path, expected):
    msg = error_of(data)
    assert msg.startswith(f"{path}:"), msg
    assert expected in msg


def test_literal_violation_lists_allowed_values():
    msg = error_of({"reader": {"txt_mode": "lines"}})
    assert msg.startswith("corpus.reader.txt_mode:")
    assert "'lines'" in msg
    for allowed in ("'line'", "'paragraph'", "'file'"):
        assert allowed in msg


def test_int_is_accepted_for_float_field_and_becomes_float():
    cfg = corpus_config_from_dict({"split": {"valid": 0, "test": 0}})
    assert cfg.split.valid == 0.0 and isinstance(cfg.split.valid, float)


def test_sources_list_becomes_tuple():
    cfg = corpus_config_from_dict({"sources": ["a", "b"]})
    assert cfg.sources == ("a", "b")


# --- __post_init__ errors get the dotted prefix -----------------------------------------------------


@pytest.mark.parametrize(
    ("data", "path", "rule"),
    [
        ({"split": {"valid": 1.5}}, "corpus.split.valid", "must be in [0, 1)"),
        ({"split": {"test": -0.1}}, "corpus.split.test", "must be in [0, 1)"),
        ({"split": {"valid": 0.6, "test": 0.5}}, "corpus.split.valid + test", "must be < 1"),
        ({"validate": {"min_chars": 5, "max_chars": 2}}, "corpus.validate.max_chars", "must be >= min_chars"),
        ({"validate": {"min_chars": -1}}, "corpus.validate.min_chars", "must be >= 0"),
        ({"reader": {"text_field": ""}}, "corpus.reader.text_field", "non-empty"),
        ({"name": "bad name"}, "corpus.name", "invalid artifact name"),
    ],
)
def test_post_init_errors_are_prefixed_with_dotted_path(data, path, rule):
    msg = error_of(data)
    assert msg.startswith(path), msg
    assert rule in msg


def test_config_error_is_a_value_error():
    # Callers that catch ValueError (e.g. the CLI) must see config errors too.
    assert issubclass(ConfigError, ValueError)


# --- overrides ----------------------------------------------------------------------------------------


def test_apply_overrides_parses_yaml_scalars_and_creates_mappings():
    base = {"corpus": {"name": "demo"}}
    out = apply_overrides(
        base,
        ["corpus.dedup.exact=false", "corpus.split.seed=3", "corpus.split.valid=0.5",
         "corpus.sources=[a, b]", "corpus.name=other", "new.deep.key=true"],
    )
    assert out["corpus"]["dedup"]["exact"] is False
    assert out["corpus"]["split"]["seed"] == 3 and type(out["corpus"]["split"]["seed"]) is int
    assert out["corpus"]["split"]["valid"] == 0.5 and type(out["corpus"]["split"]["valid"]) is float
    assert out["corpus"]["sources"] == ["a", "b"]
    assert out["corpus"]["name"] == "other"
    assert out["new"] == {"deep": {"key": True}}
    assert base == {"corpus": {"name": "demo"}}, "the input mapping must not be mutated"


def test_overrides_apply_in_order_and_feed_from_dict():
    out = apply_overrides({}, ["corpus.split.seed=1", "corpus.split.seed=7", "corpus.split.valid=0.2"])
    cfg = corpus_config_from_dict(out["corpus"])
    assert cfg.split == SplitConfig(valid=0.2, test=0.05, seed=7)


def test_override_value_with_equals_sign_and_empty_value():
    assert parse_override("a.b=x=y") == (["a", "b"], "x=y")
    assert parse_override("a.b=") == (["a", "b"], "")


def test_override_replaces_null_intermediate_with_mapping():
    out = apply_overrides({"corpus": {"split": None}}, ["corpus.split.seed=2"])
    assert out == {"corpus": {"split": {"seed": 2}}}


@pytest.mark.parametrize("item", ["novalue", "a..b=1", "=1", ".a=1", "a.=1"])
def test_malformed_override_raises(item):
    with pytest.raises(ConfigError, match="--set"):
        apply_overrides({}, [item])


def test_override_through_non_mapping_raises_naming_the_key():
    with pytest.raises(ConfigError, match=r"corpus\.name is 'demo', not a mapping"):
        apply_overrides({"corpus": {"name": "demo"}}, ["corpus.name.x=1"])


def test_unparseable_override_value_raises():
    with pytest.raises(ConfigError, match="cannot parse"):
        apply_overrides({}, ["a.b=[1, 2"])


# --- YAML files ----------------------------------------------------------------------------------------


def test_load_yaml_missing_file(tmp_path: Path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_yaml(tmp_path / "nope.yaml")


@pytest.mark.parametrize("text", ["- a\n- b\n", "just a string\n", "3\n"])
def test_load_yaml_non_mapping(tmp_path: Path, text: str):
    path = write(tmp_path / "c.yaml", text)
    with pytest.raises(ConfigError, match="top level must be a mapping"):
        load_yaml(path)


def test_load_yaml_invalid_yaml(tmp_path: Path):
    path = write(tmp_path / "c.yaml", "a: [1, 2\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_yaml(path)


def test_load_yaml_empty_file_is_empty_mapping(tmp_path: Path):
    assert load_yaml(write(tmp_path / "c.yaml", "")) == {}


def test_demo_preset_validates():
    data = load_yaml(REPO / "configs" / "demo.yaml")
    cfg = corpus_config_from_dict(data["corpus"])
    assert cfg.name == "sample"
    assert cfg.reader.txt_mode == "paragraph"
    assert cfg.validate.max_chars == 3000


# --- to_dict round trip -------------------------------------------------------------------------------


def test_to_dict_round_trips_non_default_config():
    cfg = CorpusConfig(
        name="x1",
        sources=("a", "b/c"),
        reader=ReaderConfig(txt_mode="paragraph", text_field="body"),
        clean=CleanConfig(unicode_form="NFKC", normalize_whitespace=False),
        dedup=DedupConfig(exact=False),
        split=SplitConfig(valid=0.1, test=0.2, seed=9),
        validate=ValidationConfig(enabled=False, min_chars=2, max_chars=50, data_docs=False),
    )
    data = to_dict(cfg)
    assert data["sources"] == ["a", "b/c"]  # tuples become lists
    assert data["split"] == {"valid": 0.1, "test": 0.2, "seed": 9, "by_source": {}}
    assert json.loads(json.dumps(data)) == data  # plain JSON-able data
    assert from_dict(CorpusConfig, data, "corpus") == cfg


def test_to_dict_round_trips_defaults():
    cfg = CorpusConfig()
    assert from_dict(CorpusConfig, to_dict(cfg)) == cfg


@dataclasses.dataclass(frozen=True)
class _Inner:
    size: int = 1


@dataclasses.dataclass(frozen=True)
class _Outer:
    value: int | _Inner = 0


def test_a_union_field_names_what_each_alternative_refused():
    """The errors of each member of a union were collected and then dropped; they are part of the message."""
    from corpusforge.tasks.config import ConfigError, from_dict

    with pytest.raises(ConfigError) as info:
        from_dict(_Outer, {"value": {"size": "big"}}, "x")
    message = str(info.value)
    assert message.startswith("x.value: expected") and "x.value.size: expected an integer, got 'big'" in message


def test_the_tokens_a_stage_adds_for_a_familys_roles_are_the_familys_own():
    """Issue 45, item 6: the tokens a training stage adds to the run's tokenizer for the roles its family derives
    ids from are declared on the family (FamilySpec.role_tokens), not in each stage; the tokenizer section's own
    roles win, and a role the family does not name gets "[ROLE]"."""
    from corpusforge.models.family import family
    from corpusforge.tasks.config import roles_to_add
    from corpusforge.tasks.tokenizer.config import TokenizerConfig

    plain = TokenizerConfig()
    assert roles_to_add("transformer", plain) == {"pad": "<pad>", "bos": "<s>", "eos": "</s>"}
    assert roles_to_add("bert_classifier", plain) == {"cls": "[CLS]", "sep": "[SEP]", "pad": "[PAD]"}
    assert roles_to_add("gpt", plain) == {}
    assert roles_to_add("transformer", TokenizerConfig(roles={"pad": "<blank>"})) == {"bos": "<s>", "eos": "</s>"}
    assert roles_to_add("nplm", TokenizerConfig(eot_token="<|endoftext|>")) == {}  # pad_id may be the eot id
    assert family("rnn_classifier").role_token("pad") == "[PAD]"  # not declared: "[ROLE]"
