#pragma once
// A training run's directory: last.h5, best.h5, ema.h5, step-N.h5 and metrics.csv (the files
// common/train/trainer.h describes).
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/io/folder_lock.h"
#include "common/metrics_csv.h"

namespace vitk::train {

class RunDir {
 public:
  // With `lock` (rank 0, the one that writes), first locks the directory for this object's life
  // (io::FolderLock, creating it; a directory left empty goes with the lock): vitk::UsageError
  // when another run holds it. Then vitk::UsageError when `dir` holds another run (its last.h5)
  // that `resume` is not.
  RunDir(std::string dir, const std::string& resume, bool lock);
  // Creates the directory and metrics.csv with `header`. A run resumed from this directory's
  // last.h5 keeps the rows up to its step (keep_upto); any other starts the file afresh. First
  // removes the temporary files that a killed run left (stale_removed() names them).
  void open(const std::string& header, int64_t keep_upto);
  const std::vector<std::string>& stale_removed() const { return stale_removed_; }
  bool resumes_here() const { return resumes_here_; }
  const std::string& dir() const { return dir_; }
  std::string path(const std::string& name) const;  // dir/name
  std::string last() const { return path("last.h5"); }
  std::string best() const { return path("best.h5"); }
  void row(const std::vector<std::string>& fields);
  // step-N.h5 for `step`; after it is written, only the newest `keep` of them stay.
  std::string step_file(int64_t step) const;
  void keep_newest_step_files(int keep) const;

 private:
  std::string dir_;
  io::FolderLock lock_;
  bool resumes_here_ = false;
  std::unique_ptr<MetricsCsv> csv_;
  std::vector<std::string> stale_removed_;
};

}  // namespace vitk::train
