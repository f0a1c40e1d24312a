"""benchmarks/seq2seq_gpu.py, the Multi30k presets' GPU script (benchmarks/seq2seq_gpu.sh), on CPU with --smoke:
the same code path as on the GPU machine, where corpusforge is not installed (the script maps the checkout's
folders itself). The data are the demo's number pairs laid out as Multi30k's files."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.models.test_lm_gpu_bench import BARE

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def multi30k_like(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("m30k")
    de = (REPO / "data" / "pairs" / "numbers.de").read_text(encoding="utf-8").splitlines()
    en = (REPO / "data" / "pairs" / "numbers.en").read_text(encoding="utf-8").splitlines()
    for stem, part in (("train", slice(0, 400)), ("val", slice(400, 440)), ("test_2016_flickr", slice(440, 480))):
        (folder / f"{stem}.de").write_text("\n".join(de[part]) + "\n", encoding="utf-8")
        (folder / f"{stem}.en").write_text("\n".join(en[part]) + "\n", encoding="utf-8")
    return folder


def run_bench(*args: str) -> dict:
    res = subprocess.run([sys.executable, "-c", BARE, str(REPO / "benchmarks" / "seq2seq_gpu.py"), *args],
                         capture_output=True, text=True, timeout=300, cwd=REPO.parent)
    assert res.returncode == 0, res.stderr[-3000:]
    return json.loads(res.stdout.strip().splitlines()[-1])


SHORT = ["--set", "model.max_len=24", "--set", "decode.max_len=24", "--beams", "1,2"]


@pytest.mark.gpu
def test_the_transformer_preset_trains_decodes_scores_and_times_the_cache(multi30k_like):
    out = run_bench("multi30k-transformer", "--smoke", "--kv-cache", "--data", str(multi30k_like), *SHORT)
    assert (out["family"], out["device"], out["steps"], out["truncated"]) == ("transformer", "cpu", 6, False)
    assert set(out["scores"]) == {"valid_beam1", "test_beam1", "valid_beam2", "test_beam2"}
    assert out["scores"]["test_beam1"]["sentences"] == 40 and out["val_ppl"] > 1.0
    assert out["signatures"]["bleu_tok_lc_signature"].startswith("nrefs:1|case:lc|")
    kv = out["kv_cache"]
    assert kv["same_tokens"] is True and kv["cached"]["tokens"] == kv["uncached"]["tokens"] > 0


@pytest.mark.e2e
def test_a_training_budget_stops_at_an_evaluation_and_still_scores(multi30k_like):
    out = run_bench("multi30k-gru-luong", "--smoke", "--max-seconds", "0.001", "--data", str(multi30k_like),
                    "--beams", "1", "--set", "model.max_len=24", "--set", "decode.max_len=24")
    assert out["truncated"] is True and out["steps"] == 3 < out["of_steps"] == 6  # the first evaluation (step 3)
    assert out["scores"]["test_beam1"]["sentences"] == 40
