// The SentencePiece wrapper: fixed special ids, round trips, determinism, quiet training, the
// model as bytes and as a file, and clear errors.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "common/error.h"
#include "datasets/tokenizer.h"
#include "util/test_util.h"

namespace {

namespace fs = std::filesystem;
using vitk::datasets::Tokenizer;
using vitk::datasets::TokenizerOptions;

// A few hundred sentences from a vocabulary of about 120 words, the same every run.
std::vector<std::string> corpus(int sentences = 600) {
  std::vector<std::string> words = {"the",      "king", "said",   "to",    "his",
                                    "servants", "and",  "they",   "went",  "into",
                                    "city",     "of",   "people", "water", "bread"};
  const std::vector<std::string> syllables = {"ka", "lo", "mi", "ne", "su", "ta", "ri", "po", "de"};
  for (size_t a = 0; a < syllables.size(); ++a) {
    for (size_t b = 0; b < syllables.size(); ++b) {
      if ((a + b) % 3 == 0) words.push_back(syllables[a] + syllables[b]);
      if ((a * b) % 7 == 1) words.push_back(syllables[a] + syllables[b] + syllables[(a + b) % 9]);
    }
  }
  std::mt19937 rng(7);
  std::vector<std::string> out;
  for (int i = 0; i < sentences; ++i) {
    std::string s;
    const int n = 4 + static_cast<int>(rng() % 10);
    for (int k = 0; k < n; ++k) {
      if (k) s += ' ';
      // The first words are frequent (a Zipf-like skew), the rest rare.
      const size_t w = std::min(rng() % words.size(), rng() % words.size());
      s += words[w];
    }
    s += (i % 3 == 0) ? "." : ",";
    out.push_back(s);
  }
  return out;
}

TokenizerOptions small(const std::string& type = "bpe", int vocab = 120) {
  TokenizerOptions o;
  o.model_type = type;
  o.vocab_size = vocab;
  return o;
}

TEST(Tokenizer, EmptyIsNotUsable) {
  Tokenizer t;
  EXPECT_FALSE(t.usable());
  EXPECT_EQ(t.size(), 0);
  EXPECT_TRUE(t.bytes().empty());
  EXPECT_THROW(t.encode("x"), vitk::Error);
  EXPECT_THROW(t.decode({4}), vitk::Error);
}

TEST(Tokenizer, SpecialIdsAndRoundTrip) {
  for (const std::string type : {"bpe", "unigram"}) {
    SCOPED_TRACE(type);
    const auto text = corpus();
    // Unigram's seed vocabulary of this small text allows fewer pieces than BPE's merges.
    const int vocab = type == "unigram" ? 80 : 120;
    const Tokenizer t = Tokenizer::train(text, small(type, vocab));
    ASSERT_TRUE(t.usable());
    EXPECT_EQ(t.size(), vocab);
    EXPECT_EQ(t.pieces({Tokenizer::kPad, Tokenizer::kUnk, Tokenizer::kBos, Tokenizer::kEos}),
              (std::vector<std::string>{"<pad>", "<unk>", "<s>", "</s>"}));
    for (int i = 0; i < 20; ++i) {
      const auto ids = t.encode(text[i]);
      ASSERT_FALSE(ids.empty());
      for (int id : ids) {
        EXPECT_GT(id, Tokenizer::kEos);  // no BOS/EOS/pad added, no unknown piece
        EXPECT_LT(id, t.size());
      }
      EXPECT_EQ(t.decode(ids), text[i]);
      // Padding, BOS and EOS are ignored by decode.
      std::vector<int> framed = {Tokenizer::kBos};
      framed.insert(framed.end(), ids.begin(), ids.end());
      framed.insert(framed.end(), {Tokenizer::kEos, Tokenizer::kPad, Tokenizer::kPad});
      EXPECT_EQ(t.decode(framed), text[i]);
    }
    // Subwords: the most frequent word is one piece, "▁" marks a word start; the pieces spell
    // the text.
    const auto pieces = t.pieces(t.encode("the king"));
    ASSERT_FALSE(pieces.empty());
    EXPECT_EQ(pieces[0], "\xe2\x96\x81the");
    std::string spelled;
    for (const auto& p : pieces) spelled += p;
    EXPECT_EQ(spelled, "\xe2\x96\x81the\xe2\x96\x81king");
    // A character never seen is the unknown piece.
    const auto unk = t.encode("the \xd0\xb6");  // Cyrillic zhe
    EXPECT_NE(std::find(unk.begin(), unk.end(), Tokenizer::kUnk), unk.end());
    EXPECT_TRUE(t.encode("").empty());
    EXPECT_EQ(t.decode({}), "");
  }
}

TEST(Tokenizer, TrainingIsDeterministicAndQuiet) {
  const auto text = corpus();
  testing::internal::CaptureStderr();
  const Tokenizer a = Tokenizer::train(text, small("unigram", 80));
  const Tokenizer b = Tokenizer::train(text, small("unigram", 80));
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(err, "") << "SentencePiece logged while training";
  EXPECT_EQ(a.bytes(), b.bytes());
  // A seeded sample of the sentences: also deterministic, and a different model.
  TokenizerOptions sample = small("bpe", 80);
  sample.max_sentences = 200;
  const Tokenizer c = Tokenizer::train(text, sample), d = Tokenizer::train(text, sample);
  EXPECT_EQ(c.bytes(), d.bytes());
  EXPECT_NE(c.bytes(), Tokenizer::train(text, small("bpe", 80)).bytes());
}

TEST(Tokenizer, BytesAndFileRoundTrip) {
  const auto text = corpus();
  const Tokenizer t = Tokenizer::train(text, small());
  const Tokenizer u = Tokenizer::from_bytes(t.bytes());
  EXPECT_EQ(u.bytes(), t.bytes());
  EXPECT_EQ(u.size(), t.size());
  EXPECT_EQ(u.encode(text[3]), t.encode(text[3]));

  const vitk::test::TempDir temp("vitk_spm");
  const fs::path dir = temp.path();
  t.save((dir / "m.model").string());
  const Tokenizer v = Tokenizer::load((dir / "m.model").string());
  EXPECT_EQ(v.encode(text[5]), t.encode(text[5]));
  // Copies share the model.
  const Tokenizer w = v;
  EXPECT_EQ(w.decode(w.encode(text[6])), text[6]);

  // Errors: a missing file, corrupt bytes (named), an empty model.
  try {
    Tokenizer::load((dir / "missing.model").string());
    FAIL() << "no error for a missing file";
  } catch (const vitk::Error& e) {
    EXPECT_NE(std::string(e.what()).find("missing.model"), std::string::npos) << e.what();
  }
  std::ofstream((dir / "bad.model").string(), std::ios::binary) << "this is not a protobuf";
  try {
    Tokenizer::load((dir / "bad.model").string());
    FAIL() << "no error for corrupt bytes";
  } catch (const vitk::Error& e) {
    EXPECT_NE(std::string(e.what()).find("bad.model"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("not a SentencePiece model"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(Tokenizer::from_bytes(""), vitk::Error);
  std::string truncated = t.bytes().substr(0, t.bytes().size() / 2);
  EXPECT_THROW(Tokenizer::from_bytes(truncated), vitk::Error);
}

TEST(Tokenizer, ErrorsNameTheCause) {
  const auto text = corpus(50);
  // More pieces than the text can give.
  try {
    Tokenizer::train(text, small("unigram", 5000));
    FAIL() << "no error for a vocabulary too large";
  } catch (const vitk::Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("5000"), std::string::npos) << m;
    EXPECT_NE(m.find("SentencePiece"), std::string::npos) << m;
  }
  EXPECT_THROW(Tokenizer::train(text, small("word-level")), vitk::Error);
  EXPECT_THROW(Tokenizer::train(text, small("bpe", 4)), vitk::Error);
  EXPECT_THROW(Tokenizer::train({"", ""}, small()), vitk::Error);
  const Tokenizer t = Tokenizer::train(corpus(), small());
  EXPECT_THROW(t.decode({t.size()}), vitk::Error);
  EXPECT_THROW(t.pieces({-1}), vitk::Error);
}

// A phrase becomes one piece wherever it stands, spaces included, and decodes back to its words;
// the words of a phrase alone still encode as before (pieces of their own).
TEST(Tokenizer, PhrasesBecomeOnePieceEach) {
  std::vector<std::string> text = corpus();
  for (int i = 0; i < 200; ++i)
    text.push_back(i % 2 ? "the king went to the left of the city" : "to the right of the water");
  TokenizerOptions o = small();
  o.phrases = {"to the left of", "to the right of"};
  const Tokenizer t = Tokenizer::train(text, o);
  const std::string sentence = "the king went to the left of the city to the right of the water";
  const std::vector<int> ids = t.encode(sentence);
  const std::vector<std::string> pieces = t.pieces(ids);
  for (const char* phrase : {"\xe2\x96\x81to\xe2\x96\x81the\xe2\x96\x81left\xe2\x96\x81of",
                             "\xe2\x96\x81to\xe2\x96\x81the\xe2\x96\x81right\xe2\x96\x81of"})
    EXPECT_EQ(std::count(pieces.begin(), pieces.end(), phrase), 1) << phrase;
  EXPECT_EQ(t.decode(ids), sentence);
  const std::vector<std::string> apart = t.pieces(t.encode("the left of the city"));
  EXPECT_EQ(std::count_if(apart.begin(), apart.end(),
                          [](const std::string& p) {
                            return p.find("left") != std::string::npos &&
                                   p.find("of") != std::string::npos;
                          }),
            0);

  // Without phrases, the same sentence takes more pieces.
  const Tokenizer plain = Tokenizer::train(text, small());
  EXPECT_GT(plain.encode(sentence).size(), ids.size());

  for (const std::string bad : {"", " to the left", "to the left ", "to  the left", "left,right"}) {
    o.phrases = {bad};
    try {
      Tokenizer::train(text, o);
      ADD_FAILURE() << "no error for the phrase '" << bad << "'";
    } catch (const vitk::Error& e) {
      EXPECT_NE(std::string(e.what()).find("phrase '" + bad + "'"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
