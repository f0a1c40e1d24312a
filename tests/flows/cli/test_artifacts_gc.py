"""`corpusforge artifacts du` and `corpusforge artifacts gc` (issue 35, item 12): the CLI over cf.artifacts.du/gc,
on a hand-published store with lineage and on a store grown by real pipeline runs (Prefect, MLflow in tmp)."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from corpusforge.cli import app
from tests.conftest import write
from tests.storage.test_gc import lineage  # noqa: F401 - the fixture

runner = CliRunner()


def invoke(*args: str):
    return runner.invoke(app, list(args))


def last_json(result):
    return json.loads(result.stdout.strip().splitlines()[-1])


def wait_for_a_waiter(lock: Path, timeout: float) -> bool:
    """True once a process waits for ``lock`` (a blocked flock: "->" in /proc/locks), False after ``timeout``."""
    inode, deadline = lock.stat().st_ino, time.monotonic() + timeout
    while time.monotonic() < deadline:
        if any("->" in line and f":{inode} " in line for line in Path("/proc/locks").read_text().splitlines()):
            return True
        time.sleep(0.1)
    return False


def found_ids(store: Path) -> set[str]:
    res = invoke("artifacts", "find", "--store", str(store), "--json")
    assert res.exit_code == 0, res.output
    return {h["id"] for h in last_json(res)}


def test_gc_dry_run_then_yes_removes_what_find_no_longer_lists_and_verify_passes(store_root, lineage):  # noqa: F811
    a = {k: v.manifest["id"] for k, v in lineage.items()}
    store = str(store_root)
    dry = invoke("artifacts", "gc", "--store", store, "--keep-latest", "1")
    assert dry.exit_code == 0, dry.output
    assert f"would remove tokenizer t {a['t0'][:12]}" in dry.output and f"would remove corpus c {a['c2'][:12]}" \
        in dry.output
    assert "dry run: 2 artifact(s) would go" in dry.output and "--yes" in dry.output
    assert found_ids(store_root) == set(a.values())  # the dry run removed nothing

    as_json = invoke("artifacts", "gc", "--store", store, "--keep-latest", "1", "--dry-run", "--json")
    assert as_json.exit_code == 0, as_json.output
    report = last_json(as_json)
    assert report["dry_run"] is True and report["policy"] == {"keep_latest": 1, "keep_newer_than": None}
    assert [r["id"] for r in report["removed"]] == [a["t0"], a["c2"]]
    assert set(report["removed"][0]) >= {"id", "step", "name", "bytes", "why"}
    assert report["bytes_freed"] == sum(r["bytes"] for r in report["removed"]) > 57_000
    assert {k["id"]: k["why"] for k in report["kept"]}[a["c1"]] == f"an input of kept tokenizer t {a['t1'][:12]}"
    assert found_ids(store_root) == set(a.values())

    done = invoke("artifacts", "gc", "--store", store, "--keep-latest", "1", "--yes", "--json")
    assert done.exit_code == 0, done.output
    removed = {r["id"] for r in last_json(done)["removed"]}
    assert removed == {a["t0"], a["c2"]} and last_json(done)["dry_run"] is False
    remaining = found_ids(store_root)
    assert remaining == set(a.values()) - removed
    gone = invoke("artifacts", "show", a["t0"][:12], "--store", store)
    assert gone.exit_code == 2 and "no artifact with id" in gone.output
    for aid in remaining:
        verified = invoke("artifacts", "verify", aid, "--store", store)
        assert verified.exit_code == 0 and "OK" in verified.output, verified.output
    again = invoke("artifacts", "gc", "--store", store, "--keep-latest", "1", "--yes")
    assert again.exit_code == 0 and "nothing to remove" in again.output, again.output


def test_gc_and_du_usage_errors_and_du_output(store_root, lineage):  # noqa: F811
    a = {k: v.manifest["id"] for k, v in lineage.items()}
    store = str(store_root)
    bad = invoke("artifacts", "gc", "--store", store, "--keep-newer-than", "7days", "--yes")
    assert bad.exit_code == 2 and "give an age such as 7d" in bad.output and len(found_ids(store_root)) == 7
    zero = invoke("artifacts", "gc", "--store", store, "--keep-latest", "0")
    assert zero.exit_code == 2

    du = invoke("artifacts", "du", "--store", store, "--json")
    assert du.exit_code == 0, du.output
    data = last_json(du)
    assert {(g["step"], g["name"]): g["count"] for g in data["groups"]} == \
        {("corpus_shard", "a.txt"): 2, ("corpus", "c"): 3, ("tokenizer", "t"): 2}
    used_by = {e["id"]: e["used_by"] for e in data["artifacts"]}
    assert sorted(used_by[a["s2"]]) == sorted([a["c2"], a["c3"]])
    assert data["artifact_bytes"] == sum(e["bytes"] for e in data["artifacts"])

    tree = invoke("artifacts", "du", "--store", store, "--tree")
    assert tree.exit_code == 0, tree.output
    text = tree.output
    assert "in 7 artifacts" in text and "corpus_shard" in text
    # t1's tree: the corpus c1 below it, the shard s1 below that
    at = text.index(f"tokenizer t {a['t1'][:12]}")
    assert text.index(f"corpus c {a['c1'][:12]}", at) < text.index(f"corpus_shard a.txt {a['s1'][:12]}", at)
    assert "(listed above)" in text  # s2 is an input of both c2 and c3


@pytest.mark.e2e
def test_gc_on_a_store_grown_by_pipeline_runs(prefect_harness, tmp_path, monkeypatch):
    """Three tokenizer runs (the newest on the older corpus), MLflow tracking on: keep-latest 1 removes the two
    older tokenizers and keeps the older corpus the newest tokenizer was trained on; the newest run is then answered
    from the store as it was; the MLflow runs of the removed artifacts are named. A run waits while gc holds the
    store."""
    from corpusforge.api import tokenizer_config
    from corpusforge.pipeline import run_pipeline
    from corpusforge.storage.locks import store_alone

    monkeypatch.chdir(tmp_path)
    store = tmp_path / "store"
    src = tmp_path / "a.txt"
    lines = [f"line {i} of the first corpus, with words and more words {i % 7}" for i in range(60)]

    def run(vocab: int, text: list[str]) -> dict:
        write(src, "\n".join(text) + "\n")
        return run_pipeline(tokenizer_config([str(src)], "byte-bpe", vocab, None, False, []), store=store)

    first = run(270, lines)
    second = run(270, [line.replace("first", "second") for line in lines])
    # the newest tokenizer, on the first corpus again; it waits while gc holds the store alone (another thread)
    seen: dict[str, set[str]] = {}
    held = threading.Event()

    def gc_holding() -> None:
        with store_alone(store):
            held.set()
            seen["waited"] = wait_for_a_waiter(store / ".locks" / "store.lock", timeout=120)
            seen["tokenizers"] = {p.name for p in (store / "tokenizer").iterdir()}

    holder = threading.Thread(target=gc_holding)
    holder.start()
    assert held.wait(30)
    third = run(300, lines)
    holder.join()
    assert seen["waited"], "the run never waited for the store's lock"
    assert len(seen["tokenizers"]) == 2, "a run published while gc held the store"

    tokenizers = [s["id"] for s in (first["steps"] + second["steps"] + third["steps"]) if s["step"] == "tokenizer"]
    corpus_first, corpus_second = first["corpus"]["id"], second["corpus"]["id"]
    assert third["corpus"]["id"] == corpus_first and corpus_second != corpus_first

    done = invoke("artifacts", "gc", "--store", str(store), "--keep-latest", "1", "--yes", "--json")
    assert done.exit_code == 0, done.output
    report = last_json(done)
    assert {r["id"] for r in report["removed"]} == set(tokenizers[:2])
    kept = {k["id"]: k["why"] for k in report["kept"]}
    # the newest run (the pipeline's latest) used the first corpus: kept for that before as its tokenizer's input
    assert kept[corpus_first] == "used by pipeline tokenizer's latest run"
    assert kept[tokenizers[2]] == "used by pipeline tokenizer's latest run"
    assert kept[corpus_second] == "one of the 1 newest corpus a"
    assert {r["artifact_id"] for r in report["mlflow_runs"]} == set(tokenizers[:2])
    remaining = found_ids(store)
    assert not remaining & set(tokenizers[:2]) and {tokenizers[2], corpus_first, corpus_second} <= remaining
    for aid in remaining:
        assert invoke("artifacts", "verify", aid, "--store", str(store)).exit_code == 0
    rerun = run(300, lines)  # everything it needs is still there
    assert all(step["reused"] for step in rerun["steps"]), rerun["steps"]
    assert [step["id"] for step in rerun["steps"] if step["step"] == "tokenizer"] == [tokenizers[2]]
