"""The embeddings stage through the real flow (Prefect + MLflow) and the ``corpusforge embed`` commands."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from corpusforge.cli import app
from tests.commands import corpusforge
from tests.conftest import write

pytestmark = pytest.mark.e2e

CLI = str(Path(sys.executable).parent / "corpusforge")
runner = CliRunner()
LINES = ["the king rules the land", "the queen rules the land", "a man walks", "a woman walks",
         "the king and the queen", "the man and the woman"] * 15


def make_corpus(root: Path) -> Path:
    return write(root / "royals" / "royals.txt", "\n".join(LINES) + "\n")


def test_pipeline_trains_glove_evaluates_and_logs_to_mlflow(prefect_harness, tmp_path):
    from mlflow import MlflowClient

    from corpusforge.pipeline import run_pipeline

    pairs = write(tmp_path / "pairs.tsv", "king\tqueen\t9\nman\twoman\t8\nking\tland\t2\nqueen\tunicorn\t5\n")
    config = {
        "name": "emb-e2e",
        "corpus": {"name": "royals", "sources": [str(make_corpus(tmp_path))], "reader": {"txt_mode": "line"},
                   "split": {"valid": 0.0, "test": 0.0}, "validate": {"min_chars": 1, "max_chars": 1000}},
        "embeddings": {"kind": "glove", "dim": 8, "window": 2, "min_count": 1, "epochs": 5, "device": "cpu",
                       "similarity": [str(pairs)], "neighbors": ["king"], "plot_groups": [["king", "queen"], ["man", "woman"]]},
        "runner": {"kind": "threads", "workers": 2},
    }
    store = tmp_path / "store"
    summary = run_pipeline(config, store=store)
    steps = [s["step"] for s in summary["steps"]]
    # the corpus shard and merge are deduplicated lines: 6 distinct documents
    assert steps == ["corpus_shard", "corpus", "cooccurrence", "embeddings_eval", "embeddings"]
    stage = summary["stages"]["embeddings"]
    assert stage["step"] == "embeddings" and stage["metrics"]["vocab_size"] == 10
    client = MlflowClient(tracking_uri=f"sqlite:///{store / 'mlflow.db'}")
    children = client.search_runs([summary["mlflow_experiment_id"]],
                                  filter_string=f"tags.mlflow.parentRunId = '{summary['mlflow_run_id']}'")
    by_step = {r.data.tags["corpusforge.step"]: r for r in children}
    ev = by_step["embeddings_eval"]
    assert ev.data.metrics["pairs_oov_pairs"] == 1.0 and ev.data.metrics["pairs_pairs"] == 4.0  # queen-unicorn
    assert "pairs_spearman" in ev.data.metrics
    assert {"eval.json", "pca.png", "manifest.json"} <= {a.path for a in client.list_artifacts(ev.info.run_id)}
    assert "vectors.bin" in {a.path for a in client.list_artifacts(by_step["embeddings"].info.run_id)}
    again = run_pipeline(config, store=store)
    assert again["steps_computed"] == 0


def test_embed_train_eval_neighbors(prefect_harness, tmp_path):
    from gensim.models import KeyedVectors

    corpus, store = make_corpus(tmp_path), tmp_path / "store"
    env = {k: v for k, v in __import__("os").environ.items() if k != "PREFECT_API_URL"}
    env["PREFECT_API_URL"] = prefect_harness
    proc = subprocess.run([CLI, "embed", "train", str(corpus), "--kind", "word2vec", "--set", "dim=12",
                           "--set", "min_count=1", "--set", "epochs=2", "--set", "workers=1", "--set", "sg=0",
                           "--set", "tracking.enabled=false", "--store", str(store), "--json"],
                          capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    payload = json.loads(proc.stdout.strip().splitlines()[-1])
    assert {"id", "path", "vectors_path"} <= set(payload) and payload["kind"] == "word2vec"
    kv = KeyedVectors.load_word2vec_format(payload["vectors_path"])  # the default (text) format
    assert kv.vector_size == 12 and len(kv) == 10
    manifest = json.loads((Path(payload["path"]) / "manifest.json").read_text())
    assert manifest["config"]["sg"] == 0 and manifest["config"]["dim"] == 12

    res = runner.invoke(app, ["embed", "neighbors", payload["id"][:10], "King", "--top", "3", "--store", str(store),
                              "--json"])
    assert res.exit_code == 0, res.output
    hits = json.loads(res.stdout.strip().splitlines()[-1])["neighbors"]
    assert len(hits) == 3 and "king" not in [h["word"] for h in hits]
    assert runner.invoke(app, ["embed", "neighbors", payload["id"], "unicorn", "--store", str(store)]).exit_code == 1

    pairs = write(tmp_path / "ws.tsv", "# w1\tw2\tscore\nking\tqueen\t9\nman\twoman\t8\nland\twalks\t1\nx\ty\t3\n")
    qs = write(tmp_path / "q.txt", ": family\nman woman king queen\nman king woman queen\nfoo bar baz qux\n")
    res = runner.invoke(app, ["embed", "eval", payload["id"], "--analogies", str(qs), "--similarity", str(pairs),
                              "--store", str(store), "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert out["metrics"]["analogy_questions"] == 3 and out["metrics"]["analogy_covered"] == 2
    assert out["metrics"]["ws_oov_pairs"] == 1 and out["report"]["similarity"]["ws"]["scored_pairs"] == 3
    bad = runner.invoke(app, ["embed", "eval", payload["id"], "--analogies", str(tmp_path / "missing.txt"),
                              "--store", str(store)])
    assert bad.exit_code == 2
    assert runner.invoke(app, ["embed", "train", str(corpus), "--kind", "bert"]).exit_code == 2

    # TF-IDF through the same command: no vectors_path, the matrices are in the artifact
    proc = corpusforge("embed", "train", corpus, "--kind", "tfidf", "--set", "min_df=2", "--set",
                       "tracking.enabled=false", "--store", store, "--json", env=env, code=0)  # in this process
    tfidf = json.loads(proc.stdout.strip().splitlines()[-1])
    assert tfidf["step"] == "sparse_vectors" and "vectors_path" not in tfidf
    # 6 distinct lines (dedup); words in >= 2 of them: the, king, rules, land, queen, a, man, walks, woman, and
    assert tfidf["metrics"]["vocab_size"] == 10 and tfidf["metrics"]["docs_train"] == 6
    assert (Path(tfidf["path"]) / "train_tfidf.npz").is_file()


def test_a_diverged_glove_fails_in_one_line_and_publishes_nothing(prefect_harness, tmp_path):
    # issue 35 (defect 3): exit 1, one line naming the artifact, what is not finite and what to change; no traceback
    corpus, store = make_corpus(tmp_path), tmp_path / "store"
    env = {k: v for k, v in __import__("os").environ.items() if k != "PREFECT_API_URL"}
    env["PREFECT_API_URL"] = prefect_harness
    proc = corpusforge("embed", "train", corpus, "--kind", "glove", "--set", "dim=8", "--set", "min_count=1",
                       "--set", "epochs=5", "--set", "learning_rate=1e6", "--set", "device=cpu",
                       "--set", "tracking.enabled=false", "--store", store, "--json", env=env)  # in this process
    assert proc.returncode == 1 and proc.stdout.strip() == "", proc.stderr[-2000:]
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert errors == [("error: embeddings royals-glove (glove): training diverged (final_loss is nan; 80 of 80 weight "
                       "values are NaN or infinite), so nothing was published; lower embeddings.learning_rate (now "
                       "1e+06; glove.c's is 0.05)")], proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    assert not (store / "embeddings").exists() or not any((store / "embeddings").iterdir())
