"""The pyfunc wrapper MLflow loads by module name (corpusforge.tasks.lm_pyfunc): inputs, params, and agreement with
``lm generate``'s code path. The registry round trip itself is in tests/flows/test_cli_lm.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from corpusforge.storage.store import ArtifactStore
from corpusforge.tasks.lm import build_lm, generate_text, lm_config_from_dict
from corpusforge.tasks.lm_pyfunc import _load_pyfunc, _prompts
from tests.tasks.lm_fixtures import write_char_shards
from tests.tasks.test_lm import GPT_SECTION


def test_prompts_accept_strings_lists_dicts_and_frames():
    import pandas as pd

    assert _prompts("a") == ["a"]
    assert _prompts(["a", "b"]) == ["a", "b"]
    assert _prompts({"prompt": "a"}) == ["a"] and _prompts({"prompt": ["a", "b"]}) == ["a", "b"]
    assert _prompts(pd.DataFrame({"prompt": ["x", "y"], "other": [1, 2]})) == ["x", "y"]
    assert _prompts(pd.DataFrame({0: ["z"]})) == ["z"]
    with pytest.raises(TypeError, match="prompt"):
        _prompts(3)


def test_predict_matches_generate_and_rejects_unknown_params(tmp_path):
    upstream = write_char_shards(tmp_path)
    result = build_lm(upstream, lm_config_from_dict({**GPT_SECTION, "train": {**GPT_SECTION["train"], "max_iters": 5}}),
                      ArtifactStore(tmp_path / "store"))[-1]
    data = tmp_path / "model-data"
    data.mkdir()
    (data / "lm").symlink_to(Path(result.path))
    (data / "tokenizer").symlink_to(tmp_path / "tokenizer")
    gen = _load_pyfunc(str(data))
    out = gen.predict(["the ", "a "], params={"max_new_tokens": 12, "seed": 7, "top_k": 3})
    expected = generate_text(gen.model, gen.tokenizer, "the ", 12, temperature=0.8, top_k=3, seed=7,
                             eot_id=gen.spec["tokenizer"]["eot_id"])
    assert out[0] == expected and len(out) == 2
    greedy = gen.predict("the ", params={"greedy": True, "max_new_tokens": 8, "seed": 1})
    assert greedy == gen.predict("the ", params={"greedy": True, "max_new_tokens": 8, "seed": 2})
    with pytest.raises(ValueError, match="unknown"):
        gen.predict("the ", params={"max_tokens": 3})
