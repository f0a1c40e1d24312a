"""Issue 16, items 1-2: the MLflow experiment opens on its runs, a run that computed nothing leaves no MLflow run,
and every flow run that computed has a report page (Prefect artifact + MLflow report.html); checked through the
Prefect API, and in a headless Chromium against a real `mlflow server` (the experiment page and the report)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import write
from tests.tasks.test_data_docs_offline import chromium  # noqa: F401 - the headless-browser fixture

CONFIG = {"name": "reported", "corpus": {"name": "small", "sources": ["docs"], "reader": {"txt_mode": "line"}},
          "ngram": {"order": 2, "eval_splits": []}, "runner": {"kind": "threads", "workers": 1}}


@pytest.fixture(scope="module")
def reported(prefect_harness, tmp_path_factory):
    """One pipeline run that computed (corpus + n-gram), then the same run again (nothing to compute)."""
    from corpusforge.pipeline import run_pipeline

    root = tmp_path_factory.mktemp("report")
    write(root / "docs" / "a.txt", "the cat sat on the mat\nthe dog sat on the log\nx\n")
    write(root / "docs" / "b.txt", "a bird sang\nthe cat sat on the mat\n")
    store = root / "store"
    first = run_pipeline(CONFIG, store=store, base_dir=root)
    again = run_pipeline(CONFIG, store=store, base_dir=root)
    return root, store, first, again


def _client(store: Path):
    from mlflow import MlflowClient

    uri = f"sqlite:///{store / 'mlflow.db'}"
    return MlflowClient(tracking_uri=uri)


def test_report_in_prefect_and_mlflow_and_a_no_op_run_leaves_only_a_tag(reported):
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

    _, store, first, again = reported
    client = _client(store)
    exp = client.get_experiment(first["mlflow_experiment_id"])
    assert exp.name == "reported" and exp.tags["mlflow.experimentKind"] == "custom_model_development"
    parent = client.get_run(first["mlflow_run_id"])
    assert {a.path for a in client.list_artifacts(parent.info.run_id)} >= {"report.html", "summary.json"}
    note = parent.data.tags["mlflow.note.content"]
    assert "## Record accounting" in note and "## Headline metrics" in note and "Zipf" in note
    # a shard (the two small files packed), the merge, the n-gram model
    assert parent.data.params["summary.steps_computed"] == "3" and "steps_computed" not in parent.data.metrics
    assert parent.data.tags["prefect.flow_run_url"].endswith(parent.data.tags["prefect.flow_run_id"])
    html = Path(client.download_artifacts(parent.info.run_id, "report.html", str(store.parent / "dl"))).read_text()
    assert html.count("<table>") >= 3 and html.count("data:image/png;base64,") >= 3  # lengths, reasons, Zipf

    with get_client(sync_client=True) as prefect:
        arts = prefect.read_artifacts(artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=["corpusforge-report"])))
        mine = [a for a in arts if str(a.flow_run_id) == parent.data.tags["prefect.flow_run_id"]]
        assert len(mine) == 1
        markdown = mine[0].data
        assert "| **TOTAL** | 5 |" in markdown and "](data:image/png;base64," in markdown
        assert f"/runs/{parent.info.run_id}?workflowType=machine_learning" in markdown  # linked to MLflow
        # the second run computed nothing: no MLflow run, no report; its flow run carries a tag, nothing else
        assert again["steps_computed"] == 0 and again["mlflow_run_id"] is None
        assert len(client.search_runs([exp.experiment_id], "tags.`corpusforge.pipeline` = 'reported'")) == 1
        runs = prefect.read_flow_runs()  # the session's Prefect API: other tests' runs too, so this store's only
        tagged = [r for r in runs if "corpusforge:nothing-new" in (r.tags or [])
                  and (r.parameters or {}).get("store") == str(store)]
        assert len(tagged) == 1 and str(tagged[0].id) != parent.data.tags["prefect.flow_run_id"]
        assert not [a for a in arts if a.flow_run_id == tagged[0].id]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def mlflow_ui(reported, tmp_path):
    import httpx

    _, store, _, _ = reported
    port = _free_port()
    log = open(tmp_path / "mlflow.log", "w")
    proc = subprocess.Popen([str(Path(sys.executable).parent / "mlflow"), "server", "--backend-store-uri",
                             f"sqlite:///{store / 'mlflow.db'}", "--artifacts-destination", str(store / "mlartifacts"),
                             "--host", "127.0.0.1", "--port", str(port), "--workers", "1"],
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                if httpx.get(url + "/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert proc.poll() is None and time.monotonic() < deadline, (tmp_path / "mlflow.log").read_text()[-2000:]
            time.sleep(0.5)
        yield url
    finally:
        os.killpg(proc.pid, signal.SIGTERM)  # the server and its worker (its own session)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()


def _painted(shot: Path) -> None:
    from PIL import Image

    img = Image.open(shot).convert("RGB")
    colors = img.getcolors(maxcolors=1 << 20) or []
    white = sum(n for n, c in colors if min(c) >= 250)
    assert len(colors) > 20 and white < 0.97 * img.width * img.height, f"{shot.name}: blank screenshot"


def test_mlflow_ui_opens_on_runs_and_shows_the_report(reported, mlflow_ui, chromium, tmp_path):  # noqa: F811
    from playwright.sync_api import sync_playwright

    _, store, first, _ = reported
    exp, run_id = first["mlflow_experiment_id"], first["mlflow_run_id"]
    run_name = _client(store).get_run(run_id).info.run_name
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=["--no-sandbox", "--headless=new"])
        try:
            context = browser.new_context(viewport={"width": 1400, "height": 900})
            context.route(lambda url: not url.startswith((mlflow_ui, "data:", "blob:", "file:")),
                          lambda route: route.abort())
            page = context.new_page()
            # the link corpusforge prints: the experiment's runs, not the GenAI traces page
            page.goto(f"{mlflow_ui}/#/experiments/{exp}?workflowType=machine_learning", wait_until="load")
            page.get_by_text(run_name).first.wait_for(timeout=60_000)
            runs_view = page.evaluate("""() => ({
                url: location.href, rows: document.querySelectorAll('[role=row], tr').length,
                traces_quickstart: document.body.innerText.includes('Start tracing')})""")
            page.screenshot(path=str(tmp_path / "mlflow_runs.png"))
            # the report as the server hands it to the Artifacts tab (which shows it in a sandboxed frame)
            import httpx

            served = httpx.get(f"{mlflow_ui}/get-artifact", params={"path": "report.html", "run_uuid": run_id})
            assert served.status_code == 200
            page.set_content(served.text, wait_until="load")
            report = page.evaluate("""() => ({
                tables: document.querySelectorAll('table').length,
                accounting: [...document.querySelectorAll('h2')].some(h => h.textContent === 'Record accounting'),
                total: [...document.querySelectorAll('td')].some(td => td.textContent === 'TOTAL'),
                images: [...document.images].filter(i => i.complete && i.naturalWidth > 0).length})""")
            page.screenshot(path=str(tmp_path / "report.png"), full_page=True)
        finally:
            browser.close()
    assert "/runs" in runs_view["url"] or "compareRuns" in runs_view["url"] or runs_view["rows"] > 1, runs_view
    assert runs_view["rows"] > 1 and not runs_view["traces_quickstart"], runs_view
    assert report["tables"] >= 3 and report["accounting"] and report["total"] and report["images"] >= 3, report
    _painted(tmp_path / "mlflow_runs.png")
    _painted(tmp_path / "report.png")
