"""What the local server does before it forks, besides imports, so that each command pays less (issue 12):
Prefect's API clients share one verified TLS context per CA file, SQLAlchemy's per-process set-up is done on a
throw-away MLflow store, and torch's operator libraries are not deregistered at exit. Each is checked in this
process, and put back afterwards."""

from __future__ import annotations

import os
import ssl
import tempfile
import threading
import weakref
from pathlib import Path

import pytest

from corpusforge.server import process, warm


@pytest.fixture
def prefect_ssl(monkeypatch):
    from prefect.client import orchestration

    monkeypatch.setattr(orchestration, "ssl", orchestration.ssl)  # restored after the test
    return orchestration


def test_prefect_clients_share_a_verified_context_per_ca_file(prefect_ssl, tmp_path):
    import certifi
    from prefect.client.orchestration import PrefectClient, SyncPrefectClient

    warm.share_prefect_tls_contexts()
    warm.share_prefect_tls_contexts()  # twice: one wrapper, not a wrapper of a wrapper
    shim = prefect_ssl.ssl
    assert isinstance(shim, warm._SharedVerifiedContexts) and shim._ssl is ssl
    ctx = shim.create_default_context(cafile=certifi.where())
    assert ctx is shim.create_default_context(cafile=certifi.where())  # built before the fork, reused after
    assert ctx.verify_mode == ssl.CERT_REQUIRED and ctx.check_hostname  # what Prefect verifies is unchanged
    assert len(ctx.get_ca_certs()) > 100  # certifi's bundle really loaded
    # the insecure branch mutates what it gets: never shared
    assert shim.create_default_context() is not shim.create_default_context()
    # another CA file gets its own context; the same file changed on disk gets a new one
    own = tmp_path / "ca.pem"
    own.write_text(Path(certifi.where()).read_text())
    other = shim.create_default_context(cafile=str(own))
    assert other is not ctx and other is shim.create_default_context(cafile=str(own))
    own.write_text(Path(certifi.where()).read_text() + "\n")
    assert shim.create_default_context(cafile=str(own)) is not other
    # Prefect's clients get the one context built for the CA file Prefect is configured with (httpx's pool holds it)
    from prefect.settings import PREFECT_API_SSL_CERT_FILE

    prefects = shim.create_default_context(cafile=PREFECT_API_SSL_CERT_FILE.value() or certifi.where())
    for client_class in (PrefectClient, SyncPrefectClient):
        client = client_class("http://127.0.0.1:9/api")
        assert client._client._transport._pool._ssl_context is prefects
    assert shim.SSLContext is ssl.SSLContext and shim.CERT_NONE is ssl.CERT_NONE


def test_warm_tracking_leaves_no_engine_file_or_thread_behind():
    from mlflow.store.db import utils
    from mlflow.store.model_registry.sqlalchemy_store import SqlAlchemyStore as RegistryStore
    from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

    before = set(os.listdir(tempfile.gettempdir()))
    engines = (set(SqlAlchemyStore._engine_map), set(RegistryStore._engine_map))
    warm.warm_tracking()
    assert (set(SqlAlchemyStore._engine_map), set(RegistryStore._engine_map)) == engines
    assert not [n for n in set(os.listdir(tempfile.gettempdir())) - before if n.startswith("corpusforge-warm-")]
    assert threading.active_count() == 1 or all(t.daemon or t is threading.main_thread()
                                                 for t in threading.enumerate())
    # the newest schema revision is read once per process (the Tracker memoises MLflow's lookup)
    assert utils._get_latest_schema_revision.cache_info().currsize == 1


def test_torch_libraries_are_not_deregistered_at_exit():
    import torch  # noqa: F401 - loads its operator libraries

    def torch_finalizers():
        return [ref for ref, info in list(weakref.finalize._registry.items())
                if getattr(info.func, "__module__", "") == "torch.library"]

    refs = torch_finalizers()
    if not refs:
        pytest.skip("this torch registers no library finalizers")
    saved = [ref.atexit for ref in refs]
    others = {ref: ref.atexit for ref, info in list(weakref.finalize._registry.items())
              if getattr(info.func, "__module__", "") != "torch.library"}
    try:
        warm.skip_torch_library_cleanup_at_exit()
        assert not any(ref.atexit for ref in torch_finalizers())
        assert all(ref.alive for ref in refs)  # still there: a collected library object still cleans up
        assert {ref: ref.atexit for ref in others} == others  # nobody else's finalizers touched
    finally:
        for ref, flag in zip(refs, saved):
            ref.atexit = flag


def test_later_modules_are_imported_one_at_a_time_then_the_state_says_warm(tmp_path, monkeypatch):
    """The serving loop calls warm_up_later while no command runs: one module per call, in order; after the
    last the server checks it is still single-threaded (it forks) and rewrites its state with ``warm``."""
    import json
    import sys

    mods = tmp_path / "mods"
    for name in ("cf_later_a", "cf_later_b"):
        (mods / f"{name}.py").parent.mkdir(exist_ok=True)
        (mods / f"{name}.py").write_text("LOADED = True\n")
    monkeypatch.syspath_prepend(str(mods))
    checks = []
    monkeypatch.setattr(process, "_check_single_threaded", lambda: checks.append(1))
    server = process.LocalServer(tmp_path / "store", 60.0, run_command=lambda: None)
    (tmp_path / "store" / "prefect").mkdir(parents=True)
    server.later = ["cf_later_a", "cf_later_b"]
    server.write_state("ready")

    def warm():
        return json.loads((tmp_path / "store" / "prefect" / "local-server.json").read_text())["warm"]

    assert warm() is False
    server.warm_up_later()
    assert "cf_later_a" in sys.modules and "cf_later_b" not in sys.modules and warm() is False and not checks
    server.warm_up_later()
    assert "cf_later_b" in sys.modules and warm() is True and checks == [1]
    server.warm_up_later()  # nothing left: no-op
    assert checks == [1]
    for name in ("cf_later_a", "cf_later_b"):
        sys.modules.pop(name, None)


def test_what_is_warmed_before_and_after_ready():
    """Every pipeline runs orchestration, tracking and the corpus stage: warmed before ready. torch and the
    tokenizer/embedding libraries only some stages need: after."""
    assert not set(warm.WARM_MODULES) & set(warm.LATER_MODULES)
    for name in ("prefect", "mlflow", "great_expectations", "polars", "duckdb", "corpusforge.tasks.corpus.shard"):
        assert name in warm.WARM_MODULES
    for name in ("torch", "gensim.models", "tokenizers", "corpusforge.tasks.lm.train"):
        assert name in warm.LATER_MODULES


def test_warm_corpus_compiles_the_data_docs_page_once_and_leaves_no_thread_or_folder(monkeypatch):
    """The server validates a three-row frame before it forks: afterwards the process holds the Data Docs
    page view its commands share (its templates compiled), no new thread (GX's first validation starts
    tqdm's monitor thread unless it is off: a forked server must be single-threaded), no scratch folder."""
    import tqdm

    from corpusforge.tasks.corpus import validate

    monkeypatch.setattr(validate, "_PAGE_VIEW", None)
    monkeypatch.setattr(tqdm.tqdm, "monitor_interval", tqdm.tqdm.monitor_interval)  # restored after the test
    if tqdm.tqdm.monitor is not None:  # an earlier test's progress bar started it: stop it first
        tqdm.tqdm.monitor.exit()
        tqdm.tqdm.monitor = None
    before = set(os.listdir(tempfile.gettempdir()))
    threads = set(threading.enumerate())
    warm.warm_corpus()
    assert set(threading.enumerate()) <= threads
    assert not [n for n in set(os.listdir(tempfile.gettempdir())) - before if n.startswith("corpusforge-warm-")]
    view = validate._PAGE_VIEW
    assert view is not None and view.env.cache  # compiled templates, kept for the commands
    compiled = len(view.env.cache)
    warm.warm_corpus()
    assert validate._PAGE_VIEW is view and len(view.env.cache) == compiled  # nothing compiled twice


def test_freeze_heap_puts_the_inherited_objects_out_of_the_collectors_reach():
    import gc

    try:
        warm.freeze_heap()
        frozen = gc.get_freeze_count()
        assert frozen > 10_000  # this process's modules; a forked command's collections skip them
        assert gc.get_count()[2] == 0  # no full collection left due for the forked commands
    finally:
        gc.unfreeze()
