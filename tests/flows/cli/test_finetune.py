"""``corpusforge lm finetune`` / ``lm merge`` / ``lm generate`` / ``lm export`` on post-trained models, through the
real pipeline flow (real Prefect API and MLflow): pre-train a tiny GPT on review texts with ``lm train``, fine-tune
it with SFT on prompt/response JSONL and with LoRA adapters, merge the adapters, generate from the merged model,
export it to transformers, run DPO on triplets, load the registered MLflow model, and get one-line errors for bad
input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.commands import corpusforge
from tests.flows.cli.test_seq2seq import cli_env

REVIEWS = Path(__file__).resolve().parents[3] / "data" / "labelled" / "reviews.tsv"
TRAIN = {"batch_size": 16, "lr": 3.0e-3, "min_lr": 3.0e-4, "warmup_iters": 5, "weight_decay": 0.0,
         "eval_iters": 5, "log_interval": 20, "cpu_threads": 1}


def last_json(r) -> dict:
    return json.loads(r.stdout.strip().splitlines()[-1])


@pytest.mark.e2e
def test_finetune_lora_merge_generate_export_dpo(prefect_harness, tmp_path, monkeypatch):
    rows = [line.split("\t") for line in REVIEWS.read_text(encoding="utf-8").splitlines()[1:601]]
    texts = tmp_path / "reviews.txt"
    texts.write_text("\n\n".join(t for t, _ in rows) + "\n", encoding="utf-8")
    sft = tmp_path / "sft.jsonl"
    sft.write_text("".join(json.dumps({"prompt": f"Review: {t}\nSentiment:", "response": f" {label}"}) + "\n"
                           for t, label in rows), encoding="utf-8")
    store = tmp_path / "store"

    def run(*args, code=0, subprocess=False):
        """In this process (tests/commands.py); ``subprocess=True`` for the console script itself."""
        return corpusforge(*args, "--store", store, env=cli_env(prefect_harness), code=code, subprocess=subprocess)

    preset = tmp_path / "tiny-gpt.yaml"
    preset.write_text(yaml.safe_dump({
        "corpus": {"reader": {"txt_mode": "paragraph"}, "split": {"valid": 0.1, "test": 0.0, "seed": 0}},
        "tokenizer": {"kind": "byte-bpe", "vocab_size": 300},
        "lm": {"name": "tiny-gpt", "family": "gpt", "sample": {"max_new_tokens": 0},
               "model": {"n_layer": 2, "n_head": 2, "n_embd": 32, "block_size": 64},
               "train": {**TRAIN, "max_iters": 40, "eval_interval": 40}}}), encoding="utf-8")
    parent = last_json(run("lm", "train", str(texts), "--preset", str(preset), "--json"))

    steps = ["train.max_iters=30", "train.eval_interval=30", "train.batch_size=16", "train.eval_iters=5",
             "eval_records=10", "train.cpu_threads=1"]
    full = last_json(run("lm", "finetune", parent["id"][:12], str(sft), "--method", "sft", "--json",
                         *sum((["--set", s] for s in steps), []), subprocess=True))  # the command, end to end
    assert full["method"] == "sft" and full["parent"] == parent["id"][:12]
    m = full["metrics"]
    assert m["trainable_params"] == m["total_params"] and m["val_loss"] < m["val_start_loss"]
    assert "val_answer_accuracy" in m and full["registered_model"]
    manifest = json.loads((Path(full["path"]) / "manifest.json").read_text())
    assert parent["id"] in {i["id"] for i in manifest["inputs"]}  # the lineage shows the parent

    # the registered lm names its artifact: a registered model is a start too
    lora = last_json(run("lm", "finetune", "models:/tiny-gpt/latest", str(sft), "--method", "sft", "--json",
                         "--set", "lora.r=2", *sum((["--set", s] for s in steps), [])))
    assert lora["parent_id"] == parent["id"]
    assert lora["metrics"]["trainable_params"] < 0.2 * lora["metrics"]["total_params"]
    assert (Path(lora["path"]) / "adapter.safetensors").is_file()
    refused = run("lm", "export", lora["id"][:12], str(tmp_path / "hf-adapter"), code=2)
    assert "merge them first" in refused.stderr and len(refused.stderr.strip().splitlines()) == 1

    merged = json.loads(run("lm", "merge", lora["id"][:12], "--json", subprocess=True).stdout)
    assert merged["adapter"] == lora["id"] and not merged["reused"]
    assert json.loads(run("lm", "merge", lora["id"][:12], "--json").stdout)["reused"]
    said = json.loads(run("lm", "generate", merged["id"][:12], "--prompt", "Review: the plot was dull\nSentiment:",
                          "--greedy", "-n", "5", "--json").stdout)
    via_adapter = json.loads(run("lm", "generate", lora["id"][:12], "--prompt",
                                 "Review: the plot was dull\nSentiment:", "--greedy", "-n", "5", "--json").stdout)
    assert said["text"] == via_adapter["text"]  # the merged weights compute what the adapters did
    assert said["id"] == merged["id"] and via_adapter["id"] == lora["id"]  # the full id, not the prefix given

    out = tmp_path / "hf"
    run("lm", "export", merged["id"][:12], str(out), "--format", "hf")
    modes = {f.name: f.stat().st_mode & 0o777 for f in out.iterdir()}
    assert len(set(modes.values())) == 1 and modes["model.safetensors"] & 0o044, modes  # 0600 weights before
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from corpusforge.tasks.post_training.inference import load_post_trained

    hf, tok = AutoModelForCausalLM.from_pretrained(out).eval(), AutoTokenizer.from_pretrained(out)
    ours, our_tok, _ = load_post_trained(Path(merged["path"]))
    ids = our_tok.encode("Review: the acting was superb\nSentiment:")
    assert tok("Review: the acting was superb\nSentiment:")["input_ids"] == ids
    with torch.no_grad():
        assert torch.allclose(hf(torch.tensor([ids])).logits, ours(torch.tensor([ids]))[0], atol=1e-4)

    triplets = tmp_path / "prefs.jsonl"
    flip = {"positive": "negative", "negative": "positive"}
    triplets.write_text("".join(json.dumps({"prompt": f"Review: {t}\nSentiment:", "chosen": f" {label}",
                                            "rejected": f" {flip[label]}"}) + "\n" for t, label in rows),
                        encoding="utf-8")
    dpo = last_json(run("lm", "finetune", full["id"][:12], str(triplets), "--method", "dpo", "--json",
                        "--set", "train.lr=1e-3", *sum((["--set", s] for s in steps), [])))
    d = dpo["metrics"]
    assert {"val_preference_accuracy", "val_reward_margin", "val_kl"} <= set(d) and d["val_reward_margin"] > 0

    import mlflow

    uri = f"sqlite:///{store / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.setenv("MLFLOW_REGISTRY_URI", uri)
    registered = mlflow.pyfunc.load_model(dpo["registered_model"]["latest_uri"])
    [text] = registered.predict(["Review: the plot was dull\nSentiment:"], params={"greedy": True,
                                                                                "max_new_tokens": 4})
    assert isinstance(text, str)

    bad = run("lm", "finetune", parent["id"][:12], str(sft), "--method", "sft", "--set", "prompt=Q: {question}\\nA:",
              code=2)
    assert "no question column" in bad.stderr and len(bad.stderr.strip().splitlines()) == 1
    assert "--method" in run("lm", "finetune", parent["id"][:12], str(sft), "--method", "rlhf", code=2).stderr
    assert "no registered model" in run("lm", "finetune", "models:/nope/latest", str(sft), code=2).stderr
