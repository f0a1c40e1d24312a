"""`corpusforge artifacts find/verify/gc` on hand-made stores (issue 30, items 9, 15, 16, 17): a forged manifest
fails verify; swapped folders are named by find and verify; gc sweeps what killed writers left."""

from __future__ import annotations

import json
import os
from pathlib import Path

from typer.testing import CliRunner

from corpusforge.cli import app
from corpusforge.storage.store import ArtifactStore


def publish(store: ArtifactStore, name: str = "d", k: int = 1):
    def build(out: Path):
        (out / "data.txt").write_text(f"data {name} {k}\n")
        return {"metrics": {"perplexity": 12.5}}

    return store.publish(step="demo", name=name, version=1, config={"k": k}, inputs=[], build=build)


def invoke(*args: str):
    return CliRunner().invoke(app, list(args))


def test_verify_fails_on_a_forged_metric_and_says_what_the_digest_leaves_out(store_root):
    first = publish(ArtifactStore(store_root))
    aid = first.manifest["id"]
    ok = invoke("artifacts", "verify", aid[:8], "--store", str(store_root))
    assert ok.exit_code == 0 and "OK" in ok.output, ok.output
    assert "informational): timings, created_at, environment, library_versions, git_commit" in ok.output
    path = first.path / "manifest.json"
    manifest = json.loads(path.read_text())
    manifest["metrics"]["perplexity"] = 1.01
    path.write_text(json.dumps(manifest))
    forged = invoke("artifacts", "verify", aid[:8], "--store", str(store_root))
    assert forged.exit_code == 1 and "FAIL manifest.json was edited since it was published" in forged.output


def test_verify_several_ids_or_all_of_the_store_in_one_process(store_root):
    store = ArtifactStore(store_root)
    a, b, c = (publish(store, name=n, k=k).manifest["id"] for n, k in (("a", 1), ("b", 2), ("c", 3)))
    several = invoke("artifacts", "verify", a[:8], b[:8], "--store", str(store_root))
    assert several.exit_code == 0 and several.output.count("OK ") == 2, several.output
    assert "2 artifacts: 2 verified, 0 failed" in several.output
    every = invoke("artifacts", "verify", "--all", "--store", str(store_root))
    assert every.exit_code == 0 and {a, b, c} <= set(every.output.split()), every.output
    assert "3 artifacts: 3 verified, 0 failed" in every.output
    (store.find_by_prefix(b[:8])[0][0] / "data.txt").write_text("tampered\n")  # one changed file: exit 1, named
    tampered = invoke("artifacts", "verify", "--all", "--store", str(store_root))
    assert tampered.exit_code == 1 and f"3 artifacts: 2 verified, 1 failed ({b[:12]})" in tampered.output
    assert tampered.output.count("OK ") == 2 and "FAIL" in tampered.output
    # bad usage, before anything is hashed: an unknown id among good ones, neither ids nor --all, or both
    unknown = invoke("artifacts", "verify", a[:8], "ffff0000", "--store", str(store_root))
    assert unknown.exit_code == 2 and "OK" not in unknown.output and "ffff0000" in unknown.output
    for args in ((), (a[:8], "--all")):
        usage = invoke("artifacts", "verify", *args, "--store", str(store_root))
        assert usage.exit_code == 2 and "or --all" in usage.output, usage.output
    empty = invoke("artifacts", "verify", "--all", "--store", str(store_root.parent / "empty"))
    assert empty.exit_code == 0 and "nothing to verify" in empty.output


def test_find_and_verify_name_swapped_folders(store_root):
    store = ArtifactStore(store_root)
    a, b = publish(store, "a", k=1), publish(store, "b", k=2)
    tmp = a.path.with_name(".swap")
    a.path.rename(tmp)
    b.path.rename(a.path)
    tmp.rename(b.path)
    found = invoke("artifacts", "find", "--store", str(store_root), "--json")
    assert found.exit_code == 0
    listed = json.loads(found.stdout.strip().splitlines()[-1])
    assert {h["id"]: h["path"] for h in listed} == {a.manifest["id"]: str(b.path), b.manifest["id"]: str(a.path)}
    assert all("folders were swapped or renamed" in h["problem"] for h in listed)
    assert found.output.count("warning:") == 2
    verified = invoke("artifacts", "verify", a.manifest["id"][:8], "--store", str(store_root))
    assert verified.exit_code == 1, verified.output
    assert f"FAIL {b.path} holds artifact {a.manifest['id'][:12]} (demo a), but its name says demo/{b.path.name}" \
        in " ".join(verified.output.split())


def test_gc_lists_then_removes_the_temp_dirs_of_dead_writers(store_root):
    """Issue 30, item 15, on a local store: `artifacts gc` is a dry run unless --apply; a live writer's temp dir
    stays."""
    from tests.storage.test_orphans import dead_pid

    publish(ArtifactStore(store_root))
    dead = store_root / "demo" / f".tmp-aaaaaaaaaaaa-{dead_pid()}-0123abcd"
    live = store_root / "demo" / f".tmp-bbbbbbbbbbbb-{os.getpid()}-4567ef01"
    for d in (dead, live):
        (d / "half.parquet").parent.mkdir(parents=True)
        (d / "half.parquet").write_bytes(b"x" * 100)
    dry = invoke("artifacts", "gc", "--store", str(store_root))
    assert dry.exit_code == 0 and str(dead) in dry.output and str(live) not in dry.output, dry.output
    assert "--apply" in dry.output and dead.exists()
    done = invoke("artifacts", "gc", "--store", str(store_root), "--apply")
    assert done.exit_code == 0 and "removed 1" in done.output, done.output
    assert not dead.exists() and live.exists()
    assert "nothing to remove" in invoke("artifacts", "gc", "--store", str(store_root)).output


def test_find_config_takes_the_section_prefixed_keys_that_set_takes(store_root):
    """Issue 35 item 8: `--config corpus.split.valid=0.1` (a key as --set writes it) used to match nothing."""
    store = ArtifactStore(store_root)

    def made(step: str, name: str, config: dict):
        return store.publish(step=step, name=name, version=1, config=config, inputs=[],
                             build=lambda out: (out / "x.txt").write_text(name) and {}).manifest["id"]

    held = made("corpus", "held", {"split": {"valid": 0.1, "test": 0.0}})
    made("corpus", "other", {"split": {"valid": 0.2, "test": 0.0}})
    tok = made("tokenizer", "tok", {"split": {"valid": 0.1}, "kind": "char"})  # the same key, another section

    def ids(*args: str) -> list[str]:
        res = invoke("artifacts", "find", *args, "--store", str(store_root), "--json")
        assert res.exit_code == 0, res.output
        return [h["id"] for h in json.loads(res.stdout.strip().splitlines()[-1])]

    assert ids("--config", "corpus.split.valid=0.1") == [held]
    assert ids("--config", "tokenizer.split.valid=0.1", "--config", "tokenizer.kind=char") == [tok]
    assert sorted(ids("--config", "split.valid=0.1")) == sorted([held, tok])  # the artifact's own keys, as before
    assert ids("--config", "corpus.split.valid=0.1", "--step", "tokenizer") == []
    assert ids("--config", "corpus.split.valid=0.3") == []
    import corpusforge as cf

    assert [a.id for a in cf.artifacts.find(config={"corpus.split.valid": 0.1}, store=store_root)] == [held]
