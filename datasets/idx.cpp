// (Fashion-)MNIST's IDX files, gzip-compressed or not, read whole into memory once.
// Format: a big-endian magic 0x00000803 (unsigned bytes, 3 dimensions) or 0x00000801 (1 dimension),
// one big-endian u32 per dimension, then the bytes row-major.
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "common/error.h"
#include "datasets/dataset.h"

namespace vitk::datasets {
namespace {

// Far more than any IDX file holds; a header claiming more is corrupt, and we refuse it before
// reading rather than trusting it with an allocation.
constexpr uint64_t kMaxBytes = uint64_t{1} << 34;

class GzFile {
 public:
  explicit GzFile(const std::string& path) : path_(path) {
    namespace fs = std::filesystem;
    std::error_code ec;
    fs::file_status st = fs::status(path, ec);
    if (ec || !fs::exists(st)) throw Error(path + ": no such file");
    if (fs::is_directory(st)) throw Error(path + ": is a directory, expected an IDX file");
    file_ = gzopen(path.c_str(), "rb");
    if (!file_) throw Error(path + ": cannot open: " + std::strerror(errno));
    gzbuffer(file_, 1 << 17);
  }
  ~GzFile() {
    if (file_) gzclose(file_);
  }
  GzFile(const GzFile&) = delete;
  GzFile& operator=(const GzFile&) = delete;

  // Reads up to n bytes; returns how many were read (fewer only at the end of the data). A
  // decompression error throws, naming the file.
  size_t read(void* dst, size_t n) {
    size_t done = 0;
    while (done < n) {
      const unsigned chunk = static_cast<unsigned>(std::min<size_t>(n - done, 1u << 30));
      const int got = gzread(file_, static_cast<char*>(dst) + done, chunk);
      if (got < 0) fail();
      if (got == 0) {
        check_clean_end();
        break;
      }
      done += static_cast<size_t>(got);
    }
    return done;
  }

  // What is left after the data (an IDX file has nothing there).
  bool at_end() {
    char c;
    const int got = gzread(file_, &c, 1);
    if (got < 0) fail();
    if (got == 0) check_clean_end();
    return got == 0;
  }

  uint32_t read_u32(const char* what) {
    unsigned char b[4];
    if (read(b, 4) != 4) throw Error(path_ + ": truncated header (no " + what + ")");
    return (uint32_t{b[0]} << 24) | (uint32_t{b[1]} << 16) | (uint32_t{b[2]} << 8) | b[3];
  }

 private:
  [[noreturn]] void fail() {
    int code = 0;
    const char* msg = gzerror(file_, &code);
    if (code == Z_ERRNO) msg = std::strerror(errno);
    throw Error(path_ + ": cannot read: " + (msg ? msg : "unknown zlib error"));
  }
  // zlib reports a gzip stream cut short (Z_BUF_ERROR) only through gzerror after a short read.
  void check_clean_end() {
    int code = 0;
    const char* msg = gzerror(file_, &code);
    if (code == Z_BUF_ERROR)
      throw Error(path_ + ": truncated gzip stream (" + (msg ? msg : "unexpected end") + ")");
    if (code != Z_OK && code != Z_STREAM_END) fail();
  }

  std::string path_;
  gzFile file_ = nullptr;
};

std::string hex(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08x", v);
  return buf;
}

// Reads the header and body of one IDX file whose magic must be `magic` (dims in the low byte).
std::vector<uint8_t> read_idx(const std::string& path, uint32_t magic,
                              std::vector<uint32_t>& dims) {
  GzFile in(path);
  const uint32_t got = in.read_u32("magic number");
  if (got != magic) {
    std::string what = magic == 0x803 ? "images (idx3-ubyte)" : "labels (idx1-ubyte)";
    throw Error(path + ": bad magic number " + hex(got) + ", expected " + hex(magic) + " for " +
                what);
  }
  const int rank = static_cast<int>(magic & 0xff);
  dims.assign(rank, 0);
  uint64_t total = 1;
  for (int d = 0; d < rank; ++d) {
    dims[d] = in.read_u32("dimension");
    if (dims[d] == 0)
      throw Error(path + ": dimension " + std::to_string(d) + " of the header is 0");
    total *= dims[d];
    if (total > kMaxBytes)
      throw Error(path + ": header claims more than " + std::to_string(kMaxBytes) +
                  " bytes of data; the file is corrupt");
  }
  // Grow as the data arrives rather than allocating what a header claims up front.
  std::vector<uint8_t> data;
  data.reserve(static_cast<size_t>(std::min<uint64_t>(total, uint64_t{64} << 20)));
  while (data.size() < total) {
    const size_t old = data.size();
    const size_t want = static_cast<size_t>(std::min<uint64_t>(total - old, uint64_t{16} << 20));
    data.resize(old + want);
    const size_t n = in.read(data.data() + old, want);
    if (n < want) {
      std::string expected = std::to_string(dims[0]);
      for (int d = 1; d < rank; ++d) expected += "x" + std::to_string(dims[d]);
      throw Error(path + ": truncated: the header says " + expected + " (" + std::to_string(total) +
                  " bytes of data) but the file has " + std::to_string(old + n));
    }
  }
  if (!in.at_end())
    throw Error(path + ": has data after the " + std::to_string(total) +
                " bytes its header describes; the header or the file is wrong");
  return data;
}

class IdxDataset : public Dataset {
 public:
  IdxDataset(const std::string& images_path, const std::string& labels_path,
             std::vector<std::string> class_names)
      : images_path_(images_path), class_names_(std::move(class_names)) {
    if (class_names_.empty()) throw Error(images_path + ": no class names given");
    std::vector<uint32_t> idims, ldims;
    pixels_ = read_idx(images_path, 0x803, idims);
    labels_ = read_idx(labels_path, 0x801, ldims);
    count_ = idims[0];
    rows_ = static_cast<int>(idims[1]);
    cols_ = static_cast<int>(idims[2]);
    if (ldims[0] != idims[0])
      throw Error(labels_path + ": has " + std::to_string(ldims[0]) + " labels but " + images_path +
                  " has " + std::to_string(idims[0]) + " images");
    if (rows_ > 65535 || cols_ > 65535)
      throw Error(images_path + ": images of " + std::to_string(rows_) + "x" +
                  std::to_string(cols_) + " pixels are too large for IDX data");
    const size_t classes = class_names_.size();
    for (int64_t i = 0; i < count_; ++i)
      if (labels_[i] >= classes)
        throw Error(labels_path + ": label " + std::to_string(labels_[i]) + " of sample " +
                    std::to_string(i) + " is outside 0.." + std::to_string(classes - 1));
  }

  int64_t size() const override { return count_; }
  int label(int64_t index) const override { return labels_.at(static_cast<size_t>(index)); }
  const std::vector<std::string>& class_names() const override { return class_names_; }
  bool load(int64_t index, cv::Mat& image, std::string& error) const override {
    if (index < 0 || index >= count_) {
      error = "index " + std::to_string(index) + " out of range";
      return false;
    }
    image = cv::Mat(rows_, cols_, CV_8UC1);  // fresh: the caller may share the old buffer
    const size_t n = static_cast<size_t>(rows_) * cols_;
    std::memcpy(image.data, pixels_.data() + static_cast<size_t>(index) * n, n);
    return true;
  }
  std::string describe(int64_t index) const override {
    return images_path_ + "[" + std::to_string(index) + "]";
  }
  std::string source() const override { return images_path_; }

 private:
  std::string images_path_;
  std::vector<std::string> class_names_;
  std::vector<uint8_t> pixels_;  // [count, rows, cols]
  std::vector<uint8_t> labels_;  // [count]
  int64_t count_ = 0;
  int rows_ = 0, cols_ = 0;
};

}  // namespace

std::unique_ptr<Dataset> open_idx(const std::string& images_path, const std::string& labels_path,
                                  std::vector<std::string> class_names) {
  return std::make_unique<IdxDataset>(images_path, labels_path, std::move(class_names));
}

}  // namespace vitk::datasets
