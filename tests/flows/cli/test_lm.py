"""``corpusforge lm``: presets, and one tiny end-to-end train through the real pipeline flow
(corpus -> tokenizer + encode -> lm, real Prefect API and MLflow), then generate and inspect on the result,
then the standalone LM flow on the same encoded shards (which must find the same artifact)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from corpusforge.api import load_preset, preset_names
from corpusforge.cli.lm import train_config
from corpusforge.tasks.config import ConfigError
from tests.conftest import REPO, write

CLI = str(Path(sys.executable).parent / "corpusforge")
PRESETS = ["bert-mlm-small", "ptb-gpt-bpe-small", "ptb-gpt-small", "ptb-gru-small", "ptb-lstm-medium", "ptb-lstm-small", "ptb-nplm", "shakespeare-char",
           "shakespeare-char-cpu"]
TINY = ["--set", "model.n_layer=1", "--set", "model.n_head=2", "--set", "model.n_embd=32", "--set", "model.block_size=16",
        "--set", "train.max_iters=30", "--set", "train.eval_interval=15", "--set", "train.eval_iters=4",
        "--set", "train.log_interval=5", "--set", "sample.max_new_tokens=10"]


def test_every_issue_preset_exists_and_validates():
    from corpusforge.pipeline_config import pipeline_config_from_dict

    assert preset_names() == PRESETS
    for name in PRESETS:
        cfg = pipeline_config_from_dict(train_config([Path("x.txt")], name, []))
        assert cfg.lm.name == name and cfg.tokenizer.kind in ("char", "word", "wordpiece", "byte-bpe")


def test_shakespeare_char_cpu_is_the_issue_shape():
    lm = load_preset("shakespeare-char-cpu")["lm"]
    assert lm["model"] == {**lm["model"], "n_layer": 4, "n_head": 4, "n_embd": 128, "block_size": 64, "dropout": 0.0}
    assert (lm["train"]["batch_size"], lm["train"]["max_iters"], lm["train"]["lr"]) == (12, 2000, 1e-3)


def test_overrides_default_to_the_lm_section():
    cfg = train_config([Path("a.txt")], "ptb-lstm-small", ["train.max_iters=5", "corpus.split.seed=3", "runner.workers=1"])
    assert cfg["lm"]["train"]["max_iters"] == 5 and cfg["corpus"]["split"]["seed"] == 3
    assert cfg["runner"]["workers"] == 1 and cfg["corpus"]["sources"] == ["a.txt"]
    with pytest.raises(ConfigError, match="no such preset"):
        train_config([Path("a.txt")], "nope", [])


def cli_env(api_url: str | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}
    if api_url:
        env["PREFECT_API_URL"] = api_url
    return env


@pytest.mark.slow
def test_train_generate_inspect_end_to_end(prefect_harness, tmp_path, monkeypatch):
    text = (REPO / "data" / "sample" / "tinyshakespeare.txt").read_text(encoding="utf-8")[:30000]
    src = write(tmp_path / "tiny.txt", text)
    store = tmp_path / "store"
    res = subprocess.run([CLI, "lm", "train", str(src), "--preset", "shakespeare-char-cpu", *TINY, "--store", str(store),
                          "--json"], capture_output=True, text=True, env=cli_env(prefect_harness), timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    out = json.loads(res.stdout.strip().splitlines()[-1])
    m = out["metrics"]
    assert m["val_ppl"] == pytest.approx(2.718281828459045 ** m["val_loss"], rel=1e-9)
    assert 0 < m["val_loss"] < 4.0  # below uniform over ~60 chars (ln 60 = 4.09) after 30 steps
    assert set(out["steps"]) == {"corpus", "tokenizer", "encode", "lm", "lm_sample"}
    lm_dir = Path(out["path"])
    assert (lm_dir / "loss_curve.png").is_file() and (lm_dir / "model.safetensors").is_file()
    manifest = json.loads((lm_dir / "manifest.json").read_text())
    assert manifest["inputs"][0]["id"] == out["steps"]["encode"]  # the lm id follows from the token shards

    def cli(*args):
        r = subprocess.run([CLI, "lm", *args, "--store", str(store), "--json"], capture_output=True, text=True,
                           env=cli_env(None), timeout=120)
        assert r.returncode == 0, r.stderr[-2000:]
        return json.loads(r.stdout.strip().splitlines()[-1])

    a = cli("generate", out["id"][:10], "--prompt", "ROMEO:", "-n", "25", "--seed", "3", "--top-k", "5")
    b = cli("generate", out["id"][:10], "--prompt", "ROMEO:", "-n", "25", "--seed", "3", "--top-k", "5")
    assert a["text"] == b["text"] and len(a["text"]) > 0
    report = cli("inspect", out["id"], "--prompt", "First Citizen", "--out", str(tmp_path / "insp"))
    assert len(report["heatmaps"]) == 1 and Path(report["heatmaps"][0]).stat().st_size > 1000
    assert len(report["next_tokens"]) == 10 and report["tokens"][0] == "F"
    assert sum(r["prob"] for r in report["next_tokens"]) <= 1.0 + 1e-6
    bad = subprocess.run([CLI, "lm", "generate", out["steps"]["encode"], "--store", str(store)], capture_output=True,
                         text=True, env=cli_env(None))
    assert bad.returncode == 2 and "not an lm" in bad.stderr

    # the LM flow on its own (the GPU-pool entry point): same shards + same config -> the same artifact
    from corpusforge.training_flow import lm_flow

    config = train_config([src], "shakespeare-char-cpu", [a for a in TINY if a != "--set"])["lm"]
    flow_out = lm_flow(out["steps"]["encode"][:12], config, str(store), track=False)
    assert flow_out["id"] == out["id"] and flow_out["reused"] is True
    assert flow_out["metrics"]["val_loss"] == pytest.approx(m["val_loss"])
    assert flow_out["registered_models"] == []

    # the MLflow model registry: the training run registered version 1, which @latest resolves to
    import mlflow
    import torch

    from corpusforge.models.zoo import load_model

    reg = out["registered_model"]
    assert (reg["name"], reg["version"], reg["latest_uri"]) == ("shakespeare-char-cpu", "1",
                                                                "models:/shakespeare-char-cpu@latest")
    uri = f"sqlite:///{store / 'mlflow.db'}"
    client = mlflow.MlflowClient(uri, registry_uri=uri)
    version = client.get_model_version_by_alias("shakespeare-char-cpu", "latest")
    assert str(version.version) == "1" and version.tags["corpusforge.artifact_id"] == out["id"]
    # one lm run (logged live while training, then completed), with the curve at every log_interval
    exp = client.get_experiment_by_name("corpusforge").experiment_id  # one-step commands share it
    lm_runs = client.search_runs([exp], filter_string="tags.`corpusforge.step` = 'lm'")
    assert len(lm_runs) == 1 and lm_runs[0].info.status == "FINISHED"
    assert lm_runs[0].data.tags["corpusforge.artifact_id"] == out["id"]
    curve = client.get_metric_history(lm_runs[0].info.run_id, "train_loss")
    # once per logged step (evaluations do not repeat it); the run's final figures sit at the last step too
    assert sorted(p.step for p in curve) == [5, 10, 15, 20, 25, 30, 30]
    assert sorted({p.step for p in client.get_metric_history(lm_runs[0].info.run_id, "val_loss")}) == [15, 30]
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.setenv("MLFLOW_REGISTRY_URI", uri)
    model = mlflow.pyfunc.load_model("models:/shakespeare-char-cpu@latest")
    # the pyfunc writes what `lm generate` writes for the same seed and sampling settings
    texts = model.predict(["ROMEO:", "First"], params={"max_new_tokens": 25, "seed": 3, "top_k": 5})
    assert texts[0] == a["text"] and len(texts) == 2 and texts[1]
    # ... and is a PyTorch model underneath, with the artifact's weights
    module = model.get_raw_model()
    reference = load_model(lm_dir)
    assert isinstance(module, torch.nn.Module)
    assert all(torch.equal(module.state_dict()[k], v) for k, v in reference.state_dict().items())

    # a rerun finds the registered version instead of adding one; a registry that lacks the model (here another
    # tracking URI) gets it registered even though the step was reused
    again = lm_flow(out["steps"]["encode"], config, str(store))
    assert [r["version"] for r in again["registered_models"]] == ["1"]
    other = f"sqlite:///{tmp_path / 'other.db'}"
    monkeypatch.setenv("CORPUSFORGE_TRACKING_URI", other)
    moved = lm_flow(out["steps"]["encode"], config, str(store))
    assert moved["reused"] is True and moved["registered_models"][0]["version"] == "1"
    assert mlflow.MlflowClient(other, registry_uri=other).get_model_version_by_alias(
        "shakespeare-char-cpu", "latest").tags["corpusforge.artifact_id"] == out["id"]
