#include "common/io/atomic_file.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <utility>

#include "common/error.h"

namespace vitk::io {
namespace {

// Owns a file descriptor; close() reports the error that a deferred write may only show there.
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  int get() const { return fd_; }
  bool close() { return ::close(std::exchange(fd_, -1)) == 0; }

 private:
  int fd_;
};

// Writes all of data to fd, retrying on EINTR; returns the failure's reason, empty on success.
std::string write_all(int fd, const char* data, size_t size) {
  size_t done = 0;
  while (done < size) {
    const ssize_t n = ::write(fd, data + done, size - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return n < 0 ? std::strerror(errno) : "no progress";
    done += static_cast<size_t>(n);
  }
  return {};
}

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw Error(path + ": " + what);
}

constexpr std::string_view kTempMark = ".tmp-";

std::string temp_path_for(const std::string& path) {
  // pid and a counter: two processes, or two threads of one, never share a temporary file.
  static std::atomic<unsigned> counter{0};
  return path + std::string(kTempMark) + std::to_string(::getpid()) + "-" +
         std::to_string(counter++);
}

// The writer's pid of a temporary's name "NAME.tmp-PID-N", or -1 when it is not one.
long temp_owner(const std::string& name) {
  const size_t mark = name.rfind(kTempMark);
  if (mark == std::string::npos || mark == 0) return -1;
  const std::string rest = name.substr(mark + kTempMark.size());
  const size_t dash = rest.find('-');
  auto digits = [](const std::string& s) {
    return !s.empty() && s.size() <= 9 && s.find_first_not_of("0123456789") == std::string::npos;
  };
  if (dash == std::string::npos || !digits(rest.substr(0, dash)) || !digits(rest.substr(dash + 1)))
    return -1;
  return std::stol(rest.substr(0, dash));
}

bool process_alive(long pid) {
  return pid > 0 && (::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM);
}

void write_in_place(const std::string& path, const char* bytes, size_t size) {
  Fd fd(::open(path.c_str(), O_WRONLY | O_CLOEXEC));
  if (fd.get() < 0) fail(path, std::string("cannot open for writing: ") + std::strerror(errno));
  const std::string why = write_all(fd.get(), bytes, size);
  if (!why.empty()) fail(path, "cannot write: " + why);
  if (!fd.close()) fail(path, std::string("cannot write: ") + std::strerror(errno));
}

// Writes the bytes to a new file and forces them to the disk, so that once it is renamed the
// name never points at data still in flight.
void write_synced(const std::string& tmp, const char* bytes, size_t size, const std::string& path) {
  // O_NOFOLLOW: a symbolic link planted under the temporary name must not redirect the write.
  Fd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0666));
  if (fd.get() < 0) fail(path, "cannot create temporary file " + tmp + ": " + std::strerror(errno));
  const std::string why = write_all(fd.get(), bytes, size);
  if (!why.empty()) fail(path, "cannot write temporary file " + tmp + ": " + why);
  if (::fsync(fd.get()) != 0)
    fail(path, "cannot sync temporary file " + tmp + ": " + std::strerror(errno));
  if (!fd.close()) fail(path, "cannot close temporary file " + tmp + ": " + std::strerror(errno));
}

void sync_directory(const std::string& dir, const std::string& path) {
  Fd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (fd.get() < 0)
    fail(path, "cannot open directory " + dir + " to sync it: " + std::strerror(errno));
  // Some file systems cannot sync a directory (EINVAL); the rename is then as durable as it gets.
  if (::fsync(fd.get()) != 0 && errno != EINVAL && errno != ENOTSUP)
    fail(path, "saved, but cannot sync directory " + dir + ": " + std::strerror(errno));
}

}  // namespace

std::vector<std::string> remove_stale_temporaries(const std::string& dir, bool own_are_stale) {
  std::vector<std::string> removed;
  std::error_code ec;
  for (auto it = std::filesystem::directory_iterator(dir, ec);
       !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
    const std::string name = it->path().filename().string();
    const long pid = temp_owner(name);
    if (pid < 0 || !it->is_regular_file(ec)) continue;
    const bool own = pid == static_cast<long>(::getpid());
    if (own ? !own_are_stale : process_alive(pid)) continue;
    if (::unlink(it->path().c_str()) == 0) removed.push_back(name);
  }
  return removed;
}

bool is_special_output(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return false;  // absent (or unreachable): a new file
  return !S_ISREG(st.st_mode);
}

void write_file_atomic(const std::string& path, const void* data, size_t size,
                       SpecialTarget special) {
  const char* bytes = static_cast<const char*>(data);
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) fail(path, "is a directory");
  if (is_special_output(path)) {
    if (special == SpecialTarget::refuse)
      fail(path,
           "not a regular file: this file is written beside its target and renamed over it, "
           "which would replace it");
    write_in_place(path, bytes, size);
    return;
  }
  const std::string tmp = temp_path_for(path);
  try {
    write_synced(tmp, bytes, size, path);
    if (std::rename(tmp.c_str(), path.c_str()) != 0)
      fail(path, "cannot rename " + tmp + " over it: " + std::strerror(errno));
  } catch (...) {
    ::unlink(tmp.c_str());
    throw;
  }
  // The rename is only durable once the directory entry is on disk.
  const std::string dir = std::filesystem::path(path).parent_path().string();
  sync_directory(dir.empty() ? "." : dir, path);
}

}  // namespace vitk::io
