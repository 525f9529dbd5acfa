// Decoding image files: our own header checks (image_header.cpp), then OpenCV's codecs, with
// every failure turned into a reason and, on request, the codecs' own stderr chatter captured.
#include "datasets/image_io.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <new>
#include <sstream>

#include <opencv2/imgcodecs.hpp>

#include "common/io/input_file.h"

namespace vitk::datasets {
namespace {

// OpenCV's own limits (CV_IO_MAX_IMAGE_WIDTH/HEIGHT/PIXELS defaults): it refuses larger images
// with an assertion, so we say so first.
constexpr int64_t kOpenCvMaxSide = int64_t(1) << 20;
constexpr int64_t kOpenCvMaxPixels = int64_t(1) << 30;

// While alive (and enabled), fd 2 points at an in-memory file; finish() restores it and returns
// what the codecs wrote.
class StderrCapture {
 public:
  explicit StderrCapture(bool enabled) {
    if (!enabled) return;
    lock_ = std::unique_lock<std::mutex>(codec_output_mutex());
    std::fflush(stderr);
    std::cerr.flush();
    saved_ = fcntl(2, F_DUPFD_CLOEXEC, 0);
    sink_ = memfd_create("vitk-codec-output", MFD_CLOEXEC);
    if (sink_ < 0) sink_ = open("/dev/null", O_WRONLY | O_CLOEXEC);
    if (saved_ < 0 || sink_ < 0 || dup2(sink_, 2) < 0) {
      close_fds();
      lock_.unlock();
      return;
    }
    active_ = true;
  }
  ~StderrCapture() { finish(); }
  StderrCapture(const StderrCapture&) = delete;
  StderrCapture& operator=(const StderrCapture&) = delete;

  std::string finish() {
    if (!active_) return "";
    active_ = false;
    std::fflush(stderr);
    std::cerr.flush();
    dup2(saved_, 2);
    std::string text(4096, '\0');
    ssize_t got = pread(sink_, text.data(), text.size(), 0);
    text.resize(got > 0 ? static_cast<size_t>(got) : 0);
    close_fds();
    lock_.unlock();
    return text;
  }

 private:
  void close_fds() {
    if (saved_ >= 0) close(saved_);
    if (sink_ >= 0) close(sink_);
    saved_ = sink_ = -1;
  }
  std::unique_lock<std::mutex> lock_;
  int saved_ = -1, sink_ = -1;
  bool active_ = false;
};

// The part of the codecs' words worth showing a user: libpng's fatal error ("libpng error:
// IDAT: CRC error" -> "IDAT: CRC error"). libjpeg prints only its warnings (OpenCV's handler
// swallows the error that stopped it), OpenCV's log lines and internal errors ("OpenCV(4.6.0)
// grfmt_tiff.cpp:704: error: ... TIFFReadRGBAStrip") say nothing to a user: all dropped.
std::string codec_reason(const std::string& text) {
  std::istringstream in(text);
  const std::string prefix = "libpng error: ";
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(prefix, 0) != 0) continue;
    line = line.substr(prefix.size());
    while (!line.empty() && std::isspace(static_cast<unsigned char>(line.back()))) line.pop_back();
    if (line.size() > 160) line = line.substr(0, 157) + "...";
    return line;
  }
  return "";
}

// As a viewer shows it; OpenCV's ExifTransform for IMREAD_COLOR does the same.
void apply_orientation(cv::Mat& image, int orientation) {
  if (orientation <= 1 || orientation > 8) return;
  cv::Mat out;
  if (orientation >= 5) {
    cv::transpose(image, out);
    image = out;
  }
  switch (orientation) {
    case 2:
    case 6:
      cv::flip(image, out, 1);
      break;
    case 3:
    case 7:
      cv::flip(image, out, -1);
      break;
    case 4:
    case 8:
      cv::flip(image, out, 0);
      break;
    default:
      return;  // 5: the transpose alone
  }
  image = out;
}

std::string size_text(int64_t w, int64_t h) {
  return std::to_string(w) + "x" + std::to_string(h);
}

// "--max-pixels 1000", or "the limit of 178956970 pixels" for a command without the option.
std::string limit_text(const DecodeOptions& options) {
  return options.max_pixels_option.empty()
             ? "the limit of " + std::to_string(options.max_pixels) + " pixels"
             : options.max_pixels_option + " " + std::to_string(options.max_pixels);
}

}  // namespace

std::mutex& codec_output_mutex() {
  static std::mutex m;
  return m;
}

bool decode_image(const std::vector<uint8_t>& bytes, cv::Mat& image, std::string& error,
                  const DecodeOptions& options) {
  if (bytes.empty()) {
    error = "empty file";
    return false;
  }
  ImageHeader h;
  if (!read_image_header(bytes.data(), bytes.size(), h, error)) return false;
  const int64_t pixels = h.width * h.height;
  if (pixels > options.max_pixels) {
    error = "image of " + size_text(h.width, h.height) + " pixels exceeds " + limit_text(options);
    return false;
  }
  if (h.width > kOpenCvMaxSide || h.height > kOpenCvMaxSide || pixels > kOpenCvMaxPixels) {
    error = "image of " + size_text(h.width, h.height) +
            " pixels is beyond OpenCV's limits (2^20 pixels a side, 2^30 in all)";
    return false;
  }
  cv::Mat out;
  bool out_of_memory = false;
  StderrCapture capture(options.quiet);
  try {
    out = cv::imdecode(bytes, cv::IMREAD_UNCHANGED);
  } catch (const std::bad_alloc&) {
    out_of_memory = true;
  } catch (const std::exception&) {
    // cv::Exception: an assertion inside a codec; its text is for OpenCV's developers.
  }
  const std::string said = capture.finish();
  if (out_of_memory) {
    error = "out of memory decoding the " + h.format + " image of " + size_text(h.width, h.height) +
            " pixels";
    return false;
  }
  if (out.empty()) {
    std::string detail = codec_reason(said);
    // PNG and JPEG files were walked to their end already: what fails now is inside the data.
    const bool walked = h.format == "PNG" || h.format == "JPEG";
    error = (walked ? "corrupt " : "truncated or corrupt ") + h.format +
            (detail.empty() ? "" : " (" + detail + ")");
    return false;
  }
  apply_orientation(out, h.orientation);
  image = out;
  return true;
}

bool decode_image_file(const std::string& path, cv::Mat& image, std::string& error,
                       const DecodeOptions& options) {
  int fd = io::open_regular_file(path, error, "an image");
  if (fd < 0) return false;
  struct stat st {};
  std::vector<uint8_t> bytes;
  bool ok = false;
  if (fstat(fd, &st) != 0) {
    error = std::string("cannot read: ") + std::strerror(errno);
  } else if (st.st_size == 0) {
    error = "empty file";
  } else if (st.st_size / 8 > options.max_pixels + (int64_t(8) << 20)) {
    // No image within the pixel limit needs this many bytes (16-bit RGBA uncompressed is 8 a
    // pixel, plus room for metadata); do not read it at all.
    error =
        "file of " + std::to_string(st.st_size) + " bytes is too large for " + limit_text(options);
  } else {
    ok = true;
    bytes.resize(static_cast<size_t>(st.st_size));
    size_t got = 0;
    while (got < bytes.size()) {
      ssize_t r = read(fd, bytes.data() + got, bytes.size() - got);
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) {
        error = std::string("cannot read: ") + std::strerror(errno);
        close(fd);
        return false;
      }
      if (r == 0) break;  // the file shrank meanwhile: decode what is there
      got += static_cast<size_t>(r);
    }
    bytes.resize(got);
  }
  close(fd);
  if (!ok) return false;
  return decode_image(bytes, image, error, options);
}

}  // namespace vitk::datasets
