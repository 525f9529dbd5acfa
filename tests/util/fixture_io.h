#pragma once
// Reads the HDF5 fixtures written by the PyTorch scripts under tests/parity/: f32 and i32 datasets
// into vitk::Tensor, the names in a group, and scalar attributes of the root. HDF5 C API only.
// Every failure throws vitk::Error naming the file and the object.
#include <hdf5.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "common/error.h"
#include "common/tensor.h"

namespace vitk::test {

class FixtureFile {
 public:
  explicit FixtureFile(std::string path) : path_(std::move(path)) {
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);  // we report errors ourselves
    file_ = H5Fopen(path_.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
    if (file_ < 0) throw Error("cannot open HDF5 fixture " + path_);
  }
  ~FixtureFile() {
    if (file_ >= 0) H5Fclose(file_);
  }
  FixtureFile(const FixtureFile&) = delete;
  FixtureFile& operator=(const FixtureFile&) = delete;

  const std::string& path() const { return path_; }

  // Whether a link such as "input/memory" exists (every intermediate group is checked first, as
  // H5Lexists requires).
  bool has(const std::string& name) const {
    size_t pos = 0;
    while (true) {
      const size_t slash = name.find('/', pos);
      const std::string prefix = name.substr(0, slash);
      if (H5Lexists(file_, prefix.c_str(), H5P_DEFAULT) <= 0) return false;
      if (slash == std::string::npos) return true;
      pos = slash + 1;
    }
  }

  // The names of the links directly in `group`, e.g. names("param").
  std::vector<std::string> names(const std::string& group) const {
    Id g(H5Gopen2(file_, group.c_str(), H5P_DEFAULT), H5Gclose);
    check(g.id, "cannot open group", group);
    H5G_info_t info;
    check(H5Gget_info(g.id, &info), "cannot read group", group);
    std::vector<std::string> out;
    for (hsize_t i = 0; i < info.nlinks; ++i) {
      const ssize_t n =
          H5Lget_name_by_idx(g.id, ".", H5_INDEX_NAME, H5_ITER_INC, i, nullptr, 0, H5P_DEFAULT);
      check(n, "cannot list group", group);
      std::string name(static_cast<size_t>(n), '\0');
      H5Lget_name_by_idx(g.id, ".", H5_INDEX_NAME, H5_ITER_INC, i, name.data(), name.size() + 1,
                         H5P_DEFAULT);
      out.push_back(std::move(name));
    }
    return out;
  }

  Tensor read_f32(const std::string& name) const { return read(name, DType::f32); }
  Tensor read_i32(const std::string& name) const { return read(name, DType::i32); }

  // Scalar attributes of the root group. Integers and floats convert to the asked type as HDF5
  // does; strings may be fixed-length or variable-length (h5py writes the latter).
  int64_t attr_int(const std::string& name) const {
    Id a = open_attr(name, H5T_INTEGER);
    int64_t v = 0;
    check(H5Aread(a.id, H5T_NATIVE_INT64, &v), "cannot read attribute", name);
    return v;
  }
  double attr_float(const std::string& name) const {
    Id a = open_attr(name, H5T_FLOAT);
    double v = 0;
    check(H5Aread(a.id, H5T_NATIVE_DOUBLE, &v), "cannot read attribute", name);
    return v;
  }
  std::string attr_string(const std::string& name) const {
    Id a = open_attr(name, H5T_STRING);
    Id type(H5Aget_type(a.id), H5Tclose);
    check(type.id, "cannot read the type of attribute", name);
    if (H5Tis_variable_str(type.id) > 0) {
      char* s = nullptr;
      check(H5Aread(a.id, type.id, &s), "cannot read attribute", name);
      std::string out = s ? s : "";
      H5free_memory(s);
      return out;
    }
    std::string out(H5Tget_size(type.id), '\0');
    check(H5Aread(a.id, type.id, out.data()), "cannot read attribute", name);
    return out.substr(0, out.find('\0'));
  }
  bool has_attr(const std::string& name) const { return H5Aexists(file_, name.c_str()) > 0; }

 private:
  // Closes one HDF5 identifier when it goes out of scope.
  struct Id {
    hid_t id;
    herr_t (*close)(hid_t);
    Id(hid_t i, herr_t (*c)(hid_t)) : id(i), close(c) {}
    ~Id() {
      if (id >= 0) close(id);
    }
    Id(Id&& other) noexcept : id(std::exchange(other.id, -1)), close(other.close) {}
    Id(const Id&) = delete;
    Id& operator=(const Id&) = delete;
    Id& operator=(Id&&) = delete;
  };

  template <typename T>
  void check(T status, const char* what, const std::string& name) const {
    if (status < 0) throw Error(path_ + ": " + what + " '" + name + "'");
  }

  Id open_attr(const std::string& name, H5T_class_t expected) const {
    if (!has_attr(name)) throw Error(path_ + ": no attribute '" + name + "'");
    Id a(H5Aopen(file_, name.c_str(), H5P_DEFAULT), H5Aclose);
    check(a.id, "cannot open attribute", name);
    Id type(H5Aget_type(a.id), H5Tclose);
    Id space(H5Aget_space(a.id), H5Sclose);
    if (H5Tget_class(type.id) != expected || H5Sget_simple_extent_npoints(space.id) != 1)
      throw Error(path_ + ": attribute '" + name + "' is not a scalar of the expected type");
    return a;
  }

  Tensor read(const std::string& name, DType dtype) const {
    if (!has(name)) throw Error(path_ + ": no dataset '" + name + "'");
    Id d(H5Dopen2(file_, name.c_str(), H5P_DEFAULT), H5Dclose);
    check(d.id, "cannot open dataset", name);
    Id type(H5Dget_type(d.id), H5Tclose);
    const H5T_class_t cls = H5Tget_class(type.id);
    // No silent conversion between integers and floats, nor from a wider type.
    const bool ok = dtype == DType::f32 ? (cls == H5T_FLOAT && H5Tget_size(type.id) == 4)
                                        : (cls == H5T_INTEGER && H5Tget_size(type.id) == 4);
    if (!ok) throw Error(path_ + ": dataset '" + name + "' is not " + dtype_name(dtype));
    Id space(H5Dget_space(d.id), H5Sclose);
    const int rank = H5Sget_simple_extent_ndims(space.id);
    check(rank, "cannot read the shape of dataset", name);
    std::vector<hsize_t> dims(static_cast<size_t>(rank));
    H5Sget_simple_extent_dims(space.id, dims.data(), nullptr);
    Shape shape(dims.begin(), dims.end());
    Tensor t(shape, dtype);
    const hid_t mem = dtype == DType::f32 ? H5T_NATIVE_FLOAT : H5T_NATIVE_INT32;
    if (t.numel() > 0)
      check(H5Dread(d.id, mem, H5S_ALL, H5S_ALL, H5P_DEFAULT, t.data()), "cannot read dataset",
            name);
    return t;
  }

  std::string path_;
  hid_t file_ = -1;
};

}  // namespace vitk::test
