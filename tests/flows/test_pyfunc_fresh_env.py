"""Issue 34, item 5c: a registered text generator runs where corpusforge is not installed. The lm stage's
registration bundles the corpusforge modules the loader uses (MLflow ``code/``) and requires no ``corpusforge``
package; a fresh virtual environment that has the dependencies but not corpusforge loads it with
``mlflow.pyfunc.load_model`` and serves it with ``mlflow models serve --env-manager local``, giving the text the
project's own loader gives."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import sysconfig
import time
import urllib.request
from pathlib import Path

import pytest
import torch

from corpusforge.models.tokenization import make_tokenizer
from corpusforge.models.zoo import build_model, save_model
from corpusforge.storage.store import ArtifactStore, store_relative
from tests.conftest import REPO

pytestmark = [pytest.mark.e2e, pytest.mark.server]

PROMPT = "To be, or not"
PARAMS = {"greedy": True, "max_new_tokens": 5}


def tiny_lm(store: ArtifactStore):
    """A byte-BPE tokenizer artifact and a one-layer GPT lm artifact recording it (as the lm stage writes them)."""
    lines = (REPO / "data" / "sample" / "tinyshakespeare.txt").read_text(encoding="utf-8").splitlines()[:300]

    def build_tok(out: Path):
        tok = make_tokenizer("byte-bpe")
        tok.train(lines, vocab_size=300)
        tok.save(out)

    tokenizer = store.publish(step="tokenizer", name="tok", version=1, config={"kind": "byte-bpe"}, inputs=[],
                              build=build_tok)
    vocab = json.loads((tokenizer.path / "tokenizer_meta.json").read_text())["vocab_size"]

    def build_lm(out: Path):
        torch.manual_seed(0)
        save_model(build_model("gpt", {"vocab_size": vocab, "block_size": 32, "n_layer": 1, "n_head": 2,
                                       "n_embd": 16}), out)
        spec = json.loads((out / "config.json").read_text())
        spec["tokenizer"] = {"path": store_relative(tokenizer.path, store.root), "id": tokenizer.manifest["id"],
                             "vocab_size": vocab}
        (out / "config.json").write_text(json.dumps(spec, indent=2) + "\n")

    return store.publish(step="lm", name="tiny-gpt", version=1, config={"family": "gpt"},
                         inputs=[{"id": tokenizer.manifest["id"], "kind": "artifact"}], build=build_lm)


def fresh_venv(where: Path) -> Path:
    """A virtual environment of the base interpreter without corpusforge: a .pth lists this environment's
    site-packages, whose own .pth files (corpusforge's editable finder among them) are not processed there. It
    gets the console scripts `mlflow models serve` needs (``mlflow``, and ``uvicorn``, which the server runs)."""
    base = getattr(sys, "_base_executable", None) or sys.executable
    subprocess.run([base, "-m", "venv", "--without-pip", str(where)], check=True, capture_output=True)
    python = where / "bin" / "python"
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          check=True, capture_output=True, text=True).stdout.strip()
    Path(site, "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    for name, entry in (("mlflow", "from mlflow.cli import cli as main"), ("uvicorn", "from uvicorn.main import main")):
        script = where / "bin" / name
        script.write_text(f"#!{python}\nimport sys\n{entry}\nsys.exit(main())\n")
        script.chmod(0o755)
    return python


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_registered_text_generator_loads_and_serves_without_corpusforge(tmp_path, monkeypatch):
    from corpusforge.storage.tracking import RegistryLedger, Tracker, check_registered_copy, registered_copy_digests
    from corpusforge.tasks.lm.register import register_lm
    from corpusforge.tasks.textgen import TextGenerator

    store = ArtifactStore(tmp_path / "store")
    lm = tiny_lm(store)
    tracker = Tracker(store.root, "serve")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", tracker.tracking_uri)
    monkeypatch.setenv("MLFLOW_REGISTRY_URI", tracker.tracking_uri)
    run = tracker.start_pipeline_run("run", {"name": "serve"}, {})
    info = register_lm(tracker, run, lm.manifest, lm.path)
    tracker.finish_pipeline_run(run, {})
    location = info.pop("source")
    model = Path(location[len("file://"):])

    # the copy carries the code its loader runs, and requires no corpusforge
    code = model / "code" / "corpusforge_model_code" / "lib" / "corpusforge"  # behind the loader shim
    bundled = sorted(p.relative_to(code).as_posix() for p in code.rglob("*.py"))
    for rel in ("__init__.py", "tasks/__init__.py", "tasks/textgen.py", "tasks/lm/pyfunc.py", "models/zoo.py",
                "models/sampling.py", "storage/tracking.py", "models/gpt/model.py", "models/rnn/model.py"):
        assert rel in bundled, rel
    assert not any(rel.startswith(("cli/", "api.py", "pipeline.py", "server/")) for rel in bundled), bundled
    assert not list(code.rglob("__pycache__"))
    requirements = (model / "requirements.txt").read_text().split()
    assert not any(r.startswith("corpusforge") for r in requirements), requirements
    assert {r.split("==")[0] for r in requirements} >= {"torch", "safetensors", "tokenizers", "numpy", "mlflow"}
    # `artifacts verify` takes the bundled code/ for part of the registered copy, and still catches an added file
    RegistryLedger(store.root).put(tracker.tracking_uri, lm.manifest["id"],
                                   {**info, "files": registered_copy_digests(location)}, location)
    assert check_registered_copy(store.root, lm.manifest) == []

    expected = TextGenerator(model / "data" / "data").predict([PROMPT], PARAMS)
    assert len(expected) == 1 and expected[0]

    python = fresh_venv(tmp_path / "venv")
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PATH"] = f"{python.parent}{os.pathsep}{env.get('PATH', '')}"

    def fresh(code: str) -> subprocess.CompletedProcess:
        return subprocess.run([str(python), "-c", code], cwd=outside, env=env, capture_output=True, text=True,
                              timeout=120)

    missing = fresh("import corpusforge")
    assert missing.returncode != 0 and "No module named 'corpusforge'" in missing.stderr, missing.stderr

    # (a) mlflow.pyfunc.load_model from the registry
    loaded = fresh(
        "import json, sys\n"
        "import mlflow.pyfunc\n"
        "m = mlflow.pyfunc.load_model('models:/tiny-gpt/latest')\n"
        f"out = m.predict([{PROMPT!r}], params={PARAMS!r})\n"
        "import corpusforge\n"
        "print(json.dumps({'out': list(out), 'from': corpusforge.__file__,\n"
        "                  'heavy': [n for n in ('prefect', 'great_expectations') if n in sys.modules]}))\n")
    assert loaded.returncode == 0, loaded.stderr[-3000:]
    said = json.loads(loaded.stdout.strip().splitlines()[-1])
    assert said["out"] == expected
    assert Path(said["from"]).parts[-5:] == ("code", "corpusforge_model_code", "lib", "corpusforge", "__init__.py")
    assert not Path(said["from"]).is_relative_to(REPO)
    assert said["heavy"] == []

    # where corpusforge is installed (this environment), loading the model first never shadows it with the copy
    here = subprocess.run([sys.executable, "-c",
                           "import mlflow.pyfunc\n"
                           "m = mlflow.pyfunc.load_model('models:/tiny-gpt/latest')\n"
                           f"out = m.predict([{PROMPT!r}], params={PARAMS!r})\n"
                           "import corpusforge.api, json\n"
                           "print(json.dumps({'out': list(out), 'from': corpusforge.__file__}))\n"],
                          cwd=outside, env={**os.environ}, capture_output=True, text=True, timeout=120)
    assert here.returncode == 0, here.stderr[-3000:]
    said_here = json.loads(here.stdout.strip().splitlines()[-1])
    assert said_here["out"] == expected and Path(said_here["from"]).is_relative_to(REPO)

    # (b) mlflow models serve, then a request
    port = free_port()
    log = (tmp_path / "serve.log").open("w")
    server = subprocess.Popen([str(python.parent / "mlflow"), "models", "serve", "-m", "models:/tiny-gpt/latest",
                               "--env-manager", "local", "-h", "127.0.0.1", "-p", str(port)],
                              cwd=outside, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/ping", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            assert server.poll() is None, (tmp_path / "serve.log").read_text()[-3000:]
            assert time.monotonic() < deadline, (tmp_path / "serve.log").read_text()[-3000:]
            time.sleep(0.5)
        body = json.dumps({"inputs": [PROMPT], "params": PARAMS}).encode()
        request = urllib.request.Request(f"http://127.0.0.1:{port}/invocations", data=body,
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=60) as r:
            answer = json.loads(r.read())
        assert answer == {"predictions": expected}
    finally:
        import signal

        def stop(sig) -> None:
            try:
                os.killpg(server.pid, sig)  # its own session: the mlflow CLI and the uvicorn it started
            except ProcessLookupError:
                pass

        stop(signal.SIGTERM)
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            stop(signal.SIGKILL)
            server.wait(timeout=10)
        log.close()

    # a file added to the bundled code is caught
    (code / "evil.py").write_text("import os\n")
    assert any("corpusforge_model_code/lib/corpusforge/evil.py" in p
               for p in check_registered_copy(store.root, lm.manifest))
    shutil.rmtree(tmp_path / "venv")
