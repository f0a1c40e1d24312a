"""Issue 35, items 1-2: every UI `corpusforge ui` prints shows this store's data when the default ports (4200 for
Prefect, 5000 for MLflow) belong to someone else, and the MLflow links a run prints follow the port really served.

Something other than this store answers on 4200 and 5000 throughout (a decoy started here when the port is free;
whatever already listens there otherwise): the store's UIs must land on other ports, tell the truth about them,
and never send the browser to the decoys. Checked through HTTP and in a headless Chromium."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest

from tests.conftest import write
from tests.tasks.test_data_docs_offline import chromium  # noqa: F401 - the headless-browser fixture

CLI = str(Path(sys.executable).parent / "corpusforge")
pytestmark = pytest.mark.server
CONFIG = """name: uiports
corpus: {name: small, sources: [docs], reader: {txt_mode: line}}
runner: {kind: threads, workers: 1}
"""


class _Decoy(BaseHTTPRequestHandler):
    """Another server on a default port: healthy on Prefect's and MLflow's health paths, no runs anywhere."""

    def _answer(self):
        body = b"[]" if self.path.startswith("/api/") and not self.path.startswith("/api/health") else b"true"
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Access-Control-Allow-Origin", "*")
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = _answer

    def log_message(self, *_):
        pass


def _taken_by_someone(port: int) -> ThreadingHTTPServer | None:
    """A decoy on ``port`` if it is free (None when another process already listens there, which serves too)."""
    try:
        decoy = ThreadingHTTPServer(("127.0.0.1", port), _Decoy)
    except OSError:
        return None
    threading.Thread(target=decoy.serve_forever, daemon=True).start()
    return decoy


def _env() -> dict[str, str]:
    """A user's shell: the local server on, no Prefect API or tracking server configured, default ports."""
    drop = ("PREFECT_API_URL", "PREFECT_HOME", "CORPUSFORGE_PREFECT_PORT", "PREFECT_UI_API_URL",
            "PREFECT_SERVER_UI_API_URL", "MLFLOW_TRACKING_URI", "MLFLOW_REGISTRY_URI", "CORPUSFORGE_TRACKING_URI",
            # the telemetry switches the test session sets: a user's shell has none, corpusforge sets its own
            "DO_NOT_TRACK", "MLFLOW_DISABLE_TELEMETRY", "PREFECT_SERVER_ANALYTICS_ENABLED", "GX_ANALYTICS_ENABLED")
    return {**{k: v for k, v in os.environ.items() if k not in drop}, "CORPUSFORGE_LOCAL_SERVER": "on"}


def _printed(out: Path, proc: subprocess.Popen, timeout: float = 240) -> dict[str, str]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = out.read_text() if out.exists() else ""
        if "To schedule runs" in text:
            return dict(re.findall(r"^(Prefect UI|MLflow UI):\s+(\S+)", text, re.M))
        assert proc.poll() is None, f"`corpusforge ui` exited {proc.returncode}: {text}"
        time.sleep(0.3)
    pytest.fail("`corpusforge ui` printed no URLs in time")


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """`corpusforge ui` for a store while others hold 4200 and 5000, then a pipeline run into that store."""
    root = tmp_path_factory.mktemp("uiports")
    write(root / "docs" / "a.txt", "the cat sat on the mat\nthe dog sat on the log\n")
    write(root / "cfg.yaml", CONFIG)
    store, env = root / "store", _env()
    decoys = [d for d in (_taken_by_someone(4200), _taken_by_someone(5000)) if d is not None]
    out = root / "ui.out"
    with open(out, "w") as stdout, open(root / "ui.err", "w") as stderr:
        ui = subprocess.Popen([CLI, "ui", "--store", str(store)], stdout=stdout, stderr=stderr, env=env,
                              start_new_session=True)
    try:
        urls = _printed(out, ui)
        run = subprocess.run([CLI, "run", str(root / "cfg.yaml"), "--store", str(store)], capture_output=True,
                             text=True, env=env, timeout=300)
        assert run.returncode == 0, run.stderr[-3000:]
        yield {"store": store, "prefect": urls["Prefect UI"], "mlflow": urls["MLflow UI"], "run": run.stdout,
               "ui_err": (root / "ui.err").read_text()}
    finally:
        ui.send_signal(signal.SIGTERM)  # it stops its MLflow UI; the local server is stopped meanwhile
        stopping = subprocess.Popen([CLI, "server", "stop", "--store", str(store)], env=env,
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            ui.wait(timeout=40)
        except subprocess.TimeoutExpired:
            os.killpg(ui.pid, signal.SIGKILL)
        stopping.wait(timeout=90)
        for decoy in decoys:
            decoy.shutdown()
            decoy.server_close()


def _mlflow_run(store: Path):
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{store / 'mlflow.db'}")
    exp = client.get_experiment_by_name("uiports")
    (run,) = client.search_runs([exp.experiment_id], "tags.`mlflow.parentRunId` IS NULL")
    return exp, run


def test_the_prefect_ui_reads_its_own_api_not_the_one_on_4200(served):
    settings = httpx.get(served["prefect"] + "/ui-settings", timeout=10).json()  # where its UI sends requests
    assert settings["api_url"] == served["prefect"] + "/api", settings
    assert urlsplit(served["prefect"]).port != 4200 and "4200 is taken" in served["ui_err"], served["ui_err"]
    runs = httpx.post(settings["api_url"] + "/flow_runs/filter", json={}, timeout=10).json()
    assert [r["state"]["type"] for r in runs] == ["COMPLETED"]


def test_the_printed_mlflow_ui_and_the_run_links_are_this_stores(served):
    mlflow = served["mlflow"]
    assert urlsplit(mlflow).port != 5000 and "5000 is taken" in served["ui_err"], served["ui_err"]
    got = httpx.get(mlflow + "/api/2.0/mlflow/experiments/get-by-name", params={"experiment_name": "uiports"},
                    timeout=10)
    assert got.status_code == 200, got.text  # this store's experiment, served where the UI said
    exp, run = _mlflow_run(served["store"])
    links = dict(re.findall(r"^\s+(report|runs):\s+(\S+)", served["run"], re.M))
    assert links == {"report": f"{mlflow}/#/experiments/{exp.experiment_id}/runs/{run.info.run_id}"
                               "?workflowType=machine_learning",
                     "runs": f"{mlflow}/#/experiments/{exp.experiment_id}?workflowType=machine_learning"}, served["run"]
    assert f"{mlflow}/#/experiments/{exp.experiment_id}/runs/{run.info.run_id}" in run.data.tags["mlflow.note.content"]
    record = json.loads((served["store"] / "logs" / "mlflow-ui.json").read_text())
    assert record["url"] == mlflow  # the next `corpusforge ui` tries this port first


def test_links_printed_before_any_ui_name_the_port_the_ui_will_take(tmp_path):
    from corpusforge.ui import mlflow_ui_base

    store = tmp_path / "store"
    store.mkdir()
    with socket.socket() as taken:  # the store's remembered port, taken meanwhile by another process
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        (store / "logs").mkdir()
        (store / "logs" / "mlflow-ui.json").write_text(json.dumps({"port": taken.getsockname()[1]}))
        first = mlflow_ui_base(f"sqlite:///{store / 'mlflow.db'}", store)
        port = urlsplit(first).port
        assert port != taken.getsockname()[1], first  # 5000 if free, else one the kernel gave
    assert mlflow_ui_base(None, store) == first  # remembered: the next `corpusforge ui` tries it first
    assert json.loads((store / "logs" / "mlflow-ui.json").read_text())["port"] == port
    assert mlflow_ui_base("http://tracking.example:5000/", store) == "http://tracking.example:5000"


def test_a_taken_mlflow_port_given_by_hand_fails_in_one_line(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        ui = subprocess.Popen([CLI, "ui", "--mlflow-port", str(port), "--store", str(tmp_path / "s")],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env())
        try:
            stdout, stderr = ui.communicate(timeout=120)
        except subprocess.TimeoutExpired:  # it served instead: stop it and what it started
            ui.terminate()
            stdout, stderr = ui.communicate(timeout=60)
            subprocess.run([CLI, "server", "stop", "--store", str(tmp_path / "s")], env=_env(), timeout=90)
    lines = stderr.strip().splitlines()
    assert ui.returncode == 1 and len(lines) == 1, stderr
    assert f"--mlflow-port {port}" in lines[0] and "taken" in lines[0] and "MLflow UI:" not in stdout


def test_with_the_local_server_off_its_own_prefect_server_reads_its_own_api(tmp_path):
    """The other way `corpusforge ui` serves Prefect: a `prefect server start` of its own (no MLflow UI here: the
    tracking server named is taken as the store's)."""
    env = {**_env(), "CORPUSFORGE_LOCAL_SERVER": "off", "CORPUSFORGE_TRACKING_URI": "http://127.0.0.1:9"}
    decoy = _taken_by_someone(4200)
    out = tmp_path / "ui.out"
    with open(out, "w") as stdout:
        ui = subprocess.Popen([CLI, "ui", "--store", str(tmp_path / "s")], stdout=stdout, stderr=subprocess.DEVNULL,
                              env=env, start_new_session=True)
    try:
        prefect = _printed(out, ui)["Prefect UI"]
        settings = httpx.get(prefect + "/ui-settings", timeout=10).json()
        assert settings["api_url"] == prefect + "/api" and urlsplit(prefect).port != 4200, (prefect, settings)
    finally:
        ui.send_signal(signal.SIGTERM)
        try:
            ui.wait(timeout=40)
        except subprocess.TimeoutExpired:
            os.killpg(ui.pid, signal.SIGKILL)
        if decoy is not None:
            decoy.shutdown()
            decoy.server_close()
    assert ui.returncode == 0 and not (tmp_path / "s" / "prefect" / "local-server.json").exists()


def test_both_uis_show_this_stores_run_in_a_browser(served, chromium, tmp_path):  # noqa: F811
    from playwright.sync_api import sync_playwright

    prefect, mlflow = served["prefect"], served["mlflow"]
    exp, run = _mlflow_run(served["store"])
    flow_run_link = run.data.tags["prefect.flow_run_url"]  # the link the run's report prints
    assert flow_run_link.startswith(prefect + "/runs/flow-run/"), flow_run_link
    flow_run = httpx.get(f"{prefect}/api/flow_runs/{flow_run_link.rsplit('/', 1)[1]}", timeout=10).json()
    runs_link = re.search(r"^\s+runs:\s+(\S+)", served["run"], re.M).group(1)
    elsewhere: list[str] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=["--no-sandbox", "--headless=new"])
        try:
            context = browser.new_context(viewport={"width": 1400, "height": 900})

            def refuse(route):
                elsewhere.append(route.request.url)
                route.abort()

            # nothing but this store's two servers: a UI that asks the servers on 4200/5000 finds no runs
            context.route(lambda url: not url.startswith((prefect + "/", mlflow + "/", "data:", "blob:")), refuse)
            page = context.new_page()
            page.goto(flow_run_link, wait_until="load")
            page.get_by_text(flow_run["name"]).first.wait_for(timeout=45_000)
            page.get_by_text("Completed").first.wait_for(timeout=15_000)
            page.screenshot(path=str(tmp_path / "prefect_flow_run.png"))
            page.goto(prefect + "/dashboard", wait_until="load")  # what `corpusforge ui` opens first
            page.wait_for_timeout(3000)
            page.goto(runs_link, wait_until="load")
            page.get_by_text(run.info.run_name).first.wait_for(timeout=45_000)
            page.screenshot(path=str(tmp_path / "mlflow_runs.png"))
        finally:
            browser.close()
    assert not [u for u in elsewhere if re.match(r"https?://(127\.0\.0\.1|localhost|0\.0\.0\.0)[:/]", u)], elsewhere
    # issue 50, item 8: and nothing outside this machine either (the Prefect dashboard called an analytics service)
    assert elsewhere == [], elsewhere
