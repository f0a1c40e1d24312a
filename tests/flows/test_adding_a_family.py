"""The docs' "Adding a model family" recipe (Internals), followed literally on a copy of the package (issue 45, item
9): a bag-of-embeddings classifier is one folder under models/ (four files: its config, module and spec, and the
package's __init__) and no other file is touched. The families' registry finds it (no list names it), its module
is checked against the classify contract, and the existing classify stage (which takes any family that trains on
labelled records) trains it on a labelled corpus through the corpus and tokenizer stages with the shared recipe and
objective; a rerun reuses it, and Artifact.load() gives it back, predicting. A stage for a new kind of data is the
other recipe (tests/flows/test_adding_a_stage.py: one package and one line)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.flows.test_house import _wheel_layout, digests

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

DRIVE = '''
import json, sys
import corpusforge as cf
from corpusforge.models.family import families

out = {"families": sorted(families())}
config = {"name": "bags", "corpus": {"sources": [sys.argv[1]], "reader": {"labels": {"label": "label"}},
          "split": {"valid": 0.25, "test": 0.0}},
          "tokenizer": {"kind": "word", "vocab_size": 200},
          "classify": {"family": "bag", "model": {"n_embd": 8}, "label": "label",
                       "train": {"max_iters": 150, "batch_size": 16, "lr": 0.05, "warmup_iters": 0,
                                 "eval_interval": 50, "eval_iters": 0, "log_interval": 25}}}
first = cf.run(config, store=sys.argv[2])
again = cf.run(config, store=sys.argv[2])
artifact = first["classify"]
out["first"] = {"computed": first.computed, "id": artifact.id, "metrics": artifact.metrics,
                "accounting": first["corpus"].manifest["accounting"]}
out["again"] = {"computed": again.computed, "id": again["classify"].id}
out["predicted"] = [p["label"] for p in artifact.load().predict(["a good fine day", "an awful bad night"])]
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


def test_a_new_family_is_one_folder_and_trains_through_the_classify_stage(tmp_path):
    root = _wheel_layout(tmp_path / "pkg")
    before = digests(root)
    family = root / "corpusforge" / "models" / "bag"
    family.mkdir()
    for name, text in (("__init__.py", FAMILY_INIT), ("config.py", FAMILY_CONFIG), ("model.py", FAMILY_MODEL),
                       ("spec.py", FAMILY_SPEC)):
        (family / name).write_text(text)
    after = digests(root)
    added = sorted(set(after) - set(before))
    assert added == [f"corpusforge/models/bag/{n}" for n in ("__init__.py", "config.py", "model.py", "spec.py")]
    assert all(after[k] == v for k, v in before.items())  # no other file touched

    source = tmp_path / "reviews.jsonl"
    source.write_text(labelled_records())
    store = tmp_path / "store"
    env = {**os.environ, "PYTHONPATH": str(root), "CORPUSFORGE_LOCAL_SERVER": "off", "MPLBACKEND": "Agg"}
    env.pop("PREFECT_API_URL", None)
    proc = subprocess.run([sys.executable, "-c", DRIVE, str(source), str(store)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    out = json.loads(next(x for x in proc.stdout.splitlines() if x.startswith("RESULT ")).removeprefix("RESULT "))
    assert "bag" in out["families"] and {"gpt", "rnn", "nplm", "encoder"} <= set(out["families"])
    first, again = out["first"], out["again"]
    assert first["accounting"]["kept"] == 240, first["accounting"]
    assert first["computed"] >= 5  # shard, corpus, tokenizer, encode, classify
    assert first["metrics"]["val_accuracy"] >= 0.9, first["metrics"]
    assert again["computed"] == 0 and again["id"] == first["id"]
    assert out["predicted"] == [1, 0]
