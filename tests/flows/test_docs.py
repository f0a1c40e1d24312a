"""The documentation (issue 35, items 10 and 11): the MkDocs site under deploy/docs builds with ``--strict`` (a broken
link or anchor, or a config field without a ``doc``, fails it) and its generated references list every command and
every config key; the README stays a short front page that keeps the two commands and a Python example that is part
of the one tests/flows/test_api.py runs; every ``corpusforge ...`` command the docs name exists; ``make demo`` installs
the package alone and ``make test`` the extras."""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

DOCS = REPO / "deploy" / "docs"
PAGES = DOCS / "pages"
README = REPO / "README.md"


def click_tree() -> dict[str, list[str]]:
    """Top-level command -> its subcommands ([] for a plain command), from the console script's typer app."""
    import typer

    from corpusforge.cli import app

    root = typer.main.get_command(app)
    ctx = root.context_class(root, info_name="corpusforge")
    tree = {}
    for name in root.list_commands(ctx):
        sub = root.get_command(ctx, name)
        tree[name] = list(sub.list_commands(sub.context_class(sub, info_name=name, parent=ctx))) \
            if hasattr(sub, "list_commands") else []
    return tree


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """The site, built as `make docs` and CI build it: mkdocs build --strict."""
    if shutil.which("mkdocs", path=str(Path(sys.executable).parent)) is None:
        pytest.fail("mkdocs is not installed: `make test` installs the docs extra (pip install -e '.[docs]')")
    out = tmp_path_factory.mktemp("docs") / "site"
    proc = subprocess.run([str(Path(sys.executable).parent / "mkdocs"), "build", "--strict", "-f",
                           str(DOCS / "mkdocs.yml"), "-d", str(out)], capture_output=True, text=True, timeout=600,
                          env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    return out


def text_of(html_file: Path) -> str:
    import html

    return html.unescape(re.sub(r"<[^>]+>", "", html_file.read_text(encoding="utf-8")))


def test_cli_reference_lists_every_command_and_option(site):
    import typer

    from corpusforge.cli import app

    page = (site / "reference" / "cli.html").read_text(encoding="utf-8")
    text = text_of(site / "reference" / "cli.html")
    for name, subs in click_tree().items():
        assert f'id="corpusforge-{name}"' in page, name
        for sub in subs:
            assert f'id="corpusforge-{name}-{sub}"' in page, (name, sub)
    root = typer.main.get_command(app)  # and the options of one command, as --help names them
    run = root.get_command(root.context_class(root, info_name="corpusforge"), "run")
    for param in run.params:
        for opt in getattr(param, "opts", []):
            if opt.startswith("--"):
                assert opt in text, opt


def test_config_reference_lists_every_key(site):
    """Every field of the pipeline's top level and of each stage's config is in the generated reference, with
    its default, and a nested key of each kind (a reader setting, a trainer setting, a model family's)."""
    from corpusforge.pipeline_config import PipelineConfig
    from corpusforge.stages import STAGES

    text = text_of(site / "reference" / "configuration.html")
    for f in dataclasses.fields(PipelineConfig):
        assert f.name in text, f.name
    for stage in STAGES:
        for f in dataclasses.fields(stage.config):
            if f.init and "derived" not in f.metadata:
                assert f"{stage.section}.{f.name}" in text, (stage.section, f.name)
    for key in ("corpus.reader.txt_mode", "corpus.dedup.near.threshold", "lm.train.max_iters",
                "runner.kind", "tracking.register_models", "seq2seq.decode.beam"):
        assert key in text, key
    assert "lm.model (lm.family: gpt)" in text and "paragraph" in text  # a family's table; Literal values


def test_benchmark_results_page_is_the_file(site):
    text = text_of(site / "benchmarks" / "results.html")
    first = next(line for line in (REPO / "benchmarks" / "RESULTS.md").read_text().splitlines()[2:] if line.strip())
    assert first.split(":")[0] in text


def test_readme_is_a_front_page_with_the_two_commands():
    readme = README.read_text(encoding="utf-8")
    assert len(readme.splitlines()) < 150
    (commands,) = [b for b in re.findall(r"```bash\n(.*?)```", readme, re.S) if "make demo" in b]
    assert [line.split("#")[0].strip() for line in commands.splitlines()] == ["make demo", "make test"]
    assert "source .venv/bin/activate" in readme
    size = re.search(r"`du -sh \.venv` after `make demo` on a fresh clone says (\d+(?:\.\d+)?[MG])", readme)
    assert size, "the README records the .venv size make demo leaves"
    for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", readme):  # every relative link resolves
        if "://" not in target:
            assert (REPO / target).exists(), target


def test_readme_python_example_is_part_of_the_tested_one():
    """The README's example is the docs' example (which tests/flows/test_api.py runs as written) with lines left
    out, in the same order; each line it keeps uses only names defined before it."""
    from tests.flows.test_api import docs_example

    readme = README.read_text(encoding="utf-8")
    (short,) = re.findall(r"```python\n(.*?)```", readme, re.S)
    lines = [line for line in short.splitlines() if line.strip()]
    full = iter(line for line in docs_example().splitlines() if line.strip())
    for line in lines:
        assert any(line == candidate for candidate in full), f"not in the docs' example, in order: {line}"
    compile(short, "README.md", "exec")
    assert 6 <= len(lines) <= 12


def _command_lines() -> list[tuple[str, str]]:
    """(file, text) of every place the docs and the README show a corpusforge command: inline code spans that
    start with it, and lines of shell blocks."""
    found = []
    for path in [README, *sorted(PAGES.rglob("*.md"))]:
        text = path.read_text(encoding="utf-8")
        for lang, block in re.findall(r"```(\w*)\n(.*?)```", text, re.S):
            if lang in ("bash", "sh", ""):
                found += [(path.name, line) for line in block.splitlines()]
        prose = re.sub(r"```.*?```", "", text, flags=re.S)
        found += [(path.name, span) for span in re.findall(r"`(corpusforge [^`]+)`", prose)]
    return found


def test_every_documented_command_exists():
    tree = click_tree()
    pattern = re.compile(r"(?:^\s*|[|&;(]\s*|xargs -n1 )corpusforge ([a-z][a-z0-9-]*)(?: ([a-z][a-z0-9-|]*))?")
    checked = 0
    for where, line in _command_lines():
        for first, second in pattern.findall(line):
            assert first in tree, f"{where}: `corpusforge {first}` is no command: {line.strip()}"
            if tree[first] and second:
                for sub in second.split("|"):  # server start|stop|status
                    assert sub in tree[first], f"{where}: `corpusforge {first} {sub}` is no command: {line.strip()}"
            checked += 1
    assert checked > 50


def test_configuration_example_validates():
    import yaml

    from corpusforge.pipeline_config import pipeline_config_from_dict

    page = (PAGES / "guide" / "configuration.md").read_text(encoding="utf-8")
    (block,) = re.findall(r"```yaml\n(.*?)```", page, re.S)
    cfg = pipeline_config_from_dict(yaml.safe_load(block))
    assert cfg.lm is not None and cfg.tokenizer.encode


def test_make_demo_installs_the_package_alone(tmp_path):
    """`make demo` installs the package without extras (torch first); `make test` adds the test extras."""
    if shutil.which("make") is None:
        pytest.skip("no make")
    venv = tmp_path / "venv"  # does not exist: make -n prints the whole setup
    demo = subprocess.run(["make", "-n", "demo", f"VENV={venv}"], cwd=REPO, capture_output=True, text=True,
                          timeout=60)
    assert demo.returncode == 0, demo.stderr
    installs = [line for line in demo.stdout.splitlines() if " install " in line and "--upgrade pip" not in line]
    assert any(line.rstrip().endswith("install -q -e .") for line in installs), installs
    assert not any("-e \".[" in line for line in installs), installs
    assert "source" in demo.stdout and "activate" in demo.stdout  # says how to reach the command afterwards
    test = subprocess.run(["make", "-n", "test", f"VENV={venv}"], cwd=REPO, capture_output=True, text=True,
                          timeout=60)
    assert test.returncode == 0, test.stderr
    extras = re.search(r'install -q -e "\.\[([^\]]+)\]"', test.stdout)
    assert extras and set(extras.group(1).split(",")) >= {"dev", "dask", "ray", "docs"}, test.stdout


@pytest.mark.server  # a headless Chromium
def test_search_works_on_the_site_opened_from_disk(site, chromium, tmp_path):  # noqa: F811
    """Issue 50, item 5: `make docs` says to open site/index.html, where search found nothing (the theme fetched its
    index, which browsers refuse for file:// URLs). Opened from disk, offline, typing a word lists the pages that
    have it, and nothing is requested outside the site (the Web Worker shim is the site's own file)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=["--no-sandbox", "--headless=new"])
        try:
            context = browser.new_context(offline=True)
            asked = []  # every request that would leave the machine: aborted, and the test fails on it
            context.route(lambda url: not url.startswith(("file:", "data:", "blob:")),
                          lambda route: (asked.append(route.request.url), route.abort()))
            page = context.new_page()
            page.goto((site / "guide" / "corpus.html").as_uri())
            page.click("input.md-search__input")  # the theme starts its search worker when the box is used
            page.keyboard.type("quarantine", delay=20)
            page.wait_for_selector(".md-search-result__item", timeout=30000)
            found = page.locator(".md-search-result__item").count()
            meta = page.locator(".md-search-result__meta").inner_text()
        finally:
            browser.close()
    assert found > 0 and "matching" in meta.lower(), meta
    assert asked == []


from tests.tasks.test_data_docs_offline import chromium  # noqa: E402,F401 - the headless-browser fixture
