"""``corpusforge lm export ID --format hf OUT`` on a hand-made store (a tokenizer artifact and a tiny GPT lm
artifact recording it, as the lm stage writes them): the checkpoint loads with transformers; a family without
the format, a variant GPT-2 cannot express and a tampered artifact are one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from corpusforge.cli import app
from corpusforge.models.tokenization import make_tokenizer
from corpusforge.models.zoo import build_model, save_model
from corpusforge.storage.store import ArtifactStore, store_relative
from tests.conftest import REPO

transformers = pytest.importorskip("transformers")

TINY_GPT = {"block_size": 32, "n_layer": 1, "n_head": 2, "n_embd": 16}


def publish_tokenizer(store: ArtifactStore):
    lines = (REPO / "data" / "sample" / "tinyshakespeare.txt").read_text(encoding="utf-8").splitlines()[:500]

    def build(out: Path):
        tok = make_tokenizer("byte-bpe")
        tok.train(lines, vocab_size=300)
        tok.save(out)

    return store.publish(step="tokenizer", name="tok", version=1, config={"kind": "byte-bpe"}, inputs=[], build=build)


def publish_lm(store: ArtifactStore, tokenizer, family: str = "gpt", **model):
    vocab = json.loads((tokenizer.path / "tokenizer_meta.json").read_text())["vocab_size"]

    def build(out: Path):
        torch.manual_seed(0)
        save_model(build_model(family, {"vocab_size": vocab, **model}), out)
        spec = json.loads((out / "config.json").read_text())
        spec["tokenizer"] = {"path": store_relative(tokenizer.path, store.root), "id": tokenizer.manifest["id"],
                             "vocab_size": vocab}
        (out / "config.json").write_text(json.dumps(spec, indent=2) + "\n")

    return store.publish(step="lm", name=f"tiny-{family}", version=1, config={"family": family, "model": model},
                         inputs=[{"id": tokenizer.manifest["id"], "kind": "artifact"}], build=build)


def invoke(*args: str):
    return CliRunner().invoke(app, ["lm", "export", *args])


@pytest.fixture
def store(store_root):
    s = ArtifactStore(store_root)
    return s, publish_tokenizer(s)


def test_export_hf_loads_with_transformers(store, tmp_path):
    s, tok = store
    lm = publish_lm(s, tok, **TINY_GPT)
    out = tmp_path / "hf"
    res = invoke(lm.manifest["id"][:12], str(out), "--format", "hf", "--store", str(s.root), "--json")
    assert res.exit_code == 0, res.output
    summary = json.loads(res.stdout.strip().splitlines()[-1])
    assert summary["id"] == lm.manifest["id"] and summary["architecture"] == "GPT2LMHeadModel"
    assert summary["path"] == str(out.resolve()) and summary["tokens"]["eos"]["token"] == "<|endoftext|>"
    model = transformers.AutoModelForCausalLM.from_pretrained(out)
    assert type(model).__name__ == "GPT2LMHeadModel"
    assert transformers.AutoTokenizer.from_pretrained(out).eos_token == "<|endoftext|>"
    res = invoke(lm.manifest["id"], str(tmp_path / "hf2"), "--store", str(s.root))  # text; hf is the default
    assert res.exit_code == 0, res.output
    assert "AutoModelForCausalLM.from_pretrained(" in res.stdout.strip().splitlines()[-1]
    res = invoke(lm.manifest["id"], str(out), "--store", str(s.root))  # out is now used
    assert res.exit_code == 2 and "not an empty folder" in res.output


def test_a_family_without_the_format_says_which_it_has(store, tmp_path):
    s, tok = store
    gpt = publish_lm(s, tok, **TINY_GPT)
    res = invoke(gpt.manifest["id"], str(tmp_path / "x"), "--format", "onnx", "--store", str(s.root))
    assert res.exit_code == 2 and "a gpt model exports to hf" in res.output
    rnn = publish_lm(s, tok, family="rnn", n_layer=1)
    res = invoke(rnn.manifest["id"], str(tmp_path / "y"), "--store", str(s.root))
    assert res.exit_code == 2 and "a rnn model exports to no format" in res.output
    assert not (tmp_path / "x").exists() and not (tmp_path / "y").exists()


def test_a_variant_is_refused_naming_the_field(store, tmp_path):
    s, tok = store
    lm = publish_lm(s, tok, **TINY_GPT, positional="rope")
    res = invoke(lm.manifest["id"], str(tmp_path / "x"), "--store", str(s.root))
    assert res.exit_code == 2 and "positional: rope" in res.output


def test_a_tampered_artifact_is_not_exported(store, tmp_path):
    s, tok = store
    lm = publish_lm(s, tok, **TINY_GPT)
    weights = lm.path / "model.safetensors"
    weights.chmod(0o644)
    data = bytearray(weights.read_bytes())
    data[-1] ^= 1
    weights.write_bytes(bytes(data))
    res = invoke(lm.manifest["id"], str(tmp_path / "x"), "--store", str(s.root))
    assert res.exit_code == 1 and "model.safetensors changed" in res.output
    assert not (tmp_path / "x").exists()


def test_export_is_atomic_and_bad_paths_are_one_line(store, tmp_path, monkeypatch):
    """Issue 44, item 13: the export is written beside the target and renamed into place. A kill leaves only a
    hidden partial folder, which the next export removes (its process is gone), never a half folder under the
    target's name that the rerun would refuse; a failure midway leaves nothing; a bad path is one line, exit 2."""
    import safetensors.torch

    s, tok = store
    lm = publish_lm(s, tok, **TINY_GPT)
    lid = lm.manifest["id"][:12]
    out = tmp_path / "hf"
    killed = tmp_path / ".hf.partial-999999999"  # what kill -9 midway leaves: a pid that no longer exists
    killed.mkdir()
    (killed / "config.json").write_text("{")

    def broken(*args, **kwargs):
        raise OSError(28, "No space left on device")

    with monkeypatch.context() as m:
        m.setattr(safetensors.torch, "save_file", broken)
        res = invoke(lid, str(out), "--store", str(s.root))
    assert res.exit_code == 2 and "cannot write the export: No space left on device" in res.output
    assert not out.exists() and sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".hf")) == []
    res = invoke(lid, str(out), "--store", str(s.root), "--json")
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout.strip().splitlines()[-1])["files"] == sorted(p.name for p in out.iterdir())
    assert "model.safetensors" in {p.name for p in out.iterdir()}
    (tmp_path / "a-file").write_text("x")
    res = invoke(lid, str(tmp_path / "a-file" / "hf"), "--store", str(s.root))
    assert res.exit_code == 2 and "is a file, not a folder" in res.output and len(res.output.strip().splitlines()) == 1


def test_a_command_reading_an_artifact_holds_the_store_against_gc(store):
    """Issue 44, item 11: readers did not take the store's shared lock, so `artifacts gc --apply` could remove an
    artifact being read. A command that reads an artifact holds it until the command ends; gc stops (or waits)
    meanwhile, and runs once the command is done."""
    import click

    from corpusforge.cli.common import _intact
    from corpusforge.storage.catalog import Catalog
    from corpusforge.storage.locks import StoreBusy, store_alone

    s, tok = store
    found = Catalog(s).get(tok.manifest["id"])
    with click.Context(click.Command("encode")):
        _intact(found)
        with pytest.raises(StoreBusy, match="in use"):
            with store_alone(s.root):
                pass
    with store_alone(s.root):  # the command ended: gc may run
        pass


def test_a_step_starting_from_a_model_checks_the_tokenizer_it_records(store, tmp_path):
    """Issue 44, item 7: `lm finetune` built on a tampered parent tokenizer and published different weights under
    the clean id: the tokenizer is not a direct input of the step (it is the parent's). A step's upstream models'
    recorded tokenizers are re-hashed with its direct inputs, before the build runs."""
    from corpusforge.storage.store import TamperedArtifact
    from corpusforge.tasks.step import artifact_input, run_step

    s, tok = store
    lm = publish_lm(s, tok, **TINY_GPT)
    parent = {"id": lm.manifest["id"], "kind": "artifact", "step": "lm", "name": lm.manifest["name"]}
    built = []

    def build(out: Path):
        built.append(out)
        (out / "weights.txt").write_text("made from the parent and its tokenizer")

    child = run_step(s, step="post_training", version=1, name="child", config={"lr": 1}, inputs=[parent], build=build)
    assert built and not child.reused and artifact_input(child)["step"] == "post_training"
    tokenizer_json = tok.path / "tokenizer.json"
    tokenizer_json.chmod(0o644)
    text = tokenizer_json.read_text(encoding="utf-8")
    tokenizer_json.write_text(text.replace('"', "'", 1), encoding="utf-8")  # same size, other bytes
    built.clear()
    with pytest.raises(TamperedArtifact, match=f"artifact {tok.manifest['id'][:12]} .*tokenizer.json"):
        run_step(s, step="post_training", version=1, name="child2", config={"lr": 2}, inputs=[parent], build=build)
    assert built == [] and not list((s.root / "post_training").glob("child2-*"))
