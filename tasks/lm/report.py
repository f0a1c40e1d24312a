"""The lm stage's plots for the run report, drawn from a trained model (declared as the lm step's report_plots)."""

from __future__ import annotations

from pathlib import Path


def attention_plot(lm_dir: Path, out_dir: Path) -> Path | None:
    """The last layer's attention heatmap of a trained attention lm on a short prompt (the start of its own
    sample), drawn for the report; None for a model without attention or when it cannot be drawn."""
    import json
    import logging

    try:
        from corpusforge.models.family import family

        spec = json.loads((Path(lm_dir) / "config.json").read_text(encoding="utf-8"))
        if not family(spec["family"]).can("attention_maps"):
            return None
        from corpusforge.tasks.lm.inference import inspect_lm

        sample = Path(lm_dir) / "sample.txt"
        prompt = (sample.read_text(encoding="utf-8", errors="replace") if sample.is_file() else "")[:24] or "the"
        files = inspect_lm(lm_dir, prompt, out_dir, k=3)["heatmaps"]
        return Path(files[-1]) if files else None
    except Exception as exc:  # noqa: BLE001 - the report goes on without this plot
        logging.getLogger("corpusforge").warning("no attention heatmap for the run report: %s", exc)
        return None


def report_plots(lm_dir: Path, scratch: Path) -> list[tuple[str, Path]]:
    """(caption, png) for the run report: the attention heatmap of an attention lm."""
    heat = attention_plot(lm_dir, scratch)
    return [] if heat is None else [(f"Attention heatmap ({heat.stem.replace('_', ' ')}, one panel per head)", heat)]
