// Stopping a job that mpirun runs, as common/dist/README.md says to: SIGUSR1 to mpirun (Open MPI
// passes it on to every rank at once) stops every rank after the same step with last.h5 saved, and
// the job exits 143 as a SIGTERM'ed single process does; the checkpoint resumes. Two ranks of one
// thread on the fixture ViT of tests/fixtures/resume. Under the same mpirun, a second run into the
// folder the job writes is refused (only rank 0 locks it, and nothing else complains).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/types.h>

#include <filesystem>
#include <string>
#include <vector>

#include "common/io/checkpoint.h"
#include "util/parallel_runs.h"
#include "util/test_util.h"
#include "util/vitk_process.h"

namespace {

namespace fs = std::filesystem;
using vitk::test::contains;
using vitk::test::TempDir;
using vitk::testing::Command;
using vitk::testing::ProcessResult;
using vitk::testing::slurp_file;

std::vector<std::string> fixture_train(const std::string& out, std::vector<std::string> extra) {
  const fs::path fixtures = fs::path(VITK_SOURCE_DIR) / "tests/fixtures/resume";
  std::vector<std::string> args = {"train",
                                   "--config",
                                   (fixtures / "vit.ini").string(),
                                   "--data",
                                   (fixtures / "samples.csv").string(),
                                   "--output",
                                   out,
                                   "--batch-size",
                                   "4",
                                   "--threads",
                                   "1"};
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

std::string log_of(const fs::path& dir, const std::string& tag) {
  return slurp_file(dir / (tag + ".out")) + slurp_file(dir / (tag + ".err"));
}

TEST(MpirunStop, SigusrToMpirunSavesEveryRanksRunAndTheJobExits143) {
  if (!fs::exists(VITK_MPIEXEC)) GTEST_SKIP() << VITK_MPIEXEC << " is missing";
  TempDir tmp;
  const fs::path d = tmp.path();
  Command job = vitk::testing::mpirun_vitk_command(
      d, 2, fixture_train("run", {"--epochs", "100000", "--checkpoint-every", "2"}), "job");
  job.timeout_seconds = 300;
  const pid_t mpirun = vitk::testing::spawn_process(job);
  ASSERT_GT(mpirun, 0);
  ASSERT_TRUE(vitk::testing::wait_until(120, [&] { return fs::exists(d / "run/last.h5"); }))
      << log_of(d, "job");

  // The folder is the job's: a second run into it is refused, naming rank 0.
  const ProcessResult second =
      vitk::testing::run_vitk(d, fixture_train("run", {"--resume", "run/last.h5"}), "second");
  EXPECT_EQ(second.status, 2) << second.err;
  EXPECT_TRUE(contains(second.err, "--output run is in use by another vitk run (pid "))
      << second.err;

  ASSERT_EQ(kill(mpirun, SIGUSR1), 0);
  const ProcessResult r = vitk::testing::wait_process(job, mpirun);
  const std::string log = log_of(d, "job");
  EXPECT_FALSE(r.timed_out) << log;
  EXPECT_EQ(r.status, 143) << log;
  EXPECT_TRUE(contains(log, "interrupted at step ")) << log;
  // Every rank stopped after the same step: one interrupted line, from rank 0, and a whole
  // checkpoint that resumes on one process for two more steps.
  EXPECT_EQ(log.find("interrupted at step "), log.rfind("interrupted at step ")) << log;
  const int64_t step = vitk::io::read_checkpoint_meta((d / "run/last.h5").string()).step;
  EXPECT_TRUE(contains(log, "interrupted at step " + std::to_string(step))) << log;
  const ProcessResult rest =
      vitk::testing::run_vitk(d,
                              fixture_train("run", {"--epochs", "100000", "--resume", "run/last.h5",
                                                    "--max-steps", std::to_string(step + 2)}),
                              "rest");
  EXPECT_EQ(rest.status, 0) << rest.out << rest.err;
}

}  // namespace
