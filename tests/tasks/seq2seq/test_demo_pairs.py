"""The demo's bundled translation pairs (data/pairs/numbers.de|en) are what their committed script writes: German and
English number words by a rule, line-aligned, licence-free."""

from __future__ import annotations

import importlib.util

from tests.conftest import REPO

FOLDER = REPO / "data" / "pairs"


def _script():
    spec = importlib.util.spec_from_file_location("make_numbers", FOLDER / "make_numbers.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_number_words_follow_the_rules():
    m = _script()
    cases = {1: ("eins", "one"), 16: ("sechzehn", "sixteen"), 21: ("einundzwanzig", "twenty-one"),
             30: ("dreißig", "thirty"), 101: ("einhunderteins", "one hundred one"),
             342: ("dreihundertzweiundvierzig", "three hundred forty-two"), 1000: ("eintausend", "one thousand"),
             1001: ("eintausendeins", "one thousand one"), 21000: ("einundzwanzigtausend", "twenty-one thousand"),
             71311: ("einundsiebzigtausenddreihundertelf", "seventy-one thousand three hundred eleven"),
             99999: ("neunundneunzigtausendneunhundertneunundneunzig", "ninety-nine thousand nine hundred ninety-nine")}
    for n, (de, en) in cases.items():
        assert (m.german(n), m.english(n)) == (de, en), n


def test_the_committed_files_are_the_scripts_output(tmp_path):
    m = _script()
    m.write(tmp_path)
    for suffix in ("de", "en"):
        assert (tmp_path / f"numbers.{suffix}").read_bytes() == (FOLDER / f"numbers.{suffix}").read_bytes(), suffix
    de = (FOLDER / "numbers.de").read_text(encoding="utf-8").splitlines()
    en = (FOLDER / "numbers.en").read_text(encoding="utf-8").splitlines()
    assert len(de) == len(en) == m.COUNT == len(set(de))  # distinct numbers, one pair per line
