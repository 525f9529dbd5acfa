#pragma once
// Helpers of the fuzz harnesses (tests/fuzz/README.md): a scratch file per process for parsers
// that take a path, and the rule that an exception is the expected answer to bad input.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

namespace vitk::fuzz {

// A file of this process under $TMPDIR (or /tmp), named by the harness and `suffix`, rewritten
// with each input and removed at exit. One per process, so parallel fuzzers never share one.
class ScratchFile {
 public:
  ScratchFile(const std::string& harness, const std::string& suffix) {
    const char* tmp = std::getenv("TMPDIR");
    path_ = std::string(tmp && *tmp ? tmp : "/tmp") + "/vitk_fuzz_" + harness + "_" +
            std::to_string(::getpid()) + suffix;
  }
  ~ScratchFile() { std::remove(path_.c_str()); }
  ScratchFile(const ScratchFile&) = delete;
  ScratchFile& operator=(const ScratchFile&) = delete;

  // Replaces the file's contents with data[0, size).
  const std::string& write(const uint8_t* data, size_t size) {
    std::ofstream out(path_, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
    out.close();
    if (!out) std::abort();  // a harness that cannot write its input would test nothing
    return path_;
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace vitk::fuzz
