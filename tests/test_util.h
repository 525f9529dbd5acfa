#pragma once
// Helpers for tests that work with files or run the vitk executable: a temporary directory that
// removes itself, and a runner that captures a command's exit code, stdout and stderr.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/ops/ops.h"

// Skips the current test on a CPU without AVX512_BF16, saying what oneDNN sees instead.
#define SKIP_WITHOUT_BF16()         \
  if (!vitk::ops::bf16_supported()) \
  GTEST_SKIP() << "no AVX512_BF16 on this CPU (" << vitk::ops::cpu_isa() << ")"

namespace vitk::test {

// Whether `part` occurs in `text` (for messages and command output).
inline bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
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
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path operator/(const std::string& name) const { return path_ / name; }
  // Writes `text` (bytes as given) to NAME in the directory; returns the full path.
  std::string write(const std::string& name, const std::string& text) const {
    const std::filesystem::path p = path_ / name;
    std::ofstream(p, std::ios::binary) << text;
    return p.string();
  }

 private:
  std::filesystem::path path_;
};

// The whole file as bytes ("" if it cannot be opened).
inline std::string read_file(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

struct RunResult {
  int code = -1;  // exit code; -1 when killed by a signal
  std::string out, err;
};

// Runs `VITK_BINARY ARGS` through the shell with `stdin_text` as standard input; the captured
// streams go through files in `scratch`.
inline RunResult run_vitk(const std::string& args, const TempDir& scratch,
                          const std::string& stdin_text = "") {
  const std::string in = scratch.write("run_stdin.txt", stdin_text);
  const std::string out = (scratch / "run_stdout.txt").string();
  const std::string err = (scratch / "run_stderr.txt").string();
  const std::string cmd =
      std::string(VITK_BINARY) + " " + args + " <" + in + " >" + out + " 2>" + err;
  const int status = std::system(cmd.c_str());
  RunResult r;
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = read_file(out);
  r.err = read_file(err);
  return r;
}

}  // namespace vitk::test
