#pragma once
// An HDF5 file built in memory, whose bytes the caller then writes itself (with
// write_file_atomic). HDF5 never touches the disk here on purpose: before HDF5 1.14.1 a write
// error (a full disk) makes H5Fclose fail and leaves a half-freed file behind that crashes the
// process at exit (HDFFV-11052). Writing the bytes ourselves turns such an error into an ordinary
// exception, and makes the write atomic like every other file vitk writes.
#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

#include "common/io/hdf5.h"

namespace vitk::io {

class MemoryFile {
 public:
  // path is the file the bytes are meant for: it names the file in messages only.
  explicit MemoryFile(const std::string& path);
  MemoryFile(const MemoryFile&) = delete;  // HDF5 holds a pointer to the image
  MemoryFile& operator=(const MemoryFile&) = delete;
  ~MemoryFile();

  hid_t root() const { return root_.get(); }

  // Closes the file, which is where HDF5 writes its metadata, and returns its bytes (valid while
  // this object lives).
  std::string_view finish();

 private:
  class Image;
  std::string path_;
  std::unique_ptr<Image> image_;  // declared first: it outlives the handles below
  Hid file_, root_;
};

}  // namespace vitk::io
