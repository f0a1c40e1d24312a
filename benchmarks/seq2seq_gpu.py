"""Multi30k de->en with the seq2seq presets (issue 32), run by benchmarks/gpu.sh. Needs only torch, tokenizers,
sacrebleu, pyyaml and safetensors, so it runs on a bare GPU image (no Prefect, MLflow, DuckDB or polars): it does
the work of ``corpusforge seq2seq train ... --preset P`` step by step with the same code (the corpus stage's ``lm``
cleaning, i.e. NFC and whitespace; the tokenizer stage's joint BPE over both fields with the preset's roles; the
family's model, the seq2seq objective and the one trainer; the evaluation step's decoding and sacreBLEU scoring),
and times each part.

    python benchmarks/seq2seq_gpu.py multi30k-gru-bahdanau --data ../shared/corpora/multi30k
    python benchmarks/seq2seq_gpu.py multi30k-transformer --kv-cache      # also times a decoded token with and
                                                                          # without the decoder's key/value cache
    add --smoke for a seconds-long CPU run of the same code path; --set train.max_iters=N shortens a run.

Prints, last, one line of JSON: BLEU (sacreBLEU 13a, cased), chrF and the lowercased tokenized BLEU of the PyTorch
tutorials (bentrevett/pytorch-seq2seq: the anchors of issue 32), greedy and beam, on val and test2016; validation
and test perplexity; train seconds and target tokens/s; decode sentences/s.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import unicodedata
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parent.parent


sys.path.append(str(Path(__file__).resolve().parent))  # benchmarks/bare.py, however this script is run
from bare import apply_set, map_checkout  # noqa: E402

map_checkout(extra=(("corpusforge.tasks", "tasks"), ("corpusforge.tasks.seq2seq", "tasks/seq2seq")))

from corpusforge.models.configs import TrainConfig  # noqa: E402
from corpusforge.models.decoding import beam_search, greedy  # noqa: E402
from corpusforge.models.family import families  # noqa: E402
from corpusforge.models.objectives import build, settings_from  # noqa: E402
from corpusforge.models.tokenization import make_tokenizer  # noqa: E402
from corpusforge.models.training import train  # noqa: E402
from corpusforge.models.zoo import build_model  # noqa: E402
from corpusforge.tasks.seq2seq.inference import score  # noqa: E402


def clean(line: str) -> str:
    """The corpus stage's ``lm`` cleaning preset for these files: NFC, whitespace runs to one space, stripped."""
    return " ".join(unicodedata.normalize("NFC", line).split())


def read_split(data: Path, stem: str, smoke: bool) -> tuple[list[str], list[str]]:
    de = (data / f"{stem}.de").read_text(encoding="utf-8").splitlines()
    en = (data / f"{stem}.en").read_text(encoding="utf-8").splitlines()
    if len(de) != len(en):
        raise SystemExit(f"{data}/{stem}: {len(de)} German and {len(en)} English lines")
    pairs = [(clean(a), clean(b)) for a, b in zip(de, en)]
    pairs = [p for p in pairs if p[0] and p[1]]
    if smoke:
        pairs = pairs[:300] if stem == "train" else pairs[:40]
    return [p[0] for p in pairs], [p[1] for p in pairs]


def load_preset(name: str) -> dict:
    import yaml

    path = Path(name) if name.endswith((".yaml", ".yml")) else REPO / "configs" / "seq2seq" / f"{name}.yaml"
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def decode(model, sources, bos, eos, pad_id, beam, length_penalty, max_len, batch=64):
    """Translate id lists (sorted by length, batched, as the evaluation step does); returns ids in input order."""
    from corpusforge.models.batching import pad

    device = next(model.parameters()).device
    order = sorted(range(len(sources)), key=lambda i: len(sources[i]))
    out = [None] * len(sources)
    for start in range(0, len(order), batch):
        chunk = order[start: start + batch]
        src, mask = pad([sources[i] for i in chunk], pad_id, model.cfg.max_len)
        src, mask = src.to(device), mask.to(device)
        if beam == 1:
            found = greedy(model, src, mask, bos, eos, max_len)
        else:
            found = beam_search(model, src, mask, bos, eos, beam, max_len, length_penalty)
        for i, ids in zip(chunk, found):
            out[i] = ids
    return out


def kv_cache_cost(model, sources, bos, eos, pad_id, max_len: int) -> dict:
    """Milliseconds per decoded token, greedy over the same batch, with the cache and recomputing the prefix."""
    from corpusforge.models.batching import pad

    device = next(model.parameters()).device
    src, mask = pad(sources, pad_id, model.cfg.max_len)
    src, mask = src.to(device), mask.to(device)
    out = {}
    # full float32 matmuls here (the trainer turns TF32 on): with TF32 the cached and the recomputed prefix round
    # differently, and a near tie between two tokens can then go either way
    tf32 = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    for label, use_cache in (("cached", True), ("uncached", False), ("cached_again", True)):
        if device.type == "cuda":
            torch.cuda.synchronize()
        started = time.perf_counter()
        ids = greedy(model, src, mask, bos, eos, max_len, use_cache=use_cache)
        if device.type == "cuda":
            torch.cuda.synchronize()
        seconds = time.perf_counter() - started
        tokens = sum(len(x) + 1 for x in ids)
        out[label] = {"ms_per_token": 1000 * seconds / tokens, "tokens": tokens, "seconds": seconds,
                      "ids_digest": hash(tuple(tuple(x) for x in ids))}
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = tf32
    out["same_tokens"] = out["cached"]["ids_digest"] == out["uncached"]["ids_digest"]
    for v in out.values():
        if isinstance(v, dict):
            v.pop("ids_digest")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("preset")
    ap.add_argument("--data", type=Path, default=Path(os.environ.get("MULTI30K_DIR", REPO.parent / "shared" / "corpora" / "multi30k")))
    ap.add_argument("--set", dest="sets", action="append", default=[], help="seq2seq section key=value")
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--kv-cache", action="store_true")
    ap.add_argument("--max-seconds", type=float, default=0.0, help="stop training at the first evaluation past "
                    "this many seconds (reported as truncated), then decode and score")
    ap.add_argument("--beams", default="1,5", help="comma-separated beam sizes to score (1 = greedy)")
    args = ap.parse_args()

    preset = load_preset(args.preset)
    section = preset["seq2seq"]
    apply_set(section, args.sets)
    if args.smoke:
        apply_set(section, ["train.max_iters=6", "train.eval_interval=3", "train.batch_size=16", "train.device=cpu",
                            "train.log_interval=3"])
    tok_cfg = preset["tokenizer"]
    wall = time.perf_counter()
    splits = {s: read_split(args.data, stem, args.smoke)
              for s, stem in (("train", "train"), ("valid", "val"), ("test", "test_2016_flickr"))}

    t0 = time.perf_counter()
    tok = make_tokenizer(tok_cfg.get("kind", "bpe"), "<unk>", "<|endoftext|>", (), (), "default",
                         tok_cfg.get("roles"))
    tok.train([t for pair in zip(*splits["train"]) for t in pair], vocab_size=int(tok_cfg["vocab_size"]),
              min_frequency=0)
    ids = {s: ([tok.encode(x) for x in de], [tok.encode(x) for x in en]) for s, (de, en) in splits.items()}
    tokenize_s = time.perf_counter() - t0
    roles = tok_cfg.get("roles") or {}
    special = {f"{r}_id": tok.token_to_id(roles[r]) for r in ("pad", "bos", "eos")}

    name = section["family"]
    spec = families()[name]
    mcfg = spec.config(**{**section.get("model", {}), "vocab_size": tok.vocab_size, **special})
    tcfg = TrainConfig(**section.get("train", {}))
    torch.manual_seed(tcfg.seed)
    model = build_model(name, mcfg)
    settings = settings_from(spec, section.get("objective") or {})
    objective = build(settings, mcfg, {"train": ids["train"], "valid": ids["valid"]})
    history = []

    class OutOfTime(Exception):
        pass

    def on_metrics(step, m):
        history.append({"step": step, **{k: float(v) for k, v in m.items() if isinstance(v, (int, float))}})
        if "val_loss" in m or step % 200 == 0:
            print(json.dumps({"step": step, "s": round(time.perf_counter() - t0, 1),
                              **{k: round(float(v), 4) for k, v in m.items() if isinstance(v, (int, float))}}),
                  flush=True)
        if "val_loss" in m and args.max_seconds and time.perf_counter() - t0 > args.max_seconds \
                and step < tcfg.max_iters:
            raise OutOfTime  # the weights are those just evaluated (not the best kept so far)

    t0 = time.perf_counter()
    truncated = False
    try:
        result_metrics = train(model, objective, tcfg, on_metrics=on_metrics).metrics
    except OutOfTime:
        truncated = True
        result_metrics = {"steps": history[-1]["step"],
                          "tokens_per_s": next((h["tokens_per_s"] for h in reversed(history) if "tokens_per_s" in h), 0.0)}
    train_s = time.perf_counter() - t0
    device = next(model.parameters()).device
    test_obj = build(settings, mcfg, {"train": ids["train"], "test": ids["test"]})
    test = test_obj.evaluate(model, "test", tcfg.batch_size, 0, device)
    valid = objective.evaluate(model, "valid", tcfg.batch_size, 0, device)
    train_tokens = sum(len(t) + 1 for t in ids["train"][1])  # real target tokens per epoch (eos included)

    dec = section.get("decode", {})
    max_len = int(dec.get("max_len", 128))
    lp = float(dec.get("length_penalty", 0.6))
    scores = {}
    for beam in [int(b) for b in args.beams.split(",")]:
        for split in ("valid", "test"):
            t0 = time.perf_counter()
            out = decode(model, ids[split][0], special["bos_id"], special["eos_id"], special["pad_id"], beam, lp,
                         max_len)
            if device.type == "cuda":
                torch.cuda.synchronize()
            seconds = time.perf_counter() - t0
            hyps = [tok.decode(x) for x in out]
            s = score(hyps, splits[split][1])
            scores[f"{split}_beam{beam}"] = {k: (round(v, 2) if isinstance(v, float) else v) for k, v in s.items()
                                             if not k.endswith("signature")} | {
                "seconds": round(seconds, 2), "sentences_per_s": round(len(hyps) / seconds, 1),
                "sample": hyps[0][:200]}
            signatures = {k: v for k, v in s.items() if k.endswith("signature")}
    report = {"preset": args.preset, "family": name, "sets": args.sets, "device": torch.cuda.get_device_name()
              if device.type == "cuda" else "cpu", "params": sum(p.numel() for p in model.parameters()),
              "vocab_size": tok.vocab_size, "steps": int(result_metrics.get("steps", tcfg.max_iters)), "of_steps": tcfg.max_iters,
              "truncated": truncated,
              "epochs": round(int(result_metrics.get("steps", tcfg.max_iters)) * tcfg.batch_size
                              / len(ids["train"][0]), 2),
              "train_seconds": round(train_s, 1), "tokenize_seconds": round(tokenize_s, 1),
              "target_tokens_per_s": round(result_metrics.get("tokens_per_s", 0.0), 0),
              "train_target_tokens_per_epoch": train_tokens,
              "val_ppl": round(valid["ppl"], 2), "test_ppl": round(test["ppl"], 2),
              "best_val_loss": round(float(result_metrics.get("best_val_loss", valid["loss"])), 4),
              "scores": scores, "signatures": signatures}
    if args.kv_cache:
        batch = sorted(ids["test"][0], key=len)[-64:]
        report["kv_cache"] = kv_cache_cost(model, batch, special["bos_id"], special["eos_id"], special["pad_id"],
                                           max_len)
    report["wall_seconds"] = round(time.perf_counter() - wall, 1)
    print(json.dumps(report, ensure_ascii=False), flush=True)


if __name__ == "__main__":
    main()
