"""The tokenizer stage through the real pipeline flow, and the ``corpusforge tokenizer`` CLI contract."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from corpusforge.cli import app
from tests.commands import corpusforge
from tests.conftest import REPO, write

CLI = str(Path(sys.executable).parent / "corpusforge")
runner = CliRunner()
TEXTBOOK = " ".join(["low"] * 5 + ["lower"] * 2 + ["newest"] * 6 + ["widest"] * 3 + ["highest"] * 2)


@pytest.mark.e2e
def test_pipeline_runs_tokenizer_and_encode_and_logs_to_mlflow(prefect_harness, tmp_path):
    from mlflow import MlflowClient

    from corpusforge.pipeline import run_pipeline

    src = write(tmp_path / "src" / "s.txt",
                "\n".join((REPO / "data" / "sample" / "tinyshakespeare.txt").read_text().splitlines()[:400]) + "\n")
    store = tmp_path / "store"
    config = {"name": "tok-e2e",
              "corpus": {"name": "s", "sources": [str(src)], "reader": {"txt_mode": "line"},
                         "split": {"valid": 0.1, "test": 0.0}},
              "tokenizer": {"name": "bb", "kind": "byte-bpe", "vocab_size": 300},
              "runner": {"kind": "threads", "workers": 2}}
    summary = run_pipeline(config, store=store)
    steps = [s["step"] for s in summary["steps"]]
    assert steps[-2:] == ["tokenizer", "encode"]
    main = summary["stages"]["tokenizer"]
    assert main["step"] == "encode" and main["metrics"]["tokens_train"] > 0
    meta = json.loads((Path(main["path"]) / "meta.json").read_text())
    train = np.memmap(Path(main["path"]) / "train.bin", dtype=meta["dtype"], mode="r")
    assert len(train) == meta["tokens"]["train"] and int(train[-1]) == meta["eot_id"]
    client = MlflowClient(tracking_uri=f"sqlite:///{store / 'mlflow.db'}")
    runs = client.search_runs([summary["mlflow_experiment_id"]],
                              filter_string=f"tags.mlflow.parentRunId = '{summary['mlflow_run_id']}'")
    tok_run = next(r for r in runs if r.data.tags["corpusforge.step"] == "tokenizer")
    assert {"fertility", "bytes_per_token", "oov_rate", "vocab_used", "roundtrip_exact"} <= set(tok_run.data.metrics)
    assert tok_run.data.metrics["roundtrip_exact"] == 1.0
    logged = {f.path for f in client.list_artifacts(tok_run.info.run_id)}
    assert {"tokenizer.json", "tokenizer_meta.json", "metrics.json"} <= logged
    again = run_pipeline(config, store=store)
    assert again["steps_computed"] == 0  # every step reused


@pytest.mark.e2e
def test_cli_train_classic_bpe_textbook_then_encode_and_compare(prefect_harness, tmp_path):
    words = write(tmp_path / "words.txt", TEXTBOOK + "\n")
    store = tmp_path / "store"
    env = {**os.environ, "PREFECT_API_URL": prefect_harness}
    res = subprocess.run([CLI, "tokenizer", "train", str(words), "--kind", "classic-bpe", "--merges", "5",
                          "--trace", "--store", str(store), "--json"], capture_output=True, text=True, env=env,
                         timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    payload = json.loads(res.stdout.strip().splitlines()[-1])
    assert payload["merges"] == [["e", "s"], ["es", "t"], ["est", "</w>"], ["l", "o"], ["lo", "w"]]
    assert (Path(payload["path"]) / "tokenizer.json").is_file()
    assert "Action: Merge ('lo', 'w')" in res.stdout  # the printed trace precedes the JSON line
    assert payload["trace"]["iterations"][0]["table"][0] == ["e", 19]

    enc = runner.invoke(app, ["tokenizer", "encode", payload["id"][:10], "lowest", "--store", str(store), "--json"])
    assert enc.exit_code == 0, enc.output
    got = json.loads(enc.stdout.strip().splitlines()[-1])
    assert got["tokens"] == ["low", "est</w>"] and len(got["ids"]) == 2

    res = corpusforge("tokenizer", "train", words, "--kind", "char", "--store", store, "--json", env=env,
                      code=0)  # in this process (tests/commands.py)
    char = json.loads(res.stdout.strip().splitlines()[-1])
    assert "merges" not in char
    cmp = runner.invoke(app, ["tokenizer", "compare", payload["id"], char["id"], "--store", str(store), "--json"])
    assert cmp.exit_code == 0, cmp.output
    table = json.loads(cmp.stdout.strip().splitlines()[-1])
    kinds = {v["kind"]: v for v in table.values()}
    # char level: one token per character of the 18 words (110 bytes incl. 17 spaces), 18 words
    assert kinds["char"]["eval_tokens"] == len(TEXTBOOK) and kinds["char"]["fertility"] == len(TEXTBOOK) / 18
    assert kinds["classic-bpe"]["fertility"] < kinds["char"]["fertility"]
    text = runner.invoke(app, ["tokenizer", "compare", payload["id"], char["id"], "--store", str(store)])
    assert text.exit_code == 0 and "fertility" in text.stdout
    # re-evaluated on one corpus (its valid split is empty, so its train split): same text for both
    same = runner.invoke(app, ["tokenizer", "compare", payload["id"], char["id"], "--corpus", char["corpus_id"],
                               "--store", str(store), "--json"])
    assert same.exit_code == 0, same.output
    rows = list(json.loads(same.stdout.strip().splitlines()[-1]).values())
    assert rows[0]["eval_bytes"] == rows[1]["eval_bytes"] == len(TEXTBOOK)


def test_cli_encode_unknown_id_and_bad_kind(tmp_path):
    res = runner.invoke(app, ["tokenizer", "encode", "abcd", "x", "--store", str(tmp_path)])
    assert res.exit_code == 2 and "no artifact" in res.stderr  # an unknown id is bad usage
    res = runner.invoke(app, ["tokenizer", "train", str(tmp_path), "--kind", "bytes", "--store", str(tmp_path)])
    assert res.exit_code == 2 and "--kind" in res.stderr


def test_train_config_keeps_text_as_written_and_routes_overrides():
    from corpusforge.cli.tokenizer import train_config
    from corpusforge.pipeline_config import pipeline_config_from_dict

    cfg = train_config(["/x/words.txt"], "classic-bpe", None, 5, True,
                       ["min_frequency=1", "name=mine", "corpus.split.valid=0.1", "runner.workers=1"])
    assert cfg["corpus"]["reader"] == {"txt_mode": "line"} and cfg["corpus"]["clean"] == {"preset": "raw"}
    assert cfg["corpus"]["dedup"] == {"exact": False}  # repeated lines are word counts, not duplicates
    assert cfg["corpus"]["split"] == {"valid": 0.1, "test": 0.0}
    assert cfg["tokenizer"] == {"name": "mine", "kind": "classic-bpe", "encode": False, "merges": 5,
                                "trace": True, "min_frequency": 1}
    assert cfg["runner"] == {"workers": 1}
    pipeline_config_from_dict(cfg)  # validates
