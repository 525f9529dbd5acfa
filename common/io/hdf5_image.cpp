#include "common/io/hdf5_image.h"

#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>

namespace vitk::io {

// The bytes of a file that HDF5 builds in memory. HDF5's core driver allocates and frees them
// through these callbacks; when it closes the file we keep the memory instead of freeing it, so
// the image costs no second copy. (H5Fget_file_image would copy it, and for the version 2
// superblock that V18 writes, HDF5 1.10 returns an image whose superblock checksum is wrong.)
class MemoryFile::Image {
 public:
  Image() = default;
  Image(const Image&) = delete;
  Image& operator=(const Image&) = delete;
  ~Image() { std::free(bytes_); }

  H5FD_file_image_callbacks_t callbacks() {
    H5FD_file_image_callbacks_t cb{};
    cb.image_malloc = [](size_t size, H5FD_file_image_op_t, void* self) -> void* {
      return static_cast<Image*>(self)->resize(nullptr, size);
    };
    cb.image_memcpy = [](void* dst, const void* src, size_t size, H5FD_file_image_op_t,
                         void*) -> void* { return std::memcpy(dst, src, size); };
    cb.image_realloc = [](void* ptr, size_t size, H5FD_file_image_op_t, void* self) -> void* {
      return static_cast<Image*>(self)->resize(ptr, size);
    };
    cb.image_free = [](void* ptr, H5FD_file_image_op_t op, void* self) -> herr_t {
      auto* image = static_cast<Image*>(self);
      if (ptr == image->bytes_ && op == H5FD_FILE_IMAGE_OP_FILE_CLOSE) return 0;  // keep it
      if (ptr == image->bytes_) image->bytes_ = nullptr, image->capacity_ = 0;
      std::free(ptr);
      return 0;
    };
    // HDF5 copies the access properties; every copy refers to this one object.
    cb.udata_copy = [](void* self) -> void* { return self; };
    cb.udata_free = [](void*) -> herr_t { return 0; };
    cb.udata = this;
    return cb;
  }

  const char* data() const { return static_cast<const char*>(bytes_); }
  size_t capacity() const { return capacity_; }

 private:
  void* resize(void* ptr, size_t size) {
    void* grown = std::realloc(ptr, size);
    if (grown) bytes_ = grown, capacity_ = size;
    return grown;
  }

  void* bytes_ = nullptr;
  size_t capacity_ = 0;  // the core driver grows the file in steps: the file is usually shorter
};

namespace {

// The file's length, from the end-of-file address in its superblock (HDF5 file format
// specification, superblock versions 2 and 3: signature, 4 one-byte fields, then base address,
// extension address and end-of-file address, each 8 bytes here).
size_t file_length(const char* bytes, size_t capacity, const std::string& path) {
  static const unsigned char kSignature[8] = {0x89, 'H', 'D', 'F', '\r', '\n', 0x1a, '\n'};
  const auto* b = reinterpret_cast<const unsigned char*>(bytes);
  if (!b || capacity < 48 || std::memcmp(b, kSignature, 8) != 0 || (b[8] != 2 && b[8] != 3) ||
      b[9] != 8)
    fail(path, "the file built in memory has an unexpected superblock");
  uint64_t eof = 0;
  for (int i = 7; i >= 0; --i) eof = eof << 8 | b[28 + i];
  if (eof < 48 || eof > capacity)
    fail(path, "the file built in memory has a bad end-of-file address");
  return static_cast<size_t>(eof);
}

// A name that identifies the in-memory file to HDF5 and never collides with a file it has open.
std::string unique_name(const std::string& path) {
  static std::atomic<unsigned> counter{0};
  return path + ".in-memory-" + std::to_string(::getpid()) + "-" + std::to_string(counter++);
}

}  // namespace

MemoryFile::MemoryFile(const std::string& path) : path_(path), image_(std::make_unique<Image>()) {
  Hid fapl = file_access(path, size_t{1} << 20);
  H5FD_file_image_callbacks_t callbacks = image_->callbacks();
  checked(H5Pset_file_image_callbacks(fapl.get(), &callbacks), path,
          "cannot set the in-memory driver");
  // The root group without time stamps, as every object below it.
  Hid fcpl = untimed(H5P_FILE_CREATE, path);
  file_ = checked(H5Fcreate(unique_name(path).c_str(), H5F_ACC_TRUNC, fcpl.get(), fapl.get()),
                  H5Fclose, path, "cannot create the file in memory");
  root_ = checked(H5Gopen2(file_.get(), "/", H5P_DEFAULT), H5Gclose, path, "cannot open root");
}

MemoryFile::~MemoryFile() = default;

std::string_view MemoryFile::finish() {
  root_.reset();
  if (!file_.close()) fail(path_, "cannot finish the file in memory" + hdf5_reason());
  return {image_->data(), file_length(image_->data(), image_->capacity(), path_)};
}

}  // namespace vitk::io
