"""Writes the demo's translation pairs: numbers written out in German (``numbers.de``) and English (``numbers.en``),
one number per line, the two files line-aligned. A toy translation task made by a rule, so the project can ship it
(CC0): German writes units before tens in one word ("zweiundvierzig", two-and-forty) where English writes
"forty-two", so a model has to reorder, and an attention map shows it.

    python data/pairs/make_numbers.py            # rewrites numbers.de / numbers.en beside this file

The numbers are a seeded sample (so the files are the same on every machine; tests/tasks/seq2seq/test_demo_pairs.py
checks the committed files against this script)."""

from __future__ import annotations

import random
import sys
from pathlib import Path

COUNT, LIMIT, SEED = 3000, 100_000, 32

EN_ONES = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve",
           "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen"]
EN_TENS = ["", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"]
DE_ONES = ["null", "eins", "zwei", "drei", "vier", "fünf", "sechs", "sieben", "acht", "neun", "zehn", "elf", "zwölf",
           "dreizehn", "vierzehn", "fünfzehn", "sechzehn", "siebzehn", "achtzehn", "neunzehn"]
DE_TENS = ["", "", "zwanzig", "dreißig", "vierzig", "fünfzig", "sechzig", "siebzig", "achtzig", "neunzig"]


def english(n: int) -> str:
    """American English without "and": 342 -> "three hundred forty-two", 21000 -> "twenty-one thousand"."""
    if n < 20:
        return EN_ONES[n]
    if n < 100:
        tens, ones = divmod(n, 10)
        return EN_TENS[tens] + (f"-{EN_ONES[ones]}" if ones else "")
    if n < 1000:
        hundreds, rest = divmod(n, 100)
        return f"{EN_ONES[hundreds]} hundred" + (f" {english(rest)}" if rest else "")
    thousands, rest = divmod(n, 1000)
    return f"{english(thousands)} thousand" + (f" {english(rest)}" if rest else "")


def _german_below_1000(n: int, final: bool) -> str:
    """``final``: the number ends the word, so 1 is "eins"; inside a compound it is "ein" (einhundert, einundzwanzig)."""
    if n == 0:
        return ""
    if n < 20:
        return ("eins" if final else "ein") if n == 1 else DE_ONES[n]
    if n < 100:
        tens, ones = divmod(n, 10)
        return (("ein" if ones == 1 else DE_ONES[ones]) + "und" if ones else "") + DE_TENS[tens]
    hundreds, rest = divmod(n, 100)
    return ("ein" if hundreds == 1 else DE_ONES[hundreds]) + "hundert" + _german_below_1000(rest, final)


def german(n: int) -> str:
    """One word, as German writes numbers: 342 -> "dreihundertzweiundvierzig", 1001 -> "eintausendeins"."""
    if n == 0:
        return "null"
    thousands, rest = divmod(n, 1000)
    head = _german_below_1000(thousands, final=False) + "tausend" if thousands else ""
    return head + _german_below_1000(rest, final=True)


def numbers(count: int = COUNT, limit: int = LIMIT, seed: int = SEED) -> list[int]:
    """``count`` distinct numbers in [1, limit), drawn with ``seed``, a quarter of them below 1000 (the short ones a
    model learns the parts from)."""
    rng = random.Random(seed)
    small = rng.sample(range(1, 1000), count // 4)
    large = rng.sample(range(1000, limit), count - count // 4)
    picked = small + large
    rng.shuffle(picked)
    return picked


def write(folder: Path) -> None:
    picked = numbers()
    (folder / "numbers.de").write_text("".join(german(n) + "\n" for n in picked), encoding="utf-8")
    (folder / "numbers.en").write_text("".join(english(n) + "\n" for n in picked), encoding="utf-8")


if __name__ == "__main__":
    write(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parent)
