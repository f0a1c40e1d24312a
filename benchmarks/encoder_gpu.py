"""Issue 33's encoder figures on one GPU, run by benchmarks/encoder_gpu.sh. Needs only torch, tokenizers, numpy,
scikit-learn, pyyaml and safetensors, so it runs on a bare GPU image (no Prefect, MLflow, DuckDB, polars or gensim):
it does the work of the CLI's presets step by step with the same code (the corpus stage's ``lm`` cleaning, i.e. NFC
and whitespace; the tokenizer stage's tokenizers with the presets' roles; the families' models, their objectives
and the one trainer), and times each part. The word2vec vectors come from benchmarks/encoder_gpu_prep.py (run on
a machine with gensim; it also gathers the data files into ``.gpu-data``, which the GPU machine gets carried).

    python benchmarks/encoder_gpu.py bilstm [--variant NAME]...   # sst2-bilstm, and variants of it
    python benchmarks/encoder_gpu.py bert [--pre-set k=v]... [--more-text] [--max-seconds S]
        # bert-mlm-small pre-training, then sst2-bert-scratch and sst2-bert-finetune (the classifier takes the
        # pre-trained shape), a linear probe of the pre-trained encoder's mean-pooled vectors, and SimCSE
        # (the siamese objective on each SST-2 train sentence paired with itself: dropout makes the two views)
        # from the pre-trained encoder, then its linear probe
    python benchmarks/encoder_gpu.py sbert [--set k=v]...       # the sentence-embeddings-multi30k SBERT:
        # Multi30k test2016 retrieval, and a linear probe of its vectors on SST-2
    python benchmarks/encoder_gpu.py profile [--pre-set k=v]... [--steps 30] [--compile]
        # where a BERT pre-training step's time goes (2026-11-28 on an H100: 27 steps/s, 0.5% MFU for 6 x 256):
        # building the batches alone, then the synchronised forward + backward + AdamW step, then torch.profiler's
        # top operators by host and by device time
    add --smoke for a seconds-long CPU run of the same code path.

Each prints progress lines and, last, one line of JSON (record it in benchmarks/RESULTS.md).
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import json
import os
import sys
import time
import unicodedata
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parent.parent
DATA = Path(os.environ.get("ENCODER_DATA", REPO / ".gpu-data"))


sys.path.append(str(Path(__file__).resolve().parent))  # benchmarks/bare.py, however this script is run
from bare import apply_set, map_checkout  # noqa: E402

map_checkout()

from corpusforge.models.configs import TrainConfig  # noqa: E402
from corpusforge.models.family import families  # noqa: E402
from corpusforge.models.objectives import build, settings_from  # noqa: E402
from corpusforge.models.tokenization import make_tokenizer  # noqa: E402
from corpusforge.models.training import train  # noqa: E402
from corpusforge.models.zoo import build_model, load_weights  # noqa: E402

SMOKE = False
WALL = time.perf_counter()


def log(**kv) -> None:
    print(json.dumps({"s": round(time.perf_counter() - WALL, 1), **kv}), flush=True)


def clean(line: str) -> str:
    """The corpus stage's ``lm`` cleaning preset: NFC, whitespace runs to one space, stripped."""
    return " ".join(unicodedata.normalize("NFC", line).split())


def read_sst2(name: str) -> tuple[list[str], list[int]]:
    with open(DATA / "sst2" / name, encoding="utf-8", newline="") as fh:
        rows = [(clean(r["sentence"]), int(r["label"])) for r in csv.DictReader(fh, dialect="excel-tab")]
    rows = [r for r in rows if r[0]]
    if SMOKE:
        rows = rows[:400] if name == "train.tsv" else rows[:80]
    return [r[0] for r in rows], [r[1] for r in rows]


def read_lines(rel: str) -> list[str]:
    lines = [clean(x) for x in (DATA / rel).read_text(encoding="utf-8").splitlines()]
    lines = [x for x in lines if x]
    return lines[:300] if SMOKE else lines


def load_preset(rel: str) -> dict:
    import yaml

    return yaml.safe_load((REPO / "configs" / rel).read_text(encoding="utf-8"))


def smoke_train(train_section: dict) -> None:
    if SMOKE:
        apply_set(train_section, ["max_iters=8", "eval_interval=4", "batch_size=16", "device=cpu", "log_interval=4",
                                  "warmup_iters=2"])


def train_tokenizer(tok_cfg: dict, texts: list[str], roles: dict | None = None):
    tok = make_tokenizer(tok_cfg.get("kind", "bpe"), tok_cfg.get("unk_token", "<unk>"),
                         tok_cfg.get("eot_token", "<|endoftext|>"), (), tok_cfg.get("normalizers", ()),
                         tok_cfg.get("pre_tokenizer", "default"), {**(roles or {}), **(tok_cfg.get("roles") or {})})
    tok.train(texts, vocab_size=int(tok_cfg["vocab_size"]), min_frequency=int(tok_cfg.get("min_frequency", 0)))
    return tok


def model_config(family_name: str, model: dict, tok, **extra):
    """The family's config with what the tokenizer sets (tasks.config.derived_model_config's work)."""
    spec = families()[family_name]
    ids = tok.role_ids
    derived = {name: next(ids[r] for r in roles if ids.get(r) is not None) for name, roles in spec.derived.items()}
    return spec.config(**{**model, **extra, "vocab_size": tok.vocab_size, **derived})


def fit(model, objective, tcfg: TrainConfig, label: str, max_seconds: float = 0.0) -> dict:
    """The one trainer, with progress lines; ``max_seconds`` ends it at the first evaluation past that (the weights
    are then those of the best evaluation so far when keep_best, as the trainer ends)."""
    t0 = time.perf_counter()
    seen = {"tokens_per_s": 0.0}

    class OutOfTime(Exception):
        pass

    def on_metrics(step, m):
        nums = {k: round(float(v), 4) for k, v in m.items() if isinstance(v, (int, float))}
        if "tokens_per_s" in nums:
            seen["tokens_per_s"] = nums["tokens_per_s"]
        if any(k.startswith("val_") for k in nums) or step % 500 == 0:
            log(run=label, step=step, train_s=round(time.perf_counter() - t0, 1), **nums)
        if max_seconds and any(k.startswith("val_") for k in nums) and time.perf_counter() - t0 > max_seconds \
                and step < tcfg.max_iters:
            seen["stopped_at"] = step
            raise OutOfTime

    torch.manual_seed(tcfg.seed)
    try:
        result = train(model, objective, tcfg, on_metrics=on_metrics)
        out = {"steps": result.step, "best_val_loss": round(result.best_val_loss, 4),
               "tokens_per_s": round(float(result.metrics.get("tokens_per_s", seen["tokens_per_s"])))}
    except OutOfTime:
        out = {"steps": seen["stopped_at"], "truncated": True, "tokens_per_s": round(seen["tokens_per_s"])}
    out["of_steps"] = tcfg.max_iters
    out["train_seconds"] = round(time.perf_counter() - t0, 1)
    return out


@torch.no_grad()
def predict(model, sequences: list[list[int]], pad_id: int, batch: int = 256) -> np.ndarray:
    from corpusforge.models.batching import pad

    device = next(model.parameters()).device
    model.eval()
    out = []
    for start in range(0, len(sequences), batch):
        ids, mask = pad(sequences[start: start + batch], pad_id)
        out.append(model(ids.to(device), mask.to(device)).float().argmax(-1).cpu().numpy())
    model.train()
    return np.concatenate(out)


def scores(pred: np.ndarray, gold: list[int]) -> dict:
    gold_a = np.asarray(gold)
    f1s = []
    for c in sorted(set(gold)):
        tp = int(((pred == c) & (gold_a == c)).sum())
        p = tp / max(int((pred == c).sum()), 1)
        r = tp / max(int((gold_a == c).sum()), 1)
        f1s.append(2 * p * r / (p + r) if p + r else 0.0)
    return {"accuracy": round(float((pred == gold_a).mean()), 4), "f1": round(float(np.mean(f1s)), 4)}


@torch.no_grad()
def vectors(model, sequences: list[list[int]], pad_id: int, pooling: str = "mean", batch: int = 512) -> np.ndarray:
    """One vector per sequence: a sentence encoder's output, or a bert body's states pooled over the real tokens."""
    from corpusforge.models.batching import pad
    from corpusforge.models.pooling import pool

    device = next(model.parameters()).device
    model.eval()
    order = sorted(range(len(sequences)), key=lambda i: len(sequences[i]))
    out = np.zeros((len(sequences), model.cfg.n_embd), dtype=np.float32)
    for start in range(0, len(order), batch):
        chunk = order[start: start + batch]
        ids, mask = pad([sequences[i] for i in chunk], pad_id)
        ids, mask = ids.to(device), mask.to(device).to(torch.bool)
        if hasattr(model, "lm_head"):  # a pre-trained bert: its body's last states
            states, _ = model.encode(ids, None, mask)
            v = pool(states, mask, pooling)
        else:
            v = model(ids, mask)
        out[chunk] = v.float().cpu().numpy()
    model.train()
    return out


def linear_probe(train_x: np.ndarray, train_y: list[int], dev_x: np.ndarray, dev_y: list[int]) -> dict:
    """benchmarks/sentence_probe.py's probe: standardised features, scikit-learn's logistic regression."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.preprocessing import StandardScaler

    t0 = time.perf_counter()
    scaler = StandardScaler().fit(train_x)
    clf = LogisticRegression(max_iter=1000).fit(scaler.transform(train_x), train_y)
    pred = clf.predict(scaler.transform(dev_x))
    return {**scores(np.asarray(pred), dev_y), "seconds": round(time.perf_counter() - t0, 1)}


# --- the BiLSTM -------------------------------------------------------------------------------------------------

BILSTM_VARIANTS = {
    "preset": [],
    "w2v-more": ["vectors=w2v-more"],
    "two-layers": ["model.n_layer=2"],
    "mean-pool": ["model.pooling=mean"],
    "hidden-512": ["model.n_hidden=512"],
    "lr-2e-3": ["train.lr=2.0e-3"],
    "epochs-8": ["train.max_iters=8400"],
    "w2v-more-two-layers": ["vectors=w2v-more", "model.n_layer=2"],
    # the three that helped on the H100 (2026-11-28), together
    "epochs-8-hidden-512": ["train.max_iters=8400", "model.n_hidden=512"],
    "epochs-8-hidden-512-w2v-more": ["train.max_iters=8400", "model.n_hidden=512", "vectors=w2v-more"],
}


def run_bilstm(args) -> dict:
    preset = load_preset("classify/sst2-bilstm.yaml")
    (train_x, train_y), (dev_x, dev_y) = read_sst2("train.tsv"), read_sst2("dev.tsv")
    t0 = time.perf_counter()
    tok = train_tokenizer(preset["tokenizer"], train_x)
    train_ids, dev_ids = tok.encode_batch(train_x), tok.encode_batch(dev_x)
    tokenize_s = time.perf_counter() - t0
    results = {}
    for name in args.variant or ["preset"]:
        section = json.loads(json.dumps(preset["classify"]))
        sets = list(BILSTM_VARIANTS[name])
        vec_name = next((s.split("=", 1)[1] for s in sets if s.startswith("vectors=")), "w2v-sst2")
        apply_set(section, [s for s in sets if not s.startswith("vectors=")])
        smoke_train(section["train"])
        words = (DATA / f"{vec_name}.vocab.txt").read_text(encoding="utf-8").split("\n")[:-1]
        table = np.load(DATA / f"{vec_name}.npy").astype(np.float32)
        index = {w: i for i, w in enumerate(words)}
        mcfg = model_config("rnn_classifier", {**section["model"], "n_embd": table.shape[1]}, tok, n_classes=2)
        tcfg = TrainConfig(**section["train"])
        torch.manual_seed(tcfg.seed)
        model = build_model("rnn_classifier", mcfg)
        emb = model.get_input_embeddings()
        found = 0
        with torch.no_grad():  # tasks.classify.build.init_embeddings's work
            for i in range(min(tok.vocab_size, emb.weight.shape[0])):
                token = tok.id_to_token(i)
                j = index.get(token, index.get(token.lower()))
                if j is not None:
                    emb.weight[i] = torch.from_numpy(table[j])
                    found += 1
        prepare = getattr(model, "prepare", lambda ids: list(ids))
        splits = {"train": ([prepare(x) for x in train_ids], train_y), "valid": ([prepare(x) for x in dev_ids], dev_y)}
        objective = build(settings_from(families()["rnn_classifier"], {}), mcfg, splits)
        run = fit(model, objective, tcfg, f"bilstm-{name}")
        run.update(scores(predict(model, splits["valid"][0], mcfg.pad_id), dev_y),
                   embeddings_found=found, vectors=vec_name, sets=sets,
                   params=sum(p.numel() for p in model.parameters()))
        results[name] = run
        log(run=f"bilstm-{name}", result=run)
    return {"what": "bilstm", "tokenize_seconds": round(tokenize_s, 1), "vocab_size": tok.vocab_size,
            "variants": results}


# --- BERT: pre-training, fine-tuning, from scratch, probes, SimCSE -----------------------------------------------


SHAPE = ("n_layer", "n_head", "n_embd", "block_size", "bias", "positional", "norm", "activation", "type_vocab_size")


def shape_of(pre_model: dict) -> dict:
    """The pre-trained BERT's shape fields, which a model that starts from it takes (tasks.encoded.shape_from)."""
    return {k: v for k, v in pre_model.items() if k in SHAPE}


def bert_classifier(pre_model: dict, tok, section: dict):
    return model_config("bert_classifier", {**section["model"], **shape_of(pre_model)}, tok, n_classes=2)


def classify_run(label: str, preset_rel: str, tok, pre_model: dict, init_state: dict | None, data, ft_sets) -> dict:
    (train_x, train_y), (dev_x, dev_y) = data
    section = load_preset(preset_rel)["classify"]
    apply_set(section, ft_sets)
    smoke_train(section["train"])
    mcfg = bert_classifier(pre_model, tok, section)
    tcfg = TrainConfig(**section["train"])
    torch.manual_seed(tcfg.seed)
    model = build_model("bert_classifier", mcfg)
    loaded = None
    if init_state is not None:
        report = load_weights(model, init_state)
        loaded = {"loaded": len(report["loaded"]), "missing": report["missing"], "mismatched": report["mismatched"]}
    splits = {"train": ([model.prepare(x) for x in tok.encode_batch(train_x)], train_y),
              "valid": ([model.prepare(x) for x in tok.encode_batch(dev_x)], dev_y)}
    objective = build(settings_from(families()["bert_classifier"], {}), mcfg, splits)
    run = fit(model, objective, tcfg, label)
    run.update(scores(predict(model, splits["valid"][0], mcfg.pad_id), dev_y), init=loaded,
               params=sum(p.numel() for p in model.parameters()))
    log(run=label, result=run)
    return run


def run_bert(args) -> dict:
    preset = load_preset("lm/bert-mlm-small.yaml")
    section = preset["lm"]
    apply_set(section, args.pre_set)
    smoke_train(section["train"])
    sst_train, sst_dev = read_sst2("train.tsv"), read_sst2("dev.tsv")
    texts = list(sst_train[0]) + read_lines("ptb/ptb.train.txt")
    if args.more_text:
        texts += read_lines("multi30k/train.en") + read_lines("tinyshakespeare/input.txt")
    t0 = time.perf_counter()
    rng = np.random.default_rng(0)  # the corpus stage's split: 1% of the documents held out
    held = rng.random(len(texts)) < float(preset["corpus"]["split"]["valid"])
    tok = train_tokenizer(preset["tokenizer"], [t for t, h in zip(texts, held) if not h])
    streams = {"train": [], "valid": []}
    for ids, h in zip(tok.encode_batch(texts), held):
        streams["valid" if h else "train"].extend([*ids, tok.eot_id])
    splits = {k: np.asarray(v, dtype=np.int32) for k, v in streams.items()}
    tokenize_s = time.perf_counter() - t0
    mcfg = model_config("bert", section["model"], tok)
    tcfg = TrainConfig(**section["train"])
    torch.manual_seed(tcfg.seed)
    model = build_model("bert", mcfg)
    objective = build(settings_from(families()["bert"], section.get("objective") or {}), mcfg, splits)
    pre = fit(model, objective, tcfg, "bert-mlm", args.max_seconds)
    device = next(model.parameters()).device
    pre.update({k: round(float(v), 4) for k, v in objective.evaluate(model, "valid", tcfg.batch_size, 0, device).items()})
    pre.update(params=sum(p.numel() for p in model.parameters()), train_tokens=int(len(splits["train"])),
               documents=len(texts), model=section["model"], train=section["train"])
    log(run="bert-mlm", result=pre)
    state = {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}
    out = {"what": "bert", "more_text": args.more_text, "tokenize_seconds": round(tokenize_s, 1), "pretrain": pre}

    # a linear probe of the pre-trained encoder's mean-pooled last states (no fine-tuning)
    prep = lambda ids: [mcfg.cls_id, *ids[: mcfg.block_size - 2], mcfg.sep_id]  # noqa: E731
    tr = [prep(x) for x in tok.encode_batch(sst_train[0])]
    dv = [prep(x) for x in tok.encode_batch(sst_dev[0])]
    out["probe_pretrained_mean"] = linear_probe(vectors(model, tr, mcfg.pad_id), sst_train[1],
                                                vectors(model, dv, mcfg.pad_id), sst_dev[1])
    log(run="probe-pretrained", result=out["probe_pretrained_mean"])
    del model
    out["scratch"] = classify_run("bert-scratch", "classify/sst2-bert-scratch.yaml", tok, section["model"], None,
                                  (sst_train, sst_dev), args.ft_set)
    out["finetune"] = classify_run("bert-finetune", "classify/sst2-bert-finetune.yaml", tok, section["model"], state,
                                   (sst_train, sst_dev), args.ft_set)
    out["finetune_minus_scratch"] = round(out["finetune"]["accuracy"] - out["scratch"]["accuracy"], 4)

    # SimCSE (Gao et al. 2021, unsupervised): each SST-2 train sentence paired with itself, the in-batch contrastive
    # objective of the sbert family; dropout gives the two views. From the pre-trained encoder.
    sb = load_preset("sentence-embeddings-multi30k.yaml")["sentence_embeddings"]
    apply_set(sb, ["train.max_iters=1000", "train.eval_interval=250", "train.lr=3.0e-5", "train.min_lr=3.0e-6",
                   "train.batch_size=128", "objective.scale=20.0", *args.simcse_set])
    smoke_train(sb["train"])
    scfg = model_config("sbert", {**sb["model"], **shape_of(section["model"])}, tok)
    stcfg = TrainConfig(**sb["train"])
    torch.manual_seed(stcfg.seed)
    enc = build_model("sbert", scfg)
    load_weights(enc, state)
    n_valid = min(2000, len(tr) // 10)
    pairs = {"train": (tr[n_valid:], tr[n_valid:]), "valid": (tr[:n_valid], tr[:n_valid])}
    simcse_objective = build(settings_from(families()["sbert"], sb.get("objective") or {}), scfg, pairs)
    simcse = fit(enc, simcse_objective, stcfg, "simcse")
    simcse["probe"] = linear_probe(vectors(enc, tr, scfg.pad_id), sst_train[1], vectors(enc, dv, scfg.pad_id),
                                   sst_dev[1])
    out["simcse"] = simcse
    log(run="simcse", result=simcse)
    return out


# --- SBERT on Multi30k ------------------------------------------------------------------------------------------


def run_sbert(args) -> dict:
    from corpusforge.models.objectives import retrieval_scores

    preset = load_preset("sentence-embeddings-multi30k.yaml")
    section = preset["sentence_embeddings"]
    apply_set(section, args.set)
    smoke_train(section["train"])
    data = {split: (read_lines(f"multi30k/{stem}.en"), read_lines(f"multi30k/{stem}.de"))
            for split, stem in (("train", "train"), ("valid", "val"), ("test", "test_2016_flickr"))}
    t0 = time.perf_counter()
    tok = train_tokenizer(preset["tokenizer"], [t for pair in zip(*data["train"]) for t in pair],
                          roles={"cls": "[CLS]", "sep": "[SEP]", "pad": "[PAD]"})
    mcfg = model_config("sbert", section["model"], tok)
    torch.manual_seed(1337)
    model = build_model("sbert", mcfg)
    ids = {s: ([model.prepare(x) for x in tok.encode_batch(en)], [model.prepare(x) for x in tok.encode_batch(de)])
           for s, (en, de) in data.items()}
    tokenize_s = time.perf_counter() - t0
    tcfg = TrainConfig(**section["train"])
    settings = settings_from(families()["sbert"], section.get("objective") or {})
    run = fit(model, build(settings, mcfg, {"train": ids["train"], "valid": ids["valid"]}), tcfg, "sbert")
    device = next(model.parameters()).device
    ea = torch.from_numpy(vectors(model, ids["test"][0], mcfg.pad_id)).to(device)
    eb = torch.from_numpy(vectors(model, ids["test"][1], mcfg.pad_id)).to(device)
    run["test_en_to_de"] = {k: round(v, 4) for k, v in retrieval_scores(ea, eb).items()}
    run["test_de_to_en"] = {k: round(v, 4) for k, v in retrieval_scores(eb, ea).items()}
    sst_train, sst_dev = read_sst2("train.tsv"), read_sst2("dev.tsv")
    tr = [model.prepare(x) for x in tok.encode_batch(sst_train[0])]
    dv = [model.prepare(x) for x in tok.encode_batch(sst_dev[0])]
    run["sst2_probe"] = linear_probe(vectors(model, tr, mcfg.pad_id), sst_train[1], vectors(model, dv, mcfg.pad_id),
                                     sst_dev[1])
    run.update(params=sum(p.numel() for p in model.parameters()), tokenize_seconds=round(tokenize_s, 1),
               sets=args.set)
    return {"what": "sbert", **run}


def run_profile(args) -> dict:
    """Time one BERT pre-training step's parts on the bert-mlm-small data (SST-2 train + PTB train): the batch
    builder alone; the step itself (the trainer's order: batch to the device, autocast forward and loss, backward,
    clip, AdamW), synchronised; then torch.profiler over the same steps."""
    from torch.profiler import ProfilerActivity, profile

    preset = load_preset("lm/bert-mlm-small.yaml")
    section = preset["lm"]
    apply_set(section, args.pre_set)
    smoke_train(section["train"])
    texts = read_sst2("train.tsv")[0] + read_lines("ptb/ptb.train.txt")
    tok = train_tokenizer(preset["tokenizer"], texts)
    stream = np.asarray([i for ids in tok.encode_batch(texts) for i in (*ids, tok.eot_id)], dtype=np.int32)
    mcfg = model_config("bert", section["model"], tok)
    tcfg = TrainConfig(**section["train"])
    device = torch.device("cuda" if torch.cuda.is_available() and tcfg.device != "cpu" else "cpu")
    torch.manual_seed(tcfg.seed)
    model = build_model("bert", mcfg).to(device)
    objective = build(settings_from(families()["bert"], section.get("objective") or {}), mcfg,
                      {"train": stream, "valid": stream[:100000]})
    objective.setup(model, tcfg.batch_size)
    loss_module = objective.loss_module(model)
    if args.compile:
        loss_module = torch.compile(loss_module)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=device.type == "cuda")
    amp = torch.autocast("cuda", dtype=torch.bfloat16) if device.type == "cuda" else torch.autocast("cpu", enabled=False)
    gen = torch.Generator().manual_seed(0)
    n = 4 if SMOKE else args.steps
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)

    t0 = time.perf_counter()
    batches = [objective.batch(i, gen) for i in range(3 * n)]
    build_ms = 1000 * (time.perf_counter() - t0) / (3 * n)

    def step(batch):
        tensors = [t.to(device, non_blocking=True) for t in batch.tensors]
        with amp:
            loss, _ = loss_module(*tensors, None)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    for b in batches[:n]:  # warm-up (and compilation)
        step(b)
    sync()
    t0 = time.perf_counter()
    for b in batches[n: 2 * n]:
        step(b)
    sync()
    step_ms = 1000 * (time.perf_counter() - t0) / n
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with profile(activities=activities) as prof:
        for b in batches[2 * n:]:
            step(b)
        sync()
    table = prof.key_averages()
    print(table.table(sort_by="self_cpu_time_total", row_limit=15), flush=True)
    if device.type == "cuda":
        print(table.table(sort_by="self_cuda_time_total", row_limit=15), flush=True)
    tokens = sum(int(b.tokens) for b in batches[n: 2 * n]) / n
    return {"what": "profile", "compile": args.compile, "steps": n, "batch_size": tcfg.batch_size,
            "params": sum(p.numel() for p in model.parameters()), "build_batch_ms": round(build_ms, 2),
            "step_ms": round(step_ms, 2), "steps_per_s": round(1000 / step_ms, 1),
            "tokens_per_s": round(tokens * 1000 / step_ms), "model": section["model"]}


def main() -> None:
    global SMOKE
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("what", choices=("bilstm", "bert", "sbert", "profile"))
    ap.add_argument("--steps", type=int, default=30, help="profile: steps to time (and as many to warm up)")
    ap.add_argument("--compile", action="store_true", help="profile: torch.compile the model and its loss")
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--variant", action="append", default=[], choices=sorted(BILSTM_VARIANTS))
    ap.add_argument("--pre-set", action="append", default=[], help="lm section key=value (bert pre-training)")
    ap.add_argument("--ft-set", action="append", default=[], help="classify section key=value (both BERT classifiers)")
    ap.add_argument("--simcse-set", action="append", default=[], help="sentence_embeddings section key=value (SimCSE)")
    ap.add_argument("--set", action="append", default=[], help="sentence_embeddings section key=value (sbert)")
    ap.add_argument("--more-text", action="store_true", help="pre-train also on Multi30k's English and Tiny "
                                                            "Shakespeare")
    ap.add_argument("--max-seconds", type=float, default=0.0, help="bert: end pre-training at the first evaluation "
                                                                   "past this many seconds (reported as truncated)")
    args = ap.parse_args()
    SMOKE = args.smoke
    if torch.cuda.is_available():
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
    out = {"bilstm": run_bilstm, "bert": run_bert, "sbert": run_sbert, "profile": run_profile}[args.what](args)
    out.update(device=torch.cuda.get_device_name() if torch.cuda.is_available() and not SMOKE else "cpu",
               torch=torch.__version__, wall_seconds=round(time.perf_counter() - WALL, 1), argv=sys.argv[1:])
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
