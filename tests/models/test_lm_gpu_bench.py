"""benchmarks/lm_gpu.py, the GPU targets' script (benchmarks/gpu.sh), on CPU with --smoke: the same code path as on
the GPU machine, where corpusforge is not installed (the script maps the checkout's folders itself)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
# a bare image: no installed corpusforge (the editable install's finder is taken off the import machinery)
BARE = """
import runpy, sys
sys.meta_path[:] = [f for f in sys.meta_path if "editable" not in getattr(f, "__module__", "")]
sys.path[:] = [p for p in sys.path if "__editable__" not in p]
assert "corpusforge" not in sys.modules
sys.argv = sys.argv[1:]  # python -c CODE SCRIPT ARGS: the script sees itself as argv[0]
runpy.run_path(sys.argv[0], run_name="__main__")
assert getattr(sys.modules["corpusforge"], "__file__", None) is None, "the installed package was used, not the mapping"
"""


def run_bench(*args: str) -> dict:
    res = subprocess.run([sys.executable, "-c", BARE, str(REPO / "benchmarks" / "lm_gpu.py"), *args],
                         capture_output=True, text=True, timeout=300, cwd=REPO.parent)
    assert res.returncode == 0, res.stderr[-3000:]
    return json.loads(res.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("target", ["shakespeare", "mfu", "ptb"])
@pytest.mark.gpu
def test_each_gpu_target_runs_its_code_path_on_cpu(target):
    out = run_bench(target, "--smoke")
    assert out["benchmark"] == target and isinstance(out["met"], bool)
    assert out["tokens_per_s" if target != "ptb" else "test_ppl"] > 0
    if target == "ptb":
        assert out["epochs"] == out["of_epochs"] == 2 and not out["truncated"]
        assert math.isfinite(out["test_ppl"]) and out["test_ppl"] < 51 * 1.5  # 51 words drawn uniformly
        # one stream (Zaremba's way, what 82.7 means) and 20 streams score the same words: close, not equal
        assert out["test_ppl_one_stream"] != out["test_ppl"]
        assert out["test_ppl_one_stream"] == pytest.approx(out["test_ppl"], rel=0.05)
    if target == "mfu":
        assert out["loss"] == "compiled with the model"


@pytest.mark.gpu
def test_mfu_measures_the_older_eager_loss_on_request_and_only_for_mfu():
    out = run_bench("mfu", "--smoke", "--loss-outside")
    assert out["loss"] == "eager, outside the compiled model" and out["tokens_per_s"] > 0
    res = subprocess.run([sys.executable, str(REPO / "benchmarks" / "lm_gpu.py"), "ptb", "--smoke", "--loss-outside"],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 2 and "--loss-outside, --batch and --accum apply to the mfu target only" in res.stderr
    res = subprocess.run([sys.executable, str(REPO / "benchmarks" / "lm_gpu.py"), "mfu", "--smoke", "--batch", "0"],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 2 and "--batch: must be a whole number >= 1, not 0" in res.stderr


@pytest.mark.e2e
def test_the_device_check_covers_every_family_and_passes_on_cpu():
    out = run_bench("check", "--smoke")
    assert out["met"] and out["failed"] == []
    assert set(out["families"]) == {"gpt", "gpt-tied-rope", "encoder", "nplm",
                                    *(f"{c}-{i}" for c in ("lstm", "gru", "rnn") for i in ("fused", "ours"))}
    assert all(r["ok"] and math.isfinite(r["best_val_loss"]) for r in out["families"].values())


@pytest.mark.gpu
def test_ptb_stops_at_the_first_epoch_past_its_time_budget_and_says_so():
    out = run_bench("ptb", "--smoke", "--max-seconds", "0.001", "--dtype", "float32")
    assert out["truncated"] and out["epochs"] == 1 < out["of_epochs"] and out["met"] is False
    assert out["dtype"] == "float32" and math.isfinite(out["test_ppl"])


@pytest.mark.e2e
def test_the_ptb_only_options_are_refused_elsewhere():
    res = subprocess.run([sys.executable, str(REPO / "benchmarks" / "lm_gpu.py"), "mfu", "--smoke", "--max-seconds", "5"],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 2 and "apply to the ptb target only" in res.stderr
