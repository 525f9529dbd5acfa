#pragma once
// What an expensive SetUpTestSuite makes (a trained model), made once per build of vitk and reused
// by the suite's later processes: ctest runs every test in a process of its own, so a suite's
// setup would otherwise run once per test (MtCli's 600 training steps took ~35 s each time).
//
// The directory lives in the build tree, beside the vitk binary, under a name made from the
// suite's `key` (its inputs and arguments) and the binary's size and modification time, so a new
// build or a changed setup makes a new one; older ones of the same suite are removed then. It is
// made in a temporary sibling and renamed into place: a setup that fails or is killed leaves
// nothing to reuse, and of two processes making it at once, the second rename fails and that
// process uses the first one's.
#include <stdlib.h>

#include <cstdio>
#include <filesystem>
#include <functional>
#include <string>

namespace vitk::testing {

// The suite's directory: made by `make(dir)` (which returns whether it succeeded) unless a
// process of this build made it before. Empty when making it failed.
inline std::filesystem::path suite_cache(
    const std::string& suite, const std::string& key,
    const std::function<bool(const std::filesystem::path&)>& make) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path binary(VITK_BINARY);
  const std::string stamp =
      key + "|" + std::to_string(fs::file_size(binary, ec)) + "|" +
      std::to_string(fs::last_write_time(binary, ec).time_since_epoch().count());
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016zx", std::hash<std::string>{}(stamp));
  const fs::path root = binary.parent_path() / "test-cache";
  const fs::path dir = root / (suite + "-" + hex);
  if (fs::is_directory(dir, ec)) return dir;
  fs::create_directories(root, ec);
  std::string tmpl = (root / (suite + ".tmp-XXXXXX")).string();
  if (!mkdtemp(tmpl.data())) return {};
  const fs::path made = tmpl;
  if (!make(made)) {
    fs::remove_all(made, ec);
    return {};
  }
  fs::rename(made, dir, ec);
  if (ec) {  // another process renamed its own first
    fs::remove_all(made, ec);
    return fs::is_directory(dir, ec) ? dir : fs::path();
  }
  // Older builds' directories of this suite.
  for (const auto& entry : fs::directory_iterator(root, ec)) {
    const std::string name = entry.path().filename().string();
    if (entry.path() != dir && name.rfind(suite + "-", 0) == 0) fs::remove_all(entry.path(), ec);
  }
  return dir;
}

}  // namespace vitk::testing
