"""What the local server imports and builds once, before it forks commands: each command then pays only for its
own work (figures in benchmarks/RESULTS.md, start-up)."""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from pathlib import Path

from corpusforge.server.log import log as _log

# Imported once by the server so that commands do not pay for them: everything a stage may need. First what
# every pipeline runs (orchestration, tracking, the corpus stage, n-grams): the server is ready after these.
WARM_MODULES = (
    "prefect", "prefect.flow_engine", "prefect.task_engine", "prefect.task_runners", "prefect.artifacts",
    "prefect.client.orchestration", "prefect.events.clients", "prefect.logging.handlers",
    "mlflow", "mlflow.tracking", "mlflow.store.tracking.sqlalchemy_store",
    "mlflow.store.model_registry.sqlalchemy_store", "mlflow.pyfunc", "alembic", "alembic.migration",
    "great_expectations", "great_expectations.render.renderer", "pandas", "polars", "pyarrow", "pyarrow.parquet",
    "duckdb", "numpy", "matplotlib", "matplotlib.pyplot", "rich", "typer", "yaml", "httpx", "rensa",
    "fontTools.subset", "corpusforge.pipeline", "corpusforge.plan", "corpusforge.tasks.corpus.shard",
    "corpusforge.tasks.corpus.merge", "corpusforge.tasks.ngram.build", "corpusforge.tasks.track",
    "corpusforge.storage.tracking", "corpusforge.storage.db_templates",
)
# Then, after the server is ready and only while no command runs, one module at a time: what the tokenizer,
# embedding and neural stages add (torch alone is ~2 CPU-s). The first command on a new store does not wait
# for them; a command that needs one before it is warm imports it itself, as it would without a server.
LATER_MODULES = (
    "tokenizers", "corpusforge.tasks.tokenizer.train", "corpusforge.tasks.tokenizer.encode", "scipy.sparse",
    "gensim.models", "corpusforge.tasks.embeddings.build", "torch", "safetensors.torch",
    "corpusforge.models.training", "corpusforge.tasks.lm.train",
)


class _SharedVerifiedContexts:
    """Stands in for the ``ssl`` module in Prefect's client module: a verified context built from a CA file is
    built once per (file, its size and mtime) and shared. Any other call goes to ``ssl`` itself (Prefect's
    insecure branch changes the context it gets, so that one is never shared)."""

    def __init__(self, ssl_module):
        import threading

        self._ssl = ssl_module
        self._made: dict[tuple, object] = {}
        self._lock = threading.Lock()

    def __getattr__(self, name):
        return getattr(self._ssl, name)

    def create_default_context(self, purpose=None, *, cafile=None, capath=None, cadata=None):
        purpose = self._ssl.Purpose.SERVER_AUTH if purpose is None else purpose
        if cafile is None or capath is not None or cadata is not None or purpose != self._ssl.Purpose.SERVER_AUTH:
            return self._ssl.create_default_context(purpose, cafile=cafile, capath=capath, cadata=cadata)
        st = os.stat(cafile)
        key = (os.fspath(cafile), st.st_size, st.st_mtime_ns)
        with self._lock:
            if key not in self._made:
                self._made[key] = self._ssl.create_default_context(purpose, cafile=cafile)
            return self._made[key]


def share_prefect_tls_contexts() -> None:
    """Prefect builds a verified TLS context from a CA file (certifi's ~150 CAs, ~30 ms) for every API client it
    creates, even for a plain ``http://`` API; a flow run creates four (flow engine, log worker, events worker
    and its version check), ~0.13 CPU-s per command. Share one per CA file, built here before the fork. Verified
    contexts are shared by design (an SSLContext serves many connections); what Prefect verifies is unchanged."""
    import ssl

    import certifi
    from prefect.client import orchestration
    from prefect.settings import PREFECT_API_SSL_CERT_FILE

    if not isinstance(orchestration.ssl, _SharedVerifiedContexts):
        orchestration.ssl = _SharedVerifiedContexts(ssl)
    orchestration.ssl.create_default_context(cafile=PREFECT_API_SSL_CERT_FILE.value() or certifi.where())


def warm_tracking() -> None:
    """One tracked run on a throw-away sqlite store, so that the forked commands find what SQLAlchemy builds
    once per process (mapper configuration, generated cache-key and loader code) already built. The engine is
    closed and forgotten before the fork; nothing of it reaches the store.

    Its database is made by MLflow's migrations, not copied from the cached template (corpusforge.storage.
    db_templates) that new stores start from: with a copy, the warm-up ended with a full garbage collection
    due (the migrations' allocations had just run one), which every forked command then paid (+0.5 CPU-s per
    command measured, for ~0.8 CPU-s saved once per server start)."""
    import tempfile

    from mlflow.store.model_registry.sqlalchemy_store import SqlAlchemyStore as RegistryStore
    from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

    from corpusforge.storage.tracking import Tracker

    with tempfile.TemporaryDirectory(prefix="corpusforge-warm-") as tmp:
        root = Path(tmp)
        # not <root>/mlflow.db, which the Tracker would create from the template
        tracker = Tracker(root, "warm-up", tracking_uri=f"sqlite:///{root / 'warm-up.db'}")
        parent = tracker.start_pipeline_run("warm-up", {"warm": {"up": 1}}, {"corpusforge.warm_up": "1"})
        artifact = root / "artifact"
        artifact.mkdir()
        manifest = {"id": "0" * 64, "step": "warm_up", "name": "warm-up", "config": {"a": 1}, "files": {},
                    "metrics": {"n": 1}, "inputs": [{"id": "1" * 64, "kind": "warm_up", "name": "in"}]}
        (artifact / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
        tracker.log_step(parent, manifest, artifact)
        tracker.finish_pipeline_run(parent, {"steps_computed": 1})
        for engines in (SqlAlchemyStore._engine_map, RegistryStore._engine_map):
            for uri in [u for u in engines if tmp in u]:
                engines.pop(uri).dispose()


def warm_corpus() -> None:
    """One GX validation and Data Docs page of a three-row frame (corpusforge.tasks.corpus.validate.
    warm_validation), in a throw-away folder: GX's lazily built machinery and the page's compiled templates,
    which every command's first shard paid (~0.05-0.1 CPU-s), are built once, here."""
    from corpusforge.tasks.corpus.validate import warm_validation

    with tempfile.TemporaryDirectory(prefix="corpusforge-warm-") as scratch:
        warm_validation(Path(scratch))


def freeze_heap() -> None:
    """Move every object the server holds (the imported modules, the warm-ups' caches) out of the garbage
    collector's reach: a forked command's collections then scan only the objects it made itself, not the
    millions it inherited, and do not write to the inherited pages (which stay shared, not copied). What
    Python's docs advise before forking (``gc.freeze``); the server's own later garbage is collected as usual."""
    import gc

    gc.collect()
    gc.freeze()


def skip_torch_library_cleanup_at_exit() -> None:
    """torch deregisters each operator library it loaded from a ``weakref.finalize`` run at exit: ~0.05 CPU-s
    that every forked command paid on its way to ``os._exit``, where nothing is left to clean. Those finalizers
    (and only those) no longer run at exit; they still run if a library object is collected."""
    import weakref

    for ref, info in list(weakref.finalize._registry.items()):  # no public way to list them
        if getattr(info.func, "__module__", "") == "torch.library":
            ref.atexit = False


def _import_quietly(name: str) -> None:
    import importlib

    try:
        importlib.import_module(name)
    except Exception as exc:  # noqa: BLE001 - an optional library missing only costs its import later
        _log(f"warm-up: could not import {name}: {exc}")


def _check_single_threaded() -> None:
    import threading

    threads = [t.name for t in threading.enumerate()]
    if len(threads) > 1:  # forking a multi-threaded process can deadlock a child: serve cold instead
        raise RuntimeError(f"warm-up left threads running ({', '.join(threads)}); not forking from this process")
