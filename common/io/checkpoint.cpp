// The checkpoint format: which names, shapes, attributes and groups a vitk checkpoint holds, and
// every check a load makes before it reads a value. The HDF5 calls are in hdf5.cpp, the file is
// built in memory (hdf5_image.cpp) and written by the atomic writer (atomic_file.cpp).
#include "common/io/checkpoint.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <set>
#include <utility>
#include <variant>

#include "common/error.h"
#include "common/finite.h"
#include "common/io/atomic_file.h"
#include "common/io/hdf5.h"
#include "common/io/hdf5_image.h"
#include "common/io/input_file.h"
#include "common/optim/optim.h"

namespace vitk::io {
namespace {

constexpr const char* kFormatAttr = "vitk_format";
constexpr const char* kFormatName = "vitk-checkpoint";
constexpr const char* kVersionAttr = "vitk_format_version";
constexpr int64_t kFormatVersion = 1;
constexpr const char* kConfigPrefix = "config.";
constexpr const char* kRecipePrefix = "recipe.";
constexpr const char* kOptimizerGroup = "optimizer";
constexpr const char* kFilesGroup = "files";
constexpr const char* kStateGroup = "train_state";
constexpr const char* kQuantizationAttr = "quantization";
constexpr const char* kScaleSuffix = "_scale";  // NAME_scale: the per-row scales of int8 NAME

// Written as int8 (save_checkpoint's contract): only the plain form can be; a packed one is
// oneDNN's layout for this CPU.
bool stored_as_int8(const Parameter& p, const std::string& path) {
  if (!p.value_released) return false;
  if (!p.quantized || p.quantized->packed())
    fail(path, "cannot save " + quoted(p.name) +
                   ": its f32 value was released and its int8 form is packed for this CPU");
  return true;
}

// ----------------------------------------------------------------------------------------------
// Writing

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

// The training state as attributes of /train_state and of its subgroups: "rng/dropout/counter"
// is the attribute `counter` of /train_state/rng/dropout.
void write_state(hid_t root, const std::map<std::string, StateValue>& values,
                 const std::string& path) {
  Hid gcpl = untimed(H5P_GROUP_CREATE, path);
  std::map<std::string, Hid> groups;  // by their path below the root
  auto group = [&](const std::string& where) -> hid_t {
    auto it = groups.find(where);
    if (it != groups.end()) return it->second.get();
    const size_t slash = where.rfind('/');
    const hid_t parent =
        slash == std::string::npos ? root : groups.at(where.substr(0, slash)).get();
    Hid g = create_group(parent, where.substr(slash + 1), gcpl.get(), where, path);
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
    if (const auto* i = std::get_if<int64_t>(&value))
      write_int64(loc, name, *i, path);
    else if (const auto* u = std::get_if<uint64_t>(&value))
      write_uint64(loc, name, *u, path);
    else if (const auto* d = std::get_if<double>(&value))
      write_double(loc, name, *d, path);
    else
      write_strings(loc, name, {std::get<std::string>(value)}, false, path);
  }
}

// Writes the whole checkpoint into an HDF5 file in memory.
void build(MemoryFile& file, const std::string& path, const ParamStore& params,
           const CheckpointMeta& meta, optim::Optimizer* optimizer) {
  const hid_t r = file.root();
  write_strings(r, kFormatAttr, {kFormatName}, false, path);
  write_int64(r, kVersionAttr, kFormatVersion, path);
  for (const auto& [key, value] : meta.config)
    write_strings(r, kConfigPrefix + key, {value}, false, path);
  for (const auto& [key, value] : meta.recipe)
    write_strings(r, kRecipePrefix + key, {value}, false, path);
  if (!meta.class_names.empty()) write_strings(r, "class_names", meta.class_names, true, path);
  write_int64(r, "step", meta.step, path);
  write_int64(r, "epoch", meta.epoch, path);
  if (!meta.train_state.empty()) write_state(r, meta.train_state, path);

  bool int8 = false;
  for (const auto& p : params.params()) int8 = int8 || stored_as_int8(p, path);
  if (int8 && optimizer) fail(path, "cannot save an optimizer's state with int8 weights");
  if (int8) write_strings(r, kQuantizationAttr, {"int8"}, false, path);

  Hid dcpl = untimed(H5P_DATASET_CREATE, path);
  auto write_f32 = [&](hid_t group, const Parameter& p, const float* arena) {
    write_dataset(group, p.name, H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, arena + p.offset, p.shape,
                  dcpl.get(), "tensor " + quoted(p.name), path);
  };
  for (const auto& p : params.params()) {
    if (!stored_as_int8(p, path)) {
      write_f32(r, p, params.values().f32());
      continue;
    }
    const ops::QuantizedWeight& q = *p.quantized;
    write_dataset(r, p.name, H5T_STD_I8LE, H5T_NATIVE_SCHAR, q.values.data(), p.shape, dcpl.get(),
                  "tensor " + quoted(p.name), path);
    write_dataset(r, p.name + kScaleSuffix, H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, q.scales.data(),
                  {q.n}, dcpl.get(), "tensor " + quoted(p.name + kScaleSuffix), path);
  }

  if (!meta.files.empty()) {
    Hid gcpl = untimed(H5P_GROUP_CREATE, path);
    Hid group = create_group(r, kFilesGroup, gcpl.get(), kFilesGroup, path);
    for (const auto& [file_name, bytes] : meta.files)
      write_dataset(group.get(), file_name, H5T_STD_U8LE, H5T_NATIVE_UINT8, bytes.data(),
                    {static_cast<int64_t>(bytes.size())}, dcpl.get(),
                    quoted(std::string(kFilesGroup) + "/" + file_name), path);
  }

  if (optimizer) {
    write_strings(r, "optimizer", {optimizer->kind()}, false, path);
    write_int64(r, "optimizer_steps", optimizer->steps(), path);
    Hid gcpl = untimed(H5P_GROUP_CREATE, path);
    Hid group = create_group(r, kOptimizerGroup, gcpl.get(), kOptimizerGroup, path);
    for (const auto& [buffer_name, tensor] : checked_state(*optimizer, params, path)) {
      Hid buffer = create_group(group.get(), buffer_name, gcpl.get(),
                                std::string(kOptimizerGroup) + "/" + buffer_name, path);
      for (const auto& p : params.params()) write_f32(buffer.get(), p, tensor->f32());
    }
  }
}

// ----------------------------------------------------------------------------------------------
// Reading

ReadFile open_checkpoint(const std::string& path) {
  // Before HDF5 opens it: a FIFO would block the open until a writer came.
  require_regular_file(path, "a checkpoint");
  // H5Fis_hdf5 only looks for the signature; when it is there but the file is damaged (< 0, or
  // > 0 and the open fails), H5Fopen explains why.
  if (H5Fis_hdf5(path.c_str()) == 0) fail(path, "not an HDF5 file");
  H5Eclear2(H5E_DEFAULT);
  ReadFile f = open_read_only(path);

  const std::string not_ours = "not a vitk checkpoint (no '" + std::string(kFormatAttr) + "' = '" +
                               kFormatName + "' attribute)";
  auto marker = open_attribute(f.root.get(), kFormatAttr, path);
  if (!marker) fail(path, not_ours);
  std::string format = read_string(f, marker->get(), kFormatAttr);
  if (format != kFormatName) fail(path, not_ours);
  auto version_attr = open_attribute(f.root.get(), kVersionAttr, path);
  if (!version_attr) fail(path, "no '" + std::string(kVersionAttr) + "' attribute");
  int64_t version = read_int64(f, version_attr->get(), kVersionAttr);
  if (version < 1 || version > kFormatVersion)
    fail(path, "checkpoint format version " + std::to_string(version) +
                   " is not supported (this vitk reads version " + std::to_string(kFormatVersion) +
                   ")");
  return f;
}

CheckpointMeta read_meta(const ReadFile& f, const std::string& path) {
  const std::vector<std::string> names = attribute_names(f.root.get(), path);
  CheckpointMeta meta;
  const hid_t root = f.root.get();
  for (const auto& name : names) {
    for (auto [prefix, into] :
         {std::pair{kConfigPrefix, &meta.config}, std::pair{kRecipePrefix, &meta.recipe}}) {
      const size_t n = std::strlen(prefix);
      if (name.compare(0, n, prefix) != 0) continue;
      Hid attr = checked(H5Aopen(root, name.c_str(), H5P_DEFAULT), H5Aclose, path,
                         "cannot open attribute " + quoted(name));
      (*into)[name.substr(n)] = read_string(f, attr.get(), name);
    }
  }
  // Everything but the config is optional, so that a converter script can write a minimal file.
  if (auto a = open_attribute(root, "class_names", path))
    meta.class_names = read_strings(f, a->get(), "class_names");
  if (auto a = open_attribute(root, "step", path)) meta.step = read_int64(f, a->get(), "step");
  if (auto a = open_attribute(root, "epoch", path)) meta.epoch = read_int64(f, a->get(), "epoch");
  if (auto a = open_attribute(root, "rng_state", path))
    meta.rng_state = read_uint64s(f, a->get(), "rng_state");
  if (auto a = open_attribute(root, "optimizer", path))
    meta.optimizer = read_string(f, a->get(), "optimizer");
  if (auto a = open_attribute(root, kQuantizationAttr, path)) {
    meta.quantization = read_string(f, a->get(), kQuantizationAttr);
    if (meta.quantization != "int8")
      fail(path, "attribute 'quantization' is " + quoted(meta.quantization) +
                     "; vitk knows only \"int8\"");
  }
  return meta;
}

// The training state under /train_state (write_state), if there is such a group: scalar
// integers, numbers and strings, in groups at most two levels below it.
void read_state_group(const ReadFile& f, hid_t group, const std::string& prefix, int depth,
                      std::map<std::string, StateValue>& out) {
  const std::string& path = f.path;
  const std::string where = std::string(kStateGroup) + (prefix.empty() ? "" : "/" + prefix);
  auto full = [&](const std::string& name) { return prefix.empty() ? name : prefix + "/" + name; };
  for (const std::string& name : attribute_names(group, path)) {
    const std::string shown = where + "/" + name;
    Hid attr = checked(H5Aopen(group, name.c_str(), H5P_DEFAULT), H5Aclose, path,
                       "cannot open attribute " + quoted(shown));
    Hid type =
        checked(H5Aget_type(attr.get()), H5Tclose, path, "cannot read attribute " + quoted(shown));
    const H5T_class_t cls = H5Tget_class(type.get());
    if (cls == H5T_STRING) {
      out[full(name)] = read_string(f, attr.get(), shown);
    } else if (cls == H5T_INTEGER && H5Tget_sign(type.get()) == H5T_SGN_NONE) {
      const std::vector<uint64_t> v = read_uint64s(f, attr.get(), shown);
      if (v.size() != 1) fail(path, "attribute " + quoted(shown) + " is not a single integer");
      out[full(name)] = v[0];
    } else if (cls == H5T_INTEGER) {
      out[full(name)] = read_int64(f, attr.get(), shown);
    } else if (cls == H5T_FLOAT) {
      out[full(name)] = read_double(f, attr.get(), shown);
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
    read_state_group(f, sub.get(), full(name), depth + 1, out);
  }
}

std::map<std::string, StateValue> read_state(const ReadFile& f, const std::string& path) {
  std::map<std::string, StateValue> out;
  if (!has_link(f.root.get(), kStateGroup, path)) return out;
  Hid group = checked(H5Gopen2(f.root.get(), kStateGroup, H5P_DEFAULT), H5Gclose, path,
                      "'train_state' is not a group");
  read_state_group(f, group.get(), "", 0, out);
  return out;
}

// Checks that the group holds exactly the model's tensors, as f32 of the right shapes, and
// returns their opened datasets in store order. prefix is how messages show names in the group.
// A parameter's datasets: its values, and for an int8 one its scales (NAME_scale).
struct TensorData {
  Hid values, scales;
  bool int8() const { return scales.get() >= 0; }
};

// An i8 tensor in a file without quantization = "int8": `vitk quantize` always writes the
// attribute, so such a file is damaged or made elsewhere, and no command reads it.
[[noreturn]] void fail_unmarked_int8(const std::string& path, const std::string& shown) {
  fail(path, "tensor " + quoted(shown) + " is int8, but the file has no attribute quantization = " +
                 "\"int8\" (which every file of vitk quantize has): a damaged or foreign file; " +
                 "quantize the f32 checkpoint again");
}

// Why tensor `shown`, of `dtype`, cannot be loaded as the model's f32 (or, `int8_expected`: as
// the int8 matrix of a quantised file, its scales beside it).
std::string dtype_problem(const std::string& shown, const std::string& dtype, bool int8,
                          bool int8_expected) {
  if (int8_expected)
    return "tensor " + quoted(shown) + " has dtype " + dtype + "; an int8 matrix of vitk " +
           "quantize (its scales in " + quoted(shown + kScaleSuffix) + ") must be i8";
  return "tensor " + quoted(shown) + " has dtype " + dtype + ", the model expects f32" +
         (dtype == "i8" ? std::string(int8 ? " (int8 only for a matrix)"
                                           : " (an int8 tensor of `vitk quantize` runs only at "
                                             "inference)")
                        : "");
}

// `quantized`: the file has quantization = "int8" (i8 tensors are taken only then, and with int8).
std::vector<TensorData> check_tensors(hid_t group, const std::map<std::string, LinkKind>& links,
                                      const std::string& prefix, const ParamStore& params,
                                      const std::string& path, bool int8, bool quantized) {
  size_t missing = 0;
  for (const auto& p : params.params()) missing += links.count(p.name) == 0;
  std::vector<TensorData> out;
  std::set<std::string> known;
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
    known.insert(p.name);
    DatasetInfo info = inspect_dataset(group, p.name, shown, path);
    if (info.dtype == "i8" && int8 && !quantized) fail_unmarked_int8(path, shown);
    const bool is_int8 = info.dtype == "i8" && int8 && p.shape.size() == 2;
    if (info.dtype != "f32" && !is_int8) {
      const bool int8_expected = int8 && quantized && p.shape.size() == 2 &&
                                 links.count(p.name + kScaleSuffix) && info.dtype != "i8";
      fail(path, dtype_problem(shown, info.dtype, int8, int8_expected));
    }
    if (!info.shape) fail(path, "tensor " + quoted(shown) + " has no data (null dataspace)");
    if (*info.shape != p.shape)
      fail(path, "tensor " + quoted(shown) + " has shape " + shape_str(*info.shape) +
                     ", the model expects " + shape_str(p.shape));
    TensorData data{std::move(info.ds), Hid()};
    if (is_int8) {
      const std::string scale = p.name + kScaleSuffix, shown_scale = prefix + scale;
      auto s = links.find(scale);
      if (s == links.end() || s->second != LinkKind::dataset)
        fail(path, "int8 tensor " + quoted(shown) + " has no dataset " + quoted(shown_scale) +
                       " with its scales");
      known.insert(scale);
      DatasetInfo si = inspect_dataset(group, scale, shown_scale, path);
      const Shape want{p.shape[0]};
      if (si.dtype != "f32" || !si.shape || *si.shape != want)
        fail(path, "tensor " + quoted(shown_scale) + " should be f32 " + shape_str(want) +
                       ", not " + si.dtype + " " + (si.shape ? shape_str(*si.shape) : "(null)"));
      data.scales = std::move(si.ds);
    }
    out.push_back(std::move(data));
  }
  std::vector<std::string> extra;
  for (const auto& [name, kind] : links)
    if (kind == LinkKind::dataset && !known.count(name)) extra.push_back(name);
  if (!extra.empty()) {
    std::string more =
        extra.size() > 1 ? " (and " + std::to_string(extra.size() - 1) + " more)" : "";
    fail(path, "unexpected tensor " + quoted(prefix + extra[0]) +
                   ": the model has no parameter of that name" + more);
  }
  return out;
}

// The byte strings under /files, if there is such a group: each a 1-D u8 dataset.
std::map<std::string, std::string> read_files(const ReadFile& f, const std::string& path) {
  std::map<std::string, std::string> out;
  if (!has_link(f.root.get(), kFilesGroup, path)) return out;
  Hid group = checked(H5Gopen2(f.root.get(), kFilesGroup, H5P_DEFAULT), H5Gclose, path,
                      "'files' is not a group");
  for (const auto& [name, kind] : list_links(group.get(), "group 'files'", path)) {
    const std::string shown = std::string(kFilesGroup) + "/" + name;
    if (kind != LinkKind::dataset) fail(path, quoted(shown) + " is not a dataset");
    DatasetInfo info = inspect_dataset(group.get(), name, shown, path);
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

// The optimizer's part of a checkpoint, checked and opened, not yet read.
struct OptimizerFile {
  std::vector<std::pair<std::string, Tensor*>> state;  // the optimizer's buffers
  std::vector<std::vector<TensorData>> datasets;       // per buffer, in store order
  int64_t steps = 0;
};

OptimizerFile check_optimizer_state(const ReadFile& f,
                                    const std::map<std::string, LinkKind>& root_links,
                                    optim::Optimizer& optimizer, const ParamStore& params,
                                    const std::string& path) {
  OptimizerFile out;
  out.state = checked_state(optimizer, params, path);
  auto kind_attr = open_attribute(f.root.get(), "optimizer", path);
  if (!kind_attr)
    fail(path, "has no optimizer state, but the " + optimizer.kind() + " optimizer needs it");
  std::string kind = read_string(f, kind_attr->get(), "optimizer");
  if (kind != optimizer.kind())
    fail(path, "holds " + kind + " optimizer state, but the optimizer is " + optimizer.kind());
  auto steps_attr = open_attribute(f.root.get(), "optimizer_steps", path);
  if (!steps_attr) fail(path, "has no 'optimizer_steps' attribute");
  out.steps = read_int64(f, steps_attr->get(), "optimizer_steps");

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
    out.datasets.push_back(check_tensors(buffer.get(), links, prefix, params, path, false, false));
  }
  return out;
}

// Reads each dataset into its parameter's slot of a flat buffer with the arena layout. A NaN or
// an infinity is refused here, while the values are in cache: a model with one would score NaN
// (and rank it first), and training or averaging would spread it.
void read_tensors(const std::vector<TensorData>& datasets, const ParamStore& params, float* dst,
                  const std::string& prefix, const std::string& path) {
  size_t i = 0;
  for (const auto& p : params.params()) {
    const TensorData& data = datasets[i++];
    if (data.int8()) continue;  // read_int8
    checked(
        H5Dread(data.values.get(), H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, dst + p.offset),
        path, "cannot read tensor " + quoted(prefix + p.name));
    const int64_t bad = first_non_finite(dst + p.offset, p.numel());
    if (bad >= 0)
      fail(path, "tensor " + quoted(prefix + p.name) + " holds a non-finite value (" +
                     std::to_string(dst[p.offset + static_cast<size_t>(bad)]) + " at flat index " +
                     std::to_string(bad) + "): the weights are damaged");
  }
}

// The int8 tensors' quantised weights, by parameter (null for an f32 one).
std::vector<std::shared_ptr<ops::QuantizedWeight>> read_int8(
    const std::vector<TensorData>& datasets, const ParamStore& params, const std::string& path) {
  std::vector<std::shared_ptr<ops::QuantizedWeight>> out;
  size_t i = 0;
  for (const auto& p : params.params()) {
    const TensorData& data = datasets[i++];
    out.emplace_back();
    if (!data.int8()) continue;
    Tensor q(p.shape, DType::s8), scales({p.shape[0]});
    checked(H5Dread(data.values.get(), H5T_NATIVE_SCHAR, H5S_ALL, H5S_ALL, H5P_DEFAULT, q.data()),
            path, "cannot read tensor " + quoted(p.name));
    checked(
        H5Dread(data.scales.get(), H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, scales.data()),
        path, "cannot read tensor " + quoted(p.name + kScaleSuffix));
    try {
      out.back() = std::make_shared<ops::QuantizedWeight>(
          ops::quantized_weight(std::move(q), std::move(scales)));
    } catch (const Error& e) {
      fail(path, "int8 tensor " + quoted(p.name) + ": " + e.what());
    }
  }
  return out;
}

// An uninitialised staging buffer of the arena's layout: the pages of tensors that are not read
// into it (int8 ones) are never touched.
std::unique_ptr<float[]> staging(const ParamStore& params) {
  return std::unique_ptr<float[]>(new float[std::max<size_t>(params.arena_floats(), 1)]);
}

void copy_slots(const float* staged, const std::vector<TensorData>& datasets,
                const ParamStore& params, float* dst) {
  size_t i = 0;
  for (const auto& p : params.params())
    if (!datasets[i++].int8())
      std::copy_n(staged + p.offset, static_cast<size_t>(p.numel()), dst + p.offset);
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
    for (const auto& [key, value] : meta.recipe) {
      check_text(key, "recipe key", path);
      check_text(value, "recipe value", path);
    }
    for (const auto& name : meta.class_names) check_text(name, "class name", path);

    MemoryFile file(path);
    build(file, path, params, meta, optimizer);
    // Refused rather than written in place: a pipe without a reader would block a training run.
    write_file_atomic(path, file.finish(), SpecialTarget::refuse);
  });
}

CheckpointMeta read_checkpoint_meta(const std::string& path) {
  return with_path(path, [&] {
    ReadFile f = open_checkpoint(path);
    CheckpointMeta meta = read_meta(f, path);
    meta.files = read_files(f, path);
    meta.train_state = read_state(f, path);
    return meta;
  });
}

CheckpointMeta load_checkpoint(const std::string& path, ParamStore& params,
                               optim::Optimizer* optimizer, bool int8) {
  return with_path(path, [&] {
    if (!params.finalized()) fail(path, "cannot load into a parameter store that is not finalized");
    ReadFile f = open_checkpoint(path);
    CheckpointMeta meta = read_meta(f, path);
    meta.files = read_files(f, path);
    meta.train_state = read_state(f, path);
    if (!meta.quantization.empty() && !int8)
      fail(path, "is quantised to " + meta.quantization +
                     " (vitk quantize): it runs only at inference (classify, eval, translate); "
                     "train, fine-tune or average from the f32 checkpoint it was made from");

    // Check everything before reading any values, then read into staging buffers and copy only
    // when all reads succeeded: a failed load leaves the model and the optimizer as they were.
    const auto root_links = list_links(f.root.get(), "the root group", path);
    std::vector<TensorData> datasets =
        check_tensors(f.root.get(), root_links, "", params, path, int8, !meta.quantization.empty());
    // save_checkpoint marks a file int8 only when it writes an int8 matrix: a mark without one is
    // a damaged or hand-made file that would run at f32 under an int8 name.
    if (!meta.quantization.empty() && std::none_of(datasets.begin(), datasets.end(),
                                                   [](const TensorData& d) { return d.int8(); }))
      fail(path, "is marked quantization=" + quoted(meta.quantization) +
                     " but holds no int8 matrix (no i8 tensor with its NAME_scale): the file is "
                     "damaged; quantize its f32 checkpoint again with vitk quantize");

    OptimizerFile opt;
    if (optimizer) opt = check_optimizer_state(f, root_links, *optimizer, params, path);

    // A load for inference (int8) reads the f32 values straight into the store: staging them
    // would hold the model twice at the peak, and such a caller drops the store when a load
    // fails. A load that may be followed by training keeps the guarantee above.
    const bool in_place = int8 && !optimizer;
    std::unique_ptr<float[]> staged = in_place ? nullptr : staging(params);
    read_tensors(datasets, params, in_place ? params.values().f32() : staged.get(), "", path);
    auto quantized = read_int8(datasets, params, path);
    std::vector<std::unique_ptr<float[]>> staged_state;
    for (size_t b = 0; b < opt.state.size(); ++b) {
      staged_state.push_back(staging(params));
      read_tensors(opt.datasets[b], params, staged_state.back().get(),
                   std::string(kOptimizerGroup) + "/" + opt.state[b].first + "/", path);
    }

    if (!in_place) copy_slots(staged.get(), datasets, params, params.values().f32());
    params.mark_changed();
    size_t i = 0;
    for (Parameter& p : params.params()) {
      if (!quantized[i]) {
        ++i;
        continue;
      }
      p.quantized = std::move(quantized[i++]);
      p.quantized_version = p.version;
      p.value_released = true;  // never written: its pages were never touched
    }
    for (size_t b = 0; b < opt.state.size(); ++b)
      copy_slots(staged_state[b].get(), opt.datasets[b], params, opt.state[b].second->f32());
    if (optimizer) optimizer->set_steps(opt.steps);
    return meta;
  });
}

std::vector<std::pair<std::string, Shape>> list_checkpoint(const std::string& path) {
  return with_path(path, [&] {
    ReadFile f = open_checkpoint(path);
    const bool quantized = open_attribute(f.root.get(), kQuantizationAttr, path).has_value();
    std::vector<std::pair<std::string, Shape>> out;
    for (const auto& [name, kind] : list_links(f.root.get(), "the root group", path)) {
      if (kind != LinkKind::dataset) continue;
      DatasetInfo info = inspect_dataset(f.root.get(), name, name, path);
      if (info.dtype == "i8" && !quantized) fail_unmarked_int8(path, name);
      out.emplace_back(name, info.shape.value_or(Shape{}));
    }
    // std::map already orders by name; sort anyway so the contract does not hang on that.
    std::sort(out.begin(), out.end());
    return out;
  });
}

}  // namespace vitk::io
