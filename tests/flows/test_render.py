"""The printed steps table lists a step after the steps it reads (a stage returns its main output last)."""

from __future__ import annotations

import json


def test_run_order_puts_a_step_after_its_inputs(tmp_path):
    from corpusforge.render import run_order

    def step(name: str, inputs: list[str]) -> dict:
        path = tmp_path / name
        path.mkdir()
        (path / "manifest.json").write_text(json.dumps({"id": name, "files": {}, "inputs": [{"id": i} for i in inputs]}))
        return {"id": name, "step": name, "path": str(path)}

    steps = [step("corpus", []), step("eval", ["emb"]), step("emb", ["corpus"]), step("sample", ["lm"]),
             step("lm", ["corpus"])]
    assert [s["id"] for s in run_order(steps)] == ["corpus", "emb", "eval", "lm", "sample"]
    assert [s["id"] for s in run_order(steps[:1] + steps[2:3])] == ["corpus", "emb"]  # already in order
