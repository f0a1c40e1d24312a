"""The docs' "Adding a model family" recipe (Internals), followed literally on a copy of the package: a bag-of-embeddings
classifier is one folder under models/ (config, module, spec), one stage package under tasks/ and one line in
flows/stages.py. The pipeline config types it, the families' registry finds it (no list names it), it trains on a
labelled corpus through the corpus, tokenizer and its own stage with the shared trainer and objective, a rerun
reuses it, and Artifact.load() gives it back, predicting."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.flows.test_house import _wheel_layout

pytestmark = pytest.mark.e2e

FAMILY_INIT = '''"""A bag of embeddings: the mean of a text's token vectors, then a linear layer (a toy classifier)."""
'''

FAMILY_CONFIG = '''
from __future__ import annotations

from dataclasses import dataclass, field

from corpusforge.models.configs import FROM_TOKENIZER


@dataclass(frozen=True)
class BagConfig:
    """Shape of a bag-of-embeddings classifier."""

    vocab_size: int = field(default=100, metadata={"doc": "Token ids (set from the tokenizer).", "derived": FROM_TOKENIZER})
    pad_id: int = field(default=0, metadata={"doc": "Padding id (set from the tokenizer).", "derived": FROM_TOKENIZER})
    n_classes: int = field(default=2, metadata={"doc": "Classes (set from the labels).", "derived": "set from the labels"})
    n_embd: int = field(default=16, metadata={"doc": "Embedding size."})

    def __post_init__(self) -> None:
        if self.n_embd < 1:
            raise ValueError(f"n_embd: must be >= 1, got {self.n_embd}")
'''

FAMILY_MODEL = '''
from __future__ import annotations

import torch
import torch.nn as nn

from corpusforge.models.bag.config import BagConfig


class BagOfEmbeddings(nn.Module):
    def __init__(self, cfg: BagConfig):
        super().__init__()
        self.cfg = cfg
        self.emb = nn.Embedding(cfg.vocab_size, cfg.n_embd)
        self.out = nn.Linear(cfg.n_embd, cfg.n_classes)

    def forward(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        m = mask.unsqueeze(-1).float()
        return self.out((self.emb(ids) * m).sum(1) / m.sum(1).clamp_min(1.0))
'''

FAMILY_SPEC = '''
from corpusforge.models.bag.config import BagConfig
from corpusforge.models.family import FamilySpec

SPEC = FamilySpec(name="bag", config=BagConfig, module="corpusforge.models.bag.model:BagOfEmbeddings",
                  objective="classification", doc="mean of token vectors, then linear",
                  trains_on="labelled", capabilities=frozenset({"classify"}), derived={"pad_id": ("pad", "eot")})
'''

STAGE_CONFIG = '''
from __future__ import annotations

from dataclasses import dataclass, field

from corpusforge.models.configs import TrainConfig
from corpusforge.models.family import FamilyConfigs
from corpusforge.tasks.config import check_artifact_name

FAMILIES = FamilyConfigs("labelled")


@dataclass(frozen=True)
class BagClassifyConfig:
    """A classifier trained on the tokenizer stage's encoded labelled records."""

    name: str = field(default="classifier", metadata={"doc": "Artifact name."})
    family: str = field(default="bag", metadata={"doc": "A family that trains on labelled records."})
    model: object | None = field(default=None, metadata={"doc": "The family's config.", "variants": ("family", FAMILIES)})
    train: TrainConfig = field(default_factory=TrainConfig, metadata={"doc": "How to train."})
    field_name: str = field(default="text", metadata={"doc": "The text field."})
    label: str = field(default="label", metadata={"doc": "The label column."})

    def __post_init__(self) -> None:
        check_artifact_name(self.name)
        if self.family not in FAMILIES:
            raise ValueError(f"family: one of {', '.join(FAMILIES)}, got {self.family!r}")
        if self.model is None:
            object.__setattr__(self, "model", FAMILIES[self.family]())
'''

STAGE_BUILD = '''
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from corpusforge.storage.records import ids_column
from corpusforge.storage.store import ArtifactStore
from corpusforge.tasks.bagclassify.config import BagClassifyConfig
from corpusforge.tasks.config import from_dict, identity
from corpusforge.tasks.orchestration import prefect_task
from corpusforge.tasks.step import StepResult, artifact_input, run_step
from corpusforge.tasks.training import MetricsLog, training_report, training_scratch

VERSION = 1


def build_classifier(encoded: StepResult, cfg: BagClassifyConfig, store: ArtifactStore, on_metrics=None) -> StepResult:
    config = identity(cfg)
    with training_scratch(store, "bagclassify", VERSION, config, [encoded.id]) as scratch:
        return run_step(store, step="bagclassify", version=VERSION, name=cfg.name, config=config,
                        inputs=[artifact_input(encoded)],
                        build=lambda out: _build(out, Path(encoded.path), cfg, scratch, on_metrics))


def _build(out, encoded_dir, cfg, scratch, on_metrics):
    import polars as pl
    import torch

    from corpusforge.models.family import family
    from corpusforge.models.objectives import build, default_settings
    from corpusforge.models.training import train
    from corpusforge.models.zoo import build_model, save_model

    meta = json.loads((encoded_dir / "meta.json").read_text())
    frames = {s: pl.read_parquet(encoded_dir / f"{s}.parquet") for s in ("train", "valid", "test")
              if (encoded_dir / f"{s}.parquet").is_file()}
    classes = sorted(set(frames["train"][cfg.label].to_list()))
    splits = {s: (f[ids_column(cfg.field_name)].to_list(), [classes.index(v) for v in f[cfg.label].to_list()])
              for s, f in frames.items() if len(f)}
    specials = {**meta.get("special_ids", {}), "eot": meta.get("eot_id")}
    spec = family(cfg.family)
    derived = {name: next(specials[r] for r in roles if specials.get(r) is not None) for name, roles in spec.derived.items()}
    mcfg = dataclasses.replace(cfg.model, vocab_size=meta["vocab_size"], n_classes=len(classes), **derived)
    torch.manual_seed(cfg.train.seed)
    model = build_model(cfg.family, mcfg)
    log = MetricsLog(on_metrics)
    result = train(model, build(default_settings(spec), mcfg, splits), cfg.train, on_metrics=log,
                   checkpoint_path=scratch / "checkpoint.safetensors")
    save_model(model.cpu().eval(), out)
    (out / "labels.json").write_text(json.dumps({"classes": classes, "tokenizer": meta["tokenizer_path"]}))
    metrics = {k: float(v) for k, v in result.metrics.items() if isinstance(v, (int, float))}
    log.write(out, metrics, title=f"{cfg.family} {cfg.name}")
    return {"metrics": metrics}


class Predictor:
    def __init__(self, model, tokenizer, classes):
        self.model, self.tokenizer, self.classes = model, tokenizer, classes

    def predict(self, texts):
        import torch

        from corpusforge.models.batching import pad

        ids, mask = pad([self.tokenizer.encode(t) for t in texts], self.model.cfg.pad_id)
        with torch.no_grad():
            return [self.classes[i] for i in self.model(ids, mask).argmax(-1).tolist()]


def load_classifier(artifact_dir: Path, manifest: dict):
    from corpusforge.models.tokenization import load_tokenizer
    from corpusforge.models.zoo import load_model
    from corpusforge.storage.store import resolve_recorded

    info = json.loads((artifact_dir / "labels.json").read_text())
    tokenizer = load_tokenizer(resolve_recorded(info["tokenizer"], artifact_dir))
    return Predictor(load_model(artifact_dir), tokenizer, info["classes"])


@prefect_task(name="bagclassify")
def classify_task(upstream: dict, config: dict, store_root: str, on_metrics=None) -> dict:
    from prefect import get_run_logger

    cfg = from_dict(BagClassifyConfig, config, "bagclassify")
    with training_report(cfg.name, cfg.train.max_iters, get_run_logger(), on_metrics) as report:
        return build_classifier(StepResult.from_dict(upstream), cfg, ArtifactStore(store_root), report).to_dict()
'''

STAGE_INIT = '''
from corpusforge.tasks.bagclassify.config import BagClassifyConfig
from corpusforge.tasks.stage import Stage, StepOutputs

STAGE = Stage(section="bagclassify", config=BagClassifyConfig, after="tokenizer", live=True,
              doc="Train a classifier on labelled records.",
              task="corpusforge.tasks.bagclassify.build:classify_task",
              core="corpusforge.tasks.bagclassify.build:build_classifier",
              steps={"bagclassify": StepOutputs(mlflow=("metrics.json", "loss_curve.png"),
                                               loader="corpusforge.tasks.bagclassify.build:load_classifier")})
'''

DRIVE = '''
import json, sys, typing
import corpusforge as cf
from corpusforge.models.family import families
from corpusforge.pipeline_config import PipelineConfig

out = {"typed": str(typing.get_type_hints(PipelineConfig)["bagclassify"]), "families": sorted(families())}
config = {"name": "bags", "corpus": {"sources": [sys.argv[1]], "reader": {"labels": {"label": "label"}},
          "split": {"valid": 0.25, "test": 0.0}},
          "tokenizer": {"kind": "word", "vocab_size": 200, "format": "parquet", "fields": ["text"], "labels": ["label"]},
          "bagclassify": {"model": {"n_embd": 8}, "train": {"max_iters": 150, "batch_size": 16, "lr": 0.05,
                          "warmup_iters": 0, "eval_interval": 50, "eval_iters": 0, "log_interval": 25}}}
first = cf.run(config, store=sys.argv[2])
again = cf.run(config, store=sys.argv[2])
artifact = first["bagclassify"]
out["first"] = {"computed": first.computed, "id": artifact.id, "metrics": artifact.metrics,
                "accounting": first["corpus"].manifest["accounting"]}
out["again"] = {"computed": again.computed, "id": again["bagclassify"].id}
out["predicted"] = artifact.load().predict(["a good fine day", "an awful bad night"])
print("RESULT " + json.dumps(out))
'''


def labelled_records(n: int = 240) -> str:
    import random

    rng = random.Random(7)
    filler = ["the", "a", "day", "night", "film", "song", "was", "is", "very", "quite", "this", "that", "my"]
    cue = {1: ["good", "great", "fine", "lovely"], 0: ["bad", "awful", "poor", "dull"]}
    lines = []
    for i in range(n):
        label = i % 2
        words = rng.sample(filler, 5) + [rng.choice(cue[label])] + [f"w{i}"]
        rng.shuffle(words)
        lines.append(json.dumps({"text": " ".join(words), "label": label}))
    return "\n".join(lines) + "\n"


def test_a_new_family_is_one_folder_one_stage_package_and_one_line(tmp_path):
    root = _wheel_layout(tmp_path / "pkg")
    family = root / "corpusforge" / "models" / "bag"
    family.mkdir()
    for name, text in (("__init__.py", FAMILY_INIT), ("config.py", FAMILY_CONFIG), ("model.py", FAMILY_MODEL),
                       ("spec.py", FAMILY_SPEC)):
        (family / name).write_text(text)
    stage = root / "corpusforge" / "tasks" / "bagclassify"
    stage.mkdir()
    for name, text in (("__init__.py", STAGE_INIT), ("config.py", STAGE_CONFIG), ("build.py", STAGE_BUILD)):
        (stage / name).write_text(text)
    stages = root / "corpusforge" / "stages.py"
    text = stages.read_text()
    assert "from corpusforge.tasks import " in text and "    lm.STAGE,\n" in text
    text = text.replace("from corpusforge.tasks import ", "from corpusforge.tasks import bagclassify, ", 1)
    stages.write_text(text.replace("    lm.STAGE,\n", "    lm.STAGE,\n    bagclassify.STAGE,\n"))  # the one line

    source = tmp_path / "reviews.jsonl"
    source.write_text(labelled_records())
    store = tmp_path / "store"
    env = {**os.environ, "PYTHONPATH": str(root), "CORPUSFORGE_LOCAL_SERVER": "off", "MPLBACKEND": "Agg"}
    env.pop("PREFECT_API_URL", None)
    proc = subprocess.run([sys.executable, "-c", DRIVE, str(source), str(store)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    out = json.loads(next(x for x in proc.stdout.splitlines() if x.startswith("RESULT ")).removeprefix("RESULT "))
    assert out["typed"].endswith("BagClassifyConfig | None")
    assert "bag" in out["families"] and {"gpt", "rnn", "nplm", "encoder"} <= set(out["families"])
    first, again = out["first"], out["again"]
    assert first["accounting"]["kept"] == 240, first["accounting"]
    assert first["computed"] >= 5  # shard, corpus, tokenizer, encode, bag
    assert first["metrics"]["val_accuracy"] >= 0.9, first["metrics"]
    assert again["computed"] == 0 and again["id"] == first["id"]
    assert out["predicted"] == [1, 0]
