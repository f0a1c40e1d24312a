"""Issue 45, item 7: every "module:function" string a stage or a model family declares (a Stage's task, core and
adjust_upstream; each StepOutputs' highlights, report_plots, loader and exports; Registers' wants and register; a
FamilySpec's module and exporters; each objective kind's factory) names something that exists and can be called,
and every objective a family names is a declared kind (or a reference of its own). A typo in one would
otherwise surface only when that path first runs: at the end of a long training, or in a user's export."""

from __future__ import annotations

import dataclasses
import re

REF = re.compile(r"^corpusforge(\.\w+)+:\w+$")
FIELDS = {"task", "core", "adjust_upstream", "highlights", "report_plots", "loader", "exports", "wants", "register",
          "module", "objective", "exporters", "factory"}


def refs(obj, where: str):
    """(where, field, the string) of every string found in ``obj``'s dataclass fields, mappings and tuples."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        for f in dataclasses.fields(obj):
            yield from refs_in(getattr(obj, f.name), f"{where}.{f.name}", f.name)


def refs_in(value, where: str, name: str):
    if isinstance(value, str):
        yield where, name, value
    elif isinstance(value, dict) or hasattr(value, "items"):
        for k, v in value.items():
            yield from refs_in(v, f"{where}[{k}]", name)
    elif isinstance(value, (tuple, list, frozenset, set)):
        for i, v in enumerate(value):
            yield from refs_in(v, f"{where}[{i}]", name)
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        yield from refs(value, where)


def declared():
    from corpusforge.models.family import families
    from corpusforge.stages import STAGES

    for stage in STAGES:
        yield from refs(stage, f"stage {stage.section}")
    from corpusforge.models.objectives import KINDS

    for name, spec in families().items():
        yield from refs(spec, f"family {name}")
    for name, kind in KINDS.items():
        yield from refs(kind, f"objective kind {name}")


def test_every_declared_reference_resolves_to_something_callable():
    from corpusforge.tasks.stage import load

    from corpusforge.models.objectives import KINDS

    found = [(where, value) for where, name, value in declared() if name in FIELDS and value]
    assert len(found) >= 40, found  # every stage and family declares some: the walk reached them
    kinds = [(where, value) for where, value in found if where.endswith(".objective") and ":" not in value]
    assert len(kinds) >= 10, kinds  # each family names its objective's kind
    for where, value in kinds:
        assert value in KINDS, f"{where}: {value!r} is no objective kind ({', '.join(KINDS)})"
    for where, value in found:
        if (where, value) in kinds:
            continue
        assert REF.match(value), f"{where}: {value!r} is not a 'module:attribute' reference"
        assert callable(load(value)), f"{where}: {value} is not callable"


def test_no_reference_hides_in_another_field():
    """A string shaped like a reference outside the fields above would not be resolved by the test above: a new
    field that holds references must join FIELDS."""
    stray = [(where, value) for where, name, value in declared() if name not in FIELDS and REF.match(value)]
    assert stray == []
