#include "common/io/checkpoint.h"

#include <fcntl.h>
#include <hdf5.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <set>
#include <utility>

#include "common/error.h"
#include "common/io/output_path.h"
#include "common/optim/optim.h"

namespace vitk::io {
namespace {

constexpr const char* kFormatAttr = "vitk_format";
constexpr const char* kFormatName = "vitk-checkpoint";
constexpr const char* kVersionAttr = "vitk_format_version";
constexpr int64_t kFormatVersion = 1;
constexpr const char* kConfigPrefix = "config.";
constexpr const char* kOptimizerGroup = "optimizer";
constexpr const char* kFilesGroup = "files";
constexpr const char* kStateGroup = "train_state";

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw Error(path + ": " + what);
}

// The library prints its whole error stack to stderr by default; we turn each failure into one
// message instead. The setting is per thread in a thread-safe HDF5, so every entry point calls it.
void quiet_hdf5() {
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
}

// The innermost message on HDF5's error stack (e.g. "truncated file: eof = 96, ...") to explain a
// failure in our one-line error without printing the stack.
std::string hdf5_reason() {
  std::string reason;
  H5E_walk2_t first = [](unsigned n, const H5E_error2_t* e, void* data) -> herr_t {
    if (n == 0 && e && e->desc) {
      try {
        *static_cast<std::string*>(data) = e->desc;
      } catch (...) {
      }
    }
    return 0;
  };
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, first, &reason);
  H5Eclear2(H5E_DEFAULT);
  return reason.empty() ? std::string() : " (" + reason + ")";
}

// Owns one HDF5 identifier and closes it with the matching H5?close, so an exception thrown
// halfway through never leaks a handle (a leaked handle keeps the file open and unflushed).
class Hid {
 public:
  using Closer = herr_t (*)(hid_t);
  Hid() = default;
  Hid(hid_t id, Closer closer) : id_(id), closer_(closer) {}
  Hid(Hid&& other) noexcept
      : id_(std::exchange(other.id_, H5I_INVALID_HID)), closer_(other.closer_) {}
  Hid& operator=(Hid&& other) noexcept {
    if (this != &other) {
      reset();
      id_ = std::exchange(other.id_, H5I_INVALID_HID);
      closer_ = other.closer_;
    }
    return *this;
  }
  Hid(const Hid&) = delete;
  Hid& operator=(const Hid&) = delete;
  ~Hid() { reset(); }

  hid_t get() const { return id_; }
  // Closing a file is where HDF5 writes its buffered metadata, so the writer checks the result.
  bool close() {
    herr_t status = id_ >= 0 ? closer_(id_) : 0;
    id_ = H5I_INVALID_HID;
    return status >= 0;
  }
  void reset() { close(); }

 private:
  hid_t id_ = H5I_INVALID_HID;
  Closer closer_ = nullptr;
};

Hid checked(hid_t id, Hid::Closer closer, const std::string& path, const std::string& what) {
  if (id < 0) fail(path, what + hdf5_reason());
  return Hid(id, closer);
}

void checked(herr_t status, const std::string& path, const std::string& what) {
  if (status < 0) fail(path, what + hdf5_reason());
}

std::string quoted(const std::string& s) {
  return "'" + s + "'";
}

// memory_increment > 0: build the file in memory (the core driver) instead of on disk.
Hid file_access(const std::string& path, size_t memory_increment = 0) {
  Hid fapl = checked(H5Pcreate(H5P_FILE_ACCESS), H5Pclose, path, "cannot create HDF5 properties");
  // STRONG: closing the file closes anything still open in it, so the close really releases it.
  // V18: dense attribute storage, which a long class_names list needs (compact storage caps an
  // attribute at 64 KiB); every HDF5 since 1.8 and h5py read it.
  checked(H5Pset_fclose_degree(fapl.get(), H5F_CLOSE_STRONG), path, "cannot set close degree");
  checked(H5Pset_libver_bounds(fapl.get(), H5F_LIBVER_V18, H5F_LIBVER_V18), path,
          "cannot set format version");
  if (memory_increment)
    checked(H5Pset_fapl_core(fapl.get(), memory_increment, false), path,
            "cannot set the in-memory driver");
  return fapl;
}

// ----------------------------------------------------------------------------------------------
// Writing

// Modification times in object headers would make two saves of the same state differ byte for byte.
Hid untimed(hid_t cls, const std::string& path) {
  Hid plist = checked(H5Pcreate(cls), H5Pclose, path, "cannot create HDF5 properties");
  checked(H5Pset_obj_track_times(plist.get(), false), path, "cannot set object properties");
  return plist;
}

Hid make_space(const Shape& shape, const std::string& path) {
  if (shape.empty()) return checked(H5Screate(H5S_SCALAR), H5Sclose, path, "cannot make dataspace");
  std::vector<hsize_t> dims(shape.begin(), shape.end());
  return checked(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr), H5Sclose,
                 path, "cannot make dataspace");
}

Hid utf8_string_type(const std::string& path) {
  Hid type = checked(H5Tcopy(H5T_C_S1), H5Tclose, path, "cannot make string type");
  checked(H5Tset_size(type.get(), H5T_VARIABLE), path, "cannot make string type");
  checked(H5Tset_cset(type.get(), H5T_CSET_UTF8), path, "cannot make string type");
  return type;
}

// A scalar string attribute, or a 1-D array of them when as_array. Fixed-length (NUL-padded
// UTF-8) rather than variable-length: variable-length strings live in HDF5's global heap, which
// has no checksum, and HDF5 1.10 crashes reading a damaged one; fixed-length strings sit in the
// checksummed attribute message itself.
void write_strings(hid_t loc, const std::string& name, const std::vector<std::string>& values,
                   bool as_array, const std::string& path) {
  size_t width = 1;  // HDF5 has no zero-size strings
  for (const auto& v : values) width = std::max(width, v.size());
  Hid type = checked(H5Tcopy(H5T_C_S1), H5Tclose, path, "cannot make string type");
  checked(H5Tset_size(type.get(), width), path, "cannot make string type");
  checked(H5Tset_strpad(type.get(), H5T_STR_NULLPAD), path, "cannot make string type");
  checked(H5Tset_cset(type.get(), H5T_CSET_UTF8), path, "cannot make string type");
  Hid space =
      as_array ? make_space({static_cast<int64_t>(values.size())}, path) : make_space({}, path);
  Hid attr =
      checked(H5Acreate2(loc, name.c_str(), type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT),
              H5Aclose, path, "cannot create attribute " + quoted(name));
  std::vector<char> packed(values.size() * width, '\0');
  for (size_t i = 0; i < values.size(); ++i)
    std::copy(values[i].begin(), values[i].end(), packed.begin() + i * width);
  checked(H5Awrite(attr.get(), type.get(), packed.data()), path,
          "cannot write attribute " + quoted(name));
}

void write_integers(hid_t loc, const std::string& name, hid_t file_type, hid_t mem_type,
                    const void* data, int64_t count, bool as_array, const std::string& path) {
  Hid space = as_array ? make_space({count}, path) : make_space({}, path);
  Hid attr =
      checked(H5Acreate2(loc, name.c_str(), file_type, space.get(), H5P_DEFAULT, H5P_DEFAULT),
              H5Aclose, path, "cannot create attribute " + quoted(name));
  checked(H5Awrite(attr.get(), mem_type, data), path, "cannot write attribute " + quoted(name));
}

void write_int64(hid_t loc, const std::string& name, int64_t value, const std::string& path) {
  write_integers(loc, name, H5T_STD_I64LE, H5T_NATIVE_INT64, &value, 1, false, path);
}

void write_tensor(hid_t loc, const std::string& name, const float* data, const Shape& shape,
                  hid_t dcpl, const std::string& path) {
  Hid space = make_space(shape, path);
  Hid ds = checked(
      H5Dcreate2(loc, name.c_str(), H5T_IEEE_F32LE, space.get(), H5P_DEFAULT, dcpl, H5P_DEFAULT),
      H5Dclose, path, "cannot create tensor " + quoted(name));
  checked(H5Dwrite(ds.get(), H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, data), path,
          "cannot write tensor " + quoted(name));
}

// The training state as attributes of /train_state and of its subgroups: "rng/dropout/counter"
// is the attribute `counter` of /train_state/rng/dropout.
void write_state(hid_t root, const std::map<std::string, StateValue>& values,
                 const std::string& path) {
  Hid gcpl = untimed(H5P_GROUP_CREATE, path);
  std::map<std::string, Hid> groups;  // by path below the root
  auto group = [&](const std::string& where) -> hid_t {
    auto it = groups.find(where);
    if (it != groups.end()) return it->second.get();
    Hid g = checked(H5Gcreate2(root, where.c_str(), H5P_DEFAULT, gcpl.get(), H5P_DEFAULT), H5Gclose,
                    path, "cannot create group " + quoted(where));
    return groups.emplace(where, std::move(g)).first->second.get();
  };
  group(kStateGroup);
  for (const auto& [key, value] : values) {
    std::string where = kStateGroup, rest = key;
    for (size_t slash; (slash = rest.find('/')) != std::string::npos;) {
      where += "/" + rest.substr(0, slash);
      rest = rest.substr(slash + 1);
      group(where);
    }
    const hid_t loc = group(where);
    const std::string name = rest;
    if (const auto* i = std::get_if<int64_t>(&value)) {
      write_int64(loc, name, *i, path);
    } else if (const auto* u = std::get_if<uint64_t>(&value)) {
      write_integers(loc, name, H5T_STD_U64LE, H5T_NATIVE_UINT64, u, 1, false, path);
    } else if (const auto* d = std::get_if<double>(&value)) {
      Hid space = make_space({}, path);
      Hid attr = checked(
          H5Acreate2(loc, name.c_str(), H5T_IEEE_F64LE, space.get(), H5P_DEFAULT, H5P_DEFAULT),
          H5Aclose, path, "cannot create attribute " + quoted(name));
      checked(H5Awrite(attr.get(), H5T_NATIVE_DOUBLE, d), path,
              "cannot write attribute " + quoted(name));
    } else {
      write_strings(loc, name, {std::get<std::string>(value)}, false, path);
    }
  }
}

// Link names are paths to HDF5: a '/' would silently make nested groups that no loader expects.
void check_link_name(const std::string& name, const std::string& what, const std::string& path) {
  if (name.empty() || name == "." || name.find('/') != std::string::npos)
    fail(path, "cannot save " + what + " " + quoted(name) +
                   ": an HDF5 name must not be empty or '.', nor contain '/'");
}

void check_text(const std::string& text, const std::string& what, const std::string& path) {
  if (text.find('\0') != std::string::npos)
    fail(path, "cannot save " + what + " " + quoted(text.c_str()) + ": it contains a NUL byte");
}

std::vector<std::pair<std::string, Tensor*>> checked_state(optim::Optimizer& optimizer,
                                                           const ParamStore& params,
                                                           const std::string& path) {
  auto state = optimizer.state();
  for (const auto& [name, tensor] : state) {
    if (!tensor || tensor->dtype() != DType::f32 ||
        tensor->numel() < static_cast<int64_t>(params.arena_floats()))
      fail(path, "optimizer buffer " + quoted(name) +
                     " is not an f32 tensor covering the parameter arena");
  }
  return state;
}

// The bytes of a file that HDF5 built in memory. HDF5's core driver allocates and frees them
// through these callbacks; when it closes the file we keep the memory instead of freeing it, so
// the image costs no second copy. (H5Fget_file_image would copy it, and for the version 2
// superblock that V18 writes, HDF5 1.10 returns an image whose superblock checksum is wrong.)
class Image {
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

// The file's length, from the end-of-file address in its superblock (HDF5 file format
// specification, superblock versions 2 and 3: signature, 4 one-byte fields, then base address,
// extension address and end-of-file address, each 8 bytes here).
size_t file_length(const Image& image, const std::string& path) {
  static const unsigned char kSignature[8] = {0x89, 'H', 'D', 'F', '\r', '\n', 0x1a, '\n'};
  const auto* b = reinterpret_cast<const unsigned char*>(image.data());
  if (!b || image.capacity() < 48 || std::memcmp(b, kSignature, 8) != 0 ||
      (b[8] != 2 && b[8] != 3) || b[9] != 8)
    fail(path, "the checkpoint built in memory has an unexpected superblock");
  uint64_t eof = 0;
  for (int i = 7; i >= 0; --i) eof = eof << 8 | b[28 + i];
  if (eof < 48 || eof > image.capacity())
    fail(path, "the checkpoint built in memory has a bad end-of-file address");
  return static_cast<size_t>(eof);
}

// Builds the whole file in memory. HDF5 never touches the disk here on purpose: before HDF5
// 1.14.1 a write error (a full disk) makes H5Fclose fail and leaves a half-freed file behind that
// crashes the process at exit (HDFFV-11052). Writing the bytes ourselves turns such an error
// into an ordinary exception.
void build_image(Image& image, const std::string& name, const std::string& path,
                 const ParamStore& params, const CheckpointMeta& meta,
                 optim::Optimizer* optimizer) {
  Hid fapl = file_access(path, size_t{1} << 20);
  H5FD_file_image_callbacks_t callbacks = image.callbacks();
  checked(H5Pset_file_image_callbacks(fapl.get(), &callbacks), path,
          "cannot set the in-memory driver");
  // name only identifies the in-memory file; a unique one never collides with a file HDF5 has open.
  // The root group without time stamps, as every object below it: the same state gives the same
  // bytes.
  Hid fcpl = untimed(H5P_FILE_CREATE, path);
  Hid file = checked(H5Fcreate(name.c_str(), H5F_ACC_TRUNC, fcpl.get(), fapl.get()), H5Fclose, path,
                     "cannot create the checkpoint in memory");
  fapl.reset();
  {
    Hid root = checked(H5Gopen2(file.get(), "/", H5P_DEFAULT), H5Gclose, path, "cannot open root");
    const hid_t r = root.get();
    write_strings(r, kFormatAttr, {kFormatName}, false, path);
    write_int64(r, kVersionAttr, kFormatVersion, path);
    for (const auto& [key, value] : meta.config)
      write_strings(r, kConfigPrefix + key, {value}, false, path);
    if (!meta.class_names.empty()) write_strings(r, "class_names", meta.class_names, true, path);
    write_int64(r, "step", meta.step, path);
    write_int64(r, "epoch", meta.epoch, path);
    if (!meta.train_state.empty()) write_state(r, meta.train_state, path);

    Hid dcpl = untimed(H5P_DATASET_CREATE, path);
    const float* values = params.values().f32();
    for (const auto& p : params.params())
      write_tensor(r, p.name, values + p.offset, p.shape, dcpl.get(), path);

    if (!meta.files.empty()) {
      Hid gcpl = untimed(H5P_GROUP_CREATE, path);
      Hid group = checked(H5Gcreate2(r, kFilesGroup, H5P_DEFAULT, gcpl.get(), H5P_DEFAULT),
                          H5Gclose, path, "cannot create group 'files'");
      for (const auto& [file_name, bytes] : meta.files) {
        Hid space = make_space({static_cast<int64_t>(bytes.size())}, path);
        Hid ds = checked(H5Dcreate2(group.get(), file_name.c_str(), H5T_STD_U8LE, space.get(),
                                    H5P_DEFAULT, dcpl.get(), H5P_DEFAULT),
                         H5Dclose, path, "cannot create 'files/" + file_name + "'");
        if (!bytes.empty())
          checked(H5Dwrite(ds.get(), H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, bytes.data()),
                  path, "cannot write 'files/" + file_name + "'");
      }
    }

    if (optimizer) {
      write_strings(r, "optimizer", {optimizer->kind()}, false, path);
      write_int64(r, "optimizer_steps", optimizer->steps(), path);
      Hid gcpl = untimed(H5P_GROUP_CREATE, path);
      Hid group = checked(H5Gcreate2(r, kOptimizerGroup, H5P_DEFAULT, gcpl.get(), H5P_DEFAULT),
                          H5Gclose, path, "cannot create group 'optimizer'");
      for (const auto& [buffer_name, tensor] : checked_state(*optimizer, params, path)) {
        Hid buffer = checked(
            H5Gcreate2(group.get(), buffer_name.c_str(), H5P_DEFAULT, gcpl.get(), H5P_DEFAULT),
            H5Gclose, path, "cannot create group 'optimizer/" + buffer_name + "'");
        for (const auto& p : params.params())
          write_tensor(buffer.get(), p.name, tensor->f32() + p.offset, p.shape, dcpl.get(), path);
      }
    }
  }
  if (!file.close()) fail(path, "cannot finish the checkpoint in memory" + hdf5_reason());
}

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

// Writes the bytes to a new file and forces them to the disk before it is renamed into place.
void write_synced(const std::string& tmp, const char* bytes, size_t size, const std::string& path) {
  // O_NOFOLLOW: a symbolic link planted under the temporary name must not redirect the write.
  Fd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0666));
  if (fd.get() < 0) fail(path, "cannot create temporary file " + tmp + ": " + std::strerror(errno));
  size_t done = 0;
  while (done < size) {
    ssize_t n = ::write(fd.get(), bytes + done, size - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail(path, "cannot write temporary file " + tmp + ": " + std::strerror(errno));
    done += static_cast<size_t>(n);
  }
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

std::string temp_path_for(const std::string& path) {
  // pid and a counter: two processes, or two threads of one, never share a temporary file.
  static std::atomic<unsigned> counter{0};
  return path + ".tmp-" + std::to_string(::getpid()) + "-" + std::to_string(counter++);
}

// ----------------------------------------------------------------------------------------------
// Reading

struct OpenFile {
  Hid file;
  Hid root;
  hsize_t size = 0;  // bytes; no attribute of a sound file holds more elements than this
};

std::optional<Hid> open_attribute(hid_t loc, const std::string& name, const std::string& path) {
  htri_t exists = H5Aexists(loc, name.c_str());
  if (exists < 0) fail(path, "cannot read attribute " + quoted(name) + hdf5_reason());
  if (exists == 0) return std::nullopt;
  return checked(H5Aopen(loc, name.c_str(), H5P_DEFAULT), H5Aclose, path,
                 "cannot open attribute " + quoted(name));
}

// The attribute names of an object.
std::vector<std::string> attribute_names(hid_t loc, const std::string& where,
                                         const std::string& path) {
  std::vector<std::string> names;
  H5A_operator2_t collect = [](hid_t, const char* name, const H5A_info_t*, void* data) -> herr_t {
    try {
      static_cast<std::vector<std::string>*>(data)->emplace_back(name);
      return 0;
    } catch (...) {
      return -1;
    }
  };
  checked(H5Aiterate2(loc, H5_INDEX_NAME, H5_ITER_INC, nullptr, collect, &names), path,
          "cannot list the attributes of " + where);
  return names;
}

std::string type_name(hid_t type) {
  const std::string bits = std::to_string(8 * H5Tget_size(type));
  switch (H5Tget_class(type)) {
    case H5T_FLOAT:
      return "f" + bits;
    case H5T_INTEGER:
      return (H5Tget_sign(type) == H5T_SGN_NONE ? "u" : "i") + bits;
    case H5T_STRING:
      return "string";
    case H5T_COMPOUND:
      return "compound";
    case H5T_ENUM:
      return "enum";
    case H5T_ARRAY:
      return "array";
    default:
      return "a non-numeric HDF5 type";
  }
}

struct AttrData {
  Hid type, space;
  hssize_t count = 0;
};

AttrData attribute_data(hid_t attr, H5T_class_t expected, const char* expected_name,
                        const std::string& name, const OpenFile& f, const std::string& path) {
  AttrData d;
  d.type = checked(H5Aget_type(attr), H5Tclose, path, "cannot read attribute " + quoted(name));
  d.space = checked(H5Aget_space(attr), H5Sclose, path, "cannot read attribute " + quoted(name));
  if (H5Tget_class(d.type.get()) != expected)
    fail(path, "attribute " + quoted(name) + " is " + type_name(d.type.get()) + ", expected " +
                   expected_name);
  d.count = H5Sget_simple_extent_npoints(d.space.get());
  if (d.count < 0 || static_cast<hsize_t>(d.count) > f.size)
    fail(path, "attribute " + quoted(name) + " is damaged");
  return d;
}

std::vector<std::string> read_strings(hid_t attr, const std::string& name, const OpenFile& f,
                                      const std::string& path) {
  AttrData d = attribute_data(attr, H5T_STRING, "a string", name, f, path);
  const size_t n = static_cast<size_t>(d.count);
  std::vector<std::string> out;
  if (n == 0) return out;
  htri_t variable = H5Tis_variable_str(d.type.get());
  if (variable < 0) fail(path, "cannot read attribute " + quoted(name) + hdf5_reason());
  if (variable) {
    Hid mem = utf8_string_type(path);
    checked(H5Tset_cset(mem.get(), H5Tget_cset(d.type.get())), path, "cannot make string type");
    std::vector<char*> ptrs(n, nullptr);
    checked(H5Aread(attr, mem.get(), ptrs.data()), path, "cannot read attribute " + quoted(name));
    // HDF5 allocated the strings; give them back even if copying them throws.
    struct Reclaim {
      hid_t type, space;
      char** data;
      ~Reclaim() {
#if H5_VERSION_GE(1, 12, 0)
        H5Treclaim(type, space, H5P_DEFAULT, data);
#else
        // 1.10 declares H5Treclaim in its headers but does not export it.
        H5Dvlen_reclaim(type, space, H5P_DEFAULT, data);
#endif
      }
    } reclaim{mem.get(), d.space.get(), ptrs.data()};
    for (const char* p : ptrs) out.emplace_back(p ? p : "");
    return out;
  }
  // Fixed-length strings, as h5py writes numpy byte strings: NUL- or space-padded slots.
  const size_t width = H5Tget_size(d.type.get());
  if (width == 0 || n * width > f.size) fail(path, "attribute " + quoted(name) + " is damaged");
  std::vector<char> buf(n * width);
  checked(H5Aread(attr, d.type.get(), buf.data()), path, "cannot read attribute " + quoted(name));
  const bool space_padded = H5Tget_strpad(d.type.get()) == H5T_STR_SPACEPAD;
  for (size_t i = 0; i < n; ++i) {
    const char* s = buf.data() + i * width;
    size_t len = space_padded ? width : strnlen(s, width);
    while (space_padded && len > 0 && s[len - 1] == ' ') --len;
    out.emplace_back(s, len);
  }
  return out;
}

std::string read_string(hid_t attr, const std::string& name, const OpenFile& f,
                        const std::string& path) {
  auto values = read_strings(attr, name, f, path);
  if (values.size() != 1) fail(path, "attribute " + quoted(name) + " is not a single string");
  return values[0];
}

std::vector<uint64_t> read_uint64s(hid_t attr, const std::string& name, const OpenFile& f,
                                   const std::string& path) {
  AttrData d = attribute_data(attr, H5T_INTEGER, "an integer", name, f, path);
  std::vector<uint64_t> out(static_cast<size_t>(d.count));
  if (!out.empty())
    checked(H5Aread(attr, H5T_NATIVE_UINT64, out.data()), path,
            "cannot read attribute " + quoted(name));
  return out;
}

int64_t read_int64(hid_t attr, const std::string& name, const OpenFile& f,
                   const std::string& path) {
  AttrData d = attribute_data(attr, H5T_INTEGER, "an integer", name, f, path);
  if (d.count != 1) fail(path, "attribute " + quoted(name) + " is not a single integer");
  int64_t value = 0;
  checked(H5Aread(attr, H5T_NATIVE_INT64, &value), path, "cannot read attribute " + quoted(name));
  return value;
}

OpenFile open_checkpoint(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0)
    fail(path, std::string("cannot open: ") + std::strerror(errno));
  if (S_ISDIR(st.st_mode)) fail(path, "is a directory, not a checkpoint");
  if (::access(path.c_str(), R_OK) != 0)
    fail(path, std::string("cannot open: ") + std::strerror(errno));
  // H5Fis_hdf5 only looks for the signature; when it is there but the file is damaged (< 0, or
  // > 0 and the open fails), H5Fopen explains why.
  if (H5Fis_hdf5(path.c_str()) == 0) fail(path, "not an HDF5 file");
  H5Eclear2(H5E_DEFAULT);
  OpenFile f;
  Hid fapl = file_access(path);
  f.file = checked(H5Fopen(path.c_str(), H5F_ACC_RDONLY, fapl.get()), H5Fclose, path,
                   "cannot read the HDF5 file, it is truncated or damaged");
  f.root = checked(H5Gopen2(f.file.get(), "/", H5P_DEFAULT), H5Gclose, path,
                   "cannot read the root group, the file is damaged");
  checked(H5Fget_filesize(f.file.get(), &f.size), path, "cannot get the file size");

  const std::string not_ours = "not a vitk checkpoint (no '" + std::string(kFormatAttr) + "' = '" +
                               kFormatName + "' attribute)";
  auto marker = open_attribute(f.root.get(), kFormatAttr, path);
  if (!marker) fail(path, not_ours);
  std::string format = read_string(marker->get(), kFormatAttr, f, path);
  if (format != kFormatName) fail(path, not_ours);
  auto version_attr = open_attribute(f.root.get(), kVersionAttr, path);
  if (!version_attr) fail(path, "no '" + std::string(kVersionAttr) + "' attribute");
  int64_t version = read_int64(version_attr->get(), kVersionAttr, f, path);
  if (version < 1 || version > kFormatVersion)
    fail(path, "checkpoint format version " + std::to_string(version) +
                   " is not supported (this vitk reads version " + std::to_string(kFormatVersion) +
                   ")");
  return f;
}

CheckpointMeta read_meta(const OpenFile& f, const std::string& path) {
  const std::vector<std::string> names = attribute_names(f.root.get(), "the root group", path);
  CheckpointMeta meta;
  const hid_t root = f.root.get();
  const size_t prefix = std::strlen(kConfigPrefix);
  for (const auto& name : names) {
    if (name.compare(0, prefix, kConfigPrefix) != 0) continue;
    Hid attr = checked(H5Aopen(root, name.c_str(), H5P_DEFAULT), H5Aclose, path,
                       "cannot open attribute " + quoted(name));
    meta.config[name.substr(prefix)] = read_string(attr.get(), name, f, path);
  }
  // Everything but the config is optional, so that a converter script can write a minimal file.
  if (auto a = open_attribute(root, "class_names", path))
    meta.class_names = read_strings(a->get(), "class_names", f, path);
  if (auto a = open_attribute(root, "step", path))
    meta.step = read_int64(a->get(), "step", f, path);
  if (auto a = open_attribute(root, "epoch", path))
    meta.epoch = read_int64(a->get(), "epoch", f, path);
  if (auto a = open_attribute(root, "rng_state", path))
    meta.rng_state = read_uint64s(a->get(), "rng_state", f, path);
  if (auto a = open_attribute(root, "optimizer", path))
    meta.optimizer = read_string(a->get(), "optimizer", f, path);
  return meta;
}

enum class LinkKind { dataset, group, other };

// The links of a group by name, each classified without following soft or external links (an
// external link would open another file).
std::map<std::string, LinkKind> list_links(hid_t group, const std::string& where,
                                           const std::string& path) {
  std::vector<std::pair<std::string, bool>> links;  // name, is a hard link
  H5L_iterate_t collect = [](hid_t, const char* name, const H5L_info_t* info,
                             void* data) -> herr_t {
    try {
      static_cast<decltype(links)*>(data)->emplace_back(name, info->type == H5L_TYPE_HARD);
      return 0;
    } catch (...) {
      return -1;
    }
  };
  checked(H5Literate(group, H5_INDEX_NAME, H5_ITER_INC, nullptr, collect, &links), path,
          "cannot list " + where);
  std::map<std::string, LinkKind> out;
  for (const auto& [name, hard] : links) {
    LinkKind kind = LinkKind::other;
    if (hard) {
      Hid obj = checked(H5Oopen(group, name.c_str(), H5P_DEFAULT), H5Oclose, path,
                        "cannot open " + quoted(name) + ", the file is damaged");
      H5I_type_t type = H5Iget_type(obj.get());
      kind = type == H5I_DATASET ? LinkKind::dataset
             : type == H5I_GROUP ? LinkKind::group
                                 : LinkKind::other;
    }
    out.emplace(name, kind);
  }
  return out;
}

struct DatasetInfo {
  Hid ds;
  std::optional<Shape> shape;  // none for a null dataspace
  std::string dtype;           // "f32" when it is a 32-bit IEEE float of either byte order
};

DatasetInfo inspect(hid_t group, const std::string& name, const std::string& shown,
                    const std::string& path) {
  DatasetInfo info;
  info.ds = checked(H5Dopen2(group, name.c_str(), H5P_DEFAULT), H5Dclose, path,
                    "cannot open tensor " + quoted(shown));
  Hid type =
      checked(H5Dget_type(info.ds.get()), H5Tclose, path, "cannot read tensor " + quoted(shown));
  Hid space =
      checked(H5Dget_space(info.ds.get()), H5Sclose, path, "cannot read tensor " + quoted(shown));
  const bool f32 =
      H5Tequal(type.get(), H5T_IEEE_F32LE) > 0 || H5Tequal(type.get(), H5T_IEEE_F32BE) > 0;
  info.dtype = f32 ? "f32" : type_name(type.get());
  // An "f32" of another layout (custom precision) must not pass as ours.
  if (!f32 && info.dtype == "f32") info.dtype = "a non-IEEE 32-bit float";
  H5S_class_t cls = H5Sget_simple_extent_type(space.get());
  if (cls == H5S_SCALAR) {
    info.shape = Shape{};
  } else if (cls == H5S_SIMPLE) {
    int rank = H5Sget_simple_extent_ndims(space.get());
    if (rank < 0) fail(path, "cannot read the shape of tensor " + quoted(shown));
    std::vector<hsize_t> dims(static_cast<size_t>(rank));
    if (H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr) < 0)
      fail(path, "cannot read the shape of tensor " + quoted(shown));
    info.shape = Shape(dims.begin(), dims.end());
  }
  return info;
}

// Checks that the group holds exactly the model's tensors, as f32 of the right shapes, and
// returns their opened datasets in store order. prefix is how messages show names in the group.
std::vector<Hid> check_tensors(hid_t group, const std::map<std::string, LinkKind>& links,
                               const std::string& prefix, const ParamStore& params,
                               const std::string& path) {
  size_t missing = 0;
  for (const auto& p : params.params()) missing += links.count(p.name) == 0;
  std::vector<Hid> datasets;
  for (const auto& p : params.params()) {
    const std::string shown = prefix + p.name;
    auto it = links.find(p.name);
    if (it == links.end()) {
      std::string more = missing > 1
                             ? " (" + std::to_string(missing) + " of the model's " +
                                   std::to_string(params.params().size()) + " tensors are missing)"
                             : "";
      fail(path, "tensor " + quoted(shown) + " is missing, the model expects it" + more);
    }
    if (it->second != LinkKind::dataset)
      fail(path, "tensor " + quoted(shown) + " is not a dataset");
    DatasetInfo info = inspect(group, p.name, shown, path);
    if (info.dtype != "f32")
      fail(path,
           "tensor " + quoted(shown) + " has dtype " + info.dtype + ", the model expects f32");
    if (!info.shape) fail(path, "tensor " + quoted(shown) + " has no data (null dataspace)");
    if (*info.shape != p.shape)
      fail(path, "tensor " + quoted(shown) + " has shape " + shape_str(*info.shape) +
                     ", the model expects " + shape_str(p.shape));
    datasets.push_back(std::move(info.ds));
  }
  std::set<std::string> known;
  for (const auto& p : params.params()) known.insert(p.name);
  std::vector<std::string> extra;
  for (const auto& [name, kind] : links)
    if (kind == LinkKind::dataset && !known.count(name)) extra.push_back(name);
  if (!extra.empty()) {
    std::string more =
        extra.size() > 1 ? " (and " + std::to_string(extra.size() - 1) + " more)" : "";
    fail(path, "unexpected tensor " + quoted(prefix + extra[0]) +
                   ": the model has no parameter of that name" + more);
  }
  return datasets;
}

// The byte strings under /files, if there is such a group: each a 1-D u8 dataset.
std::map<std::string, std::string> read_files(const OpenFile& f, const std::string& path) {
  std::map<std::string, std::string> out;
  htri_t exists = H5Lexists(f.root.get(), kFilesGroup, H5P_DEFAULT);
  if (exists < 0) fail(path, "cannot look for group 'files'" + hdf5_reason());
  if (exists == 0) return out;
  Hid group = checked(H5Gopen2(f.root.get(), kFilesGroup, H5P_DEFAULT), H5Gclose, path,
                      "'files' is not a group");
  for (const auto& [name, kind] : list_links(group.get(), "group 'files'", path)) {
    const std::string shown = std::string(kFilesGroup) + "/" + name;
    if (kind != LinkKind::dataset) fail(path, quoted(shown) + " is not a dataset");
    DatasetInfo info = inspect(group.get(), name, shown, path);
    if (info.dtype != "u8" || !info.shape || info.shape->size() != 1 ||
        static_cast<hsize_t>((*info.shape)[0]) > f.size)
      fail(path, quoted(shown) + " is not a 1-D array of bytes (u8)");
    std::string bytes(static_cast<size_t>((*info.shape)[0]), '\0');
    if (!bytes.empty())
      checked(H5Dread(info.ds.get(), H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, bytes.data()),
              path, "cannot read " + quoted(shown));
    out.emplace(name, std::move(bytes));
  }
  return out;
}

// The training state under /train_state (write_state), if there is such a group: scalar
// integers, floats and strings, in groups at most two levels below it.
void read_state_group(hid_t group, const std::string& prefix, int depth, const OpenFile& f,
                      const std::string& path, std::map<std::string, StateValue>& out) {
  const std::string where = std::string(kStateGroup) + (prefix.empty() ? "" : "/" + prefix);
  auto full = [&](const std::string& name) { return prefix.empty() ? name : prefix + "/" + name; };
  for (const std::string& name : attribute_names(group, quoted(where), path)) {
    const std::string shown = where + "/" + name;
    Hid attr = checked(H5Aopen(group, name.c_str(), H5P_DEFAULT), H5Aclose, path,
                       "cannot open attribute " + quoted(shown));
    Hid type =
        checked(H5Aget_type(attr.get()), H5Tclose, path, "cannot read attribute " + quoted(shown));
    const H5T_class_t cls = H5Tget_class(type.get());
    if (cls == H5T_STRING) {
      out[full(name)] = read_string(attr.get(), shown, f, path);
    } else if (cls == H5T_INTEGER && H5Tget_sign(type.get()) == H5T_SGN_NONE) {
      const std::vector<uint64_t> v = read_uint64s(attr.get(), shown, f, path);
      if (v.size() != 1) fail(path, "attribute " + quoted(shown) + " is not a single integer");
      out[full(name)] = v[0];
    } else if (cls == H5T_INTEGER) {
      out[full(name)] = read_int64(attr.get(), shown, f, path);
    } else if (cls == H5T_FLOAT) {
      AttrData d = attribute_data(attr.get(), H5T_FLOAT, "a number", shown, f, path);
      if (d.count != 1) fail(path, "attribute " + quoted(shown) + " is not a single number");
      double value = 0;
      checked(H5Aread(attr.get(), H5T_NATIVE_DOUBLE, &value), path,
              "cannot read attribute " + quoted(shown));
      out[full(name)] = value;
    } else {
      fail(path, "attribute " + quoted(shown) + " is " + type_name(type.get()) +
                     ", expected an integer, a number or a string");
    }
  }
  for (const auto& [name, kind] : list_links(group, quoted(where), path)) {
    if (kind != LinkKind::group || depth >= 2)
      fail(path, quoted(where + "/" + name) + " is not part of a training state");
    Hid sub = checked(H5Gopen2(group, name.c_str(), H5P_DEFAULT), H5Gclose, path,
                      "cannot open group " + quoted(where + "/" + name));
    read_state_group(sub.get(), full(name), depth + 1, f, path, out);
  }
}

std::map<std::string, StateValue> read_state(const OpenFile& f, const std::string& path) {
  std::map<std::string, StateValue> out;
  htri_t exists = H5Lexists(f.root.get(), kStateGroup, H5P_DEFAULT);
  if (exists < 0) fail(path, "cannot look for group 'train_state'" + hdf5_reason());
  if (exists == 0) return out;
  Hid group = checked(H5Gopen2(f.root.get(), kStateGroup, H5P_DEFAULT), H5Gclose, path,
                      "'train_state' is not a group");
  read_state_group(group.get(), "", 0, f, path, out);
  return out;
}

// The optimizer's part of a checkpoint, checked and opened, not yet read.
struct OptimizerFile {
  std::vector<std::pair<std::string, Tensor*>> state;  // the optimizer's buffers
  std::vector<std::vector<Hid>> datasets;              // per buffer, in store order
  int64_t steps = 0;
};

OptimizerFile check_optimizer_state(const OpenFile& f,
                                    const std::map<std::string, LinkKind>& root_links,
                                    optim::Optimizer& optimizer, const ParamStore& params,
                                    const std::string& path) {
  OptimizerFile out;
  out.state = checked_state(optimizer, params, path);
  auto kind_attr = open_attribute(f.root.get(), "optimizer", path);
  if (!kind_attr)
    fail(path, "has no optimizer state, but the " + optimizer.kind() + " optimizer needs it");
  std::string kind = read_string(kind_attr->get(), "optimizer", f, path);
  if (kind != optimizer.kind())
    fail(path, "holds " + kind + " optimizer state, but the optimizer is " + optimizer.kind());
  auto steps_attr = open_attribute(f.root.get(), "optimizer_steps", path);
  if (!steps_attr) fail(path, "has no 'optimizer_steps' attribute");
  out.steps = read_int64(steps_attr->get(), "optimizer_steps", f, path);

  auto it = root_links.find(kOptimizerGroup);
  if (it == root_links.end() || it->second != LinkKind::group)
    fail(path, "has no 'optimizer' group with the optimizer state");
  Hid group = checked(H5Gopen2(f.root.get(), kOptimizerGroup, H5P_DEFAULT), H5Gclose, path,
                      "cannot open group 'optimizer'");
  auto buffers = list_links(group.get(), "group 'optimizer'", path);
  for (const auto& entry : out.state) {
    const std::string& name = entry.first;
    const std::string prefix = std::string(kOptimizerGroup) + "/" + name + "/";
    auto b = buffers.find(name);
    if (b == buffers.end() || b->second != LinkKind::group)
      fail(path, "optimizer buffer " + quoted(name) + " is missing (no group " +
                     quoted(kOptimizerGroup + std::string("/") + name) + ")");
    Hid buffer = checked(H5Gopen2(group.get(), name.c_str(), H5P_DEFAULT), H5Gclose, path,
                         "cannot open group " + quoted(prefix));
    auto links = list_links(buffer.get(), quoted(prefix), path);
    out.datasets.push_back(check_tensors(buffer.get(), links, prefix, params, path));
  }
  return out;
}

// Reads each dataset into its parameter's slot of a flat buffer with the arena layout.
void read_tensors(const std::vector<Hid>& datasets, const ParamStore& params, float* dst,
                  const std::string& prefix, const std::string& path) {
  size_t i = 0;
  for (const auto& p : params.params()) {
    checked(H5Dread(datasets[i++].get(), H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT,
                    dst + p.offset),
            path, "cannot read tensor " + quoted(prefix + p.name));
  }
}

void copy_slots(const std::vector<float>& staged, const ParamStore& params, float* dst) {
  for (const auto& p : params.params())
    std::copy_n(staged.data() + p.offset, static_cast<size_t>(p.numel()), dst + p.offset);
}

// Runs body and reports anything but our own errors (bad_alloc from a damaged size, say) as an
// Error naming the file, so callers need one catch.
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

}  // namespace

void save_checkpoint(const std::string& path, const ParamStore& params, const CheckpointMeta& meta,
                     optim::Optimizer* optimizer) {
  with_path(path, [&] {
    if (!params.finalized()) fail(path, "cannot save a parameter store that is not finalized");
    for (const auto& p : params.params()) {
      check_link_name(p.name, "parameter", path);
      if (optimizer && p.name == kOptimizerGroup)
        fail(path, "cannot save parameter 'optimizer' with optimizer state: the names collide");
      if (!meta.files.empty() && p.name == kFilesGroup)
        fail(path, "cannot save parameter 'files' with named files: the names collide");
    }
    for (const auto& entry : meta.files) check_link_name(entry.first, "file", path);
    if (optimizer)
      for (const auto& entry : checked_state(*optimizer, params, path))
        check_link_name(entry.first, "optimizer buffer", path);
    for (const auto& [key, value] : meta.config) {
      check_text(key, "config key", path);
      check_text(value, "config value", path);
    }
    for (const auto& name : meta.class_names) check_text(name, "class name", path);

    if (io::is_special_output(path))
      fail(path,
           "not a regular file: a checkpoint is written beside its target and renamed over "
           "it, which would replace it");
    const std::string tmp = temp_path_for(path);
    Image image;
    build_image(image, tmp, path, params, meta, optimizer);
    const size_t length = file_length(image, path);
    try {
      write_synced(tmp, image.data(), length, path);
      if (std::rename(tmp.c_str(), path.c_str()) != 0)
        fail(path, "cannot rename " + tmp + " over it: " + std::strerror(errno));
    } catch (...) {
      ::unlink(tmp.c_str());
      throw;
    }
    // The rename is only durable once the directory entry is on disk.
    std::string dir = std::filesystem::path(path).parent_path().string();
    sync_directory(dir.empty() ? "." : dir, path);
  });
}

CheckpointMeta read_checkpoint_meta(const std::string& path) {
  return with_path(path, [&] {
    OpenFile f = open_checkpoint(path);
    CheckpointMeta meta = read_meta(f, path);
    meta.files = read_files(f, path);
    meta.train_state = read_state(f, path);
    return meta;
  });
}

CheckpointMeta load_checkpoint(const std::string& path, ParamStore& params,
                               optim::Optimizer* optimizer) {
  return with_path(path, [&] {
    if (!params.finalized()) fail(path, "cannot load into a parameter store that is not finalized");
    OpenFile f = open_checkpoint(path);
    CheckpointMeta meta = read_meta(f, path);
    meta.files = read_files(f, path);
    meta.train_state = read_state(f, path);

    // Check everything before reading any values, then read into staging buffers and copy only
    // when all reads succeeded: a failed load leaves the model and the optimizer as they were.
    const auto root_links = list_links(f.root.get(), "the root group", path);
    std::vector<Hid> datasets = check_tensors(f.root.get(), root_links, "", params, path);

    OptimizerFile opt;
    if (optimizer) opt = check_optimizer_state(f, root_links, *optimizer, params, path);

    std::vector<float> staged(params.arena_floats());
    read_tensors(datasets, params, staged.data(), "", path);
    std::vector<std::vector<float>> staged_state;
    for (size_t b = 0; b < opt.state.size(); ++b) {
      staged_state.emplace_back(params.arena_floats());
      read_tensors(opt.datasets[b], params, staged_state.back().data(),
                   std::string(kOptimizerGroup) + "/" + opt.state[b].first + "/", path);
    }

    copy_slots(staged, params, params.values().f32());
    params.mark_changed();
    for (size_t b = 0; b < opt.state.size(); ++b)
      copy_slots(staged_state[b], params, opt.state[b].second->f32());
    if (optimizer) optimizer->set_steps(opt.steps);
    return meta;
  });
}

std::vector<std::pair<std::string, Shape>> list_checkpoint(const std::string& path) {
  return with_path(path, [&] {
    OpenFile f = open_checkpoint(path);
    std::vector<std::pair<std::string, Shape>> out;
    for (const auto& [name, kind] : list_links(f.root.get(), "the root group", path)) {
      if (kind != LinkKind::dataset) continue;
      DatasetInfo info = inspect(f.root.get(), name, name, path);
      out.emplace_back(name, info.shape.value_or(Shape{}));
    }
    // std::map already orders by name; sort anyway so the contract does not hang on that.
    std::sort(out.begin(), out.end());
    return out;
  });
}

}  // namespace vitk::io
