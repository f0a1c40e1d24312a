"""The MLflow adapter against a real sqlite tracking store in a temp dir."""

from __future__ import annotations

import json
from pathlib import Path

from corpusforge.storage.tracking import Tracker, flatten


def test_log_step_records_tags_inputs_metrics_history_and_files(tmp_path):
    art = tmp_path / "art"
    art.mkdir()
    (art / "manifest.json").write_text("{}")
    (art / "plot.png").write_bytes(b"\x89PNG fake")
    manifest = {"id": "a" * 64, "step": "lm", "name": "tiny", "config": {"lr": 0.1, "model": {"n_layer": 2}},
                "inputs": [{"id": "b" * 64, "kind": "artifact", "name": "shards"}],
                "metrics": {"val_loss": 1.5, "tokens": 10}, "timings": {"seconds": 2.0}}
    tracker = Tracker(tmp_path / "store", "exp")
    parent = tracker.start_pipeline_run("run", {"name": "exp"}, {"corpusforge.pipeline": "exp"})
    history = [{"step": 10, "train_loss": 2.0}, {"step": 20, "train_loss": 1.8, "val_loss": 1.6}]
    run_id = tracker.log_step(parent, manifest, art, files=["plot.png", "missing.png"], history=history)
    tracker.finish_pipeline_run(parent, {"steps_computed": 1})
    client = tracker.client
    run = client.get_run(run_id)
    assert run.data.tags["mlflow.parentRunId"] == parent
    assert run.data.tags["corpusforge.artifact_id"] == "a" * 64
    assert run.data.tags["corpusforge.inputs"] == "b" * 64
    assert run.data.params["model.n_layer"] == "2"
    assert [(m.step, m.value) for m in client.get_metric_history(run_id, "train_loss")] == [(10, 2.0), (20, 1.8)]
    assert {d.dataset.digest for d in run.inputs.dataset_inputs} == {"b" * 32}
    assert {a.path for a in client.list_artifacts(run_id)} == {"manifest.json", "plot.png"}
    assert client.get_run(parent).info.status == "FINISHED"
    # the embedded default keeps everything under the store root
    assert tracker.tracking_uri == f"sqlite:///{tmp_path / 'store' / 'mlflow.db'}"
    assert (tmp_path / "store" / "mlartifacts").is_dir()


def test_flatten_nests_with_dots_and_lists_as_json():
    assert flatten("", {"a": {"b": 1, "c": [1, 2]}, "d": "x"}, {}) == {"a.b": "1", "a.c": json.dumps([1, 2]), "d": "x"}


def test_config_keys_mlflow_refuses_are_made_legal(tmp_path):
    # split.by_source keys are globs ("*ptb.valid.txt"); MLflow refuses '*' in param names and used to fail the run
    config = {"split": {"by_source": {"*ptb.valid.txt": "valid", "?ptb.valid.txt": "test", "[ptb.valid.txt": "x",
                                      "_ptb.valid.txt_1": "y"}}, "lr": 1}
    tracker = Tracker(tmp_path / "store", "exp")
    parent = tracker.start_pipeline_run("run", config, {})
    params = tracker.client.get_run(parent).data.params
    assert params["split.by_source._ptb.valid.txt"] in {"valid", "test"}
    # colliding names get a numeric suffix (even when that suffix is itself taken): no value is lost
    assert sorted(v for k, v in params.items() if k.startswith("split.by_source.")) == ["test", "valid", "x", "y"]
    assert params["lr"] == "1"



def test_curves_are_metrics_and_summaries_are_not_one_point_charts(tmp_path):
    """Issue 16 item 1: beside curves, end-of-step figures are `summary.*` params and the run's description;
    a run without curves keeps its figures as metrics; the experiment opens on its runs."""
    art = tmp_path / "art"
    art.mkdir()
    (art / "manifest.json").write_text("{}")
    tracker = Tracker(tmp_path / "store", "exp")
    exp = tracker.client.get_experiment(tracker.experiment_id)
    assert exp.tags["mlflow.experimentKind"] == "custom_model_development"
    assert tracker.experiment_url().endswith("?workflowType=machine_learning")
    parent = tracker.start_pipeline_run("run", {"name": "exp"}, {})
    lm = {"id": "a" * 64, "step": "lm", "name": "tiny", "config": {}, "inputs": [],
          "metrics": {"val_loss": 1.5, "val_ppl": 4.48, "tokens": 1000}, "timings": {"seconds": 2.0}}
    history = [{"step": 10, "train_loss": 2.0, "lr": 1e-3}, {"step": 20, "train_loss": 1.8, "val_loss": 1.5}]
    run = tracker.client.get_run(tracker.log_step(parent, lm, art, history=history))
    assert set(run.data.metrics) == {"train_loss", "lr", "val_loss"}  # every metric is a curve
    assert run.data.params["summary.val_ppl"] == "4.48" and run.data.params["summary.tokens"] == "1000"
    assert "| val_ppl | 4.48 |" in run.data.tags["mlflow.note.content"]
    ngram = {"id": "c" * 64, "step": "ngram", "name": "n", "config": {}, "inputs": [], "metrics": {"ppl": 80.5}}
    flat = tracker.client.get_run(tracker.log_step(parent, ngram, art))
    assert flat.data.metrics["ppl"] == 80.5 and "summary.ppl" not in flat.data.params
    tracker.finish_pipeline_run(parent, {"steps_computed": 2, "pipeline": "exp"})
    done = tracker.client.get_run(parent)
    assert done.data.metrics == {} and done.data.params["summary.steps_computed"] == "2"


def registered_lm_store(root, step: str = "lm", loader: str = "corpusforge.tasks.lm.pyfunc"):
    """A store with an lm artifact (or one of ``step``) registered in its embedded MLflow as the stage registers it
    (a pyfunc whose copy sits under <store>/mlartifacts, recorded in the store's registry ledger with its files'
    digests)."""
    from corpusforge.storage.store import ArtifactStore
    from corpusforge.storage.tracking import RegistryLedger, registered_copy_digests

    def build(out):
        (out / "config.json").write_text(json.dumps({"family": "gpt"}))
        (out / "model.safetensors").write_bytes(b"weights" * 100)

    lm = ArtifactStore(root).publish(step=step, name="tiny", version=1, config={"n": 1}, inputs=[], build=build)
    tracker = Tracker(root, "exp")
    run = tracker.start_pipeline_run("run", {"name": "exp"}, {})
    info = tracker.register_pyfunc_model(run, "tiny", {step: lm.path}, loader_module=loader,
                                         pip_requirements=[], params={}, tags={"corpusforge.artifact_id": "x"})
    location = info.pop("source")
    RegistryLedger(root).put(tracker.tracking_uri, lm.manifest["id"],
                             {**info, "files": registered_copy_digests(location)}, location)
    tracker.finish_pipeline_run(run, {})
    return lm.manifest["id"]


def test_verify_of_a_copied_store_rebases_its_registered_copies_or_says_what_to_run(tmp_path):
    """Issue 30, item 16: `artifacts verify <lm>` on a copy of a store used to fail ("registered copy ... outside
    this store") until a tracked run rebased MLflow's paths: verify rebases them itself, and says what to run when
    it cannot."""
    import shutil

    from corpusforge.storage.catalog import Catalog
    from corpusforge.storage.store import ArtifactStore

    original = tmp_path / "original"
    aid = registered_lm_store(original)
    assert Catalog(ArtifactStore(original)).verify(aid).ok
    blocked = tmp_path / "blocked"
    shutil.copytree(original, blocked)
    shutil.rmtree(blocked / ".locks")
    (blocked / ".locks").write_text("a file where the lock folder would be: the database cannot be rebased")
    report = Catalog(ArtifactStore(blocked)).verify(aid)
    assert not report.ok
    assert any(f"this store was moved or copied from {original}" in p and "corpusforge artifacts verify" in p
               for p in report.problems), report.problems

    copy = tmp_path / "copy"
    shutil.copytree(original, copy)
    report = Catalog(ArtifactStore(copy)).verify(aid)
    assert report.ok, report.problems
    ledger = json.loads((copy / ".tracking" / "registry.json").read_text())
    assert str(original) + "/" not in json.dumps(ledger)  # the copy now names its own files
    assert Catalog(ArtifactStore(original)).verify(aid).ok  # the original is untouched


def test_verify_checks_the_registered_copy_against_the_loader_and_signature_it_was_registered_with(tmp_path):
    """The ledger records what registration used (loader module, artifact folder, signature); verify compares the
    registered copy's MLmodel with that, so storage names no loader of its own (issue 31, item 5)."""
    from corpusforge.storage.catalog import Catalog
    from corpusforge.storage.store import ArtifactStore
    from corpusforge.storage.tracking import RegistryLedger

    root = tmp_path / "store"
    aid = registered_lm_store(root)
    (uri, entries), = RegistryLedger(root)._read().items()
    entry = entries[aid]
    assert entry["loader_module"] == "corpusforge.tasks.lm.pyfunc" and entry["artifact_key"] == "lm"
    assert json.loads(entry["signature"]["inputs"]) == [{"type": "string", "required": True}]
    assert set(RegistryLedger(root).get(uri, aid)) & {"loader_module", "artifact_key", "signature"} == set()
    assert Catalog(ArtifactStore(root)).verify(aid).ok
    mlmodel = Path(entry["location"][len("file://"):]) / "MLmodel"
    original = mlmodel.read_text()
    mlmodel.write_text(original.replace("loader_module: corpusforge.tasks.lm.pyfunc", "loader_module: somewhere.else"))
    problems = Catalog(ArtifactStore(root)).verify(aid).problems
    assert any("loads ['somewhere.else'], not corpusforge.tasks.lm.pyfunc" in p for p in problems), problems
    mlmodel.write_text(original.replace('"type": "string"', '"type": "long"', 1))
    problems = Catalog(ArtifactStore(root)).verify(aid).problems
    assert any("signature is not the one it was registered with" in p for p in problems), problems


def test_a_registered_model_carries_an_input_example_and_mlflow_asks_for_none(tmp_path, capfd):
    """Issue 35, item 9a: every registration warned "An input example was not provided when logging the model";
    the model now carries a real one (checked against its signature when saved), so the warning has no cause."""
    import warnings

    import mlflow

    from corpusforge.storage.tracking import RegistryLedger

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        registered_lm_store(tmp_path / "store")
    assert not [w for w in caught if "input example was not provided" in str(w.message)]
    assert "input example" not in capfd.readouterr().err  # nor MLflow's INFO line about checking it
    (uri, entries), = RegistryLedger(tmp_path / "store")._read().items()
    location = Path(next(iter(entries.values()))["location"][len("file://"):])
    model = mlflow.models.Model.load(str(location / "MLmodel"))
    assert model.saved_input_example_info is not None
    assert model.load_input_example(str(location)) == ["The"]
    assert (location / "serving_input_example.json").is_file()  # what `mlflow models serve` is shown


def register_tiny(tracker, run_id, manifest, artifact_dir):
    """A registrar as a stage declares one (Registers.register): the artifact as a pyfunc, tagged with its id."""
    import time

    time.sleep(0.3)  # two registrations at once overlap here
    return tracker.register_pyfunc_model(run_id, str(manifest["name"]), {"lm": artifact_dir},
                                         loader_module="corpusforge.tasks.lm.pyfunc", pip_requirements=[],
                                         params={}, tags={"corpusforge.artifact_id": manifest["id"]})


def test_two_registrations_of_one_artifact_at_once_make_one_version(tmp_path):
    """Issue 44, item 10: two identical commands at once registered the same artifact twice (3 of 3). Registration
    is idempotent by artifact id: under the store's lock, a version of this artifact already in the registry is
    the registration, whether the step was computed or reused."""
    import threading

    from corpusforge.storage.store import ArtifactStore
    from corpusforge.tasks.stage import Registers
    from corpusforge.tasks.track import _try_register

    root = tmp_path / "store"

    def build(out):
        (out / "config.json").write_text(json.dumps({"family": "gpt"}))
        (out / "model.safetensors").write_bytes(b"weights" * 100)

    lm = ArtifactStore(root).publish(step="lm", name="tiny", version=1, config={"n": 1}, inputs=[], build=build)
    registers = Registers("lm", "unused:wants", f"{__name__}:register_tiny")
    tracker = Tracker(root, "exp")
    run = tracker.start_pipeline_run("run", {"name": "exp"}, {})
    results = []

    def register():
        results.append(_try_register(Tracker(root, "exp"), run, dict(lm.manifest), Path(lm.path), registers))

    threads = [threading.Thread(target=register) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [r.get("error") for r in results] == [None] * 3, results
    versions = tracker.client.search_model_versions("name = 'tiny'")
    assert len(versions) == 1 and {str(r["version"]) for r in results} == {str(versions[0].version)}
    tracker.finish_pipeline_run(run, {})


def test_verify_checks_the_registered_copy_of_every_stage_not_only_lm(tmp_path):
    """Issue 44, item 6: `artifacts verify` checked MLflow's registered copies for lm artifacts only; code planted
    in a registered classifier (DPO, seq2seq, ...) copy passed, and MLflow would import it on load."""
    from corpusforge.storage.catalog import Catalog
    from corpusforge.storage.store import ArtifactStore
    from corpusforge.storage.tracking import RegistryLedger

    for step, loader in (("classify", "corpusforge.tasks.classify.pyfunc"),
                         ("seq2seq", "corpusforge.tasks.seq2seq.pyfunc"),
                         ("post_training", "corpusforge.tasks.lm.pyfunc")):
        root = tmp_path / step
        aid = registered_lm_store(root, step, loader)
        assert Catalog(ArtifactStore(root)).verify(aid).ok
        ((_, entries),) = RegistryLedger(root)._read().items()
        copy = Path(entries[aid]["location"][len("file://"):])
        planted = copy / "code" / "corpusforge" / "__init__.py"
        planted.parent.mkdir(parents=True)
        planted.write_text("import os; os.system('echo planted')\n")
        problems = Catalog(ArtifactStore(root)).verify(aid).problems
        assert any("code/ folder, which MLflow would import" in p for p in problems), (step, problems)
