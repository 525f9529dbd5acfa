#include "common/train/run_dir.h"

#include <algorithm>
#include <filesystem>
#include <utility>

#include "common/error.h"
#include "common/io/atomic_file.h"

namespace vitk::train {

namespace fs = std::filesystem;

RunDir::RunDir(std::string dir, const std::string& resume, bool lock) : dir_(std::move(dir)) {
  if (lock) lock_ = io::FolderLock(dir_, "--output");
  const std::string last_h5 = last();
  std::error_code ec;
  resumes_here_ = !resume.empty() && fs::equivalent(resume, last_h5, ec);
  if (fs::exists(last_h5) && !resumes_here_)
    throw UsageError("--output " + dir_ + " already holds a run (" + last_h5 +
                     "): resume it with --resume " + last_h5 + ", or choose another --output");
}

void RunDir::open(const std::string& header, int64_t keep_upto) {
  std::error_code ec;
  fs::create_directories(dir_, ec);
  if (ec || !fs::is_directory(dir_))
    throw Error(dir_ + ": cannot create the output directory" +
                (ec ? " (" + ec.message() + ")" : std::string()));
  // A kill -9 during a save leaves LAST.h5.tmp-PID-N beside the file; nothing else cleans it up.
  stale_removed_ = io::remove_stale_temporaries(dir_, /*own_are_stale=*/true);
  csv_ = std::make_unique<MetricsCsv>(path("metrics.csv"), header, resumes_here_ ? keep_upto : -1);
}

std::string RunDir::path(const std::string& name) const {
  return (fs::path(dir_) / name).string();
}

void RunDir::row(const std::vector<std::string>& fields) {
  csv_->row(fields);
}

std::string RunDir::step_file(int64_t step) const {
  return path("step-" + std::to_string(step) + ".h5");
}

void RunDir::keep_newest_step_files(int keep) const {
  std::vector<std::pair<int64_t, fs::path>> found;
  for (const auto& entry : fs::directory_iterator(dir_)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("step-", 0) != 0 || entry.path().extension() != ".h5") continue;
    const std::string digits = name.substr(5, name.size() - 8);
    if (digits.empty() || digits.size() > 18 ||
        digits.find_first_not_of("0123456789") != std::string::npos)
      continue;
    found.emplace_back(std::stoll(digits), entry.path());
  }
  std::sort(found.begin(), found.end());
  for (size_t i = 0; i + static_cast<size_t>(keep) < found.size(); ++i) fs::remove(found[i].second);
}

}  // namespace vitk::train
