"""Shared test setup: quiet offline environment, one Prefect test harness per session, tmp stores, and the tiers.

Tiers (deploy/docs/pages/internals/tests.md): a test marked ``e2e``, ``server``, ``learns``, ``memory``, ``corpus`` or ``gpu``
is in the full tier; every other test is in the fast tier. A bare ``pytest`` (no path named) runs the fast tier
(``make test-fast``); ``pytest --tier all`` runs everything (``make test``, what ``.ci/run`` calls); naming paths
runs every test in them unless ``--tier fast`` is given. ``gpu`` tests skip on a machine without CUDA. A fast-tier
test that takes more than ``CORPUSFORGE_FAST_TEST_LIMIT`` seconds (10; 0 turns the guard off) fails: mark it for
what makes it slow, or make it faster.
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

import pytest

# Before anything imports prefect/mlflow: no telemetry, and a throwaway PREFECT_HOME.
_PREFECT_HOME = tempfile.mkdtemp(prefix="corpusforge-prefect-home-")
# corpusforge's per-user cache (object-store caches, the Prefect/MLflow database templates of
# corpusforge.storage.db_templates): one per session, never the user's ~/.cache/corpusforge.
_CACHE_DIR = tempfile.mkdtemp(prefix="corpusforge-cache-")
for key, value in {
    "DO_NOT_TRACK": "true",
    "MLFLOW_DISABLE_TELEMETRY": "true",
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    "GX_ANALYTICS_ENABLED": "false",
    "PREFECT_HOME": _PREFECT_HOME,
    "CORPUSFORGE_CACHE_DIR": _CACHE_DIR,
    "PREFECT_LOGGING_LEVEL": "WARNING",
    # torch's OpenMP threads spin while waiting; on a busy 2-core machine that makes CPU training 5-20x slower
    "OMP_WAIT_POLICY": "PASSIVE",
    # Commands run in their own processes against the session's Prefect harness: no test starts a store's
    # background local server by accident (tests/flows/test_local_server.py turns it on where it is tested).
    "CORPUSFORGE_LOCAL_SERVER": "off",
    "PYTHONIOENCODING": "utf-8",
}.items():
    os.environ[key] = value
# One torch thread per test process (and the commands it starts): the cores go to pytest-xdist's workers instead,
# which is faster on the CPU-bound suite than threads that wait on each other, and makes a test's CPU time its own
# (the guard below reads it). A test that wants more threads sets them.
os.environ.setdefault("OMP_NUM_THREADS", "1")
# COLUMNS and LINES: pytest-xdist's workers get 80 x 24, which would make the commands they start wrap their
# one-line errors at 80 columns (a command whose output is not a terminal does not wrap otherwise)
for key in ("PREFECT_API_URL", "CORPUSFORGE_STORE", "CORPUSFORGE_TRACKING_URI", "MLFLOW_TRACKING_URI", "COLUMNS", "LINES"):
    os.environ.pop(key, None)

REPO = Path(__file__).resolve().parent.parent
SHARED = REPO.parent / "shared"


@pytest.fixture(scope="session")
def prefect_harness():
    """One real Prefect API (ephemeral, sqlite) for the whole test session; yields its API URL."""
    from prefect.settings import PREFECT_API_URL
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=120):
        yield PREFECT_API_URL.value()


@pytest.fixture
def store_root(tmp_path: Path) -> Path:
    root = tmp_path / "store"
    root.mkdir()
    return root


@pytest.fixture
def short_tmp():
    """A private directory with a short path (AF_UNIX socket paths end at 108 bytes; pytest-xdist makes tmp_path
    longer), removed after the test."""
    import shutil

    path = Path(tempfile.mkdtemp(prefix="cf-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def write(path: Path, data: bytes | str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(data, str):
        data = data.encode("utf-8")
    path.write_bytes(data)
    return path


# --- tiers ------------------------------------------------------------------------------------------------------

# why a test is in the full tier (the marks are declared in pyproject.toml; the tests page lists them)
FULL_TIER_MARKS = ("e2e", "server", "learns", "memory", "corpus", "gpu")
FAST_TEST_LIMIT = float(os.environ.get("CORPUSFORGE_FAST_TEST_LIMIT", "10"))
# Libraries some tests import on first use (collection has imported torch, prefect and transformers already). A tier
# run imports them once before the first test, so that no fast test's time holds a library's first import (great
# expectations alone takes ~9 s on the 2-core machine) and the guard below measures the tests themselves.
WARM_IMPORTS = ("mlflow", "great_expectations", "peft", "gensim", "duckdb", "matplotlib.pyplot", "torch._dynamo")


def pytest_addoption(parser):
    parser.addoption("--tier", choices=("fast", "all"), default=None,
                     help="fast: only the tests without the marks " + ", ".join(FULL_TIER_MARKS) + " (what a bare "
                          "`pytest` runs, `make test-fast`); all: every test (`make test`). Default: fast when no "
                          "path, -m or -k is given, all when one is.")


def _chosen_tier(config) -> str:
    chosen = config.getoption("--tier")
    if chosen:
        return chosen
    if config.option.markexpr or config.option.keyword:  # the user is choosing tests: -m learns, -k sft
        return "all"
    return "fast" if config.args_source != pytest.Config.ArgsSource.ARGS else "all"


def pytest_configure(config):
    # pytest-xdist's workers get the paths as arguments whatever the user typed: they take the tier the
    # controlling process chose (they inherit its environment)
    if not hasattr(config, "workerinput"):
        os.environ["CORPUSFORGE_TEST_TIER"] = _chosen_tier(config)


def tier(config) -> str:
    return os.environ.get("CORPUSFORGE_TEST_TIER") or _chosen_tier(config)


def is_fast(item) -> bool:
    return not any(item.get_closest_marker(m) for m in FULL_TIER_MARKS)


def _has_cuda() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


# Modules by their time in a full run (tests/flows' server and end-to-end modules, on 2 cores, CI of 80c40f6), longest
# first; an approximate list is enough (it only orders the hand-out), a module missing from it goes after these.
LONGEST = (
    "tests.flows.test_team_mode", "tests.flows.test_local_server", "tests.flows.test_api",
    "tests.flows.test_local_server_attack", "tests.flows.test_demo_verify",
    "tests.tasks.post_training.test_post_training", "tests.flows.test_ui_ports", "tests.flows.test_runners",
    "tests.flows.test_db_template", "tests.flows.cli.test_finetune", "tests.flows.cli.test_lm",
    "tests.flows.cli.test_classify", "tests.flows.cli.test_main", "tests.flows.test_packaging",
    "tests.flows.test_plan", "tests.flows.cli.test_seq2seq",
)


def pytest_collection_modifyitems(config, items):
    for item in items:  # a test on the session's Prefect API runs flows for real
        if "prefect_harness" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.e2e)
    if tier(config) == "fast":
        slow = [item for item in items if not is_fast(item)]
        if slow:
            config.hook.pytest_deselected(items=slow)
            items[:] = [item for item in items if is_fast(item)]
    # The modules that hold full-tier tests first: pytest-xdist hands modules out in this order, so the long ones
    # start early and the short ones fill in at the end (the order within a module is kept).
    # The longest (LONGEST, measured: the CI's slowest modules on 2 cores) go first of all, longest first: a long
    # module handed out last would run alone at the end.
    heavy = {item.module.__name__ for item in items if not is_fast(item) and getattr(item, "module", None)}
    rank = {name: i for i, name in enumerate(LONGEST)}

    def order(item) -> tuple[int, int]:
        name = getattr(getattr(item, "module", None), "__name__", "")
        return (0 if name in heavy else 1), rank.get(name, len(LONGEST))

    items.sort(key=order)
    gpu = [item for item in items if item.get_closest_marker("gpu")]
    if gpu and not _has_cuda():
        for item in gpu:
            item.add_marker(pytest.mark.skip(reason="needs a CUDA GPU (marked gpu)"))


def pytest_report_header(config):
    return (f"corpusforge tier: {tier(config)} (full-tier marks: {', '.join(FULL_TIER_MARKS)}; a fast test over "
            f"{FAST_TEST_LIMIT:g} s of CPU fails)" if FAST_TEST_LIMIT else f"corpusforge tier: {tier(config)}")


def pytest_collection_finish(session):
    """Before a tier run's first test: the libraries tests import on first use, timed (see WARM_IMPORTS)."""
    if len(session.items) < 50 or not FAST_TEST_LIMIT:
        return
    import importlib

    started = time.perf_counter()
    for name in WARM_IMPORTS:
        try:
            importlib.import_module(name)
        except ImportError:
            pass
    session.config._corpusforge_warm = time.perf_counter() - started  # noqa: SLF001 - shown in the summary


def pytest_terminal_summary(terminalreporter, config):
    warm = getattr(config, "_corpusforge_warm", None)
    if warm is not None:
        terminalreporter.write_line(f"corpusforge: {', '.join(WARM_IMPORTS)} imported before the first test in "
                                    f"{warm:.1f} s")


def _cpu_seconds() -> float:
    """CPU time of this process (all its threads) and of the children it has waited for."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    item._corpusforge_cpu = _cpu_seconds()  # noqa: SLF001


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """The guard: a fast-tier test whose setup and call took more than FAST_TEST_LIMIT seconds of CPU fails. CPU
    time, not wall time: two or more test processes share the cores (pytest-xdist), which stretches every test's
    wall time by how busy the others are; a test's CPU time is its own. A fast test that waits (a sleep, a server)
    is caught by wall time, at three times the limit."""
    outcome = yield
    report = outcome.get_result()
    if call.when == "setup":
        item._corpusforge_setup = call.duration  # noqa: SLF001
        return
    if call.when != "call" or not FAST_TEST_LIMIT or not report.passed or not is_fast(item):
        return
    wall = getattr(item, "_corpusforge_setup", 0.0) + call.duration
    cpu = _cpu_seconds() - getattr(item, "_corpusforge_cpu", _cpu_seconds())
    if cpu > FAST_TEST_LIMIT or wall > 3 * FAST_TEST_LIMIT:
        report.outcome = "failed"
        report.longrepr = (f"fast-tier test took {cpu:.1f} s of CPU, {wall:.1f} s of wall time (setup included), "
                           f"over the {FAST_TEST_LIMIT:g} s limit (CORPUSFORGE_FAST_TEST_LIMIT; wall time: three "
                           f"times that): mark it for what makes it slow ({', '.join(FULL_TIER_MARKS)}) or make it "
                           "faster")
