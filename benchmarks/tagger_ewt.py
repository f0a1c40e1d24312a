"""The BiLSTM tagger family on UD English-EWT UPOS, trained in-process on the model layer alone (issue 46): the
readers (corpusforge.storage.tagged), a word vocabulary of the training words seen at least ``--min-count`` times
(the rest read as <unk>, their characters kept), the character vocabulary of the training words, the tagging
objective and the one trainer; dev accuracy against the most-frequent-tag baseline computed on the same split.

This is the model before the `tag` stage exists: no corpus cleaning, no store, no MLflow. The anchor is the
published figure (bilty, Plank et al. 2016: 94.6 UPOS on the EWT test set, word and character features, no
pre-trained vectors; we report dev, the test set is not in ../shared).

Command: .venv/bin/python benchmarks/tagger_ewt.py [--head softmax|crf] [--epochs 10] [--threads 2]
"""

from __future__ import annotations

import argparse
import collections
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import SHARED, emit, header, row  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--head", choices=("softmax", "crf"), default="softmax")
    parser.add_argument("--epochs", type=float, default=10.0, help="passes over the training sentences")
    parser.add_argument("--min-count", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--batch", type=int, default=32)
    args = parser.parse_args()

    from corpusforge.models.configs import TrainConfig  # corpusforge before torch: its OpenMP threads then wait passively
    from corpusforge.models.objectives import build, default_settings
    from corpusforge.models.family import family
    from corpusforge.models.tag_eval import most_frequent_tag, token_accuracy
    from corpusforge.models.tagger.config import TaggerConfig
    from corpusforge.models.training import train
    from corpusforge.models.zoo import build_model
    from corpusforge.storage.tagged import TagColumns, read_conllu

    import torch

    torch.set_num_threads(args.threads)
    header(f"BiLSTM tagger ({args.head}) on EWT UPOS, {args.epochs} epochs, {args.threads} threads")
    ewt = SHARED / "corpora" / "ud-ewt"
    splits = {s: [r for r in read_conllu(ewt / f"en_ewt-ud-{s}.conllu", TagColumns({"upos": "upos"})) if r.ok]
              for s in ("train", "dev")}
    counts = collections.Counter(w for r in splits["train"] for w in r.fields["tokens"])
    words = ["<pad>", "<unk>"] + sorted(w for w, c in counts.items() if c >= args.min_count)
    word_id = {w: i for i, w in enumerate(words)}
    chars = ["<pad>", "<unk>"] + sorted({c for w in counts for c in w})
    char_id = {c: i for i, c in enumerate(chars)}
    tags = sorted({t for r in splits["train"] for t in r.fields["upos"]})
    tag_id = {t: i for i, t in enumerate(tags)}

    def encode(records):
        sentences = [([word_id.get(w, 1) for w in r.fields["tokens"]],
                      [[char_id.get(c, 1) for c in w] for w in r.fields["tokens"]]) for r in records]
        return sentences, [[tag_id[t] for t in r.fields["upos"]] for r in records]

    # the most-frequent-tag baseline (corpusforge.models.tag_eval), on the same split
    dev_words, dev_tags = [r.fields["tokens"] for r in splits["dev"]], [r.fields["upos"] for r in splits["dev"]]
    baseline = token_accuracy(dev_tags, most_frequent_tag([r.fields["tokens"] for r in splits["train"]],
                                                          [r.fields["upos"] for r in splits["train"]], dev_words))
    words_in_dev = sum(len(t) for t in dev_tags)

    cfg = TaggerConfig(vocab_size=len(words), pad_id=0, n_tags=len(tags), n_chars=len(chars), head=args.head)
    torch.manual_seed(0)
    model = build_model("tagger", cfg)
    data = {"train": encode(splits["train"]), "valid": encode(splits["dev"])}
    objective = build(default_settings(family("tagger")), cfg, data)
    print(f"   train {len(splits['train'])} sentences, dev {len(splits['dev'])} ({words_in_dev} words); vocabulary "
          f"{len(words)} words, {len(chars)} characters, {len(tags)} tags; {sum(p.numel() for p in model.parameters()):,} "
          f"parameters; most-frequent-tag baseline on dev {baseline:.4f}", flush=True)
    start = time.perf_counter()
    result = train(model, objective, TrainConfig(
        max_iters=int(args.epochs * len(splits["train"]) / args.batch), batch_size=args.batch, lr=2e-3, min_lr=2e-4,
        warmup_iters=100, eval_interval=400, eval_iters=0, weight_decay=0.0, grad_clip=5.0, device="cpu",
        log_interval=400),
        on_metrics=lambda step, m: print(f"   step {step}: " + ", ".join(f"{k} {v:.4f}" for k, v in m.items()
                                                                       if k in ("train_loss", "loss", "val_loss", "val_accuracy")),
                                         flush=True))
    seconds = time.perf_counter() - start
    accuracy = result.metrics["val_accuracy"]
    print(f"   dev UPOS accuracy {accuracy:.4f} (best val_loss's weights; step {result.step}, {seconds / 60:.1f} min); "
          f"baseline {baseline:.4f}")
    emit("tagger_ewt", [row("tagger_ewt", f"EWT UPOS dev, BiLSTM {args.head}", "accuracy", accuracy, 0.946,
                            target="bilty 94.6 (test set)", met=accuracy >= 0.946,
                            note=f"most-frequent-tag baseline {baseline:.4f}; {seconds / 60:.1f} min")],
         epochs=args.epochs, head=args.head)


if __name__ == "__main__":
    main()
