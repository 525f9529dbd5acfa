#!/usr/bin/python3
"""ctest: datasets/bible_corpus.py on the mod2imp excerpts in tests/fixtures/bible/.

    python3 tests/test_bible_corpus.py [SOURCE_DIR]
"""
import os
import subprocess
import sys
import tempfile

ROOT = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..")
SCRIPT = os.path.join(ROOT, "datasets", "bible_corpus.py")
sys.path.insert(0, os.path.join(ROOT, "datasets"))
import bible_corpus  # noqa: E402

bible_corpus_osis = bible_corpus.OSIS
bible_corpus_split = bible_corpus.book_split
FIXTURE = os.path.join(ROOT, "tests", "fixtures", "bible")
SRC = os.path.join(FIXTURE, "spaRV1909eb.imp")
TGT = os.path.join(FIXTURE, "engWEB2015eb.imp")

passed = failed = 0


def check(condition, what):
    global passed, failed
    if condition:
        passed += 1
    else:
        failed += 1
        print("FAILED:", what)


def run(out, *extra):
    return subprocess.run([sys.executable, SCRIPT, "--out", out, "--from-imp", SRC, TGT, *extra],
                          capture_output=True, text=True)


def read_split(out, name):
    with open(os.path.join(out, name + ".tsv"), encoding="utf-8") as f:
        rows = [line.rstrip("\n").split("\t") for line in f]
    with open(os.path.join(out, name + ".ref"), encoding="utf-8") as f:
        refs = [line.rstrip("\n") for line in f]
    check(len(rows) == len(refs), f"{name}: .tsv and .ref have the same number of lines")
    for side, ext in ((0, "es"), (1, "en")):
        with open(os.path.join(out, f"{name}.{ext}"), encoding="utf-8") as f:
            check([line.rstrip("\n") for line in f] == [r[side] for r in rows],
                  f"{name}.{ext} is column {side + 1} of {name}.tsv")
    return dict(zip(refs, rows)), rows


with tempfile.TemporaryDirectory() as out:
    result = run(out, "--test-books", "Ruth", "Jonah", "Philippians", "--valid-books", "joel")
    check(result.returncode == 0, f"exit code 0 (stderr: {result.stderr})")
    train, train_rows = read_split(out, "train")
    valid, valid_rows = read_split(out, "valid")
    test, test_rows = read_split(out, "test")
    every = {**train, **valid, **test}

    # Counts: printed per split and equal to the files.
    check(f"train: {len(train_rows)} pairs" in result.stdout, "train count printed")
    check(f"valid: {len(valid_rows)} pairs" in result.stdout, "valid count printed")
    check(f"test: {len(test_rows)} pairs" in result.stdout, "test count printed")
    check(len(every) == len(train_rows) + len(valid_rows) + len(test_rows), "no reference twice")

    # Whole books held out.
    check(all(r.split()[0] in ("Ruth", "Jonah", "Philippians") for r in test), "test books")
    check(all(r.startswith("Joel ") for r in valid) and len(valid) == 2, "valid books")
    check("Ruth 1:1" in test and "Genesis 1:1" in train, "splits by book")

    # Every line is clean: two non-empty fields, no markup, collapsed whitespace.
    for ref, (s, t) in every.items():
        check(s and t and s == s.strip() and t == t.strip(), f"{ref}: non-empty, trimmed")
        check("<" not in s + t and ">" not in s + t and "  " not in s + t and "&" not in s + t,
              f"{ref}: no markup or entity left: {s} | {t}")

    # Markup stripped; a footnote between two words leaves one space, its contents gone.
    check(every["Genesis 1:1"] == ["En el principio crió Dios los cielos y la tierra.",
                                    "In the beginning, God created the heavens and the earth."],
          f"Genesis 1:1 (drop capital, footnote): {every['Genesis 1:1']}")
    check(every["Jonah 1:1"][1] == "Now Yahweh’s word came to Jonah the son of Amittai, saying,",
          f"Jonah 1:1 (footnote between words): {every['Jonah 1:1']}")
    # Canonical psalm titles kept (the Spanish has them in verse 1), section headings dropped.
    check(every["Psalms 3:1"][1].startswith("A Psalm by David, when he fled from Absalom his son. "
                                            "Yahweh, how"), f"Psalms 3:1: {every['Psalms 3:1']}")
    check(every["Psalms 3:1"][0].startswith("Salmo de David"), "Psalms 3:1 Spanish")
    # Cross-references removed with their contents.
    check(all("Micah" not in t and "annotateRef" not in t for _, t in every.values()),
          "cross-references removed")
    # The WEB's glossary after Revelation 22:21 is not part of the verse.
    check(every["Revelation of John 22:21"][1] ==
          "The grace of the Lord Jesus Christ be with all the saints. Amen.",
          f"Revelation 22:21: {every['Revelation of John 22:21']}")
    # The Spanish subscription after an epistle is dropped.
    check(every["Philippians 4:23"][0] ==
          "La gracia de nuestro Señor Jesucristo sea con todos vosotros. Amén.",
          f"Philippians 4:23: {every['Philippians 4:23']}")
    # A verse one text leaves out (WEB Luke 17:36: a footnote only) is skipped alone.
    check("Luke 17:36" not in every and "Luke 17:35" in every and "Luke 17:37" in every,
          "Luke 17:36 skipped, its neighbours kept")
    # Jonah 1:17 is 2:1 in the Spanish numbering: re-aligned by content.
    check(every.get("Jonah 1:17", [""])[0].startswith("Mas Jehová había prevenido un gran pez"),
          f"Jonah 1:17: {every.get('Jonah 1:17')}")
    check(every.get("Jonah 2:1", [""])[0].startswith("Y oró Jonás desde el vientre del pez"),
          f"Jonah 2:1: {every.get('Jonah 2:1')}")
    # Books in one text only (Tobit is in the WEB only) are left out; verse 0 is no verse.
    check(not any(r.startswith("Tobit") or r.endswith(":0") for r in every), "no Tobit, no :0")

    # The book-classification set: the same verses, labelled with their book's OSIS name, split by
    # chapter (c % 10 == 2 test, 6 validation), Spanish and English line by line alike.
    books = os.path.join(out, "books")
    labelled = {}
    for name in ("train", "valid", "test"):
        with open(os.path.join(books, name + ".ref"), encoding="utf-8") as f:
            refs = [line.rstrip("\n") for line in f]
        sides = []
        for lang in ("es", "en"):
            with open(os.path.join(books, f"{name}.{lang}.tsv"), encoding="utf-8") as f:
                sides.append([line.rstrip("\n").split("\t") for line in f])
        check(len(sides[0]) == len(sides[1]) == len(refs), f"books {name}: files line up")
        for ref, (es, book), (en, book_en) in zip(refs, *sides):
            check(book == book_en == bible_corpus_osis[ref.rsplit(" ", 1)[0]], f"{ref}: label")
            check(bible_corpus_split(int(ref.rsplit(" ", 1)[1].split(":")[0])) == name,
                  f"{ref}: in {name} by its chapter")
            check([es, en] == every[ref], f"{ref}: the verse pair's text")
            labelled[ref] = name
    check(set(labelled) == {r for r in every if not r.startswith("Tobit")}, "every verse labelled")
    check(labelled.get("Jonah 2:1") == "test" and labelled.get("Luke 17:35") == "train" and
          labelled.get("Psalms 3:1") == "train", "Jonah 2 tests, Luke 17 and Psalms 3 train")
    check([bible_corpus_split(c) for c in (2, 6, 12, 16, 1, 10)] ==
          ["test", "valid", "test", "valid", "train", "train"], "every tenth chapter")
    with open(os.path.join(books, "mt-train.tsv"), encoding="utf-8") as f:
        mt_train = [line.rstrip("\n").split("\t") for line in f]
    check(mt_train == [every[r] for r, n in labelled.items() if n == "train"],
          "mt-train.tsv: the pairs of the training chapters only")
    with open(os.path.join(books, "groups.tsv"), encoding="utf-8") as f:
        groups = dict(line.rstrip("\n").split("\t") for line in f)
    check(len(groups) == 66 and groups["Gen"] == "law" and groups["Ruth"] == "history" and
          groups["Jonah"] == "minor prophets" and groups["Rev"] == "revelation", "groups.tsv")

    # Bad input: a book that is not there, the same book in two splits, a missing file.
    r = run(out, "--test-books", "Hezekiah")
    check(r.returncode != 0 and "Hezekiah" in r.stderr, f"unknown book: {r.stderr}")
    r = run(out, "--test-books", "Ruth", "--valid-books", "Ruth")
    check(r.returncode != 0 and "Ruth" in r.stderr, f"book in two splits: {r.stderr}")
    r = subprocess.run([sys.executable, SCRIPT, "--out", out, "--from-imp", SRC,
                        os.path.join(out, "missing.imp")], capture_output=True, text=True)
    check(r.returncode != 0 and "missing.imp" in r.stderr, f"missing file: {r.stderr}")

# The cleaner on markup the fixture lacks: a note before punctuation, a cross-reference, nested
# markup, entities, GBF and ThML footnotes, a quotation marker.
cases = [
    ('earth<note placement="foot">or, land</note>, and <w lemma="x">sea</w>.', "earth, and sea."),
    ('sea.<note type="crossReference"><reference>Micah 7:6</reference></note> Then', "sea. Then"),
    ('a<note n="1">x <note>y</note> z</note>b', "a b"),
    ('one<lb type="x-p"/>two <transChange type="added">three</transChange>', "one two three"),
    ("Tom &amp; Jerry &quot;x&quot;\t  end ", 'Tom & Jerry "x" end'),
    ("word<RF>a GBF footnote<Rf> next<CM>more <FI>italic<Fi>", "word next more italic"),
    ('said,<scripRef passage="Gen 1:1">Gen 1:1</scripRef> “Go”', "said, “Go”"),
    ('<q marker="“">Go</q>', "“Go"),
    ('<title type="section">A heading</title>Text', "Text"),
    ('end.<div eID="b1" osisID="Rev" type="book"/> <div type="glossary"/>Abba is...', "end."),
]
for markup, expected in cases:
    got = bible_corpus.clean(markup)
    check(got == expected, f"clean({markup!r}) = {got!r}, expected {expected!r}")
caps = bible_corpus.DropCapitals(["el principio en el", "la tierra y Jehová dijo", "y Jehová"])
for text, expected in [("EN el principio", "En el principio"), ("Y EN la tierra", "Y en la tierra"),
                       ("Y JEHOVÁ dijo", "Y Jehová dijo"), ("ALEPH. y", "ALEPH. y")]:
    check(caps(text) == expected, f"drop capital {text!r} -> {caps(text)!r}, expected {expected!r}")

print(f"{passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
