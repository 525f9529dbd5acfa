// PNG files written whole or not at all: encoded in memory, written to a temporary file in the
// same directory, flushed, then renamed over the target (rename is atomic within a file system).
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <vector>

#include <opencv2/imgcodecs.hpp>

#include "common/error.h"
#include "common/plot/plot.h"

namespace vitk::plot {

void write_png(const std::string& path, const cv::Mat& image) {
  if (image.empty()) throw Error(path + ": nothing to draw (empty picture)");
  std::vector<unsigned char> bytes;
  try {
    if (!cv::imencode(".png", image, bytes, {cv::IMWRITE_PNG_COMPRESSION, 9}))
      throw Error(path + ": OpenCV could not encode the picture as PNG");
  } catch (const cv::Exception& e) {
    throw Error(path + ": cannot encode as PNG: " + e.err);
  }
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) throw Error(path + ": is a directory");
  const std::string tmp = path + ".tmp-" + std::to_string(::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw Error(path + ": cannot create " + tmp + ": " + std::strerror(errno));
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const std::string why = n < 0 ? std::strerror(errno) : "no progress";
      ::close(fd);
      std::remove(tmp.c_str());
      throw Error(path + ": cannot write " + tmp + ": " + why);
    }
    done += static_cast<size_t>(n);
  }
  // On disk before the rename, so that a crash leaves the old picture or the new one.
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    const std::string why = std::strerror(errno);
    std::remove(tmp.c_str());
    throw Error(path + ": cannot write " + tmp + ": " + why);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string why = std::strerror(errno);
    std::remove(tmp.c_str());
    throw Error(path + ": cannot rename " + tmp + " over it: " + why);
  }
}

}  // namespace vitk::plot
