"""Local copies of the CSS, JS, fonts and images that GX's Data Docs page loads from CDNs (issue 14, item 5).

GX's validation-results page links Bootstrap, Font Awesome, jQuery, bootstrap-table, vega, ... from CDNs and its
logo from S3, so offline the status icons were blank and the tables unstyled. Here the page is rewritten to
load the files it needs from one folder per store, ``<store>/_static/data-docs/<version>/``, copied from the
Python packages that ship them (installed with the project, pinned in pyproject.toml):

- ``xstatic-bootstrap`` 4.5.3 (GX asks for 4.3.1; the 4.x classes are the same), whose bundle includes Popper;
- ``xstatic-font-awesome`` 6.2.1 (GX asks for 6.6.0): ``fas fa-check-circle`` / ``fas fa-times`` are the status
  icons;
- ``xstatic-jquery`` 3.7.1 (what GX asks for);
- GX's own package: its logo and favicon.

Dropped, since a validation page does not need them: bootstrap-table (the tables are plain Bootstrap tables),
its filter-control extension, bootstrap-datepicker, vega/vega-lite/vega-embed (charts are on profiling pages),
and the prefers-dark stylesheet. The logo's cache-busting ``?d=<timestamp>`` goes with the S3 URL.

The folder is written once per store and content: its name is a digest of the files' sha256s, it is built in a
temporary sibling and renamed into place (first rename wins), and it holds ``MANIFEST.json`` (path -> sha256).
Each process checks an existing folder's files against it once, and rebuilds a folder that was tampered with.
Shards hold only the page, which refers to the folder by a relative path (``../../../../../../_static/...``).
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import json
import logging
import os
import re
import shutil
import threading
import uuid
from pathlib import Path

STATIC_SUBDIR = "_static/data-docs"
MANIFEST = "MANIFEST.json"

# dest path in the folder -> (module whose package ships it, path under the module's data dir, sha256 recorded)
ASSETS: dict[str, tuple[str, str, str]] = {
    "bootstrap/css/bootstrap.min.css": (
        "xstatic.pkg.bootstrap", "css/bootstrap.min.css",
        "f77c0d1739b618edc4a01ca3f6b2990b01a3009030af49ee8cf68e83052df194"),
    "bootstrap/js/bootstrap.bundle.min.js": (
        "xstatic.pkg.bootstrap", "js/bootstrap.bundle.min.js",
        "8d7089253dca29c9cd8d9deb7ec69b0a3d445f88f6a26478c719be1f90adcb01"),
    "jquery/jquery.min.js": (
        "xstatic.pkg.jquery", "jquery.min.js",
        "fc9a93dd241f6b045cbff0481cf4e1901becd0e12fb45166a8f17f95823f0b1a"),
    "font-awesome/css/all.min.css": (
        "xstatic.pkg.font_awesome", "css/all.min.css",
        "6752b9ba151a25703b2e5d17ad9ff42615f8940b591694fa8e42ab1034f476b5"),
    # every font all.min.css names (woff2 first; ttf as its fallback)
    "font-awesome/webfonts/fa-solid-900.woff2": (
        "xstatic.pkg.font_awesome", "webfonts/fa-solid-900.woff2",
        "8f06540fd77f1effe1e2da8ea10cec4a382dda9cc6ef05d816e1d6de444072f2"),
    "font-awesome/webfonts/fa-solid-900.ttf": (
        "xstatic.pkg.font_awesome", "webfonts/fa-solid-900.ttf",
        "e4f6a7e9d1a7c0b4968d9cb9d422e8d9cdca229f7ff3aeac7f96e4baa25c7680"),
    "font-awesome/webfonts/fa-regular-400.woff2": (
        "xstatic.pkg.font_awesome", "webfonts/fa-regular-400.woff2",
        "5da313b0467f7c1b18d981672b23461add31e3ad41988c30101bdaabb074e446"),
    "font-awesome/webfonts/fa-regular-400.ttf": (
        "xstatic.pkg.font_awesome", "webfonts/fa-regular-400.ttf",
        "d7b19fe201101b08ab1344ffd472d59ce652ad3c3fb5f194c3e35aa2908e674a"),
    "font-awesome/webfonts/fa-brands-400.woff2": (
        "xstatic.pkg.font_awesome", "webfonts/fa-brands-400.woff2",
        "c61287c2fa9863b5fb5844c683a168ac6520c94d822bb43d5eae35c3a2a82166"),
    "font-awesome/webfonts/fa-brands-400.ttf": (
        "xstatic.pkg.font_awesome", "webfonts/fa-brands-400.ttf",
        "b1d1c1b012e1a7621cc84fd1e5c1dbab92012f40df7423e879ab2fa493520fee"),
    "font-awesome/webfonts/fa-v4compatibility.woff2": (
        "xstatic.pkg.font_awesome", "webfonts/fa-v4compatibility.woff2",
        "f46715c9d30047f8dea4eb25ed869f791eb069c6b0f6102382c32a56aeeadfbb"),
    "font-awesome/webfonts/fa-v4compatibility.ttf": (
        "xstatic.pkg.font_awesome", "webfonts/fa-v4compatibility.ttf",
        "2ddb3b4114a9cb565e49b0af21cc3ac88cd043beb49be328b8f57a634989e0ac"),
    "gx/images/logo-long.png": (
        "great_expectations.render.view", "static/images/logo-long.png",
        "a84296549d5ba6d9e164b67ca4974f796a1f37716a9f3de44f2c06cf660731b2"),
    "gx/images/favicon.ico": (
        "great_expectations.render.view", "static/images/favicon.ico",
        "f8824a0986b4bc2349e2ac008284054cd192d3d82d3cef56dd3551b7af116c08"),
}
STYLESHEETS = ("bootstrap/css/bootstrap.min.css", "font-awesome/css/all.min.css")
SCRIPTS = ("jquery/jquery.min.js", "bootstrap/js/bootstrap.bundle.min.js")
LOGO, FAVICON = "gx/images/logo-long.png", "gx/images/favicon.ico"

_LOG = logging.getLogger("corpusforge")
_LOCK = threading.Lock()
_READY: dict[Path, Path] = {}  # static root -> its checked asset folder, once per process
_SOURCES: dict[str, tuple[Path, str]] | None = None


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _source_dir(module: str) -> Path:
    mod = importlib.import_module(module)
    base = getattr(mod, "BASE_DIR", None)  # XStatic packages name their data folder
    return Path(base) if base else Path(mod.__file__).parent


def sources() -> dict[str, tuple[Path, str]]:
    """dest path -> (the installed package's file, its sha256). Warns where a file differs from the recorded
    sha256 (another package version): that content then gets its own folder, named by its digest."""
    global _SOURCES
    if _SOURCES is None:
        found = {}
        for dest, (module, rel, recorded) in ASSETS.items():
            try:
                path = _source_dir(module) / rel
            except ImportError as exc:
                raise RuntimeError(f"Data Docs assets: {module} is not installed ({exc}); it is a dependency of "
                                   "corpusforge (pyproject.toml), reinstall the project") from None
            if not path.is_file():
                raise RuntimeError(f"Data Docs assets: {path} is missing from {module}'s package")
            digest = _sha256(path)
            if digest != recorded:
                _LOG.warning("Data Docs asset %s differs from the recorded sha256 (another version of %s?)",
                             dest, module)
            found[dest] = (path, digest)
        _SOURCES = found
    return _SOURCES


def version_name(files: dict[str, str]) -> str:
    """The folder's name: a digest of (path, sha256) for every file, so other content gets another folder."""
    blob = json.dumps(sorted(files.items())).encode()
    return "v1-" + hashlib.sha256(blob).hexdigest()[:16]


def _intact(folder: Path, files: dict[str, str]) -> bool:
    try:
        recorded = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return recorded == files and all((folder / dest).is_file() and _sha256(folder / dest) == digest
                                     for dest, digest in files.items())


def _sweep_dead_temps(parent: Path) -> None:
    """Remove ``.tmp-<pid>-*`` folders whose writer died mid-copy."""
    for stale in parent.glob(".tmp-*"):
        pid = stale.name.split("-")[1]
        try:
            os.kill(int(pid), 0)
        except (ValueError, ProcessLookupError):
            shutil.rmtree(stale, ignore_errors=True)
        except PermissionError:  # alive, someone else's
            pass


def ensure_assets(static_root: Path) -> Path:
    """The asset folder under ``static_root`` (a store root), written there once; returns its path."""
    static_root = Path(static_root)
    with _LOCK:
        ready = _READY.get(static_root)
        if ready is not None and ready.is_dir():
            return ready
        src = sources()
        files = {dest: digest for dest, (_, digest) in src.items()}
        parent = static_root / STATIC_SUBDIR
        folder = parent / version_name(files)
        if folder.is_dir() and not _intact(folder, files):
            _LOG.warning("Data Docs assets in %s were changed; rebuilding them", folder)
            broken = parent / f".broken-{uuid.uuid4().hex[:8]}"
            try:
                os.rename(folder, broken)
                shutil.rmtree(broken, ignore_errors=True)
            except FileNotFoundError:  # another process moved it first
                pass
        if not folder.is_dir():
            parent.mkdir(parents=True, exist_ok=True)
            _sweep_dead_temps(parent)
            tmp = parent / f".tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
            try:
                for dest, (path, _) in src.items():
                    (tmp / dest).parent.mkdir(parents=True, exist_ok=True)
                    shutil.copyfile(path, tmp / dest)
                (tmp / MANIFEST).write_text(json.dumps(files, indent=2, sort_keys=True) + "\n", encoding="utf-8")
                try:
                    os.rename(tmp, folder)
                except OSError:  # another writer's rename won: same name, same content
                    if not folder.is_dir():
                        raise
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
        _READY[static_root] = folder
        return folder


# GX's CDN tags: <link ... href="http(s)://...">, <script src="http(s)://..."></script>, and its S3 logo
_EXT_LINK = re.compile(r'<link\b[^>]*\bhref="https?://[^"]*"[^>]*>\s*', re.I)
_EXT_SCRIPT = re.compile(r'<script\b[^>]*\bsrc="https?://[^"]*"[^>]*>\s*</script>\s*', re.I)
_LOGO = re.compile(r'src="https?://[^"]*/logo-long\.png(?:\?[^"]*)?"', re.I)
# the dark-mode navbar's background logo (GX's package does not ship that one: the light logo stands in)
_DARK_LOGO = re.compile(r"url\('https?://[^']*/full_logo_dark\.png'\)", re.I)
_FAVICON = re.compile(r'(<link\b[^>]*rel="shortcut icon"[^>]*href=")[^"]*(")', re.I)


def localize(page: str, prefix: str) -> str:
    """GX's page with its CDN stylesheets, scripts and images replaced by the local copies under ``prefix`` (a
    URL path relative to the page). The stylesheets take the place of GX's first CDN stylesheet (before GX's
    own inline styles, which override Bootstrap), the scripts that of the first CDN script (before GX's inline
    scripts, which call jQuery)."""
    prefix = prefix.rstrip("/")
    css = "".join(f'<link rel="stylesheet" href="{prefix}/{p}"/>\n' for p in STYLESHEETS)
    js = "".join(f'<script src="{prefix}/{p}"></script>\n' for p in SCRIPTS)
    state = {"css": css, "js": js}

    def once(kind: str):
        def sub(_match: re.Match) -> str:
            out, state[kind] = state[kind], ""
            return out
        return sub

    page = _EXT_LINK.sub(once("css"), page)
    page = _EXT_SCRIPT.sub(once("js"), page)
    page = _LOGO.sub(f'src="{prefix}/{LOGO}"', page)
    page = _DARK_LOGO.sub(f"url('{prefix}/{LOGO}')", page)
    page = _FAVICON.sub(lambda m: f"{m.group(1)}{prefix}/{FAVICON}{m.group(2)}", page)
    if state["css"] or state["js"]:  # GX's template changed: still load the assets, at the end of <head>
        page = page.replace("</head>", state["css"] + state["js"] + "</head>", 1)
    return page


# ---------------------------------------------------------------- one self-contained page (the MLflow UI)
#
# The MLflow UI (3.x) shows an .html artifact as a blob: URL in an iframe sandboxed to scripts only, so a page's
# relative links resolve against nothing and its fonts, from an opaque origin, would not load anyway: there the
# page must carry what it uses. To keep that copy small, the stylesheets keep only the rules whose classes the
# page (or Bootstrap's JS) uses, and the icon font is cut down to the icons the page shows.

JS_STATE_CLASSES = {"show", "collapsing", "collapse", "fade", "active", "focus", "disabled", "modal-backdrop",
                    "modal-open", "modal-static"}
_REF = re.compile(r'(<link\b[^>]*\bhref="|<script\b[^>]*\bsrc="|<img\b[^>]*\bsrc="|url\(\')([^"\']+)(["\'])', re.I)


_CSS_TOKENS = re.compile(r"""[{}"'\\]""")


def _split_blocks(css: str) -> list[tuple[str, str]]:
    """Top-level ``(prelude, body)`` pairs of a comment-free stylesheet. Only braces, quotes and backslashes
    matter, so the scan jumps from one to the next (a character loop over the ~150 KB Bootstrap stylesheet
    cost ~0.1 CPU-s per Data Docs page)."""
    blocks, i, n = [], 0, len(css)
    while i < n:
        j = css.find("{", i)
        if j < 0:
            break
        depth, quote, escaped_at, k = 1, "", -1, n + 1  # k: one past the closing brace (n + 1: unclosed)
        for m in _CSS_TOKENS.finditer(css, j + 1):
            pos = m.start()
            if pos == escaped_at:
                continue
            c = css[pos]
            if quote:
                if c == "\\":
                    escaped_at = pos + 1
                elif c == quote:
                    quote = ""
            elif c in "\"'":
                quote = c
            elif c == "{":
                depth += 1
            elif c == "}":
                depth -= 1
                if not depth:
                    k = pos + 1
                    break
        if k > n:  # unclosed: as the character loop did, the body runs to the end less one character (but a
            k = n + (escaped_at == n)  # backslash that ends the text inside a quote)
        blocks.append((css[i:j].strip(), css[j + 1:k - 1]))
        i = k
    return blocks


def _selector_used(selector: str, classes: set[str]) -> bool:
    selector = re.sub(r":not\([^)]*\)", "", selector)
    return all(name in classes for name in re.findall(r"\.(-?[_a-zA-Z][\w-]*)", selector))


def prune_css(css: str, classes: set[str]) -> str:
    """The rules of ``css`` that can match an element with only ``classes`` (at-rules kept, @media pruned)."""
    css = re.sub(r"/\*.*?\*/", "", css, flags=re.S)
    out = []
    for prelude, body in _split_blocks(css):
        if prelude.startswith(("@media", "@supports")):
            inner = prune_css(body, classes)
            if inner:
                out.append(f"{prelude}{{{inner}}}")
        elif prelude.startswith("@"):
            out.append(f"{prelude}{{{body}}}")
        else:
            kept = [s for s in prelude.split(",") if _selector_used(s.strip(), classes)]
            if kept:
                out.append(f"{','.join(kept)}{{{body}}}")
    return "".join(out)


@functools.lru_cache(maxsize=16)
def _pruned_stylesheet(path: str, size: int, mtime_ns: int, classes: frozenset[str]) -> str:
    """``prune_css`` of a stylesheet file, remembered per (file and its stat, classes): the pages of one run's
    shards use the same classes, so the stylesheets are pruned once per run, not once per page."""
    return prune_css(Path(path).read_text(encoding="utf-8"), set(classes))


SUBSET_CACHE = ".font-subsets"  # beside the fonts in the asset folder: derived files, safe to delete


@functools.lru_cache(maxsize=64)
def _font_data_uri(path: Path, codepoints: frozenset[int]) -> str:
    """``path``'s font as a data: URI, cut down to ``codepoints`` (WOFF) where fontTools is there.

    Subsetting costs ~0.3 CPU-s (fontTools' import and the cut), which every tracked corpus run paid for the
    same few icons. The result is kept beside the font, ``.font-subsets/<key>-<sha256[:16]>.woff``, keyed by the
    .ttf's sha256, the code points and fontTools' version; a cached file is used only if its content still has
    the digest its name records (a truncated or edited one is cut again)."""
    import base64

    try:
        import fontTools
    except ImportError:
        return f"data:font/woff2;base64,{base64.b64encode(path.read_bytes()).decode()}"
    ttf = path.with_suffix(".ttf")
    key = hashlib.sha256(json.dumps([_sha256(ttf), sorted(codepoints), fontTools.version]).encode()).hexdigest()[:20]
    cache = path.parent / SUBSET_CACHE
    for hit in sorted(cache.glob(f"{key}-*.woff")):
        data = hit.read_bytes()
        if hit.stem.endswith("-" + hashlib.sha256(data).hexdigest()[:16]):
            return f"data:font/woff;base64,{base64.b64encode(data).decode()}"
    data = _subset_woff(ttf, codepoints)
    try:  # atomically: a reader sees the whole file or none
        cache.mkdir(exist_ok=True)
        tmp = cache / f".tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        try:
            tmp.write_bytes(data)
            os.replace(tmp, cache / f"{key}-{hashlib.sha256(data).hexdigest()[:16]}.woff")
        finally:
            tmp.unlink(missing_ok=True)
    except OSError as exc:  # a read-only store: the page still gets its font, cut again next time
        _LOG.debug("font subset not cached in %s: %s", cache, exc)
    return f"data:font/woff;base64,{base64.b64encode(data).decode()}"


def _subset_woff(ttf: Path, codepoints: frozenset[int]) -> bytes:
    import io

    from fontTools import subset

    font = subset.load_font(str(ttf), subset.Options())
    options = subset.Options()
    options.flavor = "woff"  # zlib: woff2 would need brotli
    subsetter = subset.Subsetter(options)
    subsetter.populate(unicodes=codepoints)
    subsetter.subset(font)
    buf = io.BytesIO()
    subset.save_font(font, buf, options)
    return buf.getvalue()


def self_contained(index: Path) -> str:
    """The page at ``index`` with the local assets it refers to inlined: stylesheets pruned to the classes it
    uses (fonts as data: URIs, cut to the icons shown), scripts and images inlined."""
    import base64

    index = Path(index)
    html = index.read_text(encoding="utf-8")
    classes = set(JS_STATE_CLASSES)
    for attr in re.findall(r'\bclass="([^"]*)"', html):
        classes.update(attr.split())
    classes.update(re.findall(r"""(?:addClass|removeClass|toggleClass|hasClass)\(\s*["']([\w-]+)""", html))

    def local(ref: str) -> Path | None:
        if re.match(r"([a-z]+:)?//|data:|#", ref):
            return None
        path = (index.parent / ref.split("?")[0]).resolve()
        return path if path.is_file() else None

    def stylesheet(path: Path) -> str:
        st = path.stat()
        css = _pruned_stylesheet(str(path), st.st_size, st.st_mtime_ns, frozenset(classes))
        codepoints = frozenset(int(h, 16) for h in re.findall(r'content:\s*"\\([0-9a-fA-F]{4,5})"', css))

        def font(m: re.Match) -> str:
            ref = m.group(1).strip("'\"")
            target = (path.parent / ref).resolve()
            if target.suffix == ".woff2" and target.is_file():
                return f"url({_font_data_uri(target, codepoints)})"
            return "url(data:,)"  # the ttf fallbacks and anything else: the woff/woff2 serves every browser

        css = re.sub(r"url\(([^)]*)\)", lambda m: m.group(0) if "data:" in m.group(1) else font(m), css)
        return css

    def inline(m: re.Match) -> str:
        tag, ref, end = m.groups()
        path = local(ref)
        if path is None:
            return m.group(0)
        if path.suffix == ".css" and tag.lower().startswith("<link"):
            return f"<style>{stylesheet(path)}</style><link data-inlined=\"{path.name}{end}"
        if path.suffix == ".js" and tag.lower().startswith("<script"):
            code = path.read_text(encoding="utf-8").replace("</script", "<\\/script")
            code = re.sub(r"//# sourceMappingURL=\S+", "", code)
            return f"<script>{code}</script><script data-inlined=\"{path.name}{end}"
        mime = {".png": "image/png", ".ico": "image/x-icon", ".svg": "image/svg+xml"}.get(path.suffix, "")
        return f"{tag}data:{mime};base64,{base64.b64encode(path.read_bytes()).decode()}{end}"

    html = _REF.sub(inline, html)
    # the placeholders left by inline(): an empty <link data-inlined=...> / <script data-inlined=...></script>
    html = re.sub(r'<link data-inlined="[^"]*"[^>]*>', "", html)
    return re.sub(r'<script data-inlined="[^"]*"[^>]*>\s*</script>', "", html)
