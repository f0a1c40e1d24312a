"""``--help`` of every command (issue 16 item 3): no ``<type>`` labels, real choices, current text, no raw newlines.

Each command's help is rendered through typer's CliRunner at 80 columns (a terminal's usual width, where a raw
newline default used to break the layout) and at 200 (where no line wraps, so whole phrases can be matched).
"""

from __future__ import annotations

import functools
import re
import subprocess
import sys
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from corpusforge.cli import app

CLI = str(Path(sys.executable).parent / "corpusforge")
runner = CliRunner()


def _commands(command=None, path=()):
    """(path, command) for the root, every group and every leaf command, from the built click tree."""
    command = command or typer.main.get_command(app)
    yield path, command
    for name, sub in getattr(command, "commands", {}).items():
        yield from _commands(sub, (*path, name))


COMMANDS = [path for path, _ in _commands()]
LEAVES = [path for path, cmd in _commands() if not getattr(cmd, "commands", None)]
# (command, flag, its choices): the flags whose values come from a fixed set
CHOICE_FLAGS = [
    (("corpus",), "--preset", ("lm", "raw", "classic", "social")),
    (("tokenizer", "train"), "--kind", ("word", "char", "classic-bpe", "bpe", "byte-bpe", "wordpiece", "unigram")),
    (("embed", "train"), "--kind", ("tfidf", "word2vec", "fasttext", "glove")),
    (("ngram", "estimate"), "--smoothing", ("mle", "add-k", "stupid-backoff", "kneser-ney", "modified-kneser-ney")),
]
FORMATS = (".txt", ".md", ".jsonl", ".json", ".csv", ".tsv", ".parquet", ".gz", ".bz2", ".xz", ".zst")
TYPE_LABEL = re.compile(r"<(bool|str|int|float|path|Path|list\[[^\]]*\]|int range|float range|file|dir)>")


@functools.lru_cache(maxsize=None)
def _help(path: tuple[str, ...], width: int = 80) -> str:
    """The command's --help at that width, rendered once per module (the checks below read the same texts)."""
    res = runner.invoke(app, [*path, "--help"], terminal_width=width, env={"COLUMNS": str(width)})
    assert res.exit_code == 0, (path, res.output)
    return res.output


def _unboxed(text: str) -> str:
    """The help text without the panels' box characters and line breaks: phrases that wrapped read whole again."""
    return " ".join(re.sub(r"[│╭╮╰╯─]", " ", text).split())


def test_every_command_is_covered():
    assert len(LEAVES) >= 20 and {("corpus",), ("lm", "generate"), ("tokenizer", "train"),
                                  ("embed", "eval"), ("artifacts", "find")} <= set(LEAVES)


@pytest.mark.parametrize("path", COMMANDS, ids=lambda p: " ".join(p) or "corpusforge")
@pytest.mark.parametrize("width", [80, 200])
def test_help_has_no_python_type_labels(path, width):
    text = _help(path, width)
    assert not TYPE_LABEL.search(text), TYPE_LABEL.search(text).group(0)
    other = set(re.findall(r"<[A-Za-z][\w\[\], |]*>", text)) - {"<s>", "</s>", "<unk>"}  # <s>: ngram's start token
    assert not other, other


@pytest.mark.parametrize("path", LEAVES, ids=" ".join)
def test_flags_show_no_type_at_all(path):
    """A flag such as --json or --help takes no value: its row is the flag and its help, nothing in between."""
    for line in _help(path, 200).splitlines():
        for flag in ("--json", "--help", "--latest", "--greedy", "--trace", "--verify-inputs"):
            if re.search(rf"│\s+{flag}\s", line):
                between = line.split(flag, 1)[1].split("  ", 1)[1].strip() if "  " in line.split(flag, 1)[1] else ""
                assert not re.match(r"^(BOOLEAN|bool|<)", between), line


@pytest.mark.parametrize(("path", "flag", "values"), CHOICE_FLAGS, ids=lambda v: " ".join(v) if isinstance(v, tuple) else v)
def test_choice_flags_list_their_choices(path, flag, values):
    text = _unboxed(_help(path, 200))
    shown = re.search(re.escape(flag) + r" \[([^\]]+)\]", text)
    assert shown, text
    assert tuple(v.strip() for v in shown.group(1).split("|")) == values
    narrow = _help(path, 80)  # at a terminal's usual width the label wraps between choices, never inside one
    for value in values:
        assert re.search(rf"(?<![\w-]){re.escape(value)}(?![\w-])", narrow), (value, narrow)


MODULES = {"corpus": "corpusforge.cli.pipeline", "tokenizer": "corpusforge.cli.tokenizer", "embed": "corpusforge.cli.embed",
           "ngram": "corpusforge.cli.ngram"}


@pytest.mark.parametrize(("path", "flag", "values"), CHOICE_FLAGS, ids=lambda v: " ".join(v) if isinstance(v, tuple) else v)
def test_choice_flags_still_take_the_same_values(path, flag, values, monkeypatch):
    """The values users type are unchanged and the config gets the plain string (not an Enum member)."""
    import importlib

    seen = []

    def run_flow(config, *args, **kwargs):
        seen.append(config)
        raise typer.Exit(0)

    monkeypatch.setattr(importlib.import_module(MODULES[path[0]]), "_run_flow", run_flow)
    extra = ["--name", "n"] if path == ("corpus",) else []
    for value in values:
        res = runner.invoke(app, [*path, "x.txt", flag, value, *extra])
        assert res.exit_code == 0, res.output
    section = {"corpus": lambda c: c["corpus"]["clean"]["preset"], "tokenizer": lambda c: c["tokenizer"]["kind"],
               "embed": lambda c: c["embeddings"]["kind"], "ngram": lambda c: c["ngram"]["smoothing"]}[path[0]]
    got = [section(c) for c in seen]
    assert got == list(values) and all(type(v) is str for v in got)
    bad = runner.invoke(app, [*path, "x.txt", flag, "no-such-value", *extra])
    assert bad.exit_code == 2 and flag in bad.output and len(seen) == len(values)


@pytest.mark.parametrize("path", [("corpus",), ("tokenizer", "train"), ("embed", "train"), ("lm", "train")],
                         ids=" ".join)
def test_source_help_names_every_supported_format(path):
    text = _unboxed(_help(path, 200))
    for suffix in FORMATS:
        assert re.search(re.escape(suffix) + r"\b", text), (suffix, text)
    assert "recursively" in text


def test_corpus_help_names_the_presets_that_exist():
    from corpusforge.tasks.corpus.clean import PRESETS

    text = _unboxed(_help(("corpus",), 200))
    for preset in PRESETS:
        assert re.search(rf"\b{preset} \(", text), preset  # each preset named and described
    assert "(.txt, .md, .jsonl)" not in text  # the old, incomplete list


def test_lm_train_help_names_the_lm_presets():
    from corpusforge.api import preset_names

    text = _unboxed(_help(("lm", "train"), 200))
    assert all(name in text for name in preset_names())


@pytest.mark.parametrize("path", LEAVES, ids=" ".join)
def test_no_help_line_is_broken_by_a_raw_newline_default(path):
    for width in (80, 200):
        lines = _help(path, width).splitlines()
        for line in lines:
            stripped = line.strip()
            if not stripped or stripped.startswith(("Usage:",)):
                continue
            if stripped[0] in "│":  # a panel row closes its box on the same line
                assert stripped.endswith("│"), line
            cells = [c.strip() for c in re.split(r"\s{2,}|│", stripped) if c.strip()]
            assert not any(c == "]" or c.endswith("[default:") for c in cells), line  # "[default: <newline>]"
        text = "\n".join(lines)
        assert "[default: \n" not in text and "default:\n" not in text


def test_lm_generate_shows_the_newline_default_escaped():
    text = _unboxed(_help(("lm", "generate"), 80))
    assert r"[default: \n]" in text


def test_real_command_help_in_a_subprocess():
    """The installed entry point renders the same help (the help fix is applied on import of corpusforge.cli)."""
    res = subprocess.run([CLI, "tokenizer", "train", "--help"], capture_output=True, text=True, timeout=60,
                         env={"COLUMNS": "200", "PATH": "/usr/bin:/bin", "CORPUSFORGE_LOCAL_SERVER": "off"})
    assert res.returncode == 0, res.stderr
    assert "<bool>" not in res.stdout and "<str>" not in res.stdout
    assert "[word | char | classic-bpe | bpe | byte-bpe | wordpiece | unigram]" in res.stdout


# ---------------------------------------------------------------------------------------------------- issue 35 item 8

def _rendered_as_markup(text: str) -> str:
    from rich.text import Text

    return Text.from_markup(text).plain


@pytest.mark.parametrize("path", COMMANDS, ids=lambda p: " ".join(p) or "corpusforge")
def test_rich_markup_eats_nothing_in_help(path):
    """Help is rich markup: '[s3]' in 'corpusforge[s3]' was read as a tag and dropped. Every help text must show
    what it says (an escaped '\\[' shows as '[')."""
    command = typer.main.get_command(app)
    for name in path:
        command = command.commands[name]
    for text in [command.help or "", *(getattr(p, "help", None) or "" for p in command.params)]:
        assert _rendered_as_markup(text) == text.replace("\\[", "["), text


def test_store_help_names_the_s3_extra():
    assert "needs corpusforge[s3])" in _unboxed(_help(("artifacts", "find"), 200))


def test_schedule_help_says_it_uses_the_stores_own_server():
    text = _unboxed(_help(("schedule",), 200))
    assert "Needs a running Prefect server" not in text
    assert "the store's own Prefect server (its local server, started if needed" in text


def test_usage_names_the_command_in_the_warm_server_too():
    """The warm local server runs each command in a process started as `python -m corpusforge.cli.server_main`,
    from which click guessed the usage name 'python -m corpusforge.cli.corpusforge'. Here: that process's
    __main__ and argv, and the function the server calls (corpusforge.cli.main)."""
    code = ("import sys\nsys.modules['__main__'].__package__ = 'corpusforge.cli'\n"
            "sys.argv = ['corpusforge', *sys.argv[1:]]\nfrom corpusforge.cli import main\nmain()")
    env = {"COLUMNS": "200", "PATH": "/usr/bin:/bin", "CORPUSFORGE_LOCAL_SERVER": "off"}
    res = subprocess.run([sys.executable, "-c", code, "artifacts", "find", "--help"], capture_output=True, text=True,
                         env=env, timeout=60)
    assert res.returncode == 0, res.stderr
    assert "Usage: corpusforge artifacts find [OPTIONS]" in res.stdout and "python -m" not in res.stdout
    bad = subprocess.run([sys.executable, "-c", code, "artifacts", "find", "--no-such-flag"], capture_output=True,
                         text=True, env=env, timeout=60)
    assert bad.returncode == 2 and "corpusforge artifacts find --help" in bad.stderr and "python -m" not in bad.stderr


@pytest.mark.parametrize("path", LEAVES, ids=lambda p: " ".join(p))
def test_the_description_flows_as_paragraphs(path):
    """Issue 50, item 12: the paragraphs after the first kept the docstring's line breaks, so at any width a
    sentence broke where the source wrapped ("The templates are taken" / "verbatim, ..." in `lm finetune --help`).
    At 200 columns (wider than any source line) a description line ends a paragraph, or a line laid out on
    purpose (indented, a list item), or the text wrapped there because the line is full."""
    text = _help(path, 200)
    head = text.split("╭")[0]  # the usage line and the description, before the panels
    lines = head.splitlines()
    for line, after in zip(lines, lines[1:]):
        body, next_body = line.strip(), after.strip()
        if not body or not next_body or body.startswith("Usage:"):
            continue
        laid_out = after.startswith("  ", 1) or next_body.startswith(("-", "*", "•", "$", "corpusforge "))
        assert laid_out or len(line.rstrip()) > 150, (path, line, after)
