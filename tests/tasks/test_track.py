"""corpusforge.tasks.track: live MLflow runs while a step trains, against a real sqlite tracking store in a temp dir."""

from __future__ import annotations

from corpusforge.storage.tracking import Tracker
from corpusforge.tasks.track import LiveRuns


def test_live_step_run_is_completed_not_duplicated_and_a_dead_one_fails(tmp_path):
    art = tmp_path / "art"
    art.mkdir()
    (art / "manifest.json").write_text("{}")
    tracker = Tracker(tmp_path / "store", "exp")
    parent = tracker.start_pipeline_run("run", {"name": "exp"}, {})
    live = LiveRuns(tracker, parent)
    on_metrics = live.callback("lm", "tiny")
    on_metrics(10, {"train_loss": 2.0, "lr": 1e-3})
    on_metrics(20, {"train_loss": 1.8, "val_loss": 1.9})
    run_id = live.runs[("lm", "tiny")]
    assert tracker.client.get_run(run_id).info.status == "RUNNING"  # visible while the step trains
    manifest = {"id": "a" * 64, "step": "lm", "name": "tiny", "config": {}, "inputs": [], "metrics": {"val_loss": 1.9}}
    history = [{"step": 10, "train_loss": 2.0}, {"step": 20, "train_loss": 1.8, "val_loss": 1.9}]
    done = tracker.log_step(parent, manifest, art, history=history, run_id=live.take("lm", "tiny"))
    assert done == run_id
    run = tracker.client.get_run(run_id)
    assert run.info.status == "FINISHED" and run.data.tags["corpusforge.artifact_id"] == "a" * 64
    assert [m.step for m in tracker.client.get_metric_history(run_id, "train_loss")] == [10, 20]  # once each

    dying = live.callback("lm", "other")
    dying(5, {"train_loss": 3.0})
    dead = live.runs[("lm", "other")]
    live.close(failed=True)
    assert tracker.client.get_run(dead).info.status == "FAILED" and live.runs == {}


def test_live_logging_trouble_never_stops_training(tmp_path):
    class Broken:
        def start_step_run(self, *a):
            raise RuntimeError("database is locked")

    live = LiveRuns(Broken(), "parent")
    on_metrics = live.callback("lm", "x")
    on_metrics(1, {"train_loss": 1.0})  # logs a warning, raises nothing
    on_metrics(2, {"train_loss": 0.9})
    assert live.broken and live.take("lm", "x") is None  # the step then gets an ordinary, complete run
    assert LiveRuns(Broken(), None).callback("lm", "x") is None  # tracking off: no callback at all


def test_a_registry_failure_is_reported_not_fatal(tmp_path):
    import json
    import logging

    from corpusforge.tasks.lm import STAGE
    from corpusforge.tasks.track import _try_register

    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append
    logging.getLogger("corpusforge").addHandler(handler)

    lm_dir = tmp_path / "lm"
    lm_dir.mkdir()
    (lm_dir / "config.json").write_text(json.dumps({"family": "gpt", "tokenizer": {"path": str(tmp_path / "gone")}}))
    got = _try_register(object(), "run", {"id": "a" * 64, "name": "tiny"}, lm_dir, STAGE.registers)
    assert got["name"] == "tiny" and "tokenizer" in got["error"]  # the tokenizer left the store
    logging.getLogger("corpusforge").removeHandler(handler)
    assert any("was not registered" in r.getMessage() for r in records)


def test_a_run_that_computed_nothing_opens_no_parent_run(tmp_path):
    """Issue 16 item 1: the parent run opens only when a step computed (or an lm is registered now)."""
    from corpusforge.tasks.step import StepResult
    from corpusforge.stages import STAGES
    from corpusforge.tasks.track import ParentRun, track_results

    tracker = Tracker(tmp_path / "store", "exp")
    parent = ParentRun(tracker, "run", {"name": "exp"}, {"corpusforge.pipeline": "exp"})
    reused = [StepResult("d" * 64, "corpus", "c", str(tmp_path), True, 0.0)]
    counts = track_results(tracker, parent, reused, live=LiveRuns(tracker, parent), stages=STAGES)
    assert counts["steps_computed"] == 0 and parent.run_id is None
    assert tracker.client.search_runs([tracker.experiment_id]) == []
    # a live metric opens it, once
    on_metrics = LiveRuns(tracker, parent).callback("lm", "tiny")
    on_metrics(1, {"train_loss": 2.0})
    assert parent.run_id is not None and parent() == parent.run_id
    assert len(tracker.client.search_runs([tracker.experiment_id])) == 2  # the parent and the lm's live run
