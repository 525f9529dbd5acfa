#include "common/io/hdf5.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "common/quoted_name.h"

namespace vitk::io {

void fail(const std::string& path, const std::string& what) {
  throw Error(path + ": " + what);
}

void quiet_hdf5() {
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
}

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

Hid::Hid(Hid&& other) noexcept
    : id_(std::exchange(other.id_, H5I_INVALID_HID)), closer_(other.closer_) {}

Hid& Hid::operator=(Hid&& other) noexcept {
  if (this != &other) {
    reset();
    id_ = std::exchange(other.id_, H5I_INVALID_HID);
    closer_ = other.closer_;
  }
  return *this;
}

bool Hid::close() {
  herr_t status = id_ >= 0 ? closer_(id_) : 0;
  id_ = H5I_INVALID_HID;
  return status >= 0;
}

Hid checked(hid_t id, Hid::Closer closer, const std::string& path, const std::string& what) {
  if (id < 0) fail(path, what + hdf5_reason());
  return Hid(id, closer);
}

void checked(herr_t status, const std::string& path, const std::string& what) {
  if (status < 0) fail(path, what + hdf5_reason());
}

std::string quoted(const std::string& s) {
  return quoted_name(s);
}

Hid file_access(const std::string& path, size_t memory_increment) {
  Hid fapl = checked(H5Pcreate(H5P_FILE_ACCESS), H5Pclose, path, "cannot create HDF5 properties");
  // STRONG: closing the file closes anything still open in it, so the close really releases it.
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

Hid create_group(hid_t loc, const std::string& name, hid_t gcpl, const std::string& shown,
                 const std::string& path) {
  return checked(H5Gcreate2(loc, name.c_str(), H5P_DEFAULT, gcpl, H5P_DEFAULT), H5Gclose, path,
                 "cannot create group " + quoted(shown));
}

namespace {

Hid utf8_string_type(const std::string& path) {
  Hid type = checked(H5Tcopy(H5T_C_S1), H5Tclose, path, "cannot make string type");
  checked(H5Tset_size(type.get(), H5T_VARIABLE), path, "cannot make string type");
  checked(H5Tset_cset(type.get(), H5T_CSET_UTF8), path, "cannot make string type");
  return type;
}

void write_attribute(hid_t loc, const std::string& name, hid_t file_type, hid_t mem_type,
                     const void* data, const Shape& shape, const std::string& path) {
  Hid space = make_space(shape, path);
  Hid attr =
      checked(H5Acreate2(loc, name.c_str(), file_type, space.get(), H5P_DEFAULT, H5P_DEFAULT),
              H5Aclose, path, "cannot create attribute " + quoted(name));
  checked(H5Awrite(attr.get(), mem_type, data), path, "cannot write attribute " + quoted(name));
}

}  // namespace

void write_strings(hid_t loc, const std::string& name, const std::vector<std::string>& values,
                   bool as_array, const std::string& path) {
  size_t width = 1;  // HDF5 has no zero-size strings
  for (const auto& v : values) width = std::max(width, v.size());
  Hid type = checked(H5Tcopy(H5T_C_S1), H5Tclose, path, "cannot make string type");
  checked(H5Tset_size(type.get(), width), path, "cannot make string type");
  checked(H5Tset_strpad(type.get(), H5T_STR_NULLPAD), path, "cannot make string type");
  checked(H5Tset_cset(type.get(), H5T_CSET_UTF8), path, "cannot make string type");
  std::vector<char> packed(values.size() * width, '\0');
  for (size_t i = 0; i < values.size(); ++i)
    std::copy(values[i].begin(), values[i].end(), packed.begin() + i * width);
  write_attribute(loc, name, type.get(), type.get(), packed.data(),
                  as_array ? Shape{static_cast<int64_t>(values.size())} : Shape{}, path);
}

void write_int64(hid_t loc, const std::string& name, int64_t value, const std::string& path) {
  write_attribute(loc, name, H5T_STD_I64LE, H5T_NATIVE_INT64, &value, {}, path);
}

void write_uint64(hid_t loc, const std::string& name, uint64_t value, const std::string& path) {
  write_attribute(loc, name, H5T_STD_U64LE, H5T_NATIVE_UINT64, &value, {}, path);
}

void write_double(hid_t loc, const std::string& name, double value, const std::string& path) {
  write_attribute(loc, name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &value, {}, path);
}

void write_dataset(hid_t loc, const std::string& name, hid_t file_type, hid_t mem_type,
                   const void* data, const Shape& shape, hid_t dcpl, const std::string& shown,
                   const std::string& path) {
  Hid space = make_space(shape, path);
  Hid ds =
      checked(H5Dcreate2(loc, name.c_str(), file_type, space.get(), H5P_DEFAULT, dcpl, H5P_DEFAULT),
              H5Dclose, path, "cannot create " + shown);
  // HDF5 refuses a null buffer even for an empty dataset; there is nothing to write then.
  if (shape_numel(shape) > 0)
    checked(H5Dwrite(ds.get(), mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data), path,
            "cannot write " + shown);
}

// ----------------------------------------------------------------------------------------------
// Reading

ReadFile open_read_only(const std::string& path) {
  ReadFile f;
  f.path = path;
  Hid fapl = file_access(path);
  f.file = checked(H5Fopen(path.c_str(), H5F_ACC_RDONLY, fapl.get()), H5Fclose, path,
                   "cannot read the HDF5 file, it is truncated or damaged");
  f.root = checked(H5Gopen2(f.file.get(), "/", H5P_DEFAULT), H5Gclose, path,
                   "cannot read the root group, the file is damaged");
  checked(H5Fget_filesize(f.file.get(), &f.size), path, "cannot get the file size");
  return f;
}

std::optional<Hid> open_attribute(hid_t loc, const std::string& name, const std::string& path) {
  htri_t exists = H5Aexists(loc, name.c_str());
  if (exists < 0) fail(path, "cannot read attribute " + quoted(name) + hdf5_reason());
  if (exists == 0) return std::nullopt;
  return checked(H5Aopen(loc, name.c_str(), H5P_DEFAULT), H5Aclose, path,
                 "cannot open attribute " + quoted(name));
}

std::vector<std::string> attribute_names(hid_t loc, const std::string& path) {
  std::vector<std::string> names;
  H5A_operator2_t collect = [](hid_t, const char* name, const H5A_info_t*, void* data) -> herr_t {
    try {
      static_cast<std::vector<std::string>*>(data)->emplace_back(name);
      return 0;
    } catch (...) {
      return -1;
    }
  };
  // In the B-tree's own order, then sorted: an ordered walk of dense storage makes libhdf5 (1.10)
  // build a table first, and free pointers it never set when a damaged file stops the build
  // (see list_links).
  checked(H5Aiterate2(loc, H5_INDEX_NAME, H5_ITER_NATIVE, nullptr, collect, &names), path,
          "cannot list attributes");
  std::sort(names.begin(), names.end());
  return names;
}

bool has_link(hid_t loc, const std::string& name, const std::string& path) {
  htri_t exists = H5Lexists(loc, name.c_str(), H5P_DEFAULT);
  if (exists < 0) fail(path, "cannot look for " + quoted(name) + hdf5_reason());
  return exists > 0;
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

namespace {

struct AttrData {
  Hid type, space;
  hssize_t count = 0;
};

AttrData attribute_data(const ReadFile& f, hid_t attr, H5T_class_t expected,
                        const char* expected_name, const std::string& name) {
  AttrData d;
  d.type = checked(H5Aget_type(attr), H5Tclose, f.path, "cannot read attribute " + quoted(name));
  d.space = checked(H5Aget_space(attr), H5Sclose, f.path, "cannot read attribute " + quoted(name));
  if (H5Tget_class(d.type.get()) != expected)
    fail(f.path, "attribute " + quoted(name) + " is " + type_name(d.type.get()) + ", expected " +
                     expected_name);
  d.count = H5Sget_simple_extent_npoints(d.space.get());
  if (d.count < 0 || static_cast<hsize_t>(d.count) > f.size)
    fail(f.path, "attribute " + quoted(name) + " is damaged");
  return d;
}

std::vector<std::string> read_variable_strings(const ReadFile& f, hid_t attr, const AttrData& d,
                                               const std::string& name) {
  Hid mem = utf8_string_type(f.path);
  checked(H5Tset_cset(mem.get(), H5Tget_cset(d.type.get())), f.path, "cannot make string type");
  std::vector<char*> ptrs(static_cast<size_t>(d.count), nullptr);
  checked(H5Aread(attr, mem.get(), ptrs.data()), f.path, "cannot read attribute " + quoted(name));
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
  std::vector<std::string> out;
  for (const char* p : ptrs) out.emplace_back(p ? p : "");
  return out;
}

}  // namespace

std::vector<std::string> read_strings(const ReadFile& f, hid_t attr, const std::string& name) {
  AttrData d = attribute_data(f, attr, H5T_STRING, "a string", name);
  const size_t n = static_cast<size_t>(d.count);
  if (n == 0) return {};
  htri_t variable = H5Tis_variable_str(d.type.get());
  if (variable < 0) fail(f.path, "cannot read attribute " + quoted(name) + hdf5_reason());
  if (variable) return read_variable_strings(f, attr, d, name);
  // Fixed-length strings, as h5py writes numpy byte strings: NUL- or space-padded slots.
  const size_t width = H5Tget_size(d.type.get());
  if (width == 0 || n * width > f.size) fail(f.path, "attribute " + quoted(name) + " is damaged");
  std::vector<char> buf(n * width);
  checked(H5Aread(attr, d.type.get(), buf.data()), f.path, "cannot read attribute " + quoted(name));
  const bool space_padded = H5Tget_strpad(d.type.get()) == H5T_STR_SPACEPAD;
  std::vector<std::string> out;
  for (size_t i = 0; i < n; ++i) {
    const char* s = buf.data() + i * width;
    size_t len = space_padded ? width : strnlen(s, width);
    while (space_padded && len > 0 && s[len - 1] == ' ') --len;
    out.emplace_back(s, len);
  }
  return out;
}

std::string read_string(const ReadFile& f, hid_t attr, const std::string& name) {
  auto values = read_strings(f, attr, name);
  if (values.size() != 1) fail(f.path, "attribute " + quoted(name) + " is not a single string");
  return values[0];
}

std::vector<uint64_t> read_uint64s(const ReadFile& f, hid_t attr, const std::string& name) {
  AttrData d = attribute_data(f, attr, H5T_INTEGER, "an integer", name);
  std::vector<uint64_t> out(static_cast<size_t>(d.count));
  if (!out.empty())
    checked(H5Aread(attr, H5T_NATIVE_UINT64, out.data()), f.path,
            "cannot read attribute " + quoted(name));
  return out;
}

int64_t read_int64(const ReadFile& f, hid_t attr, const std::string& name) {
  AttrData d = attribute_data(f, attr, H5T_INTEGER, "an integer", name);
  if (d.count != 1) fail(f.path, "attribute " + quoted(name) + " is not a single integer");
  int64_t value = 0;
  checked(H5Aread(attr, H5T_NATIVE_INT64, &value), f.path, "cannot read attribute " + quoted(name));
  return value;
}

double read_double(const ReadFile& f, hid_t attr, const std::string& name) {
  AttrData d = attribute_data(f, attr, H5T_FLOAT, "a number", name);
  if (d.count != 1) fail(f.path, "attribute " + quoted(name) + " is not a single number");
  double value = 0;
  checked(H5Aread(attr, H5T_NATIVE_DOUBLE, &value), f.path,
          "cannot read attribute " + quoted(name));
  return value;
}

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
  // H5_ITER_NATIVE, not H5_ITER_INC: for a group of many links (dense storage), an ordered walk
  // makes libhdf5 1.10 copy every link into a table first, and when a damaged file stops that
  // copy it frees the pointers of entries it never filled (a crash found by fuzzing,
  // tests/fuzz/regressions/checkpoint). The native order walks the B-tree directly; the map
  // below sorts the names anyway.
  checked(H5Literate(group, H5_INDEX_NAME, H5_ITER_NATIVE, nullptr, collect, &links), path,
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

DatasetInfo inspect_dataset(hid_t group, const std::string& name, const std::string& shown,
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

}  // namespace vitk::io
