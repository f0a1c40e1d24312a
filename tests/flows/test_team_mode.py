"""Team mode, started for real (issue 15, item 4): PostgreSQL (Debian's package), a Prefect server and an MLflow
tracking server on it, MLflow's artifacts and the artifact store in one S3 bucket (moto's S3 server), a process
worker on the ``cpu`` pool; ``deploy/prefect.yaml`` deployed, the ``demo-nightly`` deployment run and checked in
the Prefect API, the MLflow server and the bucket.

The sequence is the docs': the test reads the two bash blocks of "Team mode" (deploy/docs/pages/operations/team-mode.md)
and runs the second one verbatim
(``set -euo pipefail``), with the first one's settings replaced by its own (a temp dir, free ports, a random
password). ``test_docs_team_sequence_is_the_one_tested`` (fast) keeps the two in step. Every service binds
127.0.0.1; every process the sequence started is stopped at the end, even when a check fails."""

from __future__ import annotations

import glob
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from tests.conftest import REPO

# The settings the docs' first block exports (a team's values); the test supplies its own for each.
SETTINGS = ("TEAM_DIR", "BUCKET", "PG_PASSWORD", "PG_PORT", "S3_PORT", "PREFECT_PORT", "MLFLOW_PORT",
            "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION")
SEQUENCE_TIMEOUT = 420  # seconds for the whole docs sequence (the demo run is ~40 s of it on 2 idle cores)
DEPLOYMENT = "corpusforge-scheduled-pipeline/demo-nightly"


TEAM_PAGE = REPO / "deploy" / "docs" / "pages" / "operations" / "team-mode.md"


def docs_team_blocks() -> tuple[str, str]:
    """The docs' team-mode bash blocks (the "Team mode" section of Operations, Schedules and team mode):
    (settings, sequence)."""
    text = TEAM_PAGE.read_text(encoding="utf-8")
    start = text.index("\n## Team mode\n")
    end = text.index("\n## ", start + 1)
    blocks = re.findall(r"```bash\n(.*?)```", text[start:end], flags=re.S)
    assert len(blocks) >= 2, "the docs' 'Team mode' needs a settings block and the sequence block"
    return blocks[0], blocks[1]


def exported_names(block: str) -> list[str]:
    names = []
    for line in block.splitlines():
        line = line.split("#", 1)[0].strip()
        if line.startswith("export "):
            names += [word.split("=", 1)[0] for word in line[len("export "):].split() if "=" in word]
    return names


def test_docs_team_sequence_is_the_one_tested():
    """The docs' settings block sets exactly the names this test supplies, and the sequence block has the
    steps the checks below rely on (so editing the docs cannot silently skip one)."""
    settings, sequence = docs_team_blocks()
    assert sorted(exported_names(settings)) == sorted(SETTINGS)
    for needed in ("initdb", "pg_ctl", "createdb -h 127.0.0.1 -p $PG_PORT -U corpusforge prefect",
                   "createdb -h 127.0.0.1 -p $PG_PORT -U corpusforge mlflow",
                   "prefect server start --host 127.0.0.1", "mlflow server --host 127.0.0.1",
                   "--artifacts-destination s3://$BUCKET/mlflow", "CORPUSFORGE_STORE=s3://$BUCKET/store",
                   "prefect work-pool create cpu --type process",
                   "prefect --no-prompt deploy --all --prefect-file deploy/prefect.yaml",
                   "prefect worker start --pool cpu", f"prefect deployment run {DEPLOYMENT} --watch",
                   "corpusforge artifacts verify"):
        assert needed in sequence, needed
    for line in sequence.splitlines():  # background services log to files: nothing holds the caller's output open
        if line.rstrip().endswith("&"):
            assert "> $TEAM_DIR/" in line and "2>&1 &" in line, line
    for port_flag in re.findall(r"--host (\S+)|listen_addresses=(\S+)|-H (\S+)", sequence):
        assert "127.0.0.1" in port_flag, port_flag


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def why_not_runnable() -> str | None:
    if not sys.platform.startswith("linux"):
        return "team mode test needs Linux (PostgreSQL from the Debian package)"
    if not glob.glob("/usr/lib/postgresql/*/bin/initdb"):
        return "PostgreSQL is not installed (Debian package postgresql: no /usr/lib/postgresql/*/bin/initdb)"
    if os.geteuid() != 0:
        return "not root: the docs' sequence runs PostgreSQL as the postgres user through runuser"
    try:
        import pwd

        pwd.getpwnam("postgres")
    except KeyError:
        return "no postgres user to run PostgreSQL as (PostgreSQL refuses to run as root)"
    for tool in ("runuser", "curl", "install", "timeout"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed"
    for module, why in (("psycopg2", "the MLflow server's Postgres driver (psycopg2-binary, dev extra)"),
                        ("asyncpg", "the Prefect server's Postgres driver"), ("boto3", "MLflow's S3 client"),
                        ("moto.server", "moto's S3 server (moto[server], dev extra)"), ("s3fs", "the s3:// store")):
        try:
            __import__(module)
        except ImportError:
            return f"{module} is not installed: {why}"
    return None


def processes_of(team_dir: str) -> list[int]:
    """Every live process started by the sequence (they all inherit TEAM_DIR in their environment, even the
    ones in sessions of their own: the postmaster, Prefect's flow-run processes)."""
    marker = f"TEAM_DIR={team_dir}".encode()
    pids = []
    for environ in glob.glob("/proc/[0-9]*/environ"):
        try:
            if marker in Path(environ).read_bytes().split(b"\0"):
                pids.append(int(environ.split("/")[2]))
        except OSError:
            continue
    return [pid for pid in pids if pid != os.getpid()]


def stop_everything(proc: subprocess.Popen, env: dict[str, str]) -> list[int]:
    """PostgreSQL first (a fast shutdown), then the sequence's process group, then any straggler; returns the
    pids still alive at the end (none, unless something ignores SIGKILL)."""
    team_dir = env["TEAM_DIR"]
    pg_bin = sorted(glob.glob("/usr/lib/postgresql/*/bin"))[-1]
    if Path(team_dir, "pg", "postmaster.pid").exists():
        subprocess.run(["runuser", "-u", "postgres", "--", f"{pg_bin}/pg_ctl", "-D", f"{team_dir}/pg", "-m", "fast",
                        "-w", "-t", "30", "stop"], env=env, capture_output=True, timeout=60, check=False)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            pass
        for pid in processes_of(team_dir):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and processes_of(team_dir):
            time.sleep(0.3)
    if proc.poll() is None:
        proc.wait(timeout=10)
    return processes_of(team_dir)


def tail(path: Path, lines: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(none)"


@pytest.fixture(scope="module")
def team():
    why = why_not_runnable()
    if why:
        pytest.skip(why)
    _settings, sequence = docs_team_blocks()
    parent = Path(tempfile.mkdtemp(prefix="corpusforge-team-"))
    parent.chmod(0o755)  # the postgres user must reach TEAM_DIR inside it
    team_dir = parent / "team"
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PREFECT_API", "CORPUSFORGE_", "MLFLOW_", "AWS_"))}
    env.update({
        "TEAM_DIR": str(team_dir), "BUCKET": "corpusforge-team", "PG_PASSWORD": secrets.token_hex(12),
        "PG_PORT": str(free_port()), "S3_PORT": str(free_port()), "PREFECT_PORT": str(free_port()),
        "MLFLOW_PORT": str(free_port()), "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        # not in the docs (a team's defaults are fine): keep this run's files out of $HOME
        "PREFECT_HOME": str(team_dir / "prefect-home"), "CORPUSFORGE_CACHE_DIR": str(team_dir / "cache"),
        "CORPUSFORGE_LOCAL_SERVER": "off", "PATH": f"{Path(sys.executable).parent}:{env.get('PATH', '')}",
        "PREFECT_LOGGING_LEVEL": "INFO", "MLFLOW_DISABLE_TELEMETRY": "true",
    })
    assert set(SETTINGS) <= set(env)
    log = parent / "sequence.log"
    script = "set -euo pipefail\nset -x\n" + sequence
    started = time.monotonic()
    with open(log, "wb") as out:
        proc = subprocess.Popen(["bash", "-c", script], cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        try:
            rc = proc.wait(timeout=SEQUENCE_TIMEOUT)
        except subprocess.TimeoutExpired:
            rc = None
        elapsed = time.monotonic() - started
        if rc != 0:
            logs = "\n".join(f"--- {name}\n{tail(team_dir / name, 25)}"
                             for name in ("pg.log", "s3.log", "prefect.log", "mlflow.log", "worker-cpu.log"))
            pytest.fail(f"the docs' team-mode sequence {'timed out' if rc is None else f'exited {rc}'} after "
                        f"{elapsed:.0f}s:\n{tail(log, 60)}\n{logs}")
        print(f"team-mode sequence: {elapsed:.0f}s")
        yield {"env": env, "log": log.read_text(errors="replace"), "dir": team_dir, "elapsed": elapsed,
               "prefect": f"http://127.0.0.1:{env['PREFECT_PORT']}/api",
               "mlflow": f"http://127.0.0.1:{env['MLFLOW_PORT']}",
               "s3": f"http://127.0.0.1:{env['S3_PORT']}", "store": f"s3://{env['BUCKET']}/store"}
    finally:
        left = stop_everything(proc, env)
        shutil.rmtree(parent, ignore_errors=True)
        assert not left, f"processes of the team-mode sequence still running: {left}"


server = pytest.mark.server  # PostgreSQL, Prefect and MLflow servers, moto's S3, a worker


def cli(team, *args: str, cache: str = "cache") -> subprocess.CompletedProcess:
    env = {**team["env"], "CORPUSFORGE_CACHE_DIR": str(team["dir"] / cache),
           "AWS_ENDPOINT_URL": team["s3"], "CORPUSFORGE_STORE": team["store"]}
    return subprocess.run([str(Path(sys.executable).parent / "corpusforge"), *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=120)


def query(team, database: str, sql: str, *args) -> list[tuple]:
    """Straight from PostgreSQL: the servers really keep their state there."""
    import psycopg2

    env = team["env"]
    with psycopg2.connect(host="127.0.0.1", port=int(env["PG_PORT"]), user="corpusforge", password=env["PG_PASSWORD"],
                          dbname=database, connect_timeout=10) as con, con.cursor() as cur:
        cur.execute(sql, args)
        return [tuple(row) for row in cur.fetchall()]


def s3_client(team):
    import boto3

    return boto3.client("s3", endpoint_url=team["s3"], aws_access_key_id="testing", aws_secret_access_key="testing",
                        region_name="us-east-1")


def manifest_key(artifact: dict) -> str:
    return f"store/{artifact['step']}/{artifact['name']}-{artifact['id'][:12]}/manifest.json"


@pytest.fixture(scope="module")
def artifacts(team) -> list[dict]:
    out = cli(team, "artifacts", "find", "--store", team["store"], "--json")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


@server
def test_flow_run_completed_in_the_prefect_api(team):
    import httpx

    match = re.findall(r"/runs/flow-run/([0-9a-f-]{36})", team["log"])
    assert match, "no flow run URL in the output of `prefect deployment run`"
    flow_run = httpx.get(f"{team['prefect']}/flow_runs/{match[-1]}", timeout=30).json()
    assert flow_run["state"]["type"] == "COMPLETED", flow_run["state"]
    deployment = httpx.get(f"{team['prefect']}/deployments/name/{DEPLOYMENT}", timeout=30).json()
    assert flow_run["deployment_id"] == deployment["id"]
    assert deployment["work_pool_name"] == "cpu"
    assert flow_run["parameters"]["store"] == team["store"]  # baked in from $CORPUSFORGE_STORE at deploy time
    assert query(team, "prefect", "SELECT state_type FROM flow_run WHERE id = %s", match[-1]) == [("COMPLETED",)]


@server
def test_runs_and_registered_model_are_in_the_mlflow_server(team, artifacts, tmp_path):
    import mlflow
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=team["mlflow"], registry_uri=team["mlflow"])
    experiment = client.get_experiment_by_name("demo")
    assert experiment is not None and experiment.artifact_location.startswith("mlflow-artifacts:")
    runs = client.search_runs([experiment.experiment_id], max_results=500)
    assert all(run.info.status == "FINISHED" for run in runs)
    names = {run.info.run_name for run in runs}
    expected = {f"{a['step']}:{a['name']}" for a in artifacts}
    assert expected <= names, expected - names  # a run per computed step ...
    assert len(names - expected) == 1  # ... under one pipeline run
    assert query(team, "mlflow", "SELECT count(*) FROM runs WHERE experiment_id = %s", int(experiment.experiment_id)) \
        == [(len(runs),)]
    (lm,) = [a for a in artifacts if a["step"] == "lm"]
    (version,) = client.search_model_versions(f"name='{lm['name']}'")
    assert version.status == "READY" and version.source.startswith("mlflow-artifacts:/")
    source = client.get_model_version_download_uri(lm["name"], version.version)  # not models:/ (default registry)
    assert source.startswith("mlflow-artifacts:/")  # served by the MLflow server from the bucket
    copy = Path(mlflow.artifacts.download_artifacts(artifact_uri=source, dst_path=str(tmp_path),
                                                    tracking_uri=team["mlflow"]))
    from corpusforge.storage.hashing import sha256_file

    manifest = json.loads(s3_client(team).get_object(Bucket=team["env"]["BUCKET"], Key=manifest_key(lm))["Body"].read())
    weights = manifest["files"]["model.safetensors"]["sha256"]
    assert sha256_file(copy / "data" / "data" / "lm" / "model.safetensors") == weights


@server
def test_artifacts_are_in_the_bucket_and_verify(team, artifacts):
    s3 = s3_client(team)
    keys = [obj["Key"] for page in s3.get_paginator("list_objects_v2").paginate(Bucket=team["env"]["BUCKET"])
            for obj in page.get("Contents", [])]
    steps = {a["step"] for a in artifacts}
    assert {"corpus_shard", "corpus", "tokenizer", "encode", "ngram", "embeddings", "lm", "lm_sample"} <= steps
    manifests = {k for k in keys if k.startswith("store/") and k.endswith("/manifest.json") and "/.data-" not in k}
    assert manifests == {manifest_key(a) for a in artifacts}
    assert any(k.startswith("mlflow/") and k.endswith("/model.safetensors") for k in keys)  # MLflow's copy
    # from a machine with an empty cache: everything comes from the bucket (one process verifies them all)
    out = cli(team, "artifacts", "verify", "--all", "--store", team["store"], cache="other-machine")
    assert out.returncode == 0, (out.stdout, out.stderr)
    verified = {line.split()[1] for line in out.stdout.splitlines() if line.startswith("OK ")}
    assert verified == {a["id"] for a in artifacts}, (out.stdout, out.stderr)
    assert f"{len(artifacts)} artifacts: {len(artifacts)} verified, 0 failed" in out.stdout


@server
def test_team_mode_took_under_five_minutes(team):
    assert team["elapsed"] < 300, f"the docs' team-mode sequence took {team['elapsed']:.0f}s"


@server
def test_a_gpu_pool_worker_trains_an_lm_deployment_on_two_ranks(team, artifacts):
    """Issue 49 item 5, last in this module (it adds an artifact the checks above do not expect): a Prefect process
    worker serves the gpu pool, and the lm-gpu deployment of deploy/prefect.yaml trains an lm on the demo's encoded
    shards with train.processes 2 (gloo ranks on this CPU host, as the docs' GPU worker section says a GPU host
    does with its GPUs): the flow run completes and the published lm records the 2 processes."""
    (lm,) = [a for a in artifacts if a["step"] == "lm"]
    shown = cli(team, "artifacts", "show", lm["id"], "--json", "--store", team["store"])
    assert shown.returncode == 0, shown.stderr
    manifest = json.loads(shown.stdout.strip().splitlines()[-1])
    (encoded,) = [i["id"] for i in manifest["inputs"] if i.get("step") == "encode"]
    env = {**team["env"], "PREFECT_API_URL": team["prefect"], "CORPUSFORGE_TRACKING_URI": team["mlflow"],
           "CORPUSFORGE_HOME": str(REPO), "CORPUSFORGE_STORE": team["store"], "AWS_ENDPOINT_URL": team["s3"]}
    prefect = str(Path(sys.executable).parent / "prefect")
    with open(team["dir"] / "worker-gpu.log", "wb") as log:
        worker = subprocess.Popen([prefect, "worker", "start", "--pool", "gpu"], cwd=REPO, env=env, stdout=log,
                                  stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        config = {"name": "team-lm-2", "family": "gpt", "sample": {"max_new_tokens": 0},
                  "model": {"n_layer": 1, "n_head": 2, "n_embd": 32, "block_size": 32},
                  "train": {"max_iters": 20, "batch_size": 8, "grad_accum": 2, "processes": 2, "eval_interval": 10,
                            "eval_iters": 2, "log_interval": 5, "warmup_iters": 2, "cpu_threads": 1}}
        run = subprocess.run([prefect, "deployment", "run", "corpusforge-lm/lm-gpu", "--param", f"encoded={encoded}",
                              "--param", f"config={json.dumps(config)}", "--watch", "--watch-timeout", "600"],
                             cwd=REPO, env=env, capture_output=True, text=True, timeout=660)
        assert run.returncode == 0, f"{run.stdout[-2000:]}\n{run.stderr[-2000:]}\n{tail(team['dir'] / 'worker-gpu.log')}"
    finally:
        os.killpg(worker.pid, signal.SIGTERM)
        try:
            worker.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(worker.pid, signal.SIGKILL)
    found = cli(team, "artifacts", "find", "--step", "lm", "--name", "team-lm-2", "--json", "--store", team["store"])
    assert found.returncode == 0, found.stderr
    (trained,) = json.loads(found.stdout.strip().splitlines()[-1])
    shown = cli(team, "artifacts", "show", trained["id"], "--json", "--store", team["store"])
    metrics = json.loads(shown.stdout.strip().splitlines()[-1])["metrics"]
    assert metrics["processes"] == 2.0 and metrics["steps"] == 20
