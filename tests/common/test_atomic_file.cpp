// The atomic writer (common/io/atomic_file.h) that every file vitk writes goes through, and
// metrics.csv, the one file written row by row: whole files or the previous ones after failures,
// a full disk and kill -9; devices and pipes written in place or refused; errors that name the
// file; no temporary left behind.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "common/error.h"
#include "common/io/atomic_file.h"
#include "common/metrics_csv.h"
#include "util/test_util.h"
#include "util/vitk_process.h"

namespace {

namespace fs = std::filesystem;
using vitk::Error;
using vitk::io::SpecialTarget;
using vitk::io::write_file_atomic;
using vitk::test::contains;
using vitk::test::error_of;
using vitk::test::read_file;
using vitk::test::TempDir;

// Names in dir other than `keep`: a temporary left behind shows up here.
std::vector<std::string> others(const TempDir& dir, const std::string& keep) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir.path()))
    if (e.path().filename() != keep) names.push_back(e.path().filename().string());
  return names;
}

TEST(AtomicFile, WritesAndReplacesWholeFilesLeavingNoTemporary) {
  TempDir dir("vitk_atomic");
  const std::string path = (dir / "out.bin").string();
  write_file_atomic(path, std::string("first"));
  EXPECT_EQ(read_file(path), "first");
  const std::string big(3 << 20, 'x');  // several write(2) calls
  write_file_atomic(path, big);
  EXPECT_EQ(read_file(path), big);
  write_file_atomic(path, std::string());
  EXPECT_TRUE(fs::exists(path));
  EXPECT_EQ(fs::file_size(path), 0u);
  EXPECT_TRUE(others(dir, "out.bin").empty());
  // A relative path: its directory is the working directory.
  const fs::path cwd = fs::current_path();
  fs::current_path(dir.path());
  write_file_atomic("relative.txt", std::string("here"));
  fs::current_path(cwd);
  EXPECT_EQ(read_file(dir / "relative.txt"), "here");
}

TEST(AtomicFile, FailuresNameTheFileAndLeaveNothingBehind) {
  TempDir dir("vitk_atomic");
  const std::string nowhere = (dir / "no/such/dir/f.txt").string();
  const std::string msg = error_of([&] { write_file_atomic(nowhere, std::string("x")); });
  EXPECT_TRUE(contains(msg, nowhere) && contains(msg, "cannot create temporary file")) << msg;
  EXPECT_FALSE(fs::exists(dir / "no"));
  const std::string folder = dir.path().string();
  EXPECT_TRUE(contains(error_of([&] { write_file_atomic(folder, std::string("x")); }),
                       folder + ": is a directory"));
  EXPECT_TRUE(others(dir, "").empty());
}

TEST(AtomicFile, AFullDiskKeepsThePreviousFile) {
  TempDir dir("vitk_atomic");
  const std::string path = (dir / "keep.txt").string();
  write_file_atomic(path, std::string("previous"));
  // In a death-test child: the write of the temporary fails halfway, and must say so, naming the
  // target.
  EXPECT_EXIT(vitk::test::exit_after_writing_past_a_size_limit(
                  4096, [&] { write_file_atomic(path, std::string(1 << 20, 'n')); },
                  {path, "File too large"}),
              ::testing::ExitedWithCode(0), "");
  EXPECT_EQ(read_file(path), "previous");
  EXPECT_TRUE(others(dir, "keep.txt").empty()) << "the temporary was removed";
}

TEST(AtomicFile, DevicesAndPipesAreWrittenInPlaceOrRefused) {
  struct stat before {};
  ASSERT_EQ(::stat("/dev/null", &before), 0);
  write_file_atomic("/dev/null", std::string("discarded"));
  struct stat after {};
  ASSERT_EQ(::stat("/dev/null", &after), 0);
  EXPECT_TRUE(S_ISCHR(after.st_mode));
  EXPECT_EQ(after.st_rdev, before.st_rdev);
  EXPECT_TRUE(vitk::io::is_special_output("/dev/null"));

  TempDir dir("vitk_atomic");
  const std::string fifo = (dir / "pipe").string();
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  std::string received;
  std::thread reader([&] { received = read_file(fifo); });
  write_file_atomic(fifo, std::string("through the pipe"));
  reader.join();
  EXPECT_EQ(received, "through the pipe");

  // Refused (a checkpoint): before anything is written, so a pipe without a reader cannot block.
  const std::string msg =
      error_of([&] { write_file_atomic(fifo, std::string("x"), SpecialTarget::refuse); });
  EXPECT_TRUE(contains(msg, fifo + ": not a regular file")) << msg;
  ASSERT_EQ(::stat(fifo.c_str(), &after), 0);
  EXPECT_TRUE(S_ISFIFO(after.st_mode));
  EXPECT_TRUE(others(dir, "pipe").empty());
}

// kill -9 at any moment of a stream of writes leaves one whole version of the file: the child
// rewrites it over and over with files of one repeated letter, each of another size.
constexpr const char* kChildEnv = "VITK_ATOMIC_FILE_CHILD";

std::string version(int i) {
  return std::string(static_cast<size_t>(1 << 20) + static_cast<size_t>(i) * 4099,
                     static_cast<char>('a' + i % 26));
}

TEST(AtomicFile, KillNineLeavesAWholeFile) {
  if (const char* target = std::getenv(kChildEnv)) {
    for (int i = 1;; ++i) write_file_atomic(target, version(i));
  }
  TempDir dir("vitk_atomic");
  const std::string path = (dir / "target.bin").string();
  write_file_atomic(path, version(0));
  for (int delay_ms : {5, 37, 120, 300}) {
    vitk::testing::Command child;
    child.argv = {vitk::testing::self_executable(),
                  "--gtest_filter=AtomicFile.KillNineLeavesAWholeFile"};
    child.dir = dir.path();
    child.tag = "child";
    child.env = {{kChildEnv, path}};
    const pid_t pid = vitk::testing::spawn_process(child);
    ASSERT_GT(pid, 0);
    std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
    ASSERT_EQ(kill(pid, SIGKILL), 0);
    const vitk::testing::ProcessResult r = vitk::testing::wait_process(child, pid);
    EXPECT_EQ(r.signal, SIGKILL) << r.out << r.err;
    const std::string bytes = read_file(path);
    ASSERT_FALSE(bytes.empty()) << "after " << delay_ms << " ms";
    // Each version has its own size, which says which one this must be.
    const int k = static_cast<int>((bytes.size() - std::min(bytes.size(), size_t{1} << 20)) / 4099);
    EXPECT_TRUE(bytes == version(k))
        << "after " << delay_ms << " ms: " << bytes.size() << " bytes of '" << bytes[0]
        << "' are not a version the child wrote";
  }
}

// ---- metrics.csv

TEST(MetricsCsvFile, EachRowIsOnDiskWholeAndAResumeKeepsTheRowsUpToItsCheckpoint) {
  TempDir dir("vitk_metrics");
  const std::string path = (dir / "metrics.csv").string();
  {
    vitk::MetricsCsv csv(path, "step,loss", -1);
    EXPECT_EQ(read_file(path), "step,loss\n");
    csv.row({"100", "2.5"});
    EXPECT_EQ(read_file(path), "step,loss\n100,2.5\n") << "the row is there as soon as written";
    csv.row({"200", "1.5"});
    csv.row({"300", "1.25"});
  }
  EXPECT_EQ(read_file(path), "step,loss\n100,2.5\n200,1.5\n300,1.25\n");
  {
    // A run resumed from step 200 redoes step 300: that row goes, the header is the new one.
    vitk::MetricsCsv csv(path, "step,loss,lr", 200);
    EXPECT_EQ(read_file(path), "step,loss,lr\n100,2.5\n200,1.5\n");
    csv.row({"300", "1.2", "0.1"});
  }
  EXPECT_EQ(read_file(path), "step,loss,lr\n100,2.5\n200,1.5\n300,1.2,0.1\n");
  // A new run starts the file afresh.
  vitk::MetricsCsv fresh(path, "epoch,acc", -1);
  EXPECT_EQ(read_file(path), "epoch,acc\n");
  EXPECT_TRUE(others(dir, "metrics.csv").empty());
}

TEST(MetricsCsvFile, APipeGetsEachLineOnceAndAFolderIsNamed) {
  TempDir dir("vitk_metrics");
  const std::string fifo = (dir / "metrics.csv").string();
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  std::string received;
  std::thread reader([&] {
    std::ifstream in(fifo);
    for (std::string line; std::getline(in, line);) received += line + "\n";
  });
  {
    // Each write opens and closes the pipe; the reader sees one stream only while a writer holds
    // it open, so one is kept open here for the reader's whole read.
    const int keep = ::open(fifo.c_str(), O_WRONLY);
    ASSERT_GE(keep, 0);
    vitk::MetricsCsv csv(fifo, "step,loss", 100);
    csv.row({"1", "2"});
    csv.row({"2", "1"});
    ::close(keep);
  }
  reader.join();
  EXPECT_EQ(received, "step,loss\n1,2\n2,1\n");
  const std::string folder = (dir / "folder").string();
  fs::create_directory(folder);
  EXPECT_TRUE(contains(error_of([&] { vitk::MetricsCsv csv(folder, "a", -1); }),
                       folder + ": is a directory"));
}

}  // namespace
