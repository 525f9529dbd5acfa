#pragma once
// Helpers for tests that work with files and messages: a temporary directory that removes itself,
// what an error says, a full disk, the precisions tests run in, an environment variable set for a
// while. (Running the executable: vitk_process.h.)
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/resource.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/ops/ops.h"

// Skips the current test on a CPU without AVX512_BF16, saying what oneDNN sees instead.
#define SKIP_WITHOUT_BF16()         \
  if (!vitk::ops::bf16_supported()) \
  GTEST_SKIP() << "no AVX512_BF16 on this CPU (" << vitk::ops::cpu_isa() << ")"

// Skips a case in a precision this CPU has no products for (bf16 without AVX512_BF16).
#define SKIP_UNLESS_SUPPORTED(precision) \
  if ((precision) == vitk::ops::Precision::bf16) SKIP_WITHOUT_BF16()

namespace vitk::test {

// The precisions of the matrix products, for tests parameterised over them
// (INSTANTIATE_TEST_SUITE_P(Precisions, X, ValuesIn(kPrecisions), precision_case_name)).
inline const std::vector<ops::Precision> kPrecisions = {ops::Precision::f32, ops::Precision::bf16};
inline std::string precision_case_name(const ::testing::TestParamInfo<ops::Precision>& p) {
  return ops::precision_name(p.param);
}

// Sets (or, with nullopt, removes) one environment variable while it lives.
class EnvVar {
 public:
  EnvVar(const char* name, std::optional<std::string> value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value)
      setenv(name, value->c_str(), 1);
    else
      unsetenv(name);
  }
  ~EnvVar() {
    if (old_)
      setenv(name_, old_->c_str(), 1);
    else
      unsetenv(name_);
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

// One thread while it lives. Tiny shapes gain nothing from threads, and on a shared machine a
// parallel region can wait a long time for a busy core: the longer model tests run on one thread.
struct OneThread {
  const int saved = ops::num_threads();
  OneThread() { ops::set_num_threads(1); }
  ~OneThread() { ops::set_num_threads(saved); }
};

// Whether `part` occurs in `text` (for messages and command output).
inline bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// Whether `s` ends with `suffix`.
inline bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The message of the vitk::Error that body throws; "no exception" when it throws nothing.
template <typename F>
std::string error_of(F&& body) {
  try {
    body();
  } catch (const Error& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("wrong exception type: ") + e.what();
  }
  return "no exception";
}

// For a death-test child: runs `write` with the size of the files this process may write capped
// at `bytes`, so that it fails halfway as on a full disk, and exits 0 only if it threw a
// vitk::Error whose message holds every one of `parts` (2: no error, 3: another exception). exit()
// (not _Exit) runs the exit handlers too, which for HDF5 crash if a failed write left it broken.
template <typename F>
[[noreturn]] void exit_after_writing_past_a_size_limit(rlim_t bytes, F&& write,
                                                       const std::vector<std::string>& parts) {
  signal(SIGXFSZ, SIG_IGN);  // a write past the limit then fails with EFBIG instead of killing us
  struct rlimit limit;
  limit.rlim_cur = limit.rlim_max = bytes;
  setrlimit(RLIMIT_FSIZE, &limit);
  int code = 3;
  try {
    write();
    code = 2;
  } catch (const Error& e) {
    code = 0;
    for (const std::string& part : parts) code = contains(e.what(), part) ? code : 4;
  } catch (...) {
  }
  std::exit(code);
}

// The lines of `text`, without their newlines.
inline std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// A fresh directory under the system's temporary directory, removed with its contents at the end.
class TempDir {
 public:
  explicit TempDir(const std::string& prefix = "vitk_test") {
    std::string tmpl = (std::filesystem::temp_directory_path() / (prefix + "_XXXXXX")).string();
    if (!mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp failed for " + tmpl);
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    if (!kept_) std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path operator/(const std::string& name) const { return path_ / name; }
  // Leaves the directory and its contents in place (to look at them after the test).
  void keep() { kept_ = true; }
  // Writes `text` (bytes as given) to NAME in the directory; returns the full path.
  std::string write(const std::string& name, const std::string& text) const {
    const std::filesystem::path p = path_ / name;
    std::ofstream(p, std::ios::binary) << text;
    return p.string();
  }

 private:
  std::filesystem::path path_;
  bool kept_ = false;
};

// The whole file as bytes ("" if it cannot be opened).
inline std::string read_file(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// Every file under root, by relative path, with its bytes.
inline std::map<std::string, std::string> files_under(const std::filesystem::path& root) {
  std::map<std::string, std::string> files;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(root))
    if (entry.is_regular_file())
      files[std::filesystem::relative(entry.path(), root).string()] = read_file(entry.path());
  return files;
}

}  // namespace vitk::test
