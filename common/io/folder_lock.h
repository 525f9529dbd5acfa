#pragma once
// One vitk run per output folder. A command that writes a folder (a training run's --output,
// make-scenes' --out, the pictures of --attention-dir) holds a FolderLock on it for as long as it
// writes: flock(2), exclusive and non-blocking, on DIR/.vitk.lock, which holds the holder's pid. A
// second run into the same folder is refused at once, naming the folder and that pid. The kernel
// drops the lock when its process ends however it ends, so a kill -9 leaves no stale lock (at
// most the file, which the next run takes over). A clean release removes the file, so that a
// finished folder holds only what the run wrote.
//
// On a file system that cannot lock (some network ones answer ENOLCK), the folder is used
// without the lock: refusing every run there would be worse than the race it guards against.
#include <string>

namespace vitk::io {

class FolderLock {
 public:
  static constexpr const char* kFileName = ".vitk.lock";

  FolderLock() = default;  // holds nothing
  // Creates `dir` (and its parents) when it is missing and locks it. `option` names the folder in
  // messages ("--output"). vitk::UsageError "--output runs/x is in use by another vitk run (pid
  // 1234)" when another process holds it; vitk::Error naming the folder when it cannot be created
  // or the lock file cannot be made.
  FolderLock(const std::string& dir, const std::string& option);
  FolderLock(FolderLock&& other) noexcept;
  FolderLock& operator=(FolderLock&& other) noexcept;
  FolderLock(const FolderLock&) = delete;
  FolderLock& operator=(const FolderLock&) = delete;
  // Removes the lock file and releases the lock; then removes the folder if this lock created it
  // and it is empty (a run refused before it wrote anything leaves nothing behind).
  ~FolderLock();

  bool held() const { return fd_ >= 0; }
  const std::string& dir() const { return dir_; }
  // Removes the lock file now, keeping the lock until destruction, and forgets that the folder was
  // created here: for a folder about to be replaced whole by a rename (make-scenes).
  void remove_file();

 private:
  void release() noexcept;

  std::string dir_;
  int fd_ = -1;
  bool file_removed_ = false;
  bool created_dir_ = false;
};

}  // namespace vitk::io
