"""The docs' "Adding a stage" recipe (Internals), followed literally on a copy of the package: one new package under
tasks/ plus one line in flows/stages.py make a stage the pipeline config types, the flow runs after its upstream,
MLflow receives the declared files of, and a rerun reuses; a field marked not-in-id changes nothing; a field that
references another artifact (artifact_ref) hands it to the step and adds it to the step's inputs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.flows.test_house import _wheel_layout, digests

pytestmark = pytest.mark.e2e

CONFIG = '''
from __future__ import annotations

from dataclasses import dataclass, field

from corpusforge.tasks.config import NOT_IN_ID, artifact_ref, check_artifact_name


@dataclass(frozen=True)
class WordstatsConfig:
    """Word statistics of the corpus's train split."""

    name: str = field(default="wordstats", metadata={"doc": "Artifact name.", **NOT_IN_ID})
    top: int = field(default=3, metadata={"doc": "How many of the most frequent words to keep."})
    note: str = field(default="", metadata={"doc": "A free-text note (not in the id).", **NOT_IN_ID})
    compare: str | None = field(default=None, metadata=artifact_ref(("corpus",), doc=(
        "Another corpus (its section in this run, or an artifact id): count its distinct words too.")))

    def __post_init__(self) -> None:
        check_artifact_name(self.name)
        if self.top < 1:
            raise ValueError(f"top: must be >= 1, got {self.top}")
'''

BUILD = '''
from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from corpusforge.storage.store import ArtifactStore
from corpusforge.tasks.config import identity
from corpusforge.tasks.orchestration import prefect_task
from corpusforge.tasks.step import StepResult, artifact_input, resolve_references, run_step
from corpusforge.tasks.wordstats.config import WordstatsConfig


def build_wordstats(corpus: StepResult, cfg: WordstatsConfig, store: ArtifactStore, refs=None) -> StepResult:
    refs = resolve_references(cfg, store, section="wordstats", given=refs)
    other = Path(refs["compare"].path) if "compare" in refs else None
    return run_step(store, step="wordstats", version=1, name=cfg.name, config=identity(cfg),
                    inputs=[artifact_input(corpus)], references=refs,
                    build=lambda out: _build(out, Path(corpus.path), cfg, other))


def _words(corpus_dir: Path) -> Counter:
    import polars as pl

    return Counter(w for t in pl.read_parquet(corpus_dir / "train.parquet")["text"] for w in t.split())


def _build(out: Path, corpus_dir: Path, cfg: WordstatsConfig, other: Path | None) -> dict:
    words = _words(corpus_dir)
    top = [[w, n] for w, n in sorted(words.items(), key=lambda kv: (-kv[1], kv[0]))[: cfg.top]]
    (out / "stats.json").write_text(json.dumps({"top": top}) + "\\n")
    metrics = {"distinct_words": len(words)}
    if other is not None:
        metrics["compare_distinct_words"] = len(_words(other))
    return {"metrics": metrics}


@prefect_task(name="wordstats")
def wordstats_task(upstream: dict, config: dict, store_root: str, refs: dict | None = None) -> dict:
    from corpusforge.tasks.config import from_dict

    result = build_wordstats(StepResult.from_dict(upstream), from_dict(WordstatsConfig, config, "wordstats"),
                             ArtifactStore(store_root), refs={k: StepResult.from_dict(v) for k, v in (refs or {}).items()})
    return result.to_dict()
'''

INIT = '''
from corpusforge.tasks.stage import Stage, StepOutputs
from corpusforge.tasks.wordstats.config import WordstatsConfig

STAGE = Stage(section="wordstats", config=WordstatsConfig, after="corpus", doc="Word statistics.",
              task="corpusforge.tasks.wordstats.build:wordstats_task",
              core="corpusforge.tasks.wordstats.build:build_wordstats",
              steps={"wordstats": StepOutputs(mlflow=("stats.json",))})
'''

DRIVE = '''
import json, sys, typing
import corpusforge as cf
from corpusforge.pipeline_config import PipelineConfig
from corpusforge.tasks.config import ConfigError
from corpusforge.tasks.wordstats.config import WordstatsConfig

out = {"typed": str(typing.get_type_hints(PipelineConfig)["wordstats"])}
try:
    cf.run({"corpus": {"sources": [sys.argv[1]]}, "wordstats": {"top": 0}}, store=sys.argv[2])
except ConfigError as exc:
    out["error"] = str(exc)
config = {"name": "ws", "corpus": {"sources": [sys.argv[1]], "reader": {"txt_mode": "line"},
          "split": {"valid": 0.0, "test": 0.0}}, "wordstats": {"top": 2}}
first = cf.run(config, store=sys.argv[2])
again = cf.run({**config, "wordstats": {"top": 2, "note": "edited"}}, store=sys.argv[2])
out["first"] = {"computed": first.computed, "id": first["wordstats"].id, "path": str(first["wordstats"].path),
                "metrics": first["wordstats"].metrics, "run": first.summary.get("mlflow_run_id"),
                "uri": first.summary.get("tracking_uri")}
out["again"] = {"computed": again.computed, "id": again["wordstats"].id}
# a reference to the run's own corpus section, then to the same corpus by id prefix: one artifact
ref = cf.run({**config, "wordstats": {"top": 2, "compare": "corpus"}}, store=sys.argv[2])
by_id = cf.run({**config, "wordstats": {"top": 2, "compare": first["corpus"].id[:8]}}, store=sys.argv[2])
out["ref"] = {"computed": ref.computed, "id": ref["wordstats"].id, "path": str(ref["wordstats"].path),
              "metrics": ref["wordstats"].metrics, "corpus": first["corpus"].id}
out["by_id"] = {"computed": by_id.computed, "id": by_id["wordstats"].id}
print("RESULT " + json.dumps(out))
'''


def test_a_new_stage_is_one_package_plus_one_line(tmp_path):
    root = _wheel_layout(tmp_path / "pkg")
    before = digests(root)
    pkg = root / "corpusforge" / "tasks" / "wordstats"
    pkg.mkdir()
    (pkg / "config.py").write_text(CONFIG)
    (pkg / "build.py").write_text(BUILD)
    (pkg / "__init__.py").write_text(INIT)
    stages = root / "corpusforge" / "stages.py"
    text = stages.read_text()
    assert "    lm.STAGE,\n" in text
    assert "from corpusforge.tasks import " in text
    text = text.replace("from corpusforge.tasks import ", "from corpusforge.tasks import wordstats, ", 1)
    stages.write_text(text.replace("    lm.STAGE,\n", "    lm.STAGE,\n    wordstats.STAGE,\n"))  # the one line
    after = digests(root)  # the recipe's size: three new files in one package, one file changed
    assert sorted(set(after) - set(before)) == [f"corpusforge/tasks/wordstats/{n}"
                                                for n in ("__init__.py", "build.py", "config.py")]
    assert [k for k, v in before.items() if after[k] != v] == ["corpusforge/stages.py"]

    source = tmp_path / "words.txt"
    source.write_text("the cat sat on the mat\nthe dog sat\na bird\n")
    store = tmp_path / "store"
    env = {**os.environ, "PYTHONPATH": str(root), "CORPUSFORGE_LOCAL_SERVER": "off", "MPLBACKEND": "Agg"}
    env.pop("PREFECT_API_URL", None)
    proc = subprocess.run([sys.executable, "-c", DRIVE, str(source), str(store)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    line = next(x for x in proc.stdout.splitlines() if x.startswith("RESULT "))
    out = json.loads(line.removeprefix("RESULT "))
    assert out["typed"].endswith("WordstatsConfig | None")
    assert out["error"] == "wordstats.top: must be >= 1, got 0"
    first, again = out["first"], out["again"]
    assert first["computed"] >= 3  # a shard, the corpus, wordstats
    stats = json.loads((Path(first["path"]) / "stats.json").read_text())
    assert stats["top"] == [["the", 3], ["sat", 2]] and first["metrics"]["distinct_words"] == 8
    assert again["computed"] == 0 and again["id"] == first["id"]  # note is not in the id: reused
    ref, by_id = out["ref"], out["by_id"]
    assert ref["computed"] == 1 and ref["id"] != first["id"]  # a second input: a new artifact, the corpus reused
    assert ref["metrics"]["compare_distinct_words"] == 8  # the step received the referenced artifact
    manifest = json.loads((Path(ref["path"]) / "manifest.json").read_text())
    assert [(i["step"], i["id"]) for i in manifest["inputs"]] == [("corpus", ref["corpus"])] * 2
    assert by_id["computed"] == 0 and by_id["id"] == ref["id"]  # by id prefix: the same artifact
    # MLflow got the file the declaration names, in the step's nested run
    import mlflow

    client = mlflow.tracking.MlflowClient(first["uri"])
    children = client.search_runs([client.get_run(first["run"]).info.experiment_id],
                                  f"tags.mlflow.parentRunId = '{first['run']}'")
    logged = {a.path for r in children for a in client.list_artifacts(r.info.run_id)}
    assert "stats.json" in logged
