"""The Python API (issue 13, item 5): the docs' example (Getting started, "From Python"; the README's shorter one is
part of it: tests/flows/test_docs.py) runs as written, the demo chain runs through
``corpusforge.run`` and every stage's ``load()`` gives its working object, and the API and the CLI build the
same configs (so the same artifact ids)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.commands import corpusforge
from tests.conftest import REPO

pytestmark = [pytest.mark.e2e, pytest.mark.server]


GETTING_STARTED = REPO / "deploy" / "docs" / "pages" / "getting-started.md"


def docs_example() -> str:
    """The one Python block of the docs' "From Python" section (Getting started)."""
    text = GETTING_STARTED.read_text(encoding="utf-8")
    start = text.index("\n## From Python\n")
    end = text.index("\n## ", start + 1)
    (code,) = re.findall(r"```python\n(.*?)```", text[start:end], re.S)
    return code


@pytest.fixture(scope="module")
def api_store(tmp_path_factory):
    """A store for this module; its local server (started by the API like the CLI does) is stopped after."""
    store = tmp_path_factory.mktemp("api") / "store"
    yield store
    subprocess.run([str(Path(sys.executable).parent / "corpusforge"), "server", "stop", "--store", str(store)],
                   capture_output=True, timeout=120)


def test_docs_example_runs_as_written(api_store):
    env = {**os.environ, "CORPUSFORGE_STORE": str(api_store), "MPLBACKEND": "Agg"}
    env.pop("PREFECT_API_URL", None)  # not the test session's Prefect API: the store's own, as a user has
    proc = subprocess.run([sys.executable, "-c", docs_example()], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    lines = proc.stdout.strip().splitlines()
    assert lines[0].endswith("documents kept") and int(lines[0].split()[1]) > 7000
    assert lines[1].startswith("[") and "be" in lines[1]  # the byte-BPE tokens of the line
    assert lines[2].split()[0] == "3"
    assert "True" in lines[4]
    assert all(stage in lines[5] for stage in ("corpus", "tokenizer", "embeddings", "ngram", "lm"))


def test_demo_chain_loads_every_stage(api_store):
    """After the example (which ran the demo), the same run answers from the store, and each stage loads."""
    import corpusforge as cf

    demo = cf.run(REPO / "configs" / "demo.yaml", store=api_store)
    assert demo.computed == 0 and demo.summary.get("answered_from_store", True)
    splits = demo["corpus"].load()
    assert set(splits) == {"train", "valid", "test"} and splits["train"].height > 6000
    tok = demo["tokenizer"].load()
    assert tok.decode(tok.encode("To be, or not to be").ids) == "To be, or not to be"
    vectors = demo["embeddings"].load()
    assert len(vectors.most_similar("king", topn=3)) == 3
    # issue 16 item 6: the demo's analogy queries give sensible answers, shown in the run's summary (answered
    # from the store here: the highlights come from the published evaluation, as after training)
    answers = demo.summary["highlights"]["embeddings"]
    assert answers[0].startswith("he - king + queen \u2192 she,") and answers[1].startswith("his - he + she \u2192 her,")
    assert vectors.most_similar(positive=["he", "queen"], negative=["king"], topn=1)[0][0] == "she"
    ngram = demo["ngram"].load()
    assert ngram.order == 3
    model, lm_tok = demo["lm"].load()
    assert sum(p.numel() for p in model.parameters()) > 0 and lm_tok.encode("to be")
    found = cf.artifacts.find(step="lm", store=api_store)
    assert demo["lm"].id in {a.id for a in found}
    assert cf.artifacts.show(demo["lm"].id[:8], store=api_store).path == demo["lm"].path
    assert cf.artifacts.verify(demo["ngram"].id, store=api_store).ok
    with pytest.raises(KeyError, match="no 'encoder' stage"):
        demo["encoder"]
    with pytest.raises(LookupError):
        cf.artifacts.show("ffffffffffff", store=api_store)


def test_load_refuses_a_tampered_artifact(api_store):
    import corpusforge as cf
    from corpusforge.storage.store import TamperedArtifact

    (tok,) = [a for a in cf.artifacts.find(step="tokenizer", name="tinyshakespeare-byte-bpe", store=api_store)]
    target = tok.path / "tokenizer.json"
    data = target.read_bytes()
    try:
        target.write_bytes(data.replace(b'"vocab"', b'"vocaB"', 1))
        with pytest.raises(TamperedArtifact):
            tok.load()
    finally:
        target.write_bytes(data)


def test_api_and_cli_build_the_same_configs(prefect_harness, tmp_path):
    """The same request through the CLI and through the API makes the same config, so the same artifact: the CLI
    builds it, and the API call after it is answered from the store with the CLI's ids (and the other way round
    for embeddings), for the flags that take the most translating (--order, --set with and without a section
    prefix, an eval file, a path relative to the working directory)."""
    import json

    import corpusforge as cf

    text = "".join(f"the cat {i % 7} sat on the mat . the dog sat on the log {i % 5} .\n" for i in range(60))
    (tmp_path / "a.txt").write_text(text)
    (tmp_path / "b.txt").write_text(text.replace("cat", "cow"))
    store = tmp_path / "store"
    env = {"CORPUSFORGE_LOCAL_SERVER": "off", "PREFECT_API_URL": prefect_harness}
    # the commands in this process (tests/commands.py): what is compared is the config each side builds
    res = corpusforge("ngram", "estimate", "a.txt", "--order", "4", "--eval", "b.txt", "--set", "memory_limit=1GB",
                      "--set", "tracking.enabled=false", "--store", store, "--json", cwd=tmp_path, env=env, code=0)
    from_cli = json.loads(res.stdout.strip().splitlines()[-1])
    cwd = Path.cwd()
    try:
        os.chdir(tmp_path)
        from_api = cf.ngram.estimate(["a.txt"], order=4, eval_files=["b.txt"],
                                     overrides=["memory_limit=1GB", "tracking.enabled=false"], store=store)
        vectors = cf.embed.train(["b.txt"], "word2vec", ["dim=8", "epochs=1", "workers=1", "tracking.enabled=false"],
                                 store=store)
    finally:
        os.chdir(cwd)
    assert from_api.id == from_cli["id"] and from_api.path == Path(from_cli["path"])
    res = corpusforge("embed", "train", "b.txt", "--kind", "word2vec", "--set", "dim=8", "--set", "epochs=1",
                      "--set", "workers=1", "--set", "tracking.enabled=false", "--store", store, "--json",
                      cwd=tmp_path, env=env, code=0)
    assert json.loads(res.stdout.strip().splitlines()[-1])["id"] == vectors.id