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


def highlights(eval_dir: Path) -> list[str]:
    """What the run's summary shows under the stage: each direction's scores and one example."""
    data = json.loads((Path(eval_dir) / "scores.json").read_text(encoding="utf-8"))
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
