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


def test_a_model_that_is_not_registered_says_why(tmp_path):
    """Issue 35, item 9d: an encoder lm's JSON said `registered_model: null` and nothing else. The run's counts now
    list each model no version was registered for, with why (the family, tracking off, registration off), and the
    training commands' JSON carries it as `registered_model_reason`. (An encoder lm is registered now, as a mask
    filler: a stage whose registry entry wants a classifier stands in for a family the stage does not register.)"""
    import dataclasses

    from corpusforge.stages import STAGES
    from corpusforge.storage.store import ArtifactStore
    from corpusforge.storage.tracking import NullTracker
    from corpusforge.tasks.lm.config import lm_config_from_dict
    from corpusforge.tasks.lm.train import build_lm
    from corpusforge.tasks.track import ParentRun, registered_model_fields, track_results
    from tests.tasks.lm.lm_fixtures import write_char_shards
    from tests.tasks.lm.test_lm import GPT_SECTION

    upstream = write_char_shards(tmp_path, roles={"mask": "[MASK]"})
    section = {**GPT_SECTION, "family": "encoder", "objective": {"mask_prob": 0.3},
               "train": {**GPT_SECTION["train"], "max_iters": 4, "eval_interval": 4}}
    results = build_lm(upstream, lm_config_from_dict(section), ArtifactStore(tmp_path / "store"))
    assert [r.step for r in results] == ["lm"]  # an encoder writes no sample
    tracker = Tracker(tmp_path / "store", "exp")
    stages = [dataclasses.replace(s, registers=dataclasses.replace(
        s.registers, wants="corpusforge.tasks.classify.register:classifies", what="a classifier"))
        if s.section == "lm" else s for s in STAGES]
    counts = track_results(tracker, ParentRun(tracker, "run", {}, {}), results, stages=stages)
    assert counts["registered_models"] == []
    (entry,) = counts["not_registered"]
    assert (entry["step"], entry["id"]) == ("lm", results[-1].id)
    fields = registered_model_fields(counts, "lm")
    assert fields["registered_model"] is None
    assert fields["registered_model_reason"] == ("the lm stage registers a classifier, which a model of the "
                                                 "'encoder' family is not; it stays in the store (and its MLflow "
                                                 "run)")
    off = track_results(NullTracker(), ParentRun(NullTracker(), "run", {}, {}), results, stages=STAGES)
    assert registered_model_fields(off, "lm")["registered_model_reason"].startswith("tracking is off")
    unregistering = track_results(tracker, ParentRun(tracker, "run", {}, {}), results, register=False, stages=STAGES)
    assert registered_model_fields(unregistering, "lm")["registered_model_reason"].startswith(
        "tracking.register_models is false")
    # a registration that failed says so; one that worked has no reason
    failed = {"registered_models": [{"name": "tiny", "step": "lm", "error": "OSError: disk full"}]}
    assert registered_model_fields(failed, "lm") == {
        "registered_model": None, "registered_model_reason": "registering failed: OSError: disk full"}
    ok = {"registered_models": [{"name": "tiny", "step": "lm", "version": "1"}]}
    assert registered_model_fields(ok, "lm") == {"registered_model": ok["registered_models"][0],
                                                 "registered_model_reason": None}
