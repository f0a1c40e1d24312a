"""The unlabelled English text the QA benchmark's BERT is pre-trained on (`lm train --preset bert-qa-small`), made
from ../shared corpora that are not the QA data: UD English-EWT's training sentences (web text: blogs, reviews,
e-mail, answers; CC BY-SA 4.0) grouped by document, and SciTLDR's training abstracts (CC BY 4.0). Each document's
sentences are joined into lines of at most ``--words`` words (sentences kept whole), one passage per line, so BERT's
sentence pairs ([CLS] A [SEP] B [SEP], neighbouring lines) fill a block of about 192 tokens the way a question and a
passage fill the reader's. XQuAD's paragraphs are left out unless ``--with-contexts`` (then say so beside any
figure: the reader's test passages would have been seen, without their questions).

    python benchmarks/qa_pretraining_text.py OUT.txt [--words 80] [--with-contexts]
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

SHARED = Path(__file__).resolve().parents[2] / "shared" / "corpora"


def chunks(sentences: list[str], words: int) -> list[str]:
    out, line, n = [], [], 0
    for s in sentences:
        k = len(s.split())
        if line and n + k > words:
            out.append(" ".join(line))
            line, n = [], 0
        line.append(s)
        n += k
    if line:
        out.append(" ".join(line))
    return out


def ewt_documents(path: Path) -> list[list[str]]:
    docs: list[list[str]] = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("# newdoc"):
            docs.append([])
        elif line.startswith("# text = "):
            if not docs:
                docs.append([])
            docs[-1].append(line[len("# text = "):].strip())
    return [d for d in docs if d]


def scitldr_documents(path: Path) -> list[list[str]]:
    return [[s.strip() for s in json.loads(line)["source"] if s.strip()]
            for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path)
    parser.add_argument("--words", type=int, default=80)
    parser.add_argument("--with-contexts", action="store_true")
    args = parser.parse_args()
    docs = ewt_documents(SHARED / "ud-ewt" / "en_ewt-ud-train.conllu")
    docs += scitldr_documents(SHARED / "scitldr" / "train.jsonl")
    if args.with_contexts:
        data = json.loads((SHARED / "xquad-en" / "dev.json").read_text(encoding="utf-8"))
        docs += [re.split(r"(?<=[.!?])\s+", p["context"]) for a in data["data"] for p in a["paragraphs"]]
    lines = [line for d in docs for line in chunks(d, args.words)]
    args.out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"{args.out}: {len(docs)} documents, {len(lines)} lines, {sum(len(x.split()) for x in lines):,} words")


if __name__ == "__main__":
    main()
