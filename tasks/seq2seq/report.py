"""The seq2seq stage's plots for the run report: the alignment heatmap of a translated validation sentence (the
attention of each output token over the source tokens; one panel per cross-attention head), drawn from the model
the evaluation scored (declared as the seq2seq_eval step's report_plots)."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any


def alignment_heatmap(model_dir: Path, text: str, png: Path, direction: str | None = None, beam: int = 1,
                      translator=None, **decode: Any) -> Path | tuple[Path, str]:
    """Translate ``text`` with the model in ``model_dir`` (beam 1: greedy) and draw its alignment heatmap into
    ``png``. Given a loaded ``translator``: ``(png, the translation drawn)``, decoded once with ``beam`` and
    ``decode`` (length_penalty, max_len), so a caller prints the sentence the picture shows."""
    from corpusforge.models.decoding import plot_alignment
    from corpusforge.tasks.seq2seq.inference import load_translator

    given = translator is not None
    translator = translator or load_translator(model_dir)
    d = translator.direction(direction)
    source, output, attention, translation = translator.alignment(text, beam=beam, direction=d.key, **decode)
    png.parent.mkdir(parents=True, exist_ok=True)
    how = "greedy" if beam == 1 else f"beam {beam}"
    drawn = Path(plot_alignment(attention, source, output, png, title=f"{translator.spec.get('family')} {d.key} "
                                                                      f"({how}): {text[:60]}"))
    return (drawn, translation) if given else drawn


def report_plots(eval_dir: Path, scratch: Path) -> list[tuple[str, Path]]:
    """(caption, png) for the run report: each learned direction's heatmap of its first validation sentence."""
    from corpusforge.models.family import family
    from corpusforge.storage.store import resolve_recorded

    try:
        scores = json.loads((Path(eval_dir) / "scores.json").read_text(encoding="utf-8"))
        if scores.get("task") in ("summarize", "extract"):
            return rouge_bars(scores, Path(scratch))
        if scores.get("task") == "denoise":
            return []  # a pre-training checkpoint: its loss curve (the model step's) is the plot
        model_dir = resolve_recorded(scores["model"], Path(eval_dir))
        spec = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
        if not family(spec["family"]).can("attention_maps"):
            return []
        samples = json.loads((Path(eval_dir) / "samples.json").read_text(encoding="utf-8"))
        plots = []
        for key, rows in samples.items():
            if rows:
                png = alignment_heatmap(model_dir, rows[0]["source"], Path(scratch) / f"alignment_{key}.png", key)
                plots.append((f"Alignment heatmap, {key} (greedy), of {rows[0]['source'][:80]!r}", png))
        return plots
    except Exception as exc:  # noqa: BLE001 - the report goes on without this plot
        logging.getLogger("corpusforge").warning("no alignment heatmap for the run report: %s", exc)
        return []


def rouge_bars(scores: dict[str, Any], scratch: Path) -> list[tuple[str, Path]]:
    """task summarize: ROUGE-1/2/L of the model between Lead-1 and the one-sentence oracle, one group of bars per
    metric, on the split the headline figures come from."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    split = "test" if "test" in scores["scores"] else "valid"
    key, s = next(iter(scores["scores"][split].items()))
    metrics, rows = ("rouge1", "rouge2", "rougeL"), (("Lead-1", "lead1_"), ("model", ""), ("oracle (1 sentence)", "oracle_"))
    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    width = 0.26
    for n, (label, prefix) in enumerate(rows):
        values = [s[prefix + m] for m in metrics]
        bars = ax.bar([i + (n - 1) * width for i in range(len(metrics))], values, width, label=label)
        ax.bar_label(bars, fmt="%.1f", fontsize=7)
    ax.set_xticks(range(len(metrics)), ["ROUGE-1", "ROUGE-2", "ROUGE-L"])
    ax.set_ylabel("F1 (0-100)")
    ax.set_title(f"{key} {split}: {s['documents']} documents, {scores['decode']['rouge_rule']} reference rule")
    ax.legend(fontsize=8)
    fig.tight_layout()
    png = scratch / f"rouge_{key}.png"
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=110)
    plt.close(fig)
    return [(f"ROUGE of the summaries ({split}) between Lead-1 and the extractive oracle", png)]


def highlights(eval_dir: Path) -> list[str]:
    """What the run's summary shows under the stage: each direction's scores and one example."""
    data = json.loads((Path(eval_dir) / "scores.json").read_text(encoding="utf-8"))
    if data.get("task") in ("summarize", "extract"):
        return _summary_highlights(Path(eval_dir), data)
    if data.get("task") == "denoise":
        m = data.get("metrics") or {}
        rows = json.loads((Path(eval_dir) / "samples.json").read_text(encoding="utf-8")).get("denoise") or []
        lines = [f"denoising pre-training: val loss {m.get('val_loss', float('nan')):.3f} nats/token "
                 f"(ppl {m.get('val_ppl', float('nan')):.1f}) after {m.get('tokens_seen', 0):,.0f} tokens read; "
                 "start a summarizer or translator from it with seq2seq.init"]
        if rows:
            lines.append(f"{rows[0]['corrupted'][:100]!r} -> {rows[0]['rebuilt'][:100]!r}")
        return lines
    split = "test" if "test" in data["scores"] else "valid"
    beam = data["decode"]["beam"]
    lines = []
    for key, s in data["scores"][split].items():
        lines.append(f"{key} {split} ({s['sentences']} sentences, {'greedy' if beam == 1 else f'beam {beam}'}): "
                     f"BLEU {s['bleu']:.2f}, chrF {s['chrf']:.2f}, lowercased tokenized BLEU {s['bleu_tok_lc']:.2f}")
    lines.append(f"sacreBLEU {data['scores'][split][next(iter(data['scores'][split]))]['bleu_signature']}")
    samples = json.loads((Path(eval_dir) / "samples.json").read_text(encoding="utf-8"))
    for key, rows in samples.items():
        if rows:
            lines.append(f"{key}: {rows[0]['source']!r} -> {rows[0]['translation']!r} (reference {rows[0]['reference']!r})")
    return lines


def _summary_highlights(eval_dir: Path, data: dict[str, Any]) -> list[str]:
    split = "test" if "test" in data["scores"] else "valid"
    beam, n = data["decode"]["beam"], data["decode"].get("sentences", 1)
    how = (f"extractive, {n} sentence{'s' if n > 1 else ''}" if data.get("task") == "extract"
           else "greedy" if beam == 1 else f"beam {beam}")
    lines = []
    for key, s in data["scores"][split].items():
        lines.append(f"{key} {split} ({s['documents']} documents, {how}, "
                     f"{s['rouge_rule']} reference): ROUGE-1/2/L {s['rouge1']:.2f} / {s['rouge2']:.2f} / "
                     f"{s['rougeL']:.2f}; Lead-1 {s['lead1_rouge1']:.2f} / {s['lead1_rouge2']:.2f} / "
                     f"{s['lead1_rougeL']:.2f}; oracle {s['oracle_rouge1']:.2f} / {s['oracle_rouge2']:.2f} / "
                     f"{s['oracle_rougeL']:.2f}")
    samples = json.loads((eval_dir / "samples.json").read_text(encoding="utf-8"))
    for key, rows in samples.items():
        if rows:
            lines.append(f"{key}: {rows[0]['source'][:100]!r}... -> {rows[0]['summary']!r} "
                         f"(reference {rows[0]['references'][0]!r})")
    return lines
