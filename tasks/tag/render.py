"""A tagged sentence for people to look at: coloured entity spans (or a tag under each word) in the run report,
and the same on a terminal (``corpusforge tag predict``)."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

# one colour per entity type (or part-of-speech tag), in the order they are first met
PALETTE = ("#8dd3c7", "#fdb462", "#bebada", "#fb8072", "#80b1d3", "#b3de69", "#fccde5", "#d9d9d9", "#bc80bd",
           "#ccebc5", "#ffed6f", "#a6cee3")
ANSI = (42, 43, 45, 41, 44, 46, 47, 100, 105, 102, 103, 104)


def _colours(keys) -> dict[str, int]:
    out: dict[str, int] = {}
    for k in keys:
        out.setdefault(k, len(out) % len(PALETTE))
    return out


def terminal(result: dict[str, Any], colour: bool = False) -> str:
    """One tagged text as a line: entity spans as ``[words]TYPE`` (coloured by type with ``colour``), other tags
    as ``word/TAG``."""
    words, tags, spans = result["words"], result["tags"], result.get("spans") or []
    if spans or all(t == "O" for t in tags):  # entity tags: the spans marked, the rest plain words
        colours = _colours(s["type"] for s in spans)
        parts, at = [], 0
        for s in spans:
            parts.extend(words[at:s["first_word"]])
            inner = " ".join(words[s["first_word"]:s["last_word"] + 1])
            piece = f"[{inner}]{s['type']}"
            parts.append(f"\x1b[30;{ANSI[colours[s['type']]]}m{piece}\x1b[0m" if colour else piece)
            at = s["last_word"] + 1
        parts.extend(words[at:])
        return " ".join(parts)
    colours = _colours(tags)
    return " ".join(f"{w}/\x1b[1;{ANSI[colours[t]] - 10}m{t}\x1b[0m" if colour else f"{w}/{t}"
                    for w, t in zip(words, tags))


def plot_tagged(example: dict[str, Any], png: Path, title: str) -> Path:
    """The sentence drawn word by word, wrapped to lines: each entity span on a coloured box with its type above
    (entity tags), or each word's tag under it on its tag's colour (other tags); where the gold tag differs, it is
    shown struck through beside the prediction."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    words, tags, gold = example["words"], example["tags"], example.get("gold")
    spans = example.get("spans") or []
    entity = bool(spans) or all(t == "O" or t[:2] in ("B-", "I-", "E-", "S-") for t in tags)
    colours = _colours([s["type"] for s in spans] if entity else tags)
    width_chars = 90
    lines, line, used = [], [], 0
    for i, w in enumerate(words):
        size = max(len(w), 0 if entity else len(tags[i])) + 2
        if line and used + size > width_chars:
            lines.append(line)
            line, used = [], 0
        line.append((i, used, size))
        used += size
    if line:
        lines.append(line)
    fig, ax = plt.subplots(figsize=(11, 0.9 + 0.8 * len(lines)))
    ax.set_xlim(0, width_chars)
    ax.set_ylim(-len(lines) * 2, 1)
    ax.axis("off")
    owner = {i: s for s in spans for i in range(s["first_word"], s["last_word"] + 1)}
    for row, items in enumerate(lines):
        y = -row * 2
        for i, x, size in items:
            if entity and i in owner:
                s = owner[i]
                ax.add_patch(plt.Rectangle((x - 0.3, y - 0.45), size - 0.4, 0.9, color=PALETTE[colours[s["type"]]],
                                           alpha=0.85, linewidth=0))
                if i == s["first_word"]:
                    ax.text(x, y + 0.55, s["type"], fontsize=7, family="monospace", va="bottom", fontweight="bold")
            ax.text(x, y, words[i], fontsize=10, family="monospace", va="center")
            if not entity:
                ax.text(x, y - 0.85, tags[i], fontsize=7, family="monospace", va="center",
                        bbox={"facecolor": PALETTE[colours[tags[i]]], "edgecolor": "none", "pad": 1.5})
            if gold is not None and gold[i] != tags[i] and not entity:
                ax.text(x + len(tags[i]) + 0.6, y - 0.85, gold[i], fontsize=7, family="monospace", va="center",
                        color="#b00000")
    ax.set_title(title, fontsize=10, loc="left")
    fig.tight_layout()
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=110, metadata={"Software": None})
    plt.close(fig)
    return png


def report_plots(model_dir: Path, scratch: Path) -> list[tuple[str, Path]]:
    """(caption, png) for the run report: the first validation sentence as the model tagged it."""
    try:
        data = json.loads((Path(model_dir) / "evaluation.json").read_text(encoding="utf-8"))
        example = data.get("example")
        if not example:
            return []
        wrong = sum(g != p for g, p in zip(example.get("gold") or example["tags"], example["tags"]))
        png = plot_tagged(example, Path(scratch) / "tagged_example.png",
                          f"A validation sentence as tagged ({wrong} of {len(example['words'])} words differ from the "
                          "gold tags; red: the gold tag where it differs)")
        return [("A tagged validation sentence", png)]
    except Exception as exc:  # noqa: BLE001 - the report goes on without this plot
        logging.getLogger("corpusforge").warning("no tagged example for the run report: %s", exc)
        return []
