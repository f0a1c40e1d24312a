"""Data Docs work offline (issue 14, item 5): the GX page's CSS, JS, fonts and images are local copies in one
folder per store, not CDN links; checked without a browser, then in a headless Chromium with the network cut."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pandas as pd
import pytest

from corpusforge.tasks import data_docs_assets as dda
from corpusforge.tasks.corpus.validate import COLUMNS, DATA_DOCS_SUBDIR, ValidationConfig, validate_frame

CFG = ValidationConfig(min_chars=3, max_chars=10)
# npm's @sparticuz/chromium ships a headless Chromium inside the package (brotli-compressed), so it installs from
# the registry with npm alone; pinned to the version this test was written against (playwright drives it).
SPARTICUZ = "@sparticuz/chromium@147.0.0"
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "corpusforge" / "chromium-147.0.0"


def row(doc_id: str, text: str) -> dict:
    return {"doc_id": doc_id, "source": "s.txt", "locator": f"line:{doc_id}", "split": "train", "text": text,
            "n_chars": len(text), "n_words": len(text.split()), "content_hash": f"h{doc_id}", "lang": None,
            "meta": None}


def shard_page(store: Path, name: str = "s-000000000001") -> Path:
    """A shard's page as the corpus step writes it: under ``<store>/corpus_shard/<artifact>`` (the store's
    ``.locks`` marks its root), with one passing and one failing expectation (both status icons)."""
    (store / ".locks").mkdir(parents=True, exist_ok=True)
    out = store / "corpus_shard" / name
    outcome = validate_frame(pd.DataFrame([row("a", "fine"), row("b", "no")], columns=list(COLUMNS)), CFG, out)
    assert outcome.data_docs == f"{DATA_DOCS_SUBDIR}/index.html"
    return out / outcome.data_docs


class Refs(HTMLParser):
    """The asset references of a page: stylesheets, icons, scripts, images; and its elements' classes."""

    def __init__(self):
        super().__init__()
        self.assets: list[str] = []
        self.classes: set[str] = set()
        self.styles: list[str] = []
        self._in_style = False

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.classes.update((a.get("class") or "").split())
        if tag == "link" and a.get("href") and ({"stylesheet", "icon"} & set((a.get("rel") or "").split())):
            self.assets.append(a["href"])
        if tag in ("script", "img", "source", "iframe") and a.get("src"):
            self.assets.append(a["src"])
        if a.get("style"):
            self.styles.append(a["style"])
        self._in_style = tag == "style"

    def handle_endtag(self, tag):
        self._in_style = False

    def handle_data(self, data):
        if self._in_style:
            self.styles.append(data)


def css_urls(css: str) -> list[str]:
    return [u.strip("'\"") for u in re.findall(r"url\(\s*([^)]*?)\s*\)", css)]


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_page_refers_only_to_recorded_local_assets(tmp_path):
    store = tmp_path / "store"
    index = shard_page(store)
    html = index.read_text(encoding="utf-8")
    refs = Refs()
    refs.feed(html)
    inline_urls = [u for s in refs.styles for u in css_urls(s)]
    external = [u for u in refs.assets + inline_urls if re.match(r"(https?:)?//", u)]
    assert external == [], f"assets still from the network: {external}"
    assert "?d=" not in html  # the logo's timestamp went with the S3 URL

    folders = list((store / dda.STATIC_SUBDIR).iterdir())
    assert len(folders) == 1 and folders[0].name.startswith("v1-"), folders
    folder = folders[0]
    manifest = json.loads((folder / dda.MANIFEST).read_text())
    assert manifest == {dest: recorded for dest, (_, _, recorded) in dda.ASSETS.items()}

    local = {}
    for ref in refs.assets + [u for u in inline_urls if not u.startswith("data:")]:
        path = (index.parent / ref.split("?")[0]).resolve()
        assert path.is_file(), f"{ref} does not exist"
        assert path.is_relative_to(folder.resolve()), f"{ref} is not in the store's asset folder"
        dest = path.relative_to(folder.resolve()).as_posix()
        assert sha256(path) == dda.ASSETS[dest][2], f"{dest}: sha256 differs from the recorded one"
        local[dest] = path
    assert set(dda.STYLESHEETS) | set(dda.SCRIPTS) | {dda.LOGO} <= set(local)
    # what the stylesheets load (fonts, images) is there too
    for dest in dda.STYLESHEETS:
        for u in css_urls(local[dest].read_text(encoding="utf-8")):
            if not u.startswith("data:"):
                assert (local[dest].parent / u).resolve().is_file(), f"{dest} refers to missing {u}"

    # the status icons: their classes are defined by a local stylesheet
    icons = {c for c in refs.classes if c.startswith("fa-")}
    assert {"fa-check-circle", "fa-times"} <= icons
    css = "\n".join(local[d].read_text(encoding="utf-8") for d in dda.STYLESHEETS)
    for cls in icons | {"fas"}:
        assert re.search(rf"\.{re.escape(cls)}(?![\w-])", css), f".{cls} is defined by no local stylesheet"
    assert "Font Awesome 6 Free" in css and ".table" in css


def test_assets_are_written_once_per_store_and_repaired(tmp_path):
    store = tmp_path / "store"
    pages = [shard_page(store, f"s-{i:012d}") for i in range(3)]
    parent = store / dda.STATIC_SUBDIR
    assert [p.name for p in parent.iterdir()] == [next(parent.iterdir()).name]  # one folder, no temp dirs left
    # shards hold only their page
    for page in pages:
        shard = page.parents[len(Path(DATA_DOCS_SUBDIR).parts)]
        assert [p.relative_to(shard).as_posix() for p in shard.rglob("*") if p.is_file()] == \
            [f"{DATA_DOCS_SUBDIR}/index.html"]
    # a tampered copy is found (by a process that has not checked this store yet) and rebuilt
    folder = next(parent.iterdir())
    (folder / dda.STYLESHEETS[1]).write_text("/* emptied */")
    dda._READY.clear()
    assert dda.ensure_assets(store) == folder
    assert sha256(folder / dda.STYLESHEETS[1]) == dda.ASSETS[dda.STYLESHEETS[1]][2]
    assert [p.name for p in parent.iterdir()] == [folder.name]


# ---------------------------------------------------------------- headless browser


def _unpack_sparticuz(package: Path) -> Path | None:
    """Decompress the Chromium that @sparticuz/chromium ships (bin/chromium.br, brotli) into CACHE, with node's
    zlib (npm's own runtime), once."""
    binary = CACHE / "chromium"
    if binary.is_file():
        return binary
    node = shutil.which("node")
    if node is None or not (package / "bin" / "chromium.br").is_file():
        return None
    tmp = CACHE.with_name(CACHE.name + f".tmp-{os.getpid()}")
    tmp.mkdir(parents=True, exist_ok=True)
    script = ("const fs=require('fs'),z=require('zlib');"
              "fs.writeFileSync(process.argv[2],z.brotliDecompressSync(fs.readFileSync(process.argv[1])));")
    subprocess.run([node, "-e", script, str(package / "bin" / "chromium.br"), str(tmp / "chromium")],
                   check=True, timeout=300)
    (tmp / "chromium").chmod(0o755)
    try:
        os.rename(tmp, CACHE)
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)
    return binary if binary.is_file() else None


def find_chromium() -> tuple[str | None, list[str]]:
    """A headless Chromium from a package registry, or None and what was tried: $CORPUSFORGE_CHROMIUM;
    playwright's own (``playwright install chromium`` downloads from a CDN, not a registry, so it is usually
    absent); npm's @sparticuz/chromium, from node_modules, the global npm root or ``npm pack`` into the cache."""
    tried = []
    explicit = os.environ.get("CORPUSFORGE_CHROMIUM")
    if explicit:
        return (explicit, tried) if Path(explicit).is_file() else (None, [f"$CORPUSFORGE_CHROMIUM={explicit} missing"])
    if (CACHE / "chromium").is_file():
        return str(CACHE / "chromium"), tried
    try:
        from playwright.sync_api import sync_playwright

        with sync_playwright() as p:
            own = p.chromium.executable_path
        if own and Path(own).is_file():
            return own, tried
        tried.append("playwright's chromium is not installed (its installer downloads from a CDN)")
    except Exception as exc:  # noqa: BLE001 - any failure means: not this way
        tried.append(f"playwright: {exc}")
    roots = [Path(__file__).resolve().parents[2] / "node_modules"]
    npm = shutil.which("npm")
    if npm:
        out = subprocess.run([npm, "root", "-g"], capture_output=True, text=True, timeout=60)
        if out.returncode == 0 and out.stdout.strip():
            roots.append(Path(out.stdout.strip()))
    for root in roots:
        found = _unpack_sparticuz(root / "@sparticuz" / "chromium")
        if found:
            return str(found), tried
    if npm and not os.environ.get("CORPUSFORGE_NO_BROWSER_FETCH"):
        packdir = CACHE.with_name(CACHE.name + ".pack")
        packdir.mkdir(parents=True, exist_ok=True)
        out = subprocess.run([npm, "pack", SPARTICUZ, "--silent"], cwd=packdir, capture_output=True, text=True,
                             timeout=300)
        tarballs = sorted(packdir.glob("sparticuz-chromium-*.tgz"))
        if out.returncode == 0 and tarballs:
            subprocess.run(["tar", "xzf", tarballs[-1].name], cwd=packdir, check=True, timeout=300)
            found = _unpack_sparticuz(packdir / "package")
            shutil.rmtree(packdir, ignore_errors=True)
            if found:
                return str(found), tried
        tried.append(f"npm pack {SPARTICUZ} failed: {(out.stderr or out.stdout).strip()[-200:]}")
    else:
        tried.append("no npm to fetch @sparticuz/chromium" if not npm else "fetching disabled")
    return None, tried


@pytest.fixture(scope="module")
def chromium():
    try:
        import playwright  # noqa: F401
    except ImportError:
        pytest.skip("no headless browser: playwright is not installed (pip install -e '.[dev]')")
    path, tried = find_chromium()
    if path is None:
        pytest.skip("no headless browser: " + "; ".join(tried))
    return path


def test_screenshot_offline_shows_styled_table_and_icons(tmp_path, chromium):
    from PIL import Image
    from playwright.sync_api import sync_playwright

    index = shard_page(tmp_path / "store")
    shot = tmp_path / "data_docs.png"
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=["--no-sandbox", "--headless=new"])
        try:
            context = browser.new_context(viewport={"width": 1200, "height": 900}, offline=True)
            asked = []  # every request that would leave the machine: aborted, and the test fails on it
            context.route(lambda url: not url.startswith(("file:", "data:")),
                          lambda route: (asked.append(route.request.url), route.abort()))
            page = context.new_page()
            errors = []
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            page.goto(index.as_uri(), wait_until="load")
            page.evaluate("document.fonts.ready.then(() => true)")
            icon = "document.querySelector('i.fa-check-circle')"
            state = page.evaluate(f"""() => ({{
                tables: document.querySelectorAll('table.table').length,
                rows: document.querySelectorAll('table.table tr').length,
                ok_icons: document.querySelectorAll('i.fas.fa-check-circle').length,
                fail_icons: document.querySelectorAll('i.fas.fa-times').length,
                icon_font: getComputedStyle({icon}, '::before').fontFamily,
                icon_width: {icon}.getBoundingClientRect().width,
                font_loaded: document.fonts.check('900 16px "Font Awesome 6 Free"'),
                table_collapse: getComputedStyle(document.querySelector('table.table')).borderCollapse,
                navbar_display: getComputedStyle(document.querySelector('nav.navbar')).display,
                jquery: typeof window.jQuery,
                logo_loaded: [...document.images].every(img => img.complete && img.naturalWidth > 0),
            }})""")
            red, green = photographed_until_painted(page, shot)
        finally:
            browser.close()
    assert asked == [], f"the page asked the network for {asked}"
    assert errors == []
    assert state["tables"] >= 3 and state["rows"] >= 6
    assert state["ok_icons"] >= 1 and state["fail_icons"] >= 1
    assert "Font Awesome" in state["icon_font"] and state["font_loaded"] and state["icon_width"] > 0
    assert state["table_collapse"] == "collapse" and state["navbar_display"] == "flex"  # Bootstrap applied
    assert state["jquery"] == "function" and state["logo_loaded"]
    img = Image.open(shot).convert("RGB")
    assert img.size == (1200, 900)
    colors = img.getcolors(maxcolors=1 << 20) or []
    white = sum(n for n, c in colors if min(c) >= 250)
    assert len(colors) > 50 and white < 0.9 * img.width * img.height, "blank screenshot"
    # the failed check's red cross and the passed checks' green circles are painted
    assert red, "no red status icon painted"
    assert green, "no green status icon painted"


# ---------------------------------------------------------------- the MLflow UI's copy


def logged_page(tmp_path) -> tuple[Path, str]:
    """A shard tracked as the flow tracks it (real sqlite MLflow store): its Data Docs artifact's text."""
    from corpusforge.storage.tracking import Tracker
    from corpusforge.tasks.step import StepResult
    from corpusforge.tasks.track import track_results

    store = tmp_path / "store"
    index = shard_page(store)
    shard = index.parents[len(Path(DATA_DOCS_SUBDIR).parts)]
    manifest = {"id": "b" * 64, "step": "corpus_shard", "name": "s", "config": {}, "inputs": [], "files": {},
                "data_docs": f"{DATA_DOCS_SUBDIR}/index.html"}
    (shard / "manifest.json").write_text(json.dumps(manifest))
    tracker = Tracker(store, "exp")
    parent = tracker.start_pipeline_run("run", {"name": "exp"}, {})
    from corpusforge.tasks.corpus import STAGE

    track_results(tracker, parent, [StepResult("b" * 64, "corpus_shard", "s", str(shard), False, 0.0)], stages=[STAGE])
    runs = [run for run in tracker.client.search_runs([tracker.experiment_id])
            if run.data.tags.get("corpusforge.artifact_id") == "b" * 64]
    assert len(runs) == 1
    local = tracker.client.download_artifacts(runs[0].info.run_id, "data_docs/index.html", str(tmp_path / "dl"))
    return index, Path(local).read_text(encoding="utf-8")


def test_mlflow_copy_is_self_contained_and_small(tmp_path):
    index, html = logged_page(tmp_path)
    refs = Refs()
    refs.feed(html)
    urls = refs.assets + [u for s in refs.styles for u in css_urls(s)]
    assert urls and all(u.startswith("data:") for u in urls), [u[:80] for u in urls if not u.startswith("data:")]
    assert "fa-check-circle" in html and "Font Awesome 6 Free" in html and "data:font/woff;base64," in html
    assert "jQuery" in html and "Bootstrap v4" in html
    # pruned stylesheets and a subset icon font: ~265 KB, most of it jQuery + Bootstrap's JS (~170 KB)
    assert len(html.encode()) < 350_000, len(html.encode())
    assert index.read_text(encoding="utf-8") != html  # the store's page keeps its relative links


def test_font_subset_is_cut_once_per_store_and_checked_when_reused(tmp_path):
    """The icon font's subset is cached beside the font (a forked command of the local server would otherwise
    import fontTools and cut the same few icons on every tracked run); a damaged cache file is cut again."""
    index = shard_page(tmp_path / "store")
    dda._font_data_uri.cache_clear()
    first = dda.self_contained(index)
    cached = sorted(index.parents[len(Path(DATA_DOCS_SUBDIR).parts) + 2].glob(
        f"_static/data-docs/*/font-awesome/webfonts/{dda.SUBSET_CACHE}/*.woff"))
    assert len(cached) == 4, cached  # one per font the pruned stylesheet names (solid, regular, brands, v4)
    for path in cached:
        assert hashlib.sha256(path.read_bytes()).hexdigest()[:16] == path.stem.rsplit("-", 1)[1]
        assert path.read_bytes()[:4] == b"wOFF"
    dda._font_data_uri.cache_clear()  # a new process: the file is read, not cut again
    assert dda.self_contained(index) == first
    cached[0].write_bytes(cached[0].read_bytes()[:100])  # truncated: its name no longer matches its content
    dda._font_data_uri.cache_clear()
    assert dda.self_contained(index) == first
    again = sorted(cached[0].parent.glob("*.woff"))
    assert again == cached and again[0].read_bytes()[:4] == b"wOFF"
    assert not list(cached[0].parent.glob(".tmp-*"))


def test_mlflow_ui_iframe_screenshot(tmp_path, chromium):
    """As MLflow 3's UI shows an .html artifact: a blob: URL in an iframe sandboxed to scripts only."""
    from playwright.sync_api import sync_playwright

    _, html = logged_page(tmp_path)
    host = tmp_path / "mlflow_ui.html"
    host.write_text("<!doctype html><body style='margin:0'><script>"
                    f"const html={json.dumps(html).replace('</', '<' + chr(92) + '/')};"
                    "const f=document.createElement('iframe');f.sandbox='allow-scripts';"
                    "f.style='width:1200px;height:900px;border:0';"
                    "f.src=URL.createObjectURL(new Blob([html],{type:'text/html'}));document.body.appendChild(f);"
                    "</script>", encoding="utf-8")
    shot = tmp_path / "mlflow_ui.png"
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=["--no-sandbox", "--headless=new"])
        try:
            context = browser.new_context(viewport={"width": 1200, "height": 900}, offline=True)
            asked = []
            context.route(lambda url: not url.startswith(("file:", "data:", "blob:")),
                          lambda route: (asked.append(route.request.url), route.abort()))
            page = context.new_page()
            page.goto(host.as_uri(), wait_until="load")
            frame = page.frame_locator("iframe")
            frame.locator("i.fa-check-circle").first.wait_for()
            inner = page.frames[1]
            inner.evaluate("document.fonts.ready.then(() => true)")
            state = inner.evaluate("""() => ({
                icon_font: getComputedStyle(document.querySelector('i.fa-check-circle'), '::before').fontFamily,
                font_loaded: document.fonts.check('900 16px "Font Awesome 6 Free"'),
                navbar_display: getComputedStyle(document.querySelector('nav.navbar')).display,
                tables: document.querySelectorAll('table.table').length,
                jquery: typeof window.jQuery,
            })""")
            red, green = photographed_until_painted(page, shot)
        finally:
            browser.close()
    assert asked == []
    assert "Font Awesome" in state["icon_font"] and state["font_loaded"]
    assert state["navbar_display"] == "flex" and state["tables"] >= 3 and state["jquery"] == "function"
    assert red, "no red status icon painted"
    assert green, "no green status icon painted"


def photographed_until_painted(page, shot: Path) -> tuple[bool, bool]:
    """Screenshots of ``page`` into ``shot`` until a red (failed check) and a green (passed check) status icon
    are both painted, for up to 10 s: with the fonts loaded, a busy machine may not have painted them yet (seen
    once). The page is only photographed, never changed. Returns (red seen, green seen) of the last screenshot."""
    from PIL import Image

    for _ in range(40):
        page.screenshot(path=str(shot))
        pixels = list(Image.open(shot).convert("RGB").getdata())
        red = any(r > 180 and g < 80 and b < 80 for r, g, b in pixels)
        green = any(g > 120 and r < 80 and b < 120 for r, g, b in pixels)
        if red and green:
            break
        page.wait_for_timeout(250)
    return red, green


def test_a_dead_writers_temp_folder_is_swept(tmp_path):
    store = tmp_path / "store"
    parent = store / dda.STATIC_SUBDIR
    dead = subprocess.Popen(["true"])
    dead.wait()
    stale = parent / f".tmp-{dead.pid}-deadbeef"
    (stale / "bootstrap").mkdir(parents=True)
    dda._READY.pop(store, None)
    folder = dda.ensure_assets(store)
    assert [p.name for p in parent.iterdir()] == [folder.name]


def _split_blocks_by_character(css: str) -> list[tuple[str, str]]:
    """The definition: a character-by-character scan (what ``_split_blocks`` did before it jumped between
    braces, quotes and backslashes)."""
    blocks, i, n = [], 0, len(css)
    while i < n:
        j = css.find("{", i)
        if j < 0:
            break
        depth, k, quote = 1, j + 1, ""
        while depth and k < n:
            c = css[k]
            if quote:
                if c == "\\":
                    k += 1
                elif c == quote:
                    quote = ""
            elif c in "\"'":
                quote = c
            elif c == "{":
                depth += 1
            elif c == "}":
                depth -= 1
            k += 1
        blocks.append((css[i:j].strip(), css[j + 1:k - 1]))
        i = k
    return blocks


def test_split_blocks_equals_the_character_scan():
    import random
    import re

    from corpusforge.tasks.data_docs_assets import _split_blocks, sources

    sheets = [p for p, _ in sources().values() if str(p).endswith(".css")]
    assert sheets, "the Data Docs stylesheets (Bootstrap, Font Awesome)"
    for path in sheets:
        css = re.sub(r"/\*.*?\*/", "", path.read_text(encoding="utf-8"), flags=re.S)
        blocks = _split_blocks(css)
        assert len(blocks) > 100 and blocks == _split_blocks_by_character(css), path.name
    for css in ('a{b}', 'a{content:"}{"}b{x}', "a{content:'\\''}c{d}", "@media x{a{b}c{d}}e{f}", "a{b", "a{'\\"):
        assert _split_blocks(css) == _split_blocks_by_character(css), css
    rng = random.Random(5)
    for _ in range(5000):
        css = "".join(rng.choice("ab{}\"'\\ ;:@") for _ in range(rng.randint(0, 30)))
        assert _split_blocks(css) == _split_blocks_by_character(css), repr(css)
