"""The pyfunc wrapper MLflow loads by module name (corpusforge.tasks.lm.pyfunc): inputs, params, and agreement with
``lm generate``'s code path. The registry round trip itself is in tests/flows/cli/test_lm.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from corpusforge.storage.store import ArtifactStore
from corpusforge.tasks.lm.config import lm_config_from_dict
from corpusforge.tasks.lm.inference import generate_text
from corpusforge.tasks.lm.train import build_lm
from corpusforge.storage.tracking import pyfunc_texts
from corpusforge.tasks.lm.pyfunc import _load_pyfunc
from tests.tasks.lm.lm_fixtures import write_char_shards
from tests.tasks.lm.test_lm import GPT_SECTION


def test_prompts_accept_strings_lists_dicts_and_frames():
    import pandas as pd

    def _prompts(model_input):  # what the lm's pyfunc reads its prompts with
        return pyfunc_texts(model_input, "prompt")

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


def test_generation_defaults_agree_in_all_three_places():
    """`lm generate`, the lm_sample step and the registered pyfunc disagreed on top_k (None / 200 / 0); they
    now read tasks.lm.GENERATE_DEFAULTS (the pyfunc spells "off" as 0 and 1.0, which MLflow params need)."""
    import inspect

    from corpusforge.cli.lm import generate
    from corpusforge.tasks.lm.config import GENERATE_DEFAULTS, SampleConfig
    from corpusforge.tasks.lm.pyfunc import DEFAULT_PARAMS

    cli = {name: p.default for name, p in inspect.signature(generate).parameters.items()}
    sample = SampleConfig()
    for key, value in GENERATE_DEFAULTS.items():
        assert getattr(sample, key) == value, key
        if key in cli:
            assert cli[key] == value, key
    assert cli["top_k"] is None and cli["top_p"] is None
    assert DEFAULT_PARAMS["top_k"] == 0 and DEFAULT_PARAMS["top_p"] == 1.0  # "off", as None elsewhere
    assert all(DEFAULT_PARAMS[k] == GENERATE_DEFAULTS[k] for k in ("max_new_tokens", "temperature", "seed"))


@pytest.mark.e2e
def test_two_registered_models_with_different_loaders_load_in_one_process(tmp_path, monkeypatch):
    """Every model that carries its code is loaded through one shim package (corpusforge_model_code), which Python
    imports once per process: a text generator loaded after a mask filler got the filler's loader ("params: unknown
    ['greedy', ...]; allowed: top_k", CI of 2026-11-28). Each model now names its loader in its own data."""
    import mlflow

    from corpusforge.storage.tracking import BUNDLE_LOADER_FILE, Tracker
    from corpusforge.tasks.lm.fill_mask import MaskFiller
    from corpusforge.tasks.lm.pyfunc import LMTextGenerator
    from corpusforge.tasks.lm.register import register_lm

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.setenv("MLFLOW_REGISTRY_URI", uri)
    tracker = Tracker(tmp_path / "store", "exp")
    run = tracker.start_pipeline_run("run", {"name": "exp"}, {})
    uris = {}
    for family in ("encoder", "gpt"):
        upstream = write_char_shards(tmp_path / family, roles={"mask": "[MASK]"})
        section = {**GPT_SECTION, "name": f"tiny-{family}", "family": family,
                   "train": {**GPT_SECTION["train"], "max_iters": 5}}
        result = build_lm(upstream, lm_config_from_dict(section), ArtifactStore(tmp_path / "store"))[-1]
        manifest = {"id": result.id, "name": f"tiny-{family}"}
        info = register_lm(tracker, run, manifest, Path(result.path))
        assert info["loader_module"] == "corpusforge_model_code"  # the shim, for both
        location = Path(info["source"][len("file://"):])
        assert (location / "data" / "data" / BUNDLE_LOADER_FILE).read_text().strip() == (
            "corpusforge.tasks.lm.fill_mask" if family == "encoder" else "corpusforge.tasks.lm.pyfunc")
        uris[family] = info["source"]
    tracker.finish_pipeline_run(run, {})
    order = ["encoder", "gpt", "encoder"]  # the order the CI failed in, and back
    loaded = [mlflow.pyfunc.load_model(uris[f]) for f in order]
    kinds = [type(m._model_impl) for m in loaded]
    assert kinds == [MaskFiller, LMTextGenerator, MaskFiller]  # the lm's generator: the shared one, reading as trained
    assert len(loaded[1].predict(["the "], params={"greedy": True, "max_new_tokens": 4})[0]) >= len("the ")
    assert list(loaded[2].predict(["the [MASK]"]).columns) == ["filled", "tokens", "probabilities"]
