#pragma once
// HDF5's C API through owned handles and a few typed helpers. An exception thrown halfway never
// leaks a handle (a leaked handle keeps a file open and unflushed), and every failure is one
// vitk::Error "PATH: what (HDF5's innermost reason)" instead of HDF5's error stack on stderr.
// What the files mean (names, attributes, checks of a model) is the caller's: see checkpoint.cpp.
#include <hdf5.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/tensor.h"

namespace vitk::io {

[[noreturn]] void fail(const std::string& path, const std::string& what);

// HDF5 prints its whole error stack to stderr by default; we turn each failure into one message
// instead. The setting is per thread in a thread-safe HDF5, so every entry point calls it.
void quiet_hdf5();

// The innermost message on HDF5's error stack (" (truncated file: eof = 96, ...)"), or "", to
// explain a failure in our one-line error; clears the stack.
std::string hdf5_reason();

// Owns one HDF5 identifier and closes it with the matching H5?close.
class Hid {
 public:
  using Closer = herr_t (*)(hid_t);
  Hid() = default;
  Hid(hid_t id, Closer closer) : id_(id), closer_(closer) {}
  Hid(Hid&& other) noexcept;
  Hid& operator=(Hid&& other) noexcept;
  Hid(const Hid&) = delete;
  Hid& operator=(const Hid&) = delete;
  ~Hid() { close(); }

  hid_t get() const { return id_; }
  // Closing a file is where HDF5 writes its buffered metadata, so a writer checks the result.
  bool close();
  void reset() { close(); }

 private:
  hid_t id_ = H5I_INVALID_HID;
  Closer closer_ = nullptr;
};

// The identifier, owned; vitk::Error "PATH: what (reason)" when HDF5 returned a failure.
Hid checked(hid_t id, Hid::Closer closer, const std::string& path, const std::string& what);
void checked(herr_t status, const std::string& path, const std::string& what);

std::string quoted(const std::string& s);  // 'name', as messages show names

// File access properties: the strong close degree and the V18 format (dense attribute storage,
// which a long class_names list needs; every HDF5 since 1.8 and h5py read it). With
// memory_increment > 0 the file is built in memory (the core driver) instead of on disk.
Hid file_access(const std::string& path, size_t memory_increment = 0);

// ---- Writing

// Creation properties (H5P_FILE_CREATE for the root group, H5P_DATASET_CREATE,
// H5P_GROUP_CREATE) without modification times, which would make two saves of the same state
// differ byte for byte.
Hid untimed(hid_t cls, const std::string& path);
Hid make_space(const Shape& shape, const std::string& path);  // {} is a scalar
Hid create_group(hid_t loc, const std::string& name, hid_t gcpl, const std::string& shown,
                 const std::string& path);

// A scalar string attribute, or a 1-D array of them when as_array. Fixed-length (NUL-padded
// UTF-8) rather than variable-length: variable-length strings live in HDF5's global heap, which
// has no checksum, and HDF5 1.10 crashes reading a damaged one; fixed-length strings sit in the
// checksummed attribute message itself.
void write_strings(hid_t loc, const std::string& name, const std::vector<std::string>& values,
                   bool as_array, const std::string& path);
void write_int64(hid_t loc, const std::string& name, int64_t value, const std::string& path);
void write_uint64(hid_t loc, const std::string& name, uint64_t value, const std::string& path);
void write_double(hid_t loc, const std::string& name, double value, const std::string& path);
// A dataset of the given file type (H5T_IEEE_F32LE, H5T_STD_U8LE) from memory of mem_type.
void write_dataset(hid_t loc, const std::string& name, hid_t file_type, hid_t mem_type,
                   const void* data, const Shape& shape, hid_t dcpl, const std::string& shown,
                   const std::string& path);

// ---- Reading

// An HDF5 file open read-only. size bounds what a sound file holds: no attribute or dataset of
// it has more elements than the file has bytes, so a damaged count is refused before allocating.
struct ReadFile {
  std::string path;
  Hid file, root;
  hsize_t size = 0;
};
// Opens path (which the caller has checked exists and is an HDF5 file) and its root group.
ReadFile open_read_only(const std::string& path);

std::optional<Hid> open_attribute(hid_t loc, const std::string& name, const std::string& path);
std::vector<std::string> attribute_names(hid_t loc, const std::string& path);
bool has_link(hid_t loc, const std::string& name, const std::string& path);
// "f32", "i64", "u8", "string", ...: how messages name a type.
std::string type_name(hid_t type);

// Strings of either kind (fixed-length NUL- or space-padded as h5py writes numpy byte strings,
// or variable-length), integers of any width that fit; each names the attribute when it is of
// another kind or damaged.
std::vector<std::string> read_strings(const ReadFile& f, hid_t attr, const std::string& name);
std::string read_string(const ReadFile& f, hid_t attr, const std::string& name);
std::vector<uint64_t> read_uint64s(const ReadFile& f, hid_t attr, const std::string& name);
int64_t read_int64(const ReadFile& f, hid_t attr, const std::string& name);
double read_double(const ReadFile& f, hid_t attr, const std::string& name);  // any float width

enum class LinkKind { dataset, group, other };
// The links of a group by name, each classified without following soft or external links (an
// external link would open another file). where names the group in messages.
std::map<std::string, LinkKind> list_links(hid_t group, const std::string& where,
                                           const std::string& path);

struct DatasetInfo {
  Hid ds;
  std::optional<Shape> shape;  // none for a null dataspace
  std::string dtype;           // "f32" when it is a 32-bit IEEE float of either byte order
};
// Opens the dataset name of group; shown is how messages name it ("optimizer/exp_avg/fc.weight").
DatasetInfo inspect_dataset(hid_t group, const std::string& name, const std::string& shown,
                            const std::string& path);

// Runs body and reports anything but our own errors (bad_alloc from a damaged size, say) as an
// Error naming the file, so callers need one catch; HDF5 is quiet meanwhile.
template <typename F>
auto with_path(const std::string& path, F&& body) -> decltype(body()) {
  quiet_hdf5();
  try {
    return body();
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    fail(path, e.what());
  }
}

}  // namespace vitk::io
