"""Issue 45, item 7: every "module:function" string a stage or a model family declares (a Stage's task, core and
adjust_upstream; each StepOutputs' highlights, report_plots, loader and exports; Registers' wants and register; a
FamilySpec's module, objective and exporters) names something that exists and can be called. A typo in one would
otherwise surface only when that path first runs: at the end of a long training, or in a user's export."""

from __future__ import annotations

import dataclasses
import re

REF = re.compile(r"^corpusforge(\.\w+)+:\w+$")
FIELDS = {"task", "core", "adjust_upstream", "highlights", "report_plots", "loader", "exports", "wants", "register",
          "module", "objective", "exporters"}


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
    for name, spec in families().items():
        yield from refs(spec, f"family {name}")


def test_every_declared_reference_resolves_to_something_callable():
    from corpusforge.tasks.stage import load

    found = [(where, value) for where, name, value in declared() if name in FIELDS and value]
    assert len(found) >= 40, found  # every stage and family declares some: the walk reached them
    for where, value in found:
        assert REF.match(value), f"{where}: {value!r} is not a 'module:attribute' reference"
        assert callable(load(value)), f"{where}: {value} is not callable"


def test_no_reference_hides_in_another_field():
    """A string shaped like a reference outside the fields above would not be resolved by the test above: a new
    field that holds references must join FIELDS."""
    stray = [(where, value) for where, name, value in declared() if name not in FIELDS and REF.match(value)]
    assert stray == []
