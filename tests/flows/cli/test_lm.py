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
from tests.commands import corpusforge
from tests.conftest import REPO, write

CLI = str(Path(sys.executable).parent / "corpusforge")
PRESETS = ["bert-mlm-small", "bert-qa-small", "ptb-gpt-bpe-small", "ptb-gpt-small", "ptb-gru-small", "ptb-lstm-medium", "ptb-lstm-small", "ptb-nplm", "shakespeare-char",
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


def test_inspect_draws_under_the_store_not_in_the_current_directory(tmp_path):
    """Issue 35, item 9b: without --out, `lm inspect` wrote lm-inspect-ID/ into the current directory. It now draws
    under the store (one folder per model and prompt) and says where."""
    from corpusforge.storage.store import ArtifactStore
    from corpusforge.tasks.lm.config import lm_config_from_dict
    from corpusforge.tasks.lm.train import build_lm
    from tests.tasks.lm.lm_fixtures import write_char_shards
    from tests.tasks.lm.test_lm import GPT_SECTION

    store = tmp_path / "store"
    section = {**GPT_SECTION, "train": {**GPT_SECTION["train"], "max_iters": 4, "eval_interval": 4}}
    lm = build_lm(write_char_shards(tmp_path), lm_config_from_dict(section), ArtifactStore(store))[-1]
    here = tmp_path / "here"
    here.mkdir()

    def inspect(*args):  # in this process (tests/commands.py), from `here`
        return corpusforge("lm", "inspect", lm.id[:10], *args, "--store", store, cwd=here, code=0).stdout

    report = json.loads(inspect("--prompt", "the cat", "--json"))
    out_dir = Path(report["out_dir"])
    assert out_dir.parent == (store / "inspect").resolve() and out_dir.name.startswith(f"lm-{lm.id[:12]}-")
    assert [Path(f).parent for f in report["heatmaps"]] == [out_dir] and Path(report["heatmaps"][0]).is_file()
    assert list(here.iterdir()) == []  # nothing in the current directory
    text = inspect("--prompt", "the dog")  # another prompt: another folder, named on the terminal
    other = next(p for p in (store / "inspect").iterdir() if p != out_dir)
    assert f"attention heatmap: {other / 'attention_layer0.png'}" in text


@pytest.mark.e2e
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

    def cli(*args, subprocess=False):  # in this process unless asked (tests/commands.py)
        return corpusforge("lm", *args, "--store", store, "--json", env=cli_env(None), code=0,
                           subprocess=subprocess).json()

    a = cli("generate", out["id"][:10], "--prompt", "ROMEO:", "-n", "25", "--seed", "3", "--top-k", "5",
            subprocess=True)
    b = cli("generate", out["id"][:10], "--prompt", "ROMEO:", "-n", "25", "--seed", "3", "--top-k", "5")
    assert a["text"] == b["text"] and len(a["text"]) > 0
    report = cli("inspect", out["id"], "--prompt", "First Citizen", "--out", str(tmp_path / "insp"))
    assert len(report["heatmaps"]) == 1 and Path(report["heatmaps"][0]).stat().st_size > 1000
    assert len(report["next_tokens"]) == 10 and report["tokens"][0] == "F"
    assert sum(r["prob"] for r in report["next_tokens"]) <= 1.0 + 1e-6
    bad = corpusforge("lm", "generate", out["steps"]["encode"], "--store", store, env=cli_env(None))
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
    assert out["registered_model_reason"] is None
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


# ----------------------------------------------------------------------------------------------------------------
# held-out files: lm train TRAIN --valid FILE --test FILE (issue 35 item 7). The ptb-* presets pin their valid and
# test splits by file name (*ptb.valid.txt); with other names the corpus and the tokenizer used to run, then a
# traceback ended the run. A split the lm needs and will not get is now a config error before any work.

def test_valid_and_test_files_are_pinned_to_their_splits():
    from corpusforge.pipeline_config import pipeline_config_from_dict

    data = train_config([Path("d/train.txt")], "ptb-lstm-small", ["train.max_iters=5"], valid=Path("d/dev.txt"),
                        test=Path("d/eval.txt"))
    assert data["corpus"]["sources"] == ["d/train.txt", "d/dev.txt", "d/eval.txt"]
    split = pipeline_config_from_dict(data).corpus.split
    assert [split.split_for_source(n) for n in ("train.txt", "dev.txt", "eval.txt")] == [None, "valid", "test"]
    assert (split.valid, split.test) == (0.0, 0.0) and data["lm"]["train"]["max_iters"] == 5
    # a given file goes to the split it was given for, even where a preset glob says otherwise
    odd = pipeline_config_from_dict(train_config([Path("t.txt")], "ptb-lstm-small", [], valid=Path("ptb.test.txt")))
    assert odd.corpus.split.split_for_source("ptb.test.txt") == "valid"
    # a fraction preset: the given file is the split, nothing of the train text joins it
    char = train_config([Path("t.txt")], "shakespeare-char-cpu", [], valid=Path("v[1].txt"))
    assert char["corpus"]["split"]["valid"] == 0.0
    assert pipeline_config_from_dict(char).corpus.split.split_for_source("v[1].txt") == "valid"  # glob-escaped
    # Mikolov's own files as flags or as sources: the same config, so the same artifacts
    ptb = [Path("p/ptb.train.txt"), Path("p/ptb.valid.txt"), Path("p/ptb.test.txt")]
    assert train_config(ptb[:1], "ptb-gru-small", [], valid=ptb[1], test=ptb[2]) == \
        train_config(ptb, "ptb-gru-small", [])
    # without the flags nothing changes
    plain = train_config([Path("a.txt")], "ptb-nplm", [])
    assert plain["corpus"]["split"] == load_preset("ptb-nplm")["corpus"]["split"]
    with pytest.raises(ConfigError, match="--valid and --test files need names of their own"):
        train_config([Path("a/x.txt")], "ptb-nplm", [], valid=Path("b/x.txt"))


def test_held_out_splits_are_checked_on_the_source_names():
    from corpusforge.pipeline_config import pipeline_config_from_dict
    from corpusforge.plan import check_held_out_splits

    def check(names, split):
        cfg = pipeline_config_from_dict(train_config([Path("x.txt")], "ptb-nplm", [*(f"corpus.split.{k}={v}" for k, v
                                                                                       in split.items())]))
        check_held_out_splits(cfg, names)

    check(["ptb.train.txt", "ptb.valid.txt"], {})  # the preset's glob pins the valid file
    check(["ptb.train.txt", "ptb.test.txt"], {})  # a test split is enough for the lm
    check(["train.txt"], {"valid": 0.1})  # a fraction may hold some out
    with pytest.raises(ConfigError, match=r"^lm: needs a valid \(or test\) split .* no source \(train.txt\) matches "
                                          r"a corpus.split.by_source glob for it \(\*ptb.valid.txt, \*ptb.test.txt\); "
                                          r"give lm train --valid FILE"):
        check(["train.txt"], {})
    with pytest.raises(ConfigError, match="by_source pins every source to another split"):
        check(["train.txt"], {"valid": 0.1, "by_source": "{'*.txt': train}"})
    cfg = pipeline_config_from_dict({"corpus": {"sources": ["x"], "split": {"valid": 0, "test": 0}}})
    check_held_out_splits(cfg, ["x.txt"])  # no stage that needs one: nothing to check


def _cold_env() -> dict[str, str]:
    return {**cli_env(None), "CORPUSFORGE_LOCAL_SERVER": "off", "PYTHONPROFILEIMPORTTIME": "1"}


def _imported(stderr: str) -> set[str]:
    return {line.split("|")[-1].strip() for line in stderr.splitlines() if line.startswith("import time:")}


def test_a_split_the_preset_will_not_get_is_a_config_error_before_any_work(tmp_path):
    write(tmp_path / "train.txt", "the cat sat on the mat\nthe dog sat on the log\n")
    store = tmp_path / "store"
    res = subprocess.run([CLI, "lm", "train", "train.txt", "--preset", "ptb-lstm-small", "--store", str(store)],
                         capture_output=True, text=True, env=_cold_env(), cwd=tmp_path, timeout=300)
    assert res.returncode == 2, res.stderr[-3000:]
    lines = [line for line in res.stderr.splitlines() if not line.startswith("import time:")]
    assert len(lines) == 1 and lines[0].startswith("error: lm: needs a valid (or test) split"), lines
    assert "--valid FILE" in lines[0] and "Traceback" not in res.stderr
    assert not {"prefect", "mlflow", "torch"} & _imported(res.stderr)  # nothing started: no server, no step
    assert not (store / "corpus").exists() and not (store / "mlflow.db").exists()
    missing = subprocess.run([CLI, "lm", "train", "train.txt", "--valid", "nope.txt", "--preset", "ptb-lstm-small",
                              "--store", str(store)], capture_output=True, text=True, env=_cold_env(), cwd=tmp_path)
    assert missing.returncode == 2 and "nope.txt: no such file" in missing.stderr


def test_run_with_an_lm_and_a_corpus_that_holds_nothing_out_is_a_config_error(tmp_path):
    write(tmp_path / "docs" / "a.txt", "the cat sat on the mat\n")
    config = write(tmp_path / "p.yaml", "name: x\n"
                                        "corpus: {sources: [docs], split: {valid: 0, test: 0}}\n"
                                        "tokenizer: {kind: char}\n"
                                        "lm: {name: tiny, family: gpt}\n")
    res = subprocess.run([CLI, "run", str(config), "--store", str(tmp_path / "s")], capture_output=True, text=True,
                         env=_cold_env(), timeout=300)
    assert res.returncode == 2, res.stderr[-3000:]
    assert "error: lm: needs a valid (or test) split" in res.stderr
    assert "corpus.split.valid and test are 0" in res.stderr
    assert not {"prefect", "mlflow"} & _imported(res.stderr)


@pytest.mark.e2e
def test_train_with_valid_and_test_files_of_any_name(prefect_harness, tmp_path):
    lines = (REPO / "data" / "sample" / "tinyshakespeare.txt").read_text(encoding="utf-8").lower().split("\n")
    lines = [" ".join(line.split()) for line in lines if line.strip()]
    write(tmp_path / "train.txt", "\n".join(lines[:1500]) + "\n")
    write(tmp_path / "dev.txt", "\n".join(lines[1500:1650]) + "\n")
    write(tmp_path / "eval.txt", "\n".join(lines[1650:1800]) + "\n")
    res = corpusforge("lm", "train", "train.txt", "--valid", "dev.txt", "--test", "eval.txt", "--preset",
                      "ptb-nplm", "--set", "train.max_iters=20", "--set", "train.eval_interval=10",
                      "--set", "train.batch_size=8", "--set", "sample.max_new_tokens=3", "--set",
                      "tokenizer.vocab_size=500", "--store", tmp_path / "store", "--json",
                      env=cli_env(prefect_harness), cwd=tmp_path, code=0)
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert out["metrics"]["val_ppl"] > 1 and out["metrics"]["test_ppl"] > 1  # scored on dev.txt, then eval.txt
