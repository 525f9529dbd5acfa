// `vitk bleu` as a user runs it: the score and sacreBLEU's signature for a hypothesis file or
// standard input, and files whose line counts differ named in the error. (Corpus BLEU itself:
// common/test_bleu.cpp.)
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "util/test_util.h"
#include "util/vitk_process.h"

namespace {

class BleuCli : public ::testing::Test {
 protected:
  std::string write(const std::string& name, const std::string& text) {
    return dir_.write(name, text);
  }
  // Runs `vitk ARGS` (with optional standard input) and returns the exit code.
  int run(const std::vector<std::string>& args, const std::string& stdin_text = "") {
    dir_.write("stdin.txt", stdin_text);
    const vitk::testing::ProcessResult r =
        vitk::testing::run_vitk(dir_.path(), args, "run", "stdin.txt");
    out_ = r.out;
    err_ = r.err;
    return r.status;
  }

  vitk::test::TempDir dir_{"vitk_bleu"};
  std::string out_, err_;
};

TEST_F(BleuCli, PrintsScoreAndSignature) {
  const std::string hyp = write("hyp.txt",
                                "The dog bit the man.\nIt wasn't surprising.\r\n"
                                "The man had just bitten him.\n");
  const std::string r1 = write("r1.txt",
                               "The dog bit the man.\nIt was not unexpected.\n"
                               "The man bit him first.\n");
  const std::string r2 = write("r2.txt",
                               "The dog had bit the man.\nNo one was surprised.\n"
                               "The man had bitten the dog.\n");
  ASSERT_EQ(run({"bleu", "--ref", r1, "--ref", r2, hyp}), 0) << err_;
  EXPECT_EQ(
      out_,
      "BLEU = 48.53 82.4/50.0/45.5/37.5 (BP = 0.943 ratio = 0.944 hyp_len = 17 ref_len = 18)\n"
      "nrefs:2|case:mixed|eff:no|tok:13a|smooth:exp|version:2.4.0\n");
  // The hypothesis from standard input, the score alone.
  ASSERT_EQ(
      run({"bleu", "--ref", r1, "--ref", r2, "--score-only", "-"}, vitk::test::read_file(hyp)), 0)
      << err_;
  EXPECT_EQ(out_, "48.53\n");
  // An empty reference line: nrefs:var.
  const std::string r1_gap =
      write("r1gap.txt", "\nIt was not unexpected.\nThe man bit him first.\n");
  ASSERT_EQ(run({"bleu", "--ref", r1_gap, "--ref", r2, hyp}), 0) << err_;
  EXPECT_NE(out_.find("BLEU = 29.44 "), std::string::npos) << out_;
  EXPECT_NE(out_.find("nrefs:var|"), std::string::npos) << out_;
}

TEST_F(BleuCli, LineCountMismatchNamesBothFiles) {
  const std::string hyp = write("hyp.txt", "a\nb\nc\n");
  const std::string ref = write("ref.txt", "a\nb\n");
  EXPECT_EQ(run({"bleu", "--ref", ref, hyp}), 1);
  EXPECT_NE(err_.find(hyp + " has 3 lines"), std::string::npos) << err_;
  EXPECT_NE(err_.find(ref + " has 2"), std::string::npos) << err_;
  EXPECT_EQ(run({"bleu", "--ref", (dir_ / "missing.txt").string(), hyp}), 1);
  EXPECT_NE(err_.find("missing.txt"), std::string::npos) << err_;
  EXPECT_EQ(run({"bleu", hyp}), 2);  // --ref is required
}

}  // namespace
