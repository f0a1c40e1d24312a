"""The lm step on fixture shards in the contract's format: outputs, reuse, config errors, crash-resume."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest
import torch

from corpusforge.storage.store import ArtifactStore
from corpusforge.tasks.config import ConfigError, from_dict
from corpusforge.tasks.lm.config import LMConfig, lm_config_from_dict
from corpusforge.tasks.lm.train import build_lm
from tests.tasks.lm.lm_fixtures import write_char_shards

GPT_SECTION = {
    "name": "tiny",
    "family": "gpt",
    "model": {"n_layer": 1, "n_head": 2, "n_embd": 16, "block_size": 16},
    "train": {"max_iters": 40, "batch_size": 8, "lr": 1e-2, "warmup_iters": 5, "eval_interval": 20, "eval_iters": 4,
              "log_interval": 10},
    "sample": {"prompt": "the ", "max_new_tokens": 20},
}


def test_build_lm_writes_model_metrics_plot_and_sample(tmp_path):
    from corpusforge.models.zoo import load_model

    upstream = write_char_shards(tmp_path)
    store = ArtifactStore(tmp_path / "store")
    sample, result = build_lm(upstream, lm_config_from_dict(GPT_SECTION), store)
    out = Path(result.path)
    assert not result.reused and result.step == "lm" and sample.step == "lm_sample"
    for name in ("model.safetensors", "config.json", "metrics.json", "loss_curve.png"):
        assert (out / name).is_file(), name
    assert not (out / "sample.txt").exists()  # the sample is its own artifact
    assert (out / "loss_curve.png").stat().st_size > 1000
    manifest = json.loads((out / "manifest.json").read_text())
    m = manifest["metrics"]
    vocab = json.loads((upstream.path and (Path(upstream.path) / "meta.json")).read_text())["vocab_size"]
    assert m["val_loss"] < math.log(vocab)  # it learned something beyond uniform
    assert m["val_ppl"] == pytest.approx(math.exp(m["val_loss"]))
    assert {"test_loss", "test_ppl", "test_bpt", "tokens_per_s", "params", "steps"} <= set(m)
    history = json.loads((out / "metrics.json").read_text())["history"]
    assert [h["step"] for h in history if "val_loss" in h] == [20, 40]
    assert (Path(sample.path) / "sample.txt").read_text().startswith("the ")
    assert json.loads((Path(sample.path) / "manifest.json").read_text())["inputs"][0]["id"] == result.id
    spec = json.loads((out / "config.json").read_text())
    assert spec["family"] == "gpt" and spec["model"]["vocab_size"] == vocab
    assert spec["tokenizer"]["path"].endswith("tokenizer")
    model = load_model(out)
    assert isinstance(model(torch.zeros(1, 4, dtype=torch.long))[0], torch.Tensor)
    assert not (store.root / ".scratch" / "lm").exists() or not any((store.root / ".scratch" / "lm").iterdir())
    again = build_lm(upstream, lm_config_from_dict(GPT_SECTION), store)[-1]
    assert again.reused and again.id == result.id


@pytest.mark.parametrize("family,model", [
    ("rnn", {"cell": "gru", "n_embd": 16, "n_hidden": 16, "n_layer": 1, "block_size": 12}),
    ("nplm", {"context": 4, "n_embd": 8, "n_hidden": 16}),
])
def test_other_families_train(tmp_path, family, model):
    import numpy as np

    upstream = write_char_shards(tmp_path)
    section = {**GPT_SECTION, "family": family, "model": model, "sample": {"max_new_tokens": 5}}
    result = build_lm(upstream, lm_config_from_dict(section), ArtifactStore(tmp_path / "store"))[-1]
    m = json.loads((Path(result.path) / "manifest.json").read_text())["metrics"]
    # better than the best model that ignores context: the unigram entropy of the training split (nats)
    counts = np.bincount(np.fromfile(Path(upstream.path) / "train.bin", dtype="<u2"))
    p = counts[counts > 0] / counts.sum()
    unigram = float(-(p * np.log(p)).sum())
    assert m["val_loss"] < unigram - 0.3, (m["val_loss"], unigram)


def test_init_starts_from_the_parents_weights_and_names_it_as_an_input(tmp_path):
    """lm.init (formerly init_from, still read with a warning): the parent joins the child's inputs (its id and
    lineage); with a learning rate of ~0 the child ends where the parent was (the same val loss); the load report says everything fitted; a parent of
    another family fits nowhere and is refused."""
    upstream = write_char_shards(tmp_path)
    store = ArtifactStore(tmp_path / "store")
    parent = build_lm(upstream, lm_config_from_dict({**GPT_SECTION, "sample": {"max_new_tokens": 0}}), store)[-1]
    child_cfg = {**GPT_SECTION, "name": "child", "init": parent.id[:10], "sample": {"max_new_tokens": 0},
                 "train": {**GPT_SECTION["train"], "max_iters": 1, "eval_interval": 1, "lr": 1e-12, "min_lr": 0.0,
                           "warmup_iters": 0}}
    child = build_lm(upstream, lm_config_from_dict(child_cfg), store)[-1]
    manifest = json.loads((Path(child.path) / "manifest.json").read_text())
    assert [i["id"] for i in manifest["inputs"]] == [upstream.id, parent.id]
    assert manifest["init"]["missing"] == [] and manifest["init"]["mismatched"] == []
    parent_m = json.loads((Path(parent.path) / "manifest.json").read_text())["metrics"]
    assert manifest["metrics"]["val_loss"] == pytest.approx(parent_m["val_loss"], rel=1e-5)
    # the old key names the same parent (the id is the same: identity keeps the name init_from)
    with pytest.warns(FutureWarning, match="lm.init_from is lm.init now"):
        old_name = lm_config_from_dict({**{k: v for k, v in child_cfg.items() if k != "init"}, "init_from": parent.id})
    by_full_id = build_lm(upstream, old_name, store)[-1]
    assert by_full_id.reused and by_full_id.id == child.id  # a prefix and the full id are one input
    fresh = build_lm(upstream, lm_config_from_dict({**child_cfg, "init": None}), store)[-1]
    assert fresh.id != child.id
    rnn = {**child_cfg, "family": "rnn", "model": {"cell": "gru", "n_embd": 8, "n_hidden": 8, "n_layer": 1}}
    with pytest.raises(ValueError, match="none of the"):
        build_lm(upstream, lm_config_from_dict(rnn), store)


def test_killed_run_resumes_from_its_checkpoint_to_the_same_weights(tmp_path):
    from safetensors.torch import load_file

    upstream = write_char_shards(tmp_path)
    cfg = lm_config_from_dict({**GPT_SECTION, "model": {**GPT_SECTION["model"], "dropout": 0.1}})
    clean = build_lm(upstream, cfg, ArtifactStore(tmp_path / "clean"))[-1]

    class Killed(RuntimeError):
        pass

    def die(step, metrics):
        if step == 30:  # after the step-20 checkpoint
            raise Killed

    store = ArtifactStore(tmp_path / "crashy")
    with pytest.raises(Killed):
        build_lm(upstream, cfg, store, on_metrics=die)[-1]
    assert list((store.root / ".scratch" / "lm").glob("*/checkpoint.safetensors"))
    resumed = build_lm(upstream, cfg, store)[-1]
    assert resumed.id == clean.id
    a = load_file(str(Path(clean.path) / "model.safetensors"))
    b = load_file(str(Path(resumed.path) / "model.safetensors"))
    assert all(torch.equal(a[k], b[k]) for k in a)
    # the whole curve, not only the steps after the resume (issue 14, item 11)
    h_clean = json.loads((Path(clean.path) / "metrics.json").read_text())["history"]
    h_resumed = json.loads((Path(resumed.path) / "metrics.json").read_text())["history"]
    assert [h["step"] for h in h_resumed] == [h["step"] for h in h_clean] and h_clean[0]["step"] < 20
    for key in ("train_loss", "val_loss"):
        assert [h.get(key) for h in h_resumed] == [h.get(key) for h in h_clean]


def killed_after_checkpoint(upstream, cfg, store) -> None:
    """A run killed at step 30, after its step-20 checkpoint: what it leaves in the store's scratch."""
    def die(step, metrics):
        if step == 30:
            raise RuntimeError("killed")

    with pytest.raises(RuntimeError, match="killed"):
        build_lm(upstream, cfg, store, on_metrics=die)


def test_a_resumed_run_says_it_resumes_and_from_which_step(tmp_path, caplog):
    """Issue 35, item 9c: a run that picks up a killed run's checkpoint said nothing about it (its log replayed
    the earlier steps as if they were new): the task log now says "resuming from step 20" first."""
    import logging

    from corpusforge.tasks.training import training_report

    upstream = write_char_shards(tmp_path)
    cfg = lm_config_from_dict(GPT_SECTION)
    store = ArtifactStore(tmp_path / "store")

    killed_after_checkpoint(upstream, cfg, store)
    logger = logging.getLogger("corpusforge.test.resume")
    with caplog.at_level(logging.INFO, logger=logger.name):
        with training_report("lm tiny", 40, logger) as report:
            build_lm(upstream, cfg, store, on_metrics=report)
    lines = [r.getMessage() for r in caplog.records if r.name == logger.name]
    assert lines[0].startswith("resuming from step 20 of 40: the checkpoint a stopped run of this step left in "), lines
    assert any(line.startswith("step 40: val loss") for line in lines)
    caplog.clear()
    with caplog.at_level(logging.INFO, logger=logger.name):  # a fresh run (another store) says nothing of the kind
        with training_report("lm tiny", 40, logger) as report:
            build_lm(upstream, cfg, ArtifactStore(tmp_path / "fresh"), on_metrics=report)
    assert not [r for r in caplog.records if "resuming" in r.getMessage()]


def test_the_report_heatmap_reads_a_held_out_document_not_a_three_character_prompt(tmp_path):
    """Issue 35, item 9e: the run report's attention heatmap was drawn on "the" (the start of a sample.txt that the
    lm artifact no longer has): three characters. It now reads 24 tokens of a held-out document of the model's own
    encoded data, one row and column each."""
    from corpusforge.tasks.lm.report import report_plots, report_prompt
    from corpusforge.tasks.tokenizer.config import tokenizer_config_from_dict
    from corpusforge.tasks.tokenizer.train import run_tokenizer_stage
    from tests.tasks.tokenizer.test_tokenizer import SAMPLE, make_corpus, split_texts

    corpus, store = make_corpus(tmp_path, text="\n".join(SAMPLE.read_text(encoding="utf-8").splitlines()[:400]) + "\n")
    _, encoded = run_tokenizer_stage(corpus, tokenizer_config_from_dict({"name": "c", "kind": "char"}), store)
    section = {**GPT_SECTION, "model": {**GPT_SECTION["model"], "block_size": 32, "n_layer": 2},
               "train": {**GPT_SECTION["train"], "max_iters": 4, "eval_interval": 4}}
    lm = build_lm(encoded, lm_config_from_dict(section), store)[-1]
    prompt = report_prompt(Path(lm.path))
    assert len(prompt) == 24 and any(line.startswith(prompt) for line in split_texts(corpus.path, "valid"))
    (caption, png), = report_plots(Path(lm.path), tmp_path / "scratch")
    width = int.from_bytes(png.read_bytes()[16:20], "big")  # the PNG's IHDR: 2 heads side by side, 0.28 in a token
    assert abs(width - 0.28 * 24 * 2 * 90) <= 1, width  # 3 tokens drew the 2.5 in minimum: 450 pixels
    # the report shows the last layer, and draws only that one (issue 43: drawing every layer was seconds per run);
    # `lm inspect` (inspect_lm's default) still draws each layer
    assert png.name == "attention_layer1.png" and not list(png.parent.glob("attention_layer0*"))
    from corpusforge.tasks.lm.inference import inspect_lm

    every = inspect_lm(Path(lm.path), prompt, tmp_path / "every", k=3)["heatmaps"]
    assert [Path(f).name for f in every] == ["attention_layer0.png", "attention_layer1.png"]


def test_config_errors_name_the_field():
    with pytest.raises(ConfigError, match=r"lm\.model\.n_layr: unknown key"):
        from_dict(LMConfig, {"model": {"n_layr": 2}}, "lm")
    with pytest.raises(ConfigError, match=r"lm\.train\.max_iters"):
        from_dict(LMConfig, {"train": {"max_iters": 0}}, "lm")
    with pytest.raises(ConfigError, match=r"lm\.model\.vocab_size"):
        from_dict(LMConfig, {"model": {"vocab_size": 5}}, "lm")
    with pytest.raises(ConfigError, match=r"lm\.family"):
        from_dict(LMConfig, {"family": "lstm"}, "lm")
    with pytest.raises(ConfigError, match=r"lm\.model\.n_head"):
        from_dict(LMConfig, {"model": {"n_embd": 10, "n_head": 3}}, "lm")


def test_ids_beyond_the_declared_vocab_are_survived_and_reported(tmp_path):
    # an encode artifact whose meta.json undercounts its vocabulary (seen with a real tokenizer bug):
    # the model still gets a row for every id present, and the manifest says what happened
    upstream = write_char_shards(tmp_path)
    meta_path = Path(upstream.path) / "meta.json"
    meta = json.loads(meta_path.read_text())
    meta["vocab_size"] -= 1
    meta_path.write_text(json.dumps(meta))
    section = {**GPT_SECTION, "train": {**GPT_SECTION["train"], "max_iters": 4, "eval_interval": 4}}
    result = build_lm(upstream, lm_config_from_dict(section), ArtifactStore(tmp_path / "store"))[-1]
    manifest = json.loads((Path(result.path) / "manifest.json").read_text())
    assert "vocab_size" in manifest["warnings"][0]
    spec = json.loads((Path(result.path) / "config.json").read_text())
    assert spec["model"]["vocab_size"] == meta["vocab_size"] + 1


def test_encoder_family_trains_skips_the_sample_and_inspects_a_mask(tmp_path):
    from corpusforge.tasks.lm.inference import generate_from, inspect_lm

    upstream = write_char_shards(tmp_path, roles={"mask": "[MASK]"})
    mask_id = json.loads((Path(upstream.path) / "meta.json").read_text())["special_ids"]["mask"]
    section = {**GPT_SECTION, "family": "encoder", "objective": {"mask_prob": 0.3}}
    result = build_lm(upstream, lm_config_from_dict(section), ArtifactStore(tmp_path / "store"))[-1]
    out = Path(result.path)
    # the objective it trained with is recorded beside the model (lm evaluate scores with it)
    assert json.loads((out / "config.json").read_text())["objective"] == {"kind": "masked_lm", "mask_prob": 0.3}
    m = json.loads((out / "manifest.json").read_text())["metrics"]
    vocab = json.loads((Path(upstream.path) / "meta.json").read_text())["vocab_size"]
    assert m["val_loss"] < math.log(vocab) and m["test_ppl"] == pytest.approx(math.exp(m["test_loss"]))
    assert not (out / "sample.txt").exists()  # an encoder cannot generate, so there is no sample
    assert not (tmp_path / "store" / "lm_sample").exists()
    report = inspect_lm(out, "the cat sat on the ", tmp_path / "insp", k=5)
    assert report["tokens"][-1] == "[MASK]" and report["family"] == "encoder"
    assert len(report["heatmaps"]) == 1 and len(report["next_tokens"]) == 5
    assert all(row["id"] != mask_id for row in report["next_tokens"])  # [MASK] itself is never shown as a fill
    assert json.loads((out / "config.json").read_text())["model"]["mask_id"] == mask_id  # derived, not one past
    without = write_char_shards(tmp_path / "no-roles")  # a tokenizer without a mask role: one line, before training
    with pytest.raises(ConfigError, match="needs the tokenizer's mask token.*tokenizer.roles.mask"):
        build_lm(without, lm_config_from_dict(section), ArtifactStore(tmp_path / "other-store"))
    with pytest.raises(ValueError, match="cannot generate"):
        generate_from(out, "the ", 5)


def test_generated_text_keeps_unk_and_breaks_lines_at_end_of_text():
    # PTB-style data: a literal "<unk>" word and an end-of-sentence token; a plain decode keeps <unk> (issue 35,
    # item 9g: it used to drop it silently) but skips the end of sentence, which render_ids makes a line break
    from corpusforge.models.tokenization import make_tokenizer
    from corpusforge.tasks.lm.inference import render_ids

    tok = make_tokenizer("word", eot_token="<eos>", pre_tokenizer="whitespace_split")
    tok.train(["the <unk> sat on the mat", "a <unk> of cats"] * 3, vocab_size=50)
    eos = tok.token_to_id("<eos>")
    ids = tok.encode("the <unk> sat") + [eos] + tok.encode("a <unk> of cats")
    assert tok.decode(ids) == "the <unk> sat a <unk> of cats"
    assert render_ids(tok, ids, eos) == "the <unk> sat\na <unk> of cats"
    assert render_ids(tok, [eos] + tok.encode("the mat"), eos) == "\nthe mat"


def test_editing_the_sample_reuses_the_model(tmp_path):
    """lm.sample is not part of the lm's id (issue 13): a new prompt makes a new lm_sample artifact from the
    same, reused model; changing a training setting does retrain."""
    upstream = write_char_shards(tmp_path)
    store = ArtifactStore(tmp_path / "store")
    first_sample, first = build_lm(upstream, lm_config_from_dict(GPT_SECTION), store)
    edited = {**GPT_SECTION, "sample": {"prompt": "a dog ", "max_new_tokens": 12, "seed": 7}}
    second_sample, second = build_lm(upstream, lm_config_from_dict(edited), store)
    assert second.reused and second.id == first.id
    assert not second_sample.reused and second_sample.id != first_sample.id
    assert (Path(second_sample.path) / "sample.txt").read_text().startswith("a dog ")
    no_sample = build_lm(upstream, lm_config_from_dict({**GPT_SECTION, "sample": {"max_new_tokens": 0}}), store)
    assert [r.id for r in no_sample] == [first.id]
    retrain = {**GPT_SECTION, "train": {**GPT_SECTION["train"], "lr": 5e-3}}
    assert build_lm(upstream, lm_config_from_dict(retrain), store)[-1].id != first.id


def test_identity_follows_the_field_metadata():
    from corpusforge.tasks.config import identity

    cfg = lm_config_from_dict(GPT_SECTION)
    ident = identity(cfg)
    assert "sample" not in ident and ident["family"] == "gpt" and ident["train"]["lr"] == 1e-2
    # unset init: no input; the objective enters through model (its settings where they were model fields)
    assert set(ident) == {f.name for f in dataclasses.fields(LMConfig)} - {"sample", "init", "objective"}
    with_parent = identity(lm_config_from_dict({**GPT_SECTION, "init": "abcd1234"}))
    assert with_parent["init_from"] == "input"  # under its old name: renaming the key changed no id  # the parent's full id is among the inputs, not what was typed


def test_a_family_version_changes_the_id_of_that_family_only(tmp_path):
    """The house change kept every GPT/RNN lm's id (same weights, bit for bit) and gave NPLM lms new ones (its
    context padding is now the tokenizer's id, not a row of its own: other weights for the same config). The ids
    below were computed by the code before the change (2b4654c) on the same fixture and config."""
    upstream = write_char_shards(tmp_path)
    store = ArtifactStore(tmp_path / "store")
    short = {"train": {**GPT_SECTION["train"], "max_iters": 2, "eval_interval": 2}, "sample": {"max_new_tokens": 0}}
    gpt = build_lm(upstream, lm_config_from_dict({**GPT_SECTION, **short}), store)[-1]
    assert gpt.id == "a8d29d02719a514b0e1d5765076c5343d65f3c23f14f5793ce03f8c6e8713e5b"
    nplm_section = {**GPT_SECTION, **short, "family": "nplm", "model": {"context": 4, "n_embd": 8, "n_hidden": 16}}
    nplm = build_lm(upstream, lm_config_from_dict(nplm_section), store)[-1]
    assert nplm.id != "30d2e1b1d2acf52cfe42032a083219ae18c6c3cd7ccb4335ccd843260770f85d"
    assert json.loads((Path(nplm.path) / "manifest.json").read_text())["config"]["family_version"] == 2
    assert "family_version" not in json.loads((Path(gpt.path) / "manifest.json").read_text())["config"]


def test_a_diverged_lm_fails_in_one_line_and_publishes_nothing(tmp_path):
    # issue 35 (defect 3): a trained artifact with non-finite weights or final loss is never published
    from corpusforge.tasks.training import TrainingDiverged

    upstream = write_char_shards(tmp_path)
    store = ArtifactStore(tmp_path / "store")
    section = {**GPT_SECTION, "train": {**GPT_SECTION["train"], "lr": 1e6, "max_iters": 10, "eval_interval": 10,
                                        "warmup_iters": 0, "grad_clip": 0.0}}
    with pytest.raises(TrainingDiverged) as caught:
        build_lm(upstream, lm_config_from_dict(section), store)
    message = str(caught.value)
    assert "\n" not in message and message.startswith("lm tiny: training diverged (")
    assert "weight values are NaN or infinite" in message and "nothing was published" in message
    assert message.endswith("lower lm.train.lr (now 1e+06) or set lm.train.grad_clip (now 0: off) or raise "
                            "lm.train.warmup_iters (now 0)")
    assert not (store.root / "lm").exists() or not any((store.root / "lm").iterdir())
    assert not any((store.root / ".scratch" / "lm").iterdir())  # the diverged checkpoints are gone too


def test_a_tampered_checkpoint_is_not_resumed_and_the_run_starts_over(tmp_path, caplog):
    """Issue 44, item 8: a checkpoint changed in `.scratch` after a killed run was resumed and its weights
    published under the clean id. Its SHA-256 is recorded when it is written; a mismatch starts over with one
    warning, and the result is the clean run's, byte for byte."""
    import logging

    from safetensors.torch import load_file

    from corpusforge.tasks.training import training_report

    upstream = write_char_shards(tmp_path)
    cfg = lm_config_from_dict(GPT_SECTION)
    clean = build_lm(upstream, cfg, ArtifactStore(tmp_path / "clean"))[-1]
    store = ArtifactStore(tmp_path / "store")

    killed_after_checkpoint(upstream, cfg, store)
    (ckpt,) = (store.root / ".scratch" / "lm").glob("*/checkpoint.safetensors")
    assert (ckpt.parent / "checkpoint.safetensors.sha256").is_file()
    tensors = load_file(str(ckpt))
    from safetensors import safe_open
    from safetensors.torch import save_file

    with safe_open(str(ckpt), framework="pt") as f:
        metadata = f.metadata()
    key = next(k for k in tensors if k.startswith("model."))
    tensors[key] = tensors[key] + 1.0  # planted weights, a well-formed file
    save_file(tensors, str(ckpt), metadata=metadata)
    logger = logging.getLogger("corpusforge.test.tampered")
    with caplog.at_level(logging.INFO, logger=logger.name):
        with training_report("lm tiny", 40, logger) as report:
            again = build_lm(upstream, cfg, store, on_metrics=report)[-1]
    lines = [r.getMessage() for r in caplog.records if r.name == logger.name]
    assert lines[0].startswith("warning: not resuming from ") and "recorded when it was written" in lines[0], lines
    assert not any(line.startswith("resuming from step") for line in lines)
    assert again.id == clean.id
    a, b = load_file(str(Path(clean.path) / "model.safetensors")), load_file(str(Path(again.path) / "model.safetensors"))
    assert all(torch.equal(a[k], b[k]) for k in a)
