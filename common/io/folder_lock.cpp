#include "common/io/folder_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <thread>
#include <utility>

#include "common/error.h"

namespace vitk::io {
namespace {

namespace fs = std::filesystem;

// The pid the holder wrote into its lock file, or "" when there is none yet: the holder writes it
// just after it takes the lock, so a reader that lost the race waits a little for it.
std::string holder_pid(int fd) {
  for (int attempt = 0; attempt < 20; ++attempt) {
    char text[32] = {};
    const ssize_t n = ::pread(fd, text, sizeof text - 1, 0);
    if (n > 0) {
      std::string pid(text, static_cast<size_t>(n));
      while (!pid.empty() && (pid.back() == '\n' || pid.back() == ' ')) pid.pop_back();
      if (!pid.empty() && pid.find_first_not_of("0123456789") == std::string::npos) return pid;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return "";
}

// Whether fd is still the file at `path`: a holder that released the lock may have removed the
// file between our open and our flock, and a lock on a removed file guards nothing.
bool still_at(int fd, const std::string& path) {
  struct stat held {
  }, named{};
  return ::fstat(fd, &held) == 0 && ::stat(path.c_str(), &named) == 0 &&
         held.st_dev == named.st_dev && held.st_ino == named.st_ino;
}

bool cannot_lock_here(int error) {
  return error == ENOLCK || error == EOPNOTSUPP || error == ENOSYS || error == EINVAL;
}

}  // namespace

FolderLock::FolderLock(const std::string& dir, const std::string& option) : dir_(dir) {
  std::error_code ec;
  const bool existed = fs::exists(dir_, ec);
  if (!existed) fs::create_directories(dir_, ec);
  if (!fs::is_directory(dir_))
    throw Error(
        option + " " + dir_ + ": " +
        (existed ? std::string("exists and is not a folder")
                 : "cannot create the folder" + (ec ? " (" + ec.message() + ")" : std::string())));
  created_dir_ = !existed;
  const std::string path = (fs::path(dir_) / kFileName).string();
  for (int attempt = 0; attempt < 100; ++attempt) {
    const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0 && errno == ENOENT && attempt < 99) {  // removed by a run that was refused
      fs::create_directories(dir_, ec);
      continue;
    }
    if (fd < 0) {
      const int error = errno;
      release();
      throw Error(option + " " + dir_ + ": cannot create the lock file " + path + " (" +
                  std::strerror(error) + ")");
    }
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
      const int error = errno;
      if (cannot_lock_here(error)) {  // used unlocked (see the header), and left as it was
        ::close(fd);
        ::unlink(path.c_str());
        return;
      }
      const std::string pid = error == EWOULDBLOCK ? holder_pid(fd) : "";
      ::close(fd);
      created_dir_ = false;  // the holder's folder now
      if (error == EWOULDBLOCK)
        throw UsageError(option + " " + dir_ + " is in use by another vitk run" +
                         (pid.empty() ? std::string() : " (pid " + pid + ")") +
                         "; wait for it to end, or choose another " + option);
      throw Error(option + " " + dir_ + ": cannot lock " + path + " (" + std::strerror(error) +
                  ")");
    }
    if (!still_at(fd, path)) {
      ::close(fd);
      continue;
    }
    fd_ = fd;
    const std::string pid = std::to_string(::getpid()) + "\n";
    // Only informative (the holder's pid in messages): a short write changes nothing.
    if (::ftruncate(fd_, 0) == 0) {
      const ssize_t ignored = ::pwrite(fd_, pid.data(), pid.size(), 0);
      (void)ignored;
    }
    return;
  }
  release();
  throw Error(option + " " + dir_ + ": cannot lock " + path +
              " (it keeps being removed and made again)");
}

FolderLock::FolderLock(FolderLock&& other) noexcept
    : dir_(std::move(other.dir_)),
      fd_(std::exchange(other.fd_, -1)),
      file_removed_(other.file_removed_),
      created_dir_(std::exchange(other.created_dir_, false)) {}

FolderLock& FolderLock::operator=(FolderLock&& other) noexcept {
  if (this != &other) {
    release();
    dir_ = std::move(other.dir_);
    fd_ = std::exchange(other.fd_, -1);
    file_removed_ = other.file_removed_;
    created_dir_ = std::exchange(other.created_dir_, false);
  }
  return *this;
}

FolderLock::~FolderLock() {
  release();
}

void FolderLock::remove_file() {
  if (fd_ < 0 || file_removed_) return;
  ::unlink((fs::path(dir_) / kFileName).c_str());
  file_removed_ = true;
  created_dir_ = false;
}

void FolderLock::release() noexcept {
  if (fd_ >= 0) {
    // Removed while still held, so that no other run can lock the file in between and then find
    // it gone.
    if (!file_removed_) ::unlink((fs::path(dir_) / kFileName).c_str());
    ::close(fd_);
    fd_ = -1;
  }
  if (created_dir_) {
    std::error_code ec;
    if (fs::is_empty(dir_, ec) && !ec) fs::remove(dir_, ec);
    created_dir_ = false;
  }
}

}  // namespace vitk::io
