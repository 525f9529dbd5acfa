#include "common/io/output_path.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "common/error.h"

namespace vitk::io {
namespace {

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

}  // namespace

bool is_special_output(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return false;  // absent (or unreachable): a new file
  return !S_ISREG(st.st_mode);
}

void write_file_whole(const std::string& path, const void* data, size_t size) {
  const char* bytes = static_cast<const char*>(data);
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) throw Error(path + ": is a directory");
  if (is_special_output(path)) {
    const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd < 0) throw Error(path + ": cannot open for writing: " + std::strerror(errno));
    const std::string why = write_all(fd, bytes, size);
    ::close(fd);
    if (!why.empty()) throw Error(path + ": cannot write: " + why);
    return;
  }
  const std::string tmp = path + ".tmp-" + std::to_string(::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw Error(path + ": cannot create " + tmp + ": " + std::strerror(errno));
  std::string why = write_all(fd, bytes, size);
  // On disk before the rename, so that a crash leaves the old file or the new one.
  if (why.empty() && ::fsync(fd) != 0) why = std::strerror(errno);
  if (::close(fd) != 0 && why.empty()) why = std::strerror(errno);
  if (!why.empty()) {
    std::remove(tmp.c_str());
    throw Error(path + ": cannot write " + tmp + ": " + why);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    why = std::strerror(errno);
    std::remove(tmp.c_str());
    throw Error(path + ": cannot rename " + tmp + " over it: " + why);
  }
}

}  // namespace vitk::io
