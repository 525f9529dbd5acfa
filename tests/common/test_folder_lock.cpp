// io::FolderLock in one process (a lock is per open file, so a second one here is refused as a
// second process would be; two real processes: tools/test_output_folders.cpp): the refusal names
// the folder and the holder's pid, a release leaves the folder as it was, and a moved lock stays
// held.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <utility>

#include "common/error.h"
#include "common/io/folder_lock.h"
#include "util/test_util.h"

namespace {

namespace fs = std::filesystem;
using vitk::io::FolderLock;
using vitk::test::contains;
using vitk::test::TempDir;

std::string refusal(const std::string& dir, const std::string& option) {
  try {
    FolderLock second(dir, option);
  } catch (const vitk::UsageError& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("wrong exception: ") + e.what();
  }
  return "no exception";
}

TEST(FolderLock, ASecondLockIsRefusedNamingTheFolderAndTheHoldersPid) {
  TempDir tmp;
  const std::string dir = (tmp / "runs/x").string();
  {
    FolderLock lock(dir, "--output");
    ASSERT_TRUE(lock.held());
    EXPECT_TRUE(fs::is_directory(dir));
    EXPECT_EQ(vitk::test::read_file(fs::path(dir) / FolderLock::kFileName),
              std::to_string(getpid()) + "\n");
    const std::string message = refusal(dir, "--output");
    EXPECT_TRUE(contains(message, "--output " + dir + " is in use by another vitk run (pid " +
                                      std::to_string(getpid()) + ")"))
        << message;
    std::ofstream(fs::path(dir) / "metrics.csv") << "step\n";
  }
  // Released: the lock file is gone, what the run wrote stays, and the folder can be locked again.
  EXPECT_FALSE(fs::exists(fs::path(dir) / FolderLock::kFileName));
  EXPECT_TRUE(fs::exists(fs::path(dir) / "metrics.csv"));
  FolderLock again(dir, "--output");
  EXPECT_TRUE(again.held());
}

TEST(FolderLock, AFolderItMadeAndLeftEmptyGoesWithIt) {
  TempDir tmp;
  const std::string made = (tmp / "made").string();
  { FolderLock lock(made, "--out"); }
  EXPECT_FALSE(fs::exists(made)) << "a refused run would leave an empty folder";
  const std::string existing = (tmp / "existing").string();
  fs::create_directories(existing);
  { FolderLock lock(existing, "--out"); }
  EXPECT_TRUE(fs::is_directory(existing));
  EXPECT_TRUE(fs::is_empty(existing));
}

TEST(FolderLock, AStaleLockFileIsTakenOverAndAMovedLockStaysHeld) {
  TempDir tmp;
  const std::string dir = (tmp / "run").string();
  fs::create_directories(dir);
  tmp.write("run/.vitk.lock", "999999\n");  // a killed run's: the file, but no lock
  FolderLock first(dir, "--output");
  FolderLock moved = std::move(first);
  EXPECT_FALSE(first.held());
  EXPECT_TRUE(moved.held());
  EXPECT_TRUE(contains(refusal(dir, "--output"), "(pid " + std::to_string(getpid()) + ")"));
  moved = FolderLock();
  EXPECT_FALSE(fs::exists(fs::path(dir) / FolderLock::kFileName));
}

TEST(FolderLock, AFileIsNotAFolder) {
  TempDir tmp;
  const std::string file = tmp.write("file", "x");
  try {
    FolderLock lock(file, "--attention-dir");
    FAIL() << "locked a file";
  } catch (const vitk::Error& e) {
    EXPECT_TRUE(contains(e.what(), "--attention-dir " + file + ": exists and is not a folder"))
        << e.what();
  }
}

}  // namespace
