"""The ``corpusforge`` command line: a thin typer layer over flows and corpusforge.storage.catalog.

Heavy libraries (prefect, mlflow, great_expectations, polars) are imported inside the commands that
need them, so ``corpusforge artifacts ...`` answers in a fraction of a second.
Exit codes: 0 success, 1 the work failed (or verify found problems), 2 bad usage or config.
"""

from __future__ import annotations

from typing import Annotated

import typer


def _reflowed(paragraphs: list[str], markup_mode=None) -> str:
    """The help text's paragraphs after the first, each a flowing paragraph: typer keeps the docstring's own line
    breaks there, so a sentence broke mid-way wherever the source wrapped it ("The templates are taken" / "verbatim,
    ..." in `lm finetune --help`, issue 50). A paragraph laid out on purpose keeps its lines: one that starts with
    click's ``\\b``, or whose lines after the first are indented or list items."""
    flowing = []
    for paragraph in paragraphs:
        lines = paragraph.split("\n")
        laid_out = paragraph.startswith("\b") or any(
            line.startswith((" ", "\t")) or line.lstrip().startswith(("- ", "* ", "• ")) for line in lines[1:])
        flowing.append(paragraph if laid_out else " ".join(line.strip() for line in lines))
    return "\n\n".join(flowing)


def _reflow_help() -> None:
    from typer import rich_utils

    if hasattr(rich_utils, "_fix_linebreaks"):  # typer's join of the paragraphs after the first
        rich_utils._fix_linebreaks = _reflowed


_reflow_help()

app = typer.Typer(
    name="corpusforge",
    help="Turn raw text corpora into trained NLP artifacts, with content-addressed, reusable steps.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def main() -> None:
    # the name usage lines and "Try 'corpusforge --help'" show. click guesses it from how the process started,
    # which in the warm local server (python -m corpusforge.cli.server_main) is "python -m corpusforge.cli..."
    app(prog_name="corpusforge")


def _version_callback(value: bool) -> None:
    if value:
        from importlib.metadata import version

        print(f"corpusforge {version('corpusforge')}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[bool, typer.Option("--version", callback=_version_callback, is_eager=True,
                                          help="Print the version and exit.")] = False,
) -> None:
    """Options that apply to every command."""


# The commands, one module per group (their heavy imports stay inside their commands, so `corpusforge
# artifacts ...` stays fast), registered in the order `--help` lists them.
from corpusforge.cli.artifacts import app as artifacts_app  # noqa: E402
from corpusforge.cli.classify import app as classify_app  # noqa: E402
from corpusforge.cli.embed import app as embed_app  # noqa: E402
from corpusforge.cli.export import export as export_command  # noqa: E402
from corpusforge.cli.finetune import finetune as lm_finetune  # noqa: E402
from corpusforge.cli.finetune import merge as lm_merge  # noqa: E402
from corpusforge.cli.lm import app as lm_app  # noqa: E402
from corpusforge.cli.ngram import app as ngram_app  # noqa: E402
from corpusforge.cli.pipeline import corpus, run, schedule, ui  # noqa: E402
from corpusforge.cli.sentences import search as embed_search  # noqa: E402
from corpusforge.cli.sentences import sentences as embed_sentences  # noqa: E402
from corpusforge.cli.seq2seq import app as seq2seq_app  # noqa: E402
from corpusforge.cli.server import app as server_app  # noqa: E402
from corpusforge.cli.tag import app as tag_app  # noqa: E402
from corpusforge.cli.qa import app as qa_app  # noqa: E402
from corpusforge.cli.tokenizer import app as tokenizer_app  # noqa: E402

app.command()(run)
app.command()(corpus)
app.add_typer(artifacts_app, name="artifacts")
app.command()(schedule)
app.command()(ui)
app.add_typer(tokenizer_app, name="tokenizer")
embed_app.command("sentences")(embed_sentences)
embed_app.command("search")(embed_search)
app.add_typer(embed_app, name="embed")
app.add_typer(ngram_app, name="ngram")
lm_app.command("finetune")(lm_finetune)
lm_app.command("merge")(lm_merge)
app.add_typer(lm_app, name="lm")
app.add_typer(seq2seq_app, name="seq2seq")
app.add_typer(classify_app, name="classify")
app.add_typer(tag_app, name="tag")
app.add_typer(qa_app, name="qa")
app.add_typer(server_app, name="server")
app.command("export")(export_command)

if __name__ == "__main__":
    main()
