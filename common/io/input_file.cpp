#include "common/io/input_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/error.h"

namespace vitk::io {

int open_regular_file(const std::string& path, std::string& error, const std::string& what) {
  // O_NONBLOCK: opening a FIFO must not wait for a writer; fstat then refuses it.
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    const int e = errno;
    error = e == ENOENT || e == ENOTDIR ? "file not found"
                                        : std::string("cannot open: ") + std::strerror(e);
    return -1;
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0)
    error = std::string("cannot read: ") + std::strerror(errno);
  else if (S_ISDIR(st.st_mode))
    error = "is a directory, not " + what;
  else if (!S_ISREG(st.st_mode))
    error = "not a regular file (a device, FIFO or socket)";
  else if (::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK) != 0)
    error = std::string("cannot read: ") + std::strerror(errno);
  else
    return fd;
  ::close(fd);
  return -1;
}

void require_regular_file(const std::string& path, const std::string& what) {
  std::string error;
  const int fd = open_regular_file(path, error, what);
  // "file not found" is how image messages put it; other readers have always said this.
  if (fd < 0 && error == "file not found") error = "cannot open: No such file or directory";
  if (fd < 0) throw Error(path + ": " + error);
  ::close(fd);
}

std::ifstream open_input_file(const std::string& path, const std::string& what) {
  require_regular_file(path, what);
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path + ": cannot open: " + std::strerror(errno));
  return in;
}

}  // namespace vitk::io
