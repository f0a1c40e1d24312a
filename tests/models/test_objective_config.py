"""Objectives as configuration (issue 45, item 2): a stage's ``objective:`` section is a tagged union keyed by kind
(corpusforge.models.objectives.KINDS), defaulting to the family's; the loss settings left the model configs without
changing any artifact id, and the old keys are still read, with a warning."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import warnings

import numpy as np
import pytest

from corpusforge.models.family import FamilySpec, families, family
from corpusforge.models.objectives import (
    KINDS, ContrastiveSettings, MaskedSettings, NoSettings, Seq2SeqSettings, allowed, default_settings,
)
from corpusforge.tasks.config import ConfigError, apply_overrides, identity


def test_the_registry_is_read_without_torch():
    """Configs are checked before any work: reading the kinds and a stage's objective section imports no torch."""
    code = ("import sys; from corpusforge.models.objectives import KINDS; "
            "from corpusforge.tasks.seq2seq.config import seq2seq_config_from_dict as f; "
            "c = f({'family': 'transformer', 'objective': {'label_smoothing': 0.2}}); "
            "assert c.objective.label_smoothing == 0.2; print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "False"


def test_every_family_trains_with_a_declared_kind_that_reads_its_data():
    for name, spec in families().items():
        for kind in allowed(spec):
            assert kind in KINDS and KINDS[kind].reads == spec.trains_on, (name, kind)
        settings = default_settings(spec)
        assert settings.kind == spec.objective and type(settings) is KINDS[spec.objective].settings
    assert default_settings(family("transformer")) == Seq2SeqSettings(kind="seq2seq", label_smoothing=0.1)
    assert default_settings(family("encoder")) == MaskedSettings(kind="masked_lm", mask_prob=0.15)
    assert default_settings(family("sbert")) == ContrastiveSettings(kind="contrastive", scale=20.0, symmetric=True)


def test_a_family_naming_an_unknown_or_unfit_kind_fails_when_it_is_declared():
    from corpusforge.models.gpt.config import GPTConfig

    base = dict(name="x", config=GPTConfig, module="corpusforge.models.gpt.model:GPT", doc="d")
    with pytest.raises(ValueError, match="no kind"):
        FamilySpec(**base, objective="causal_llm")
    with pytest.raises(ValueError, match="reads pairs"):
        FamilySpec(**base, objective="causal_lm", objectives=frozenset({"seq2seq"}))
    with pytest.raises(ValueError, match="objective_defaults"):
        FamilySpec(**base, objective="causal_lm", objective_defaults={"label_smoothing": 0.1})
    assert FamilySpec(**base, objective="mypackage.losses:factory").objective == "mypackage.losses:factory"


def _seq2seq(section):
    from corpusforge.tasks.seq2seq.config import seq2seq_config_from_dict

    return seq2seq_config_from_dict(section)


def test_settings_moved_off_the_model_keep_the_artifact_id():
    """The id of a stage is built from its model's fields with the objective's settings where they were model
    fields: the Transformer's default (0.1), the same value written in the new section, and the old key under
    model (read with a warning) all give one id; another value gives another."""
    default = _seq2seq({"family": "transformer"})
    written = _seq2seq({"family": "transformer", "objective": {"kind": "seq2seq", "label_smoothing": 0.1}})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        old = _seq2seq({"family": "transformer", "model": {"label_smoothing": 0.1}})
    assert any("seq2seq.model.label_smoothing is an objective setting now" in str(w.message) for w in caught)
    assert identity(default) == identity(written) == identity(old)
    assert identity(default)["model"]["label_smoothing"] == 0.1 and "objective" not in identity(default)
    assert identity(_seq2seq({"family": "transformer", "objective": {"label_smoothing": 0.0}})) != identity(default)
    with pytest.raises(ConfigError, match="also set as seq2seq.objective.label_smoothing"):
        _seq2seq({"family": "transformer", "model": {"label_smoothing": 0.1}, "objective": {"label_smoothing": 0.2}})


@pytest.mark.parametrize("section, message", [
    ({"objective": {"kind": "dpo"}}, "seq2seq.objective.kind: family seq2seq trains with seq2seq or denoising, "
                                         "not 'dpo'"),
    ({"objective": {"label_smoothing": 1.5}}, "seq2seq.objective.label_smoothing: must be in [0, 1), got 1.5"),
    ({"objective": {"mask_prob": 0.2}}, "seq2seq.objective.mask_prob: unknown key; allowed keys under "
                                        "seq2seq.objective are: kind, label_smoothing"),
    ({"objective": {"label_smoothing": "lots"}}, "seq2seq.objective.label_smoothing: expected a number, got 'lots'"),
    ({"objective": 3}, "seq2seq.objective: expected a mapping such as {kind: seq2seq} or a kind's name, got int 3"),
])
def test_a_bad_objective_section_is_one_line_naming_the_key(section, message):
    with pytest.raises(ConfigError) as err:
        _seq2seq(section)
    assert str(err.value) == message


def test_a_family_trains_with_another_kind_it_declares_and_gets_an_id_of_its_own():
    """The rnn family also trains on random windows (causal_lm: each read from a fresh state, nothing carried):
    ``--set lm.objective=causal_lm`` picks it, the id says so, and the objective built is a CausalLM."""
    import torch

    from corpusforge.models.objectives import CausalLM, TruncatedBPTT
    from corpusforge.models.zoo import build_model, objective_for
    from corpusforge.tasks.lm.config import lm_config_from_dict

    base = {"family": "rnn", "model": {"n_embd": 8, "n_hidden": 8, "n_layer": 1, "block_size": 8}}
    bptt = lm_config_from_dict(base)
    windows = lm_config_from_dict(apply_overrides(base, ["objective=causal_lm"]))
    assert bptt.objective == NoSettings(kind="truncated_bptt") and windows.objective == NoSettings(kind="causal_lm")
    assert identity(windows)["model"]["objective"] == "causal_lm" and "objective" not in identity(bptt)["model"]
    with pytest.raises(ConfigError, match="family gpt trains with causal_lm, not 'truncated_bptt'"):
        lm_config_from_dict({"family": "gpt", "objective": "truncated_bptt"})
    model = build_model("rnn", dataclasses.replace(windows.model, vocab_size=5))
    data = np.tile(np.arange(5), 40)
    assert isinstance(objective_for(model, {"train": data}), TruncatedBPTT)
    objective = objective_for(model, {"train": data, "valid": data}, windows.objective)
    assert isinstance(objective, CausalLM)
    objective.setup(model, batch_size=4)
    batch = objective.batch(0, torch.Generator().manual_seed(0))
    loss, state = objective.loss_module(model)(*batch.tensors, None)
    assert torch.isfinite(loss) and batch.tensors[0].shape == (4, 8)
    assert objective.evaluate(model, "valid", 4)["loss"] == pytest.approx(float(np.log(5)), rel=0.2)
