"""The CLI contract: command names, flags, JSON keys and exit codes, run for real."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from corpusforge.cli import app
from tests.conftest import write

CLI = str(Path(sys.executable).parent / "corpusforge")
runner = CliRunner()


def cli_env(api_url: str | None, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}
    if api_url:
        env["PREFECT_API_URL"] = api_url
    env.update(extra)
    return env


def small_corpus(root: Path) -> Path:
    write(root / "docs" / "one.txt", "alpha beta\ngamma delta\nalpha beta\n")
    write(root / "docs" / "two.jsonl", '{"text": "epsilon zeta", "id": 7}\nnot json\n')
    return root / "docs"


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """A store with one corpus, built through the step core functions (no Prefect needed)."""
    from corpusforge.storage.store import ArtifactStore
    from corpusforge.tasks.corpus.config import corpus_config_from_dict
    from corpusforge.tasks.corpus.merge import build_corpus, resolve_sources
    from corpusforge.tasks.corpus.shard import build_corpus_shard

    root = tmp_path_factory.mktemp("cli")
    store = ArtifactStore(root / "store")
    cfg = corpus_config_from_dict({"name": "small", "sources": [str(small_corpus(root))]})
    shards = [build_corpus_shard(ref, cfg, store) for ref in resolve_sources(cfg)]
    merged = build_corpus(shards, cfg, store)
    return store.root, merged, shards


def test_artifacts_find_json_lists_every_step(built):
    store, merged, shards = built
    res = runner.invoke(app, ["artifacts", "find", "--store", str(store), "--json"])
    assert res.exit_code == 0, res.output
    found = json.loads(res.stdout.strip().splitlines()[-1])
    assert {f["id"] for f in found} == {merged.id, *(s.id for s in shards)}
    res = runner.invoke(app, ["artifacts", "find", "--store", str(store), "--step", "corpus", "--json"])
    assert [f["id"] for f in json.loads(res.stdout)] == [merged.id]
    res = runner.invoke(app, ["artifacts", "find", "--store", str(store), "--config", "split.valid=0.05", "--json"])
    assert merged.id in [f["id"] for f in json.loads(res.stdout)]
    res = runner.invoke(app, ["artifacts", "find", "--store", str(store), "--config", "split.valid=0.5", "--json"])
    assert json.loads(res.stdout) == []


def test_artifacts_show_explains_every_record(built):
    store, merged, _ = built
    res = runner.invoke(app, ["artifacts", "show", merged.id[:10], "--store", str(store), "--json"])
    assert res.exit_code == 0, res.output
    manifest = json.loads(res.stdout)
    assert manifest["id"] == merged.id
    acc = manifest["accounting"]
    assert acc["records_read"] == 5 and acc["kept"] == 3
    assert acc["quarantined"] == {"invalid_json": 1} and acc["deduplicated"] == {"exact": 1}
    assert set(acc["per_source"]) == {"docs/one.txt", "docs/two.jsonl"}
    human = runner.invoke(app, ["artifacts", "show", merged.id[:10], "--store", str(store)], env={"COLUMNS": "160"})
    assert human.exit_code == 0
    for text in ("Record accounting", "invalid_json", "docs/two.jsonl:line:2", "corpus_shard", "quarantine.parquet"):
        assert text in human.stdout


def test_artifacts_verify_detects_tampering(built, tmp_path):
    import shutil

    store, merged, _ = built
    copy = tmp_path / "store"
    shutil.copytree(store, copy)
    ok = runner.invoke(app, ["artifacts", "verify", merged.id, "--store", str(copy)])
    assert ok.exit_code == 0 and "OK" in ok.stdout
    target = next((copy / "corpus").glob("small-*")) / "train.parquet"
    data = bytearray(target.read_bytes())
    data[-20] ^= 0xFF
    target.write_bytes(bytes(data))
    bad = runner.invoke(app, ["artifacts", "verify", merged.id, "--store", str(copy)])
    assert bad.exit_code == 1
    assert "train.parquet" in bad.stderr


def test_unknown_id_is_a_clear_error(built):
    store, _, _ = built
    res = runner.invoke(app, ["artifacts", "show", "ffff0000", "--store", str(store)])
    assert res.exit_code == 2 and "no artifact with id" in res.stderr  # bad usage (docs, Command line: exit codes)


def test_run_rejects_bad_config_with_the_field_name(tmp_path):
    cfg = write(tmp_path / "bad.yaml", "name: x\ncorpus:\n  sources: [.]\n  split: {vaild: 0.1}\n")
    res = runner.invoke(app, ["run", str(cfg), "--store", str(tmp_path / "s")])
    assert res.exit_code == 2
    assert "corpus.split.vaild: unknown key" in res.stderr and "valid" in res.stderr
    res = runner.invoke(app, ["run", str(cfg), "--store", str(tmp_path / "s"), "--set", "nokey"])
    assert res.exit_code == 2 and "KEY=VALUE" in res.stderr


@pytest.mark.e2e
def test_corpus_command_json_and_two_concurrent_runs(prefect_harness, tmp_path):
    """Two concurrent runs of one config end with one intact artifact (and identical ids)."""
    docs = small_corpus(tmp_path)
    store = tmp_path / "store"
    cmd = [CLI, "corpus", str(docs), "--name", "race", "--store", str(store), "--json"]
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env=cli_env(prefect_harness)) for _ in range(2)]
    outs = [p.communicate(timeout=300) for p in procs]
    for p, (stdout, stderr) in zip(procs, outs):
        assert p.returncode == 0, stderr[-3000:]
    results = [json.loads(stdout.strip().splitlines()[-1]) for stdout, _ in outs]
    assert results[0]["id"] == results[1]["id"]
    assert Path(results[0]["path"]).is_dir() and results[0]["accounting"]["records_read"] == 5
    corpus_dirs = [p for p in (store / "corpus").iterdir()]
    assert [p.name for p in corpus_dirs] == [f"race-{results[0]['id'][:12]}"]  # no temp dirs left behind
    assert len(list((store / "corpus_shard").iterdir())) == 1  # the two small files share one shard
    verify = subprocess.run([CLI, "artifacts", "verify", results[0]["id"], "--store", str(store)],
                            capture_output=True, text=True, env=cli_env(None))
    assert verify.returncode == 0, verify.stderr


def test_schedule_without_server_says_how_to_start_one(tmp_path):
    cfg = write(tmp_path / "p.yaml", f"name: s\ncorpus:\n  sources: [{tmp_path}]\n")
    res = subprocess.run([CLI, "schedule", str(cfg), "--cron", "0 3 * * *", "--store", str(tmp_path / "s")],
                         capture_output=True, text=True, env=cli_env(None), timeout=60)
    assert res.returncode == 1
    assert "PREFECT_API_URL" in res.stderr and "prefect server start" in res.stderr


@pytest.mark.e2e
def test_schedule_registers_a_cron_deployment(prefect_harness, tmp_path):
    from prefect.client.orchestration import get_client

    docs = small_corpus(tmp_path)
    cfg = write(tmp_path / "p.yaml", f"name: nightly\ncorpus:\n  sources: [{docs}]\n")
    proc = subprocess.Popen([CLI, "schedule", str(cfg), "--cron", "0 3 * * *", "--store", str(tmp_path / "s")],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=cli_env(prefect_harness), start_new_session=True)
    try:
        deadline, deployment = time.monotonic() + 120, None
        with get_client(sync_client=True) as client:
            while time.monotonic() < deadline and deployment is None:
                try:
                    deployment = client.read_deployment_by_name("corpusforge-scheduled-pipeline/nightly")
                except Exception:  # noqa: BLE001 - not registered yet
                    assert proc.poll() is None, proc.stdout.read()
                    time.sleep(1)
        assert deployment is not None, "deployment never appeared"
        crons = [s.schedule.cron for s in deployment.schedules]
        assert crons == ["0 3 * * *"]
        assert deployment.parameters["config_path"] == str(cfg.resolve())
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _descendants(root: int) -> list[int]:
    """``root`` and every process below it (by parent pid, from /proc: the UIs run in sessions of their own)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(children.get(pid, []))
    return found


def _rss_mb(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return "?"


@pytest.mark.server
def test_ui_starts_prefect_and_mlflow_on_loopback(tmp_path):
    import httpx

    pp, mp = _free_port(), _free_port()
    proc = subprocess.Popen([CLI, "ui", "--store", str(tmp_path / "s"), "--prefect-port", str(pp),
                             "--mlflow-port", str(mp)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=cli_env(None), start_new_session=True)
    try:
        lines = []
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and not any(line.startswith("Data Docs:") for line in lines):
            line = proc.stdout.readline()
            if not line and proc.poll() is not None:
                pytest.fail(f"ui exited early: {proc.stderr.read()[-3000:]}")
            lines.append(line)
        assert f"Prefect UI:  http://127.0.0.1:{pp}\n" in lines
        assert f"MLflow UI:   http://127.0.0.1:{mp}\n" in lines
        assert httpx.get(f"http://127.0.0.1:{pp}/api/health", timeout=5).status_code == 200
        assert httpx.get(f"http://127.0.0.1:{mp}/health", timeout=5).status_code == 200
        # issue 50, item 9: only what the UIs need (MLflow's job runner held 2.95 GiB in 7 consumers)
        tree = _descendants(proc.pid)
        rss = sum(_rss_mb(pid) for pid in tree)
        assert rss <= 1024, f"{rss:.0f} MiB in {len(tree)} processes: {[_cmdline(pid)[:80] for pid in tree]}"
    finally:
        stopped = time.monotonic()
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=60)
    assert time.monotonic() - stopped <= 5.0, time.monotonic() - stopped  # Ctrl-C took 20 s
    for port in (pp, mp):  # both servers are gone after the stop
        with pytest.raises(httpx.HTTPError):
            httpx.get(f"http://127.0.0.1:{port}/health", timeout=2)
