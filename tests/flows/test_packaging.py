"""One namespace (issue 13, item 4): the wheel puts exactly one top-level package, ``corpusforge``, into
site-packages (the repository keeps flows/, tasks/, storage/ and models/; pyproject maps them), and every
module imports from the installed layout alone (no stray ``import tasks`` left)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The project's wheel, built from a copy of the sources (the build writes build/ and *.egg-info)."""
    pytest.importorskip("setuptools", reason="setuptools builds the wheel (--no-build-isolation)")
    src = tmp_path_factory.mktemp("src")
    for name in ("flows", "tasks", "storage", "models", "configs"):
        shutil.copytree(REPO / name, src / name, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, src / name)
    out = tmp_path_factory.mktemp("wheel")
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                           "-w", str(out), str(src)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (found,) = out.glob("corpusforge-*.whl")
    return found


def test_wheel_installs_only_corpusforge(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    top = {n.split("/")[0] for n in names}
    assert top == {"corpusforge", next(t for t in top if t.endswith(".dist-info"))}, top
    # every module of the four folders is in the wheel, under corpusforge (a stage package left out of
    # pyproject's `packages` fails here), and the corpus stage's data files with them
    expected = {"corpusforge/tasks/corpus/data/stopwords-glasgow-en.txt"}
    for folder, prefix in (("flows", "corpusforge"), ("tasks", "corpusforge/tasks"),
                           ("storage", "corpusforge/storage"), ("models", "corpusforge/models")):
        expected |= {f"{prefix}/{f.relative_to(REPO / folder).as_posix()}" for f in (REPO / folder).rglob("*.py")
                     if "__pycache__" not in f.parts}
    assert {"corpusforge/cli/__init__.py", "corpusforge/tasks/lm/config.py"} <= expected
    expected |= {f"corpusforge/presets/{f.relative_to(REPO / 'configs').as_posix()}"  # the presets, as package data
                 for f in (REPO / "configs").rglob("*") if f.suffix in (".py", ".yaml")}
    assert "corpusforge/presets/lm/shakespeare-char-cpu.yaml" in expected
    assert expected - set(names) == set()
    entry = next(n for n in names if n.endswith("entry_points.txt"))
    assert "corpusforge = corpusforge.entry:main" in zipfile.ZipFile(wheel).read(entry).decode()


def test_every_module_imports_from_the_installed_layout(wheel, tmp_path):
    """Unpacked wheel first on the path, run outside the repository: every module imports, and no module
    named flows/tasks/storage/models (the old top-level names) is ever loaded."""
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    code = """
import importlib, pkgutil, sys
import corpusforge
assert corpusforge.__file__.startswith(sys.argv[1]), corpusforge.__file__
failed = []
for info in pkgutil.walk_packages(corpusforge.__path__, "corpusforge."):
    try:
        importlib.import_module(info.name)
    except Exception as exc:
        failed.append(f"{info.name}: {type(exc).__name__}: {exc}")
old = sorted(m for m in sys.modules if m.split(".")[0] in ("flows", "tasks", "storage", "models"))
print(len(list(pkgutil.walk_packages(corpusforge.__path__, "corpusforge."))))
assert not failed, failed
assert not old, old
"""
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(site), "HOME": str(tmp_path)}
    proc = subprocess.run([sys.executable, "-c", code, str(site)], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    assert int(proc.stdout.split()[-1]) > 60  # every module of flows/, tasks/, storage/, models/ was visited


def test_import_corpusforge_is_cheap_and_exposes_the_api():
    code = ("import sys, corpusforge; heavy = [m for m in ('prefect', 'mlflow', 'torch', 'great_expectations') "
            "if m in sys.modules]; assert not heavy, heavy; "
            "assert callable(corpusforge.run) and callable(corpusforge.tokenizer.train) "
            "and callable(corpusforge.artifacts.load)")
    proc = subprocess.run([sys.executable, "-c", code], cwd="/", capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_the_installed_wheel_trains_with_a_packaged_preset(wheel, tmp_path):
    """In a fresh virtualenv with the wheel installed (the dependencies borrowed from this one's site-packages,
    not this checkout), `corpusforge lm train --preset NAME` finds its preset: the presets are package data, not
    files beside a source tree the wheel does not ship."""
    import json
    import sysconfig

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    site = next((venv / "lib").glob("python3*/site-packages"))
    (site / "borrowed-dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    proc = subprocess.run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install", "-q",
                           "--no-deps", "--no-index", str(wheel)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    sample = tmp_path / "work" / "sample.txt"
    sample.parent.mkdir()
    shutil.copy2(REPO / "data" / "sample" / "tinyshakespeare.txt", sample)
    env = {"PATH": f"{venv / 'bin'}:/usr/bin:/bin", "HOME": str(tmp_path), "CORPUSFORGE_LOCAL_SERVER": "off",
           "CORPUSFORGE_CACHE_DIR": str(tmp_path / "cache"), "DO_NOT_TRACK": "true", "MPLBACKEND": "Agg",
           "MLFLOW_DISABLE_TELEMETRY": "true", "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
    where = subprocess.run([str(venv / "bin" / "python"), "-c", "import corpusforge; print(corpusforge.__file__)"],
                           cwd=sample.parent, env=env, capture_output=True, text=True, timeout=120)
    assert where.stdout.startswith(str(site)), where.stdout + where.stderr  # the wheel's, not the checkout's
    proc = subprocess.run([str(venv / "bin" / "corpusforge"), "lm", "train", "sample.txt", "--preset",
                           "shakespeare-char-cpu", "--set", "train.max_iters=2", "--set", "train.eval_interval=2",
                           "--set", "train.eval_iters=1", "--set", "sample.max_new_tokens=0", "--set",
                           "tracking.enabled=false", "--store", "store", "--json"],
                          cwd=sample.parent, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["metrics"]["steps"] == 2 and result["id"]
