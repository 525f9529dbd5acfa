// Corpus BLEU against sacreBLEU's published values (its README and test/test_bleu.py), the
// mteval-v13a tokenizer against hand-applied rules, a hand-computed case and edge cases. (`vitk
// bleu` as a user runs it: tools/test_bleu_cli.cpp.)
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "common/decode/bleu.h"
#include "common/error.h"

namespace {

using vitk::decode::BleuResult;
using vitk::decode::corpus_bleu;
using vitk::decode::format_bleu;
using vitk::decode::tokenize_13a;

// sacreBLEU's README example: three segments, two reference sets.
const std::vector<std::string> kHyps = {"The dog bit the man.", "It wasn't surprising.",
                                        "The man had just bitten him."};
const std::vector<std::vector<std::string>> kRefs = {
    {"The dog bit the man.", "It was not unexpected.", "The man bit him first."},
    {"The dog had bit the man.", "No one was surprised.", "The man had bitten the dog."}};

TEST(Bleu, SacreBleuReadmeExample) {
  const BleuResult r = corpus_bleu(kHyps, kRefs);
  // test_bleu.py: test_corpus_bleu, default settings.
  EXPECT_NEAR(r.score, 48.530827, 1e-6);
  EXPECT_EQ(
      format_bleu(r),
      "BLEU = 48.53 82.4/50.0/45.5/37.5 (BP = 0.943 ratio = 0.944 hyp_len = 17 ref_len = 18)");
  EXPECT_EQ(vitk::decode::bleu_signature(2),
            "nrefs:2|case:mixed|eff:no|tok:13a|smooth:exp|version:2.4.0");
  // No order without a match, so 'exp' smoothing changes nothing (test_bleu.py: smooth 'none').
  for (int n = 0; n < 4; ++n) EXPECT_GT(r.counts[n], 0);
}

TEST(Bleu, VariableNumberOfReferences) {
  // README, "Variable Number of References": an empty reference is skipped for its segment.
  auto refs = kRefs;
  refs[0][0] = "";
  EXPECT_EQ(
      format_bleu(corpus_bleu(kHyps, refs)),
      "BLEU = 29.44 82.4/42.9/27.3/12.5 (BP = 0.889 ratio = 0.895 hyp_len = 17 ref_len = 19)");
  EXPECT_EQ(vitk::decode::bleu_signature(-1),
            "nrefs:var|case:mixed|eff:no|tok:13a|smooth:exp|version:2.4.0");
  refs[1][0] = "";
  EXPECT_THROW(corpus_bleu(kHyps, refs), vitk::Error);  // no reference left for segment 1
}

TEST(Bleu, EmptyHypothesesAreScoredNotRemoved) {
  // test_bleu.py: three empty hypotheses against the README references score 0.
  const BleuResult r = corpus_bleu({"", "", ""}, kRefs);
  EXPECT_EQ(r.score, 0.0);
  EXPECT_EQ(r.hyp_len, 0);
  EXPECT_EQ(r.ref_len, 6 + 5 + 6);  // the references closest to 0 words: the shortest
  EXPECT_EQ(r.bp, 0.0);
}

TEST(Bleu, Statistics) {
  // test_bleu.py: test_statistics.
  const BleuResult r =
      corpus_bleu({"am I am a character sequence"}, {{"I am a symbol string sequence a a"}});
  const int64_t counts[4] = {4, 2, 1, 0}, totals[4] = {6, 5, 4, 3};
  for (int n = 0; n < 4; ++n) {
    EXPECT_EQ(r.counts[n], counts[n]) << "order " << n + 1;
    EXPECT_EQ(r.totals[n], totals[n]) << "order " << n + 1;
  }
  EXPECT_EQ(r.hyp_len, 6);
  EXPECT_EQ(r.ref_len, 8);
  // exp smoothing of the empty 4-gram order: 1 / (2 * 3) matches; brevity penalty e^(1 - 8/6).
  const double expected =
      100.0 * std::exp(1.0 - 8.0 / 6.0) *
      std::exp((std::log(4.0 / 6) + std::log(2.0 / 5) + std::log(1.0 / 4) + std::log(1.0 / 6)) / 4);
  EXPECT_NEAR(r.score, expected, 1e-9);
}

TEST(Bleu, Scoring) {
  // test_bleu.py: test_scoring, from sufficient statistics.
  const int64_t counts[4] = {9, 7, 5, 3}, totals[4] = {10, 8, 6, 4};
  EXPECT_NEAR(vitk::decode::bleu_from_statistics(counts, totals, 11, 11).score, 83.75922397, 1e-7);
}

TEST(Bleu, HandComputed) {
  // Unigrams 5/6, bigrams 3/5, trigrams 1/4, no 4-gram of 3: smoothed to 1/(2*3). BP = 1.
  const BleuResult r = corpus_bleu({"the cat sat on the mat"}, {{"the cat is on the mat"}});
  EXPECT_NEAR(r.score, 100.0 * std::pow(5.0 / 6 * 3.0 / 5 * 1.0 / 4 * 1.0 / 6, 0.25), 1e-9);
  EXPECT_NEAR(r.precisions[3], 100.0 / 6, 1e-12);
  EXPECT_EQ(r.bp, 1.0);
  // Two orders without a match: 1/2 then 1/4 of a match.
  const BleuResult two = corpus_bleu({"a b c d e"}, {{"a b x c y d e"}});
  EXPECT_EQ(two.counts[2], 0);
  EXPECT_EQ(two.counts[3], 0);
  EXPECT_NEAR(two.precisions[2], 100.0 / (2 * 3), 1e-12);
  EXPECT_NEAR(two.precisions[3], 100.0 / (4 * 2), 1e-12);
  EXPECT_NEAR(two.bp, std::exp(1.0 - 7.0 / 5), 1e-12);
  // Identical text scores 100; a corpus of fewer than 4 words scores 0 (no 4-gram at all).
  EXPECT_NEAR(corpus_bleu({"this is a test"}, {{"this is a test"}}).score, 100.0, 1e-12);
  EXPECT_EQ(corpus_bleu({"a b c"}, {{"a b c"}}).score, 0.0);
  EXPECT_EQ(corpus_bleu({}, {{}}).score, 0.0);
}

TEST(Bleu, ClippingAndClosestReference) {
  // "the" six times against a reference with it twice: clipped to 2 of 6.
  const BleuResult r = corpus_bleu({"the the the the the the"}, {{"the cat on the mat"}});
  EXPECT_EQ(r.counts[0], 2);
  EXPECT_EQ(r.totals[0], 6);
  // The count is clipped by the maximum over the references.
  EXPECT_EQ(corpus_bleu({"the the the"}, {{"the cat"}, {"the the cat"}}).counts[0], 2);
  // Closest reference length, the shorter one on a tie: 4 words against 3 and 5 -> 3.
  EXPECT_EQ(corpus_bleu({"a b c d"}, {{"a b c"}, {"a b c d e"}}).ref_len, 3);
  EXPECT_EQ(corpus_bleu({"a b c d"}, {{"a b c d e"}, {"a b"}}).ref_len, 5);
}

TEST(Bleu, CaseSensitive) {
  EXPECT_EQ(corpus_bleu({"The Cat"}, {{"the cat"}}).counts[0], 0);
}

TEST(Bleu, ReferenceCountMismatchThrows) {
  EXPECT_THROW(corpus_bleu({"a", "b"}, {{"a"}}), vitk::Error);
}

TEST(Tokenize13a, Punctuation) {
  EXPECT_EQ(tokenize_13a("Hello, world."), "Hello , world .");
  EXPECT_EQ(tokenize_13a("It wasn't surprising."), "It wasn't surprising .");
  // Periods and commas stay inside numbers; a dash is split off after a digit only.
  EXPECT_EQ(tokenize_13a("pi is 3.14, or 3,14 in 1999-2000"),
            "pi is 3.14 , or 3,14 in 1999 - 2000");
  EXPECT_EQ(tokenize_13a("well-known"), "well-known");
  EXPECT_EQ(
      tokenize_13a("(a) [b] {c} \"d\" $5 50% a/b x@y #1 a+b a*b a=b a<b a>b a;b a:b a?b a!b "
                   "a&b a^b a_b a`b a|b a~b"),
      "( a ) [ b ] { c } \" d \" $ 5 50 % a / b x @ y # 1 a + b a * b a = b a < b a > b a ; b "
      "a : b a ? b a ! b a & b a ^ b a _ b a ` b a | b a ~ b");
  // A period between a non-digit and a digit is still split (it is not inside a number).
  EXPECT_EQ(tokenize_13a("version.2 and .5"), "version . 2 and . 5");
  EXPECT_EQ(tokenize_13a("5. Then"), "5 . Then");
  // Non-overlapping matches, as re.sub makes them: "a.." splits both periods in two passes.
  EXPECT_EQ(tokenize_13a("Wait.. what,,"), "Wait . . what , ,");
}

TEST(Tokenize13a, EntitiesLineBreaksAndSkipped) {
  EXPECT_EQ(tokenize_13a("&quot;Hi&quot; &amp; &lt;b&gt;"), "\" Hi \" & < b >");
  // &amp; is decoded after &quot;: "&amp;quot;" becomes the text "&quot;", split at & and ;.
  EXPECT_EQ(tokenize_13a("&amp;quot;"), "& quot ;");
  EXPECT_EQ(tokenize_13a("hyphen-\nated line\nbreak"), "hyphenated line break");
  EXPECT_EQ(tokenize_13a("a <skipped> b"), "a b");
}

TEST(Tokenize13a, UnicodeIsLeftAlone) {
  // Only ASCII symbols are split; Python's whitespace (here U+00A0 and U+3000) separates words.
  EXPECT_EQ(tokenize_13a("¿Qué tal? “Bien”, señor."), "¿Qué tal ? “Bien” , señor .");
  EXPECT_EQ(tokenize_13a("a\xc2\xa0"
                         "b\xe3\x80\x80"
                         "c"),
            "a b c");
  EXPECT_EQ(tokenize_13a("  \t "), "");
}

}  // namespace
