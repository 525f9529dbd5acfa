#!/usr/bin/python3
"""Builds a Spanish -> English parallel corpus of Bible verses from Debian's SWORD packages.

    apt-get install sword-text-sparv sword-text-web libsword-utils
    python3 datasets/bible_corpus.py --out data/bible
    python3 datasets/bible_corpus.py --out DIR --from-imp SPANISH.imp ENGLISH.imp

Source: Reina-Valera 1909 (SWORD module spaRV1909eb, package sword-text-sparv); target: World
English Bible (engWEB2015eb, package sword-text-web). Both are exported with `mod2imp MODULE`, whose
output is one `$$$Book C:V` line per entry followed by the entry's markup.

Cleaning: markup (OSIS, and the usual GBF and ThML tags) is removed; footnotes, cross-references,
section headings and speaker labels are removed with their contents; canonical psalm titles are
kept, because the Spanish text has them as part of verse 1; whatever follows the end of a book
(the WEB appends a glossary to Revelation 22:21) is dropped; entities are decoded and whitespace is
collapsed. The first word of a Spanish chapter is printed in capitals ("EN el principio"); it is
written as an ordinary capitalised word.

Alignment: verses are paired by reference (book, chapter, verse) and kept only when non-empty on
both sides. The two modules number some chapters differently: the Spanish module is KJV-numbered,
but in a few chapters its text follows the Hebrew/Spanish numbering (Jonah 1:17 is its 2:1, Job
39-41 shift by up to 5 verses), with SWORD merging the overflow into a chapter's last verse. A
chapter whose last verse has text on one side only, and the chapter after it, are therefore
re-aligned by content over the whole run of such chapters: a word lexicon (Dice coefficient of
co-occurrence) learned from the verses aligned by reference scores every Spanish/English verse
pair, and an order-preserving dynamic programme keeps the one-to-one matches with the highest
total score (24 chapters, about 540 pairs). A verse that one text leaves out in the middle of a
chapter (the WEB relegates Luke 17:36 to a footnote) is skipped alone. Finally pairs whose
lengths differ wildly (a merged verse) are dropped. The Spanish epistles' KJV-style
subscriptions ("Escrita de Roma con Epafrodito.") are removed from their last verse.

Result with the Debian 12 packages: 31,015 pairs (train 30,402, valid 270, test 343).

Splits hold out whole books. Test: Ruth, Jonah, Philippians, James (the issue's choice).
Validation: Joel, Habakkuk, Colossians, Titus (about 270 verses: two short prophets and two short
letters, so that validation mixes narrative-poetic Old Testament and epistolary New Testament text
like the test set does). Everything else is training data.

Writes to --out: {train,valid,test}.tsv (source<TAB>target), {split}.es and {split}.en (one side
per file, for `vitk bleu --ref test.en`), {split}.ref (the reference of each line, e.g.
"Ruth 1:1"). Prints counts per split. Uses the Python standard library only.

Also writes the book-classification set to --out/books/ (`vitk text-train`): the same verses as
`text<TAB>label` lines, the label the book's OSIS abbreviation (Gen, Exod, ..., Rev: 66 classes),
{train,valid,test}.es.tsv and .en.tsv with {split}.ref beside them. These split by chapter, not by
book or verse (neighbouring verses are near-duplicates): chapter c of every book goes to test when
c % 10 == 2 and to validation when c % 10 == 6, so every book of two or more chapters is tested;
the five one-chapter books (Obadiah, Philemon, 2 and 3 John, Jude) are training data only.
groups.tsv maps each label to its traditional group (law, history, wisdom, major prophets, minor
prophets, gospels, acts, Pauline letters, general letters, revelation) for `vitk text-eval
--groups`. mt-train.tsv and mt-valid.tsv are the Spanish -> English pairs of the classifier's
training and validation chapters: a translation model trained on them (whose encoder
`text-train --encoder-from` reuses) has seen no verse of the classifier's test chapters.
"""

import argparse
import html
import itertools
import os
import re
import shutil
import subprocess
import sys
from collections import Counter

SOURCE_MODULE = "spaRV1909eb"
TARGET_MODULE = "engWEB2015eb"
DEFAULT_TEST_BOOKS = ["Ruth", "Jonah", "Philippians", "James"]
DEFAULT_VALID_BOOKS = ["Joel", "Habakkuk", "Colossians", "Titus"]

# The 66 books' OSIS abbreviations (the labels of the classification set) by their SWORD names,
# and the traditional group of each run of books (first label of the run, group).
OSIS = dict(zip(
    ["Genesis", "Exodus", "Leviticus", "Numbers", "Deuteronomy", "Joshua", "Judges", "Ruth",
     "I Samuel", "II Samuel", "I Kings", "II Kings", "I Chronicles", "II Chronicles", "Ezra",
     "Nehemiah", "Esther", "Job", "Psalms", "Proverbs", "Ecclesiastes", "Song of Solomon",
     "Isaiah", "Jeremiah", "Lamentations", "Ezekiel", "Daniel", "Hosea", "Joel", "Amos",
     "Obadiah", "Jonah", "Micah", "Nahum", "Habakkuk", "Zephaniah", "Haggai", "Zechariah",
     "Malachi", "Matthew", "Mark", "Luke", "John", "Acts", "Romans", "I Corinthians",
     "II Corinthians", "Galatians", "Ephesians", "Philippians", "Colossians", "I Thessalonians",
     "II Thessalonians", "I Timothy", "II Timothy", "Titus", "Philemon", "Hebrews", "James",
     "I Peter", "II Peter", "I John", "II John", "III John", "Jude", "Revelation of John"],
    ["Gen", "Exod", "Lev", "Num", "Deut", "Josh", "Judg", "Ruth", "1Sam", "2Sam", "1Kgs", "2Kgs",
     "1Chr", "2Chr", "Ezra", "Neh", "Esth", "Job", "Ps", "Prov", "Eccl", "Song", "Isa", "Jer",
     "Lam", "Ezek", "Dan", "Hos", "Joel", "Amos", "Obad", "Jonah", "Mic", "Nah", "Hab", "Zeph",
     "Hag", "Zech", "Mal", "Matt", "Mark", "Luke", "John", "Acts", "Rom", "1Cor", "2Cor", "Gal",
     "Eph", "Phil", "Col", "1Thess", "2Thess", "1Tim", "2Tim", "Titus", "Phlm", "Heb", "Jas",
     "1Pet", "2Pet", "1John", "2John", "3John", "Jude", "Rev"]))
GROUP_STARTS = [("Gen", "law"), ("Josh", "history"), ("Job", "wisdom"),
                ("Isa", "major prophets"), ("Hos", "minor prophets"), ("Matt", "gospels"),
                ("Acts", "acts"), ("Rom", "Pauline letters"), ("Heb", "general letters"),
                ("Rev", "revelation")]

# ---- Reading mod2imp output ----------------------------------------------------------------

ENTRY_RE = re.compile(r"^\$\$\$(.*)$")
VERSE_KEY_RE = re.compile(r"^(.+) (\d+):(\d+)$")


def read_imp(path):
    """Returns {(book, chapter, verse): markup} for real verses (chapter and verse >= 1) and the
    list of books in order of appearance. Headings ($$$[ ... ]) and chapter/book introductions
    (verse 0) are skipped."""
    entries = {}
    books = []
    key = None
    lines = []

    def flush():
        if key is not None:
            entries[key] = "\n".join(lines)

    try:
        with open(path, encoding="utf-8", newline="") as f:
            for number, line in enumerate(f, 1):
                line = line.rstrip("\r\n")
                m = ENTRY_RE.match(line)
                if m:
                    flush()
                    key, lines = None, []
                    v = VERSE_KEY_RE.match(m.group(1).strip())
                    if v and int(v.group(2)) >= 1 and int(v.group(3)) >= 1:
                        key = (v.group(1), int(v.group(2)), int(v.group(3)))
                        if key in entries:
                            raise SystemExit(f"{path}:{number}: verse {m.group(1)} appears twice")
                        if not books or books[-1] != key[0]:
                            books.append(key[0])
                elif key is not None:
                    lines.append(line)
            flush()
    except UnicodeDecodeError as e:
        raise SystemExit(f"{path}: not UTF-8 ({e})")
    except OSError as e:
        raise SystemExit(f"{path}: {e.strerror}")
    return entries, books


# ---- Cleaning --------------------------------------------------------------------------------

TAG_RE = re.compile(r"<(/?)([A-Za-z][\w:.-]*)([^>]*?)(/?)>")
ATTR_RE = re.compile(r'([\w:-]+)\s*=\s*"([^"]*)"')

# Elements removed with their contents: OSIS notes (footnotes and cross-references), section
# headings (titles unless canonical), speaker labels; ThML notes and scripture references.
DROP_ELEMENTS = {"note", "speaker", "scripRef", "title"}
# GBF pairs removed with their contents: footnote RF..Rf, cross-reference RX..Rx, title TS..Ts.
GBF_DROP = {"RF": "Rf", "RX": "Rx", "TS": "Ts"}
# Elements whose tags separate words (blocks, lines, milestones); other tags join (w, q, hi...).
BLOCK_ELEMENTS = {"l", "lg", "lb", "p", "div", "item", "list", "title", "chapter", "verse",
                  "milestone", "br", "CM", "CL", "table", "row", "cell", "head", "closer"}
NOTE_GAP = "\x00"  # where a dropped element stood; a space unless punctuation follows
CLOSING_PUNCT = ",.;:!?)]}”’»"


def clean(markup):
    """Plain text of one verse's markup (see the module docstring)."""
    out = []
    drop = []  # stack of closing tag names we are skipping to
    pos = 0
    for m in TAG_RE.finditer(markup):
        if not drop:
            out.append(markup[pos:m.start()])
        pos = m.end()
        closing, name, attr_text, empty = m.group(1) == "/", m.group(2), m.group(3), m.group(4)
        attrs = dict(ATTR_RE.findall(attr_text))
        if drop:
            # Nested elements of the same name inside a dropped one (rare) are tracked too.
            if not closing and not empty and name == drop[-1][0]:
                drop.append((name, drop[-1][1]))
            elif (closing and name == drop[-1][0]) or (not closing and name == drop[-1][1]):
                drop.pop()
                if not drop:
                    out.append(NOTE_GAP)
            continue
        if name == "div" and attrs.get("type") == "book" and "eID" in attrs:
            pos = len(markup)  # what follows the end of a book is not part of this verse
            break
        if not closing and not empty:
            if name in DROP_ELEMENTS and not (name == "title" and attrs.get("canonical") == "true"):
                drop.append((name, None))
                continue
            if name in GBF_DROP:
                drop.append((name, GBF_DROP[name]))
                continue
        if name == "q" and attrs.get("marker"):
            out.append(attrs["marker"])  # OSIS asks for the marker to be shown; WEB leaves it ""
        if name in BLOCK_ELEMENTS:
            out.append(" ")
    if not drop:
        out.append(markup[pos:])
    text = html.unescape("".join(out))
    text = re.sub(r"\s*" + NOTE_GAP + r"+\s*(?=[" + re.escape(CLOSING_PUNCT) + "])", "", text)
    text = text.replace(NOTE_GAP, " ")
    return " ".join(text.split())


class DropCapitals:
    """The Spanish text prints the first word of each chapter in capitals ('EN el principio',
    'Y ACONTECIÓ', 'MAS Jehová'). Such a word in the first two of verse 1 is rewritten the way the
    rest of the text writes it: capitalised if it is usually capitalised inside a sentence (a
    name: 'JEHOVÁ'), in lower case otherwise, with a capital at the start of a sentence."""

    WORD_RE = re.compile(r"[^\W\d_]+")

    def __init__(self, texts):
        self.lower, self.title = Counter(), Counter()
        for text in texts:
            for m in list(self.WORD_RE.finditer(text))[1:]:
                w = m.group(0)
                if w.islower():
                    self.lower[w] += 1
                elif w[0].isupper() and w[1:].islower():
                    self.title[w.lower()] += 1

    def __call__(self, text):
        for k, m in enumerate(self.WORD_RE.finditer(text)):
            if k >= 2:
                break
            w = m.group(0)
            if len(w) < 2 or not w.isupper():
                continue
            low = w.lower()
            if self.title[low] > self.lower[low]:
                new = w[0] + low[1:]
            elif self.lower[low] > 0:
                before = text[:m.start()].rstrip()
                sentence_start = not before or before[-1] in ".!?¡¿:"
                new = w[0] + low[1:] if sentence_start else low
            else:
                continue
            return text[:m.start()] + new + text[m.end():]
        return text


# Spanish epistles end with a KJV-style subscription after the closing "Amén." ("Escrita de
# Roma con Epafrodito."), which the English text does not have.
SUBSCRIPTION_RE = re.compile(r"(Amén\.)\s+[^.]*\b(escrita|enviada)\b.*$", re.IGNORECASE)


# ---- Alignment -------------------------------------------------------------------------------


def verse_tables(entries, is_source):
    table = {}
    for (book, chapter, verse), markup in entries.items():
        table.setdefault(book, {}).setdefault(chapter, {})[verse] = clean(markup)
    if is_source:
        fix_caps = DropCapitals(v for b in table.values() for c in b.values() for v in c.values())
        for chapters in table.values():
            for verses in chapters.values():
                if 1 in verses:
                    verses[1] = fix_caps(verses[1])
            last_chapter = chapters[max(chapters)]
            last = max(last_chapter)
            last_chapter[last] = SUBSCRIPTION_RE.sub(r"\1", last_chapter[last])
    return table


WORD_RE = re.compile(r"\w+")


def content_words(text):
    return set(w for w in WORD_RE.findall(text.lower()) if not w.isdigit())


class Lexicon:
    """Word associations (Dice coefficient of verse co-occurrence) learned from the pairs aligned
    by reference: enough to tell which English verse a Spanish verse translates when the
    numbering disagrees. Very frequent words (in more than 1 verse in 20) carry no signal and
    are left out, which also keeps the counting fast."""

    def __init__(self, pairs, min_dice=0.3):
        df_s, df_t, co = Counter(), Counter(), Counter()
        sides = [(content_words(s), content_words(t)) for s, t in pairs]
        for s, t in sides:
            df_s.update(s)
            df_t.update(t)
        limit = max(20, len(pairs) // 20)
        keep_s = {w for w, n in df_s.items() if 2 <= n <= limit}
        keep_t = {w for w, n in df_t.items() if 2 <= n <= limit}
        for s, t in sides:
            co.update(itertools.product(s & keep_s, t & keep_t))
        self.translations = {}
        for (ws, wt), n in co.items():
            if n >= 2 and 2.0 * n / (df_s[ws] + df_t[wt]) >= min_dice:
                self.translations.setdefault(ws, set()).add(wt)

    def similarity(self, source, target):
        """Share of the source's known words that have a translation in the target, in [0, 1]."""
        known = [w for w in content_words(source) if w in self.translations]
        if not known:
            return 0.0
        t = content_words(target)
        return sum(1 for w in known if self.translations[w] & t) / len(known)


def monotone_matches(src, tgt, lexicon, threshold=0.35):
    """One-to-one, order-preserving matches between two lists of verses maximising the summed
    similarity above `threshold` (unmatched verses cost nothing). Returns [(i, j)]."""
    n, m = len(src), len(tgt)
    gain = [[lexicon.similarity(s, t) - threshold for t in tgt] for s in src]
    best = [[0.0] * (m + 1) for _ in range(n + 1)]
    for i in range(1, n + 1):
        for j in range(1, m + 1):
            g = gain[i - 1][j - 1]
            best[i][j] = max(best[i - 1][j], best[i][j - 1],
                             best[i - 1][j - 1] + g if g > 0 else float("-inf"))
    pairs = []
    i, j = n, m
    while i > 0 and j > 0:
        g = gain[i - 1][j - 1]
        if g > 0 and best[i][j] == best[i - 1][j - 1] + g:
            pairs.append((i - 1, j - 1))
            i, j = i - 1, j - 1
        elif best[i][j] == best[i - 1][j]:
            i -= 1
        else:
            j -= 1
    return pairs[::-1]


def align(src_table, tgt_table, books):
    """Returns [(book, chapter, verse, source, target)] in canonical order and a dict of counts."""
    stats = {"by_reference": 0, "realigned": 0, "realigned_chapters": 0, "unmatched": 0,
             "length_outliers": 0}
    pairs = []  # (book, chapter, verse, source, target), or (book, run) for a run to re-align
    for book in books:
        s_book, t_book = src_table[book], tgt_table[book]
        chapters = sorted(set(s_book) | set(t_book))
        # A chapter whose last verse has text on one side only is numbered differently by the
        # two texts (the other side ran out of verses, or moved them to the next chapter): it
        # and the next chapter are disturbed. A verse missing in the middle of a chapter is one
        # that a text leaves out (the WEB relegates Luke 17:36 to a footnote): skip it alone.
        disturbed = set()
        for c in chapters:
            s, t = s_book.get(c, {}), t_book.get(c, {})
            last = max(set(s) | set(t))
            if bool(s.get(last)) != bool(t.get(last)):
                disturbed.update((c, c + 1))
        k = 0
        while k < len(chapters):
            c = chapters[k]
            if c not in disturbed:
                s, t = s_book.get(c, {}), t_book.get(c, {})
                for v in sorted(set(s) | set(t)):
                    if s.get(v) and t.get(v):
                        pairs.append((book, c, v, s[v], t[v]))
                        stats["by_reference"] += 1
                k += 1
                continue
            run = []
            while k < len(chapters) and chapters[k] in disturbed:
                run.append(chapters[k])
                k += 1
            pairs.append((book, run))

    lexicon = Lexicon([(p[3], p[4]) for p in pairs if len(p) == 5])
    aligned = []
    for p in pairs:
        if len(p) == 5:
            aligned.append(p + (False,))
            continue
        book, run = p
        src = [x for c in run for _, x in sorted(src_table[book].get(c, {}).items()) if x]
        tgt = [(c, v, x) for c in run for v, x in sorted(tgt_table[book].get(c, {}).items()) if x]
        matched = monotone_matches(src, [x for _, _, x in tgt], lexicon)
        stats["realigned_chapters"] += len(run)
        stats["unmatched"] += len(src) + len(tgt) - 2 * len(matched)
        for i, j in matched:
            # Name the pair by its English reference: the WEB numbers verses the usual way.
            c, v, t = tgt[j]
            aligned.append((book, c, v, src[i], t, True))
            stats["realigned"] += 1

    kept = []
    for p in aligned:
        ls, lt = len(p[3]), len(p[4])
        # Spanish runs about as long as English in characters (the log ratio has a standard
        # deviation of 0.15); beyond a factor 2.2 (with slack for short verses) one side holds
        # text the other lacks. Re-aligned verses get a tighter bound: there, a verse that SWORD
        # merged with its neighbour matches one of the two by content.
        limit = 1.7 if p[5] else 2.2
        r = (ls + 20.0) / (lt + 20.0)
        if r > limit or r < 1 / limit:
            stats["length_outliers"] += 1
            continue
        kept.append(p[:5])
    return kept, stats


# ---- The book-classification set ------------------------------------------------------------


def book_split(chapter):
    """The classification split of a chapter: every tenth to test, another tenth to validation."""
    return "test" if chapter % 10 == 2 else "valid" if chapter % 10 == 6 else "train"


def groups():
    """[(label, group)] in canonical order."""
    labels = list(OSIS.values())
    starts = {label: group for label, group in GROUP_STARTS}
    rows, group = [], None
    for label in labels:
        group = starts.get(label, group)
        rows.append((label, group))
    return rows


def write_books(out, pairs):
    """The classification set of `pairs` under out/books/; returns {split: rows}."""
    os.makedirs(out, exist_ok=True)
    splits = {"train": [], "valid": [], "test": []}
    for p in pairs:
        if p[0] not in OSIS:
            continue  # a book outside the 66 (the fixture's Tobit)
        splits[book_split(p[1])].append(p)
    for name, rows in splits.items():
        with open(os.path.join(out, f"{name}.es.tsv"), "w", encoding="utf-8", newline="\n") as es, \
                open(os.path.join(out, f"{name}.en.tsv"), "w", encoding="utf-8", newline="\n") as en, \
                open(os.path.join(out, f"{name}.ref"), "w", encoding="utf-8", newline="\n") as ref:
            for book, c, v, s, t in rows:
                es.write(f"{s}\t{OSIS[book]}\n")
                en.write(f"{t}\t{OSIS[book]}\n")
                ref.write(f"{book} {c}:{v}\n")
    for name, mt in (("train", "mt-train"), ("valid", "mt-valid")):
        with open(os.path.join(out, mt + ".tsv"), "w", encoding="utf-8", newline="\n") as f:
            for _, _, _, s, t in splits[name]:
                f.write(f"{s}\t{t}\n")
    with open(os.path.join(out, "groups.tsv"), "w", encoding="utf-8", newline="\n") as f:
        for label, group in groups():
            f.write(f"{label}\t{group}\n")
    return splits


# ---- Command line ----------------------------------------------------------------------------


def book_key(name):
    """'1 Samuel', 'i samuel', 'I Samuel' -> 'i samuel'; 'Revelation' matches 'Revelation of John'."""
    words = name.strip().lower().split()
    roman = {"1": "i", "2": "ii", "3": "iii", "first": "i", "second": "ii", "third": "iii"}
    if words and words[0] in roman:
        words[0] = roman[words[0]]
    key = " ".join(words)
    return "revelation of john" if key == "revelation" else key


def resolve_books(names, books, option):
    by_key = {book_key(b): b for b in books}
    resolved = []
    for n in names:
        if book_key(n) not in by_key:
            raise SystemExit(f"{option}: no book named '{n}' in both texts (books: {', '.join(books)})")
        resolved.append(by_key[book_key(n)])
    return resolved


def export_module(module, path):
    exe = shutil.which("mod2imp")
    if exe is None:
        raise SystemExit("mod2imp not found: apt-get install libsword-utils sword-text-sparv "
                         "sword-text-web (or give --from-imp SRC.imp TGT.imp)")
    with open(path, "w", encoding="utf-8") as f:
        result = subprocess.run([exe, module], stdout=f, stderr=subprocess.PIPE, text=True)
    if result.returncode != 0 or os.path.getsize(path) == 0:
        raise SystemExit(f"mod2imp {module} failed (is its package installed? `installmgr -l` "
                         f"lists the modules): {result.stderr.strip()}")


def main(argv=None):
    parser = argparse.ArgumentParser(
        description="Spanish -> English verse pairs from the SWORD Reina-Valera 1909 and WEB.",
        epilog="example: python3 datasets/bible_corpus.py --out data/bible")
    parser.add_argument("--out", required=True, help="output directory (created)")
    parser.add_argument("--test-books", nargs="+", default=DEFAULT_TEST_BOOKS, metavar="BOOK")
    parser.add_argument("--valid-books", nargs="+", default=DEFAULT_VALID_BOOKS, metavar="BOOK")
    parser.add_argument("--from-imp", nargs=2, metavar=("SRC.imp", "TGT.imp"),
                        help="read mod2imp exports instead of running mod2imp")
    args = parser.parse_args(argv)

    os.makedirs(args.out, exist_ok=True)
    if args.from_imp:
        src_path, tgt_path = args.from_imp
    else:
        src_path = os.path.join(args.out, SOURCE_MODULE + ".imp")
        tgt_path = os.path.join(args.out, TARGET_MODULE + ".imp")
        export_module(SOURCE_MODULE, src_path)
        export_module(TARGET_MODULE, tgt_path)

    src_entries, src_books = read_imp(src_path)
    tgt_entries, tgt_books = read_imp(tgt_path)
    books = [b for b in src_books if b in set(tgt_books)]
    if not books:
        raise SystemExit(f"{src_path} and {tgt_path} have no book in common")
    test = resolve_books(args.test_books, books, "--test-books")
    valid = resolve_books(args.valid_books, books, "--valid-books")
    overlap = set(test) & set(valid)
    if overlap:
        raise SystemExit(f"books in both --test-books and --valid-books: {', '.join(sorted(overlap))}")

    pairs, stats = align(verse_tables(src_entries, True), verse_tables(tgt_entries, False), books)
    splits = {"train": [], "valid": [], "test": []}
    for p in pairs:
        splits["test" if p[0] in test else "valid" if p[0] in valid else "train"].append(p)

    for name, rows in splits.items():
        files = {ext: open(os.path.join(args.out, f"{name}.{ext}"), "w", encoding="utf-8",
                           newline="\n") for ext in ("tsv", "es", "en", "ref")}
        for book, c, v, s, t in rows:
            files["tsv"].write(f"{s}\t{t}\n")
            files["es"].write(s + "\n")
            files["en"].write(t + "\n")
            files["ref"].write(f"{book} {c}:{v}\n")
        for f in files.values():
            f.close()

    print(f"books: {len(books)} in both texts; test: {', '.join(test)}; valid: {', '.join(valid)}")
    print(f"aligned by reference: {stats['by_reference']}, re-aligned by content: "
          f"{stats['realigned']} in {stats['realigned_chapters']} chapters "
          f"({stats['unmatched']} verses left unmatched), dropped as length outliers: "
          f"{stats['length_outliers']}")
    for name, rows in splits.items():
        print(f"{name}: {len(rows)} pairs -> {os.path.join(args.out, name + '.tsv')}")
    print(f"total: {len(pairs)} pairs")
    books_dir = os.path.join(args.out, "books")
    for name, rows in write_books(books_dir, pairs).items():
        print(f"books {name}: {len(rows)} verses, {len({(p[0], p[1]) for p in rows})} chapters -> "
              f"{os.path.join(books_dir, name)}.{{es,en}}.tsv")
    return 0


if __name__ == "__main__":
    sys.exit(main())
