// Reading parallel text (datasets/parallel.h): every kind of bad input gets a message with file
// and line. (The token batcher that makes batches of the pairs: seq2seq/test_token_batcher.cpp.)
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common/error.h"
#include "datasets/parallel.h"
#include "util/test_util.h"

namespace {

using vitk::datasets::ParallelReport;
using vitk::datasets::read_parallel;
using vitk::test::error_of;

class Parallel : public ::testing::Test {
 protected:
  std::string write(const std::string& name, const std::string& text) {
    return dir_.write(name, text);
  }
  vitk::test::TempDir dir_{"vitk_parallel"};
};

TEST_F(Parallel, TsvWithSkips) {
  const std::string tsv = write("c.tsv",
                                "\xef\xbb\xbfhola\thello\r\n"  // BOM and CRLF
                                "\tempty source\n"
                                "empty target\t \n"
                                "\n"
                                "largo largo largo\tlong\n"
                                "adiós\tgoodbye");  // no final newline
  ParallelReport report;
  const auto c = read_parallel(tsv, "", 12, &report);
  EXPECT_EQ(c.source, (std::vector<std::string>{"hola", "adiós"}));
  EXPECT_EQ(c.target, (std::vector<std::string>{"hello", "goodbye"}));
  EXPECT_EQ(c.line, (std::vector<int64_t>{1, 6}));
  EXPECT_EQ(report.read, 6);
  EXPECT_EQ(report.kept, 2);
  EXPECT_EQ(report.empty, 3);
  EXPECT_EQ(report.too_long, 1);
  // Without a length limit the long pair stays; a null report is fine.
  EXPECT_EQ(read_parallel(tsv, "", 0, nullptr).source.size(), 3u);
}

TEST_F(Parallel, TwoFiles) {
  const std::string src = write("c.es", "uno\ndos\n\ncuatro\n");
  const std::string tgt = write("c.en", "one\r\ntwo\r\nthree\r\nfour\r\n");
  ParallelReport report;
  const auto c = read_parallel(src, tgt, 0, &report);
  EXPECT_EQ(c.source, (std::vector<std::string>{"uno", "dos", "cuatro"}));
  EXPECT_EQ(c.target, (std::vector<std::string>{"one", "two", "four"}));
  EXPECT_EQ(c.line, (std::vector<int64_t>{1, 2, 4}));
  EXPECT_EQ(report.empty, 1);
  EXPECT_EQ(report.read, 4);
}

TEST_F(Parallel, ErrorsNameFileAndLine) {
  const std::string src = write("a.es", "uno\ndos\ntres\n");
  const std::string tgt = write("a.en", "one\ntwo\n");
  std::string m = error_of([&] { read_parallel(src, tgt, 0, nullptr); });
  EXPECT_NE(m.find(src + " has 3 lines"), std::string::npos) << m;
  EXPECT_NE(m.find(tgt + " has 2 lines"), std::string::npos) << m;

  const std::string bad = write("b.en",
                                "one\ntw\xff"
                                "o\nthree\n");
  m = error_of([&] { read_parallel(src, bad, 0, nullptr); });
  EXPECT_NE(m.find(bad + ":2: invalid UTF-8 at byte offset 2"), std::string::npos) << m;
  // Overlong encodings and surrogates are invalid too.
  for (const std::string seq : {"\xc0\xaf", "\xed\xa0\x80", "\xf4\x90\x80\x80", "\xe2\x82"}) {
    const std::string f = write("u.tsv", "ok\tfine\nab" + seq + "\tx\n");
    m = error_of([&] { read_parallel(f, "", 0, nullptr); });
    EXPECT_NE(m.find(f + ":2: invalid UTF-8 at byte offset 2"), std::string::npos) << m;
  }

  const std::string tabs = write("t.tsv", "a\tb\nno tab here\n");
  m = error_of([&] { read_parallel(tabs, "", 0, nullptr); });
  EXPECT_NE(m.find(tabs + ":2: expected source<TAB>target, found 0 tabs"), std::string::npos) << m;
  const std::string two = write("t2.tsv", "a\tb\tc\n");
  m = error_of([&] { read_parallel(two, "", 0, nullptr); });
  EXPECT_NE(m.find(two + ":1:"), std::string::npos) << m;

  m = error_of([&] { read_parallel((dir_ / "none.tsv").string(), "", 0, nullptr); });
  EXPECT_NE(m.find("none.tsv"), std::string::npos) << m;
}

}  // namespace
