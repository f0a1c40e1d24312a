"""The house rules that import-linter cannot state: each stage package imports only the stages its declaration
names upstream (lm -> tokenizer -> corpus), every stage package is registered, and no stage section or model/
training config is typed ``Any``."""

from __future__ import annotations

import dataclasses
import shutil
import subprocess
import sys
import types
import typing
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _wheel_layout(tmp: Path) -> Path:
    """The package as the wheel lays it out (flows/ is corpusforge; tasks/, storage/, models/ its subpackages)."""
    pkg = tmp / "corpusforge"
    shutil.copytree(REPO / "flows", pkg, ignore=shutil.ignore_patterns("__pycache__"))
    for d in ("tasks", "storage", "models"):
        shutil.copytree(REPO / d, pkg / d, ignore=shutil.ignore_patterns("__pycache__"))
    return tmp


def digests(root: Path) -> dict[str, str]:
    """Every file under ``root`` (relative path) -> its sha256: what a recipe added or changed, counted."""
    import hashlib

    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts}


def _stage_imports(tmp_path: Path) -> dict[str, set[str]]:
    """stage package -> the other stage packages its modules import (grimp, on the wheel layout)."""
    code = (
        "import grimp, json\n"
        "from corpusforge.stages import STAGES\n"
        "g = grimp.build_graph('corpusforge', cache_dir=None)\n"
        "names = [s.section for s in STAGES]\n"
        "out = {}\n"
        "for n in names:\n"
        "    pkg = f'corpusforge.tasks.{n}'\n"
        "    mods = {pkg} | g.find_descendants(pkg)\n"
        "    hit = set()\n"
        "    for m in mods:\n"
        "        for imp in g.find_modules_directly_imported_by(m):\n"
        "            for other in names:\n"
        "                o = f'corpusforge.tasks.{other}'\n"
        "                if other != n and (imp == o or imp.startswith(o + '.')):\n"
        "                    hit.add(other)\n"
        "    out[n] = sorted(hit)\n"
        "print(json.dumps(out))\n"
    )
    root = _wheel_layout(tmp_path)
    import json
    import os

    env = {**os.environ, "PYTHONPATH": str(root)}
    proc = subprocess.run([sys.executable, "-c", code], cwd=root, env=env, capture_output=True, text=True, check=True)
    return {k: set(v) for k, v in json.loads(proc.stdout).items()}


def test_a_stage_imports_only_its_declared_upstream_stages(tmp_path):
    pytest.importorskip("grimp")
    from corpusforge.stages import STAGES

    after = {s.section: s.after for s in STAGES}

    def upstream(section: str) -> set[str]:
        found, at = set(), after[section]
        while at is not None:
            found.add(at)
            at = after[at]
        return found

    imports = _stage_imports(tmp_path)
    assert set(imports) == set(after)
    for section, imported in imports.items():
        assert imported <= upstream(section), (
            f"tasks/{section} imports {sorted(imported - upstream(section))}, which its declaration does not name "
            f"upstream (after={after[section]!r})")


def test_every_stage_package_is_registered_once_with_its_own_declaration():
    import importlib

    from corpusforge.stages import STAGES

    packages = sorted(p.name for p in (REPO / "tasks").iterdir() if (p / "__init__.py").is_file())
    assert sorted(s.section for s in STAGES) == packages
    for stage in STAGES:
        module = importlib.import_module(f"corpusforge.tasks.{stage.section}")
        assert module.STAGE is stage
        assert stage.config.__module__ == f"corpusforge.tasks.{stage.section}.config"
        hooks = [h for out in stage.steps.values() for h in (out.highlights, out.report_plots)]
        for ref in filter(None, (stage.task, stage.core, *hooks)):
            assert ref.startswith(f"corpusforge.tasks.{stage.section}."), ref
        steps = set(stage.steps)
        if stage.registers is not None:
            assert stage.registers.step in steps


def test_a_stage_with_artifact_references_takes_them_in_its_task_and_core():
    """The pipeline and the planner hand ``refs`` to every stage whose config declares an artifact reference
    (corpusforge.tasks.config.artifact_ref); each declared step is made by some registered stage."""
    import inspect

    from corpusforge.stages import STAGES
    from corpusforge.tasks.stage import load

    made = {step for s in STAGES for step in s.steps}
    with_refs = [s for s in STAGES if s.references()]
    assert "ngram" in [s.section for s in with_refs]  # ngram.tokenizer: the first stage with two inputs
    for stage in with_refs:
        for ref in (stage.task, stage.core):
            fn = load(ref)
            assert "refs" in inspect.signature(getattr(fn, "fn", fn)).parameters, ref
        for dotted, steps in stage.references():
            assert set(steps) <= made, (stage.section, dotted)


def _hints_any(tp, path: str, seen: set) -> list[str]:
    """Every place under ``tp`` typed Any (or a mapping to Any)."""
    bad = []
    if tp is typing.Any:
        return [path]
    origin = typing.get_origin(tp)
    if origin in (dict, typing.Mapping) and typing.get_args(tp) and typing.Any in typing.get_args(tp):
        return [path]
    if origin in (typing.Union, types.UnionType, tuple, list):
        for a in typing.get_args(tp):
            bad += _hints_any(a, path, seen)
        return bad
    if dataclasses.is_dataclass(tp) and tp not in seen:
        seen.add(tp)
        for name, hint in typing.get_type_hints(tp).items():
            bad += _hints_any(hint, f"{path}.{name}", seen)
    return bad


def test_no_section_and_no_model_or_training_config_is_typed_any():
    from corpusforge.pipeline_config import PipelineConfig
    from corpusforge.stages import STAGES

    hints = typing.get_type_hints(PipelineConfig)
    for stage in STAGES:
        assert hints[stage.section] == (stage.config | None)
    # The one mapping left open: extra GX expectations ({type, kwargs}) are GX's own schema, checked by GX when
    # the config is validated (tasks/corpus/validate.py builds each one).
    assert _hints_any(PipelineConfig, "pipeline", set()) == ["pipeline.corpus.validate.expectations"]


def test_the_lm_model_config_is_the_family_dataclass_and_validating_needs_no_torch():
    code = ("import sys\n"
            "from corpusforge.pipeline_config import pipeline_config_from_dict\n"
            "c = pipeline_config_from_dict({'corpus': {'sources': ['x']}, 'tokenizer': {},\n"
            "    'lm': {'family': 'rnn', 'model': {'cell': 'gru', 'n_layer': 1}, 'train': {'max_iters': 3}}})\n"
            "print(type(c.lm.model).__name__, c.lm.model.cell, c.lm.train.max_iters, 'torch' in sys.modules,\n"
            "      'prefect' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["RNNConfig", "gru", "3", "False", "False"]
    from corpusforge.tasks.config import ConfigError
    from corpusforge.tasks.lm.config import lm_config_from_dict

    with pytest.raises(ConfigError, match=r"lm\.model\.cell: unknown key; allowed keys under lm\.model are: block_size"):
        lm_config_from_dict({"family": "nplm", "model": {"cell": "gru"}})
    with pytest.raises(ConfigError, match=r"lm\.model\.vocab_size: set from the tokenizer; leave it out"):
        lm_config_from_dict({"model": {"vocab_size": 3}})
