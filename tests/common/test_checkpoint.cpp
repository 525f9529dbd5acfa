#include <gtest/gtest.h>
#include <hdf5.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/error.h"
#include "common/io/checkpoint.h"
#include "common/optim/optim.h"
#include "common/params.h"
#include "util/test_util.h"
#include "util/vitk_process.h"

using namespace vitk;
namespace fs = std::filesystem;

namespace {

// A stand-in with two state buffers in the arena layout, so these tests do not depend on AdamW.
class FakeOptimizer : public optim::Optimizer {
 public:
  explicit FakeOptimizer(ParamStore& params, std::string kind = "fake")
      : exp_avg({static_cast<int64_t>(params.arena_floats())}),
        exp_avg_sq({static_cast<int64_t>(params.arena_floats())}),
        params_(params),
        kind_(std::move(kind)) {}

  void step(float lr) override {
    for (auto& p : params_.params()) {
      float* w = p.value.f32();
      const float* g = p.grad.f32();
      float* m = exp_avg.f32() + p.offset;
      float* v = exp_avg_sq.f32() + p.offset;
      for (int64_t i = 0; i < p.numel(); ++i) {
        m[i] = 0.5f * m[i] + g[i];
        v[i] = 0.5f * v[i] + g[i] * g[i];
        w[i] -= lr * m[i];
      }
    }
    ++steps_;
  }
  std::string kind() const override { return kind_; }
  std::vector<std::pair<std::string, Tensor*>> state() override {
    return {{"exp_avg", &exp_avg}, {"exp_avg_sq", &exp_avg_sq}};
  }

  Tensor exp_avg, exp_avg_sq;  // public so that tests can compare them

 private:
  ParamStore& params_;
  std::string kind_;
};

constexpr const char* kQkv = "encoder.layers.0.attn.qkv.weight";

// A tiny model with dotted, PyTorch-style names; dim changes the shapes.
void build_model(ParamStore& ps, int64_t dim = 8) {
  ps.add(kQkv, {3 * dim, dim});
  ps.add("encoder.layers.0.attn.qkv.bias", {3 * dim}, false);
  ps.add("encoder.layers.0.norm1.weight", {dim}, false);
  ps.add("cls_token", {1, 1, dim}, false);
  ps.add("head.weight", {5, dim});
  ps.finalize();
}

void fill_values(ParamStore& ps, float seed) {
  for (auto& p : ps.params())
    for (int64_t i = 0; i < p.numel(); ++i)
      p.value.f32()[i] = seed + std::sin(static_cast<float>(p.offset + i));
}

void fill_grads(ParamStore& ps, float seed) {
  for (auto& p : ps.params())
    for (int64_t i = 0; i < p.numel(); ++i)
      p.grad.f32()[i] = seed * std::cos(static_cast<float>(p.offset + 3 * i));
}

std::vector<float> arena(const Tensor& t) {
  return std::vector<float>(t.f32(), t.f32() + t.numel());
}

io::CheckpointMeta sample_meta() {
  io::CheckpointMeta meta;
  meta.config = {
      {"dim", "8"}, {"model", "vit-tiny"}, {"drop_path", "0.1"}, {"note", "naïve ünïcode"}};
  meta.class_names = {"T-shirt/top", "Trouser", "Pullover", "Dress", "Coat"};
  meta.step = 1234;
  meta.epoch = 7;
  meta.train_state = {{"seed", uint64_t{0xfedcba9876543210ull}},
                      {"batch", int64_t{42}},
                      {"loss_sum", 0.5},
                      {"batching", std::string("max-tokens")},
                      {"rng/dropout/counter", uint64_t{3}}};
  return meta;
}

using vitk::test::contains;
using vitk::test::error_of;

std::string load_error(const std::string& path, ParamStore& ps, optim::Optimizer* opt = nullptr) {
  return error_of([&] { io::load_checkpoint(path, ps, opt); });
}

// Edits a saved checkpoint with the HDF5 C API to make the bad files the loader must refuse.
class RawFile {
 public:
  explicit RawFile(const std::string& path) {
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
    file_ = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    EXPECT_GE(file_, 0) << path;
  }
  ~RawFile() { H5Fclose(file_); }
  hid_t get() const { return file_; }

  void remove(const std::string& name) {
    EXPECT_GE(H5Ldelete(file_, name.c_str(), H5P_DEFAULT), 0);
  }
  // A dataset of the given HDF5 type and shape, left at its fill value (zeros).
  void add_dataset(const std::string& name, hid_t type, std::vector<hsize_t> dims) {
    hid_t space = H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr);
    hid_t ds = H5Dcreate2(file_, name.c_str(), type, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    EXPECT_GE(ds, 0) << name;
    H5Dclose(ds);
    H5Sclose(space);
  }
  void replace_dataset(const std::string& name, hid_t type, std::vector<hsize_t> dims) {
    remove(name);
    add_dataset(name, type, std::move(dims));
  }
  void set_int64_attr(const std::string& name, int64_t value) {
    if (H5Aexists(file_, name.c_str()) > 0) H5Adelete(file_, name.c_str());
    hid_t space = H5Screate(H5S_SCALAR);
    hid_t attr = H5Acreate2(file_, name.c_str(), H5T_STD_I64LE, space, H5P_DEFAULT, H5P_DEFAULT);
    EXPECT_GE(H5Awrite(attr, H5T_NATIVE_INT64, &value), 0);
    H5Aclose(attr);
    H5Sclose(space);
  }
  // A fixed-length, space-padded string, as numpy byte strings written by h5py can be.
  void set_fixed_string_attr(const std::string& name, const std::string& value, size_t width) {
    if (H5Aexists(file_, name.c_str()) > 0) H5Adelete(file_, name.c_str());
    hid_t type = H5Tcopy(H5T_C_S1);
    H5Tset_size(type, width);
    H5Tset_strpad(type, H5T_STR_SPACEPAD);
    std::string padded = value + std::string(width - value.size(), ' ');
    hid_t space = H5Screate(H5S_SCALAR);
    hid_t attr = H5Acreate2(file_, name.c_str(), type, space, H5P_DEFAULT, H5P_DEFAULT);
    EXPECT_GE(H5Awrite(attr, type, padded.data()), 0);
    H5Aclose(attr);
    H5Sclose(space);
    H5Tclose(type);
  }
  // Variable-length UTF-8 strings, as h5py writes Python str attributes.
  void set_vlen_strings_attr(const std::string& name, const std::vector<std::string>& values,
                             bool scalar) {
    if (H5Aexists(file_, name.c_str()) > 0) H5Adelete(file_, name.c_str());
    hid_t type = H5Tcopy(H5T_C_S1);
    H5Tset_size(type, H5T_VARIABLE);
    H5Tset_cset(type, H5T_CSET_UTF8);
    hsize_t n = values.size();
    hid_t space = scalar ? H5Screate(H5S_SCALAR) : H5Screate_simple(1, &n, nullptr);
    std::vector<const char*> ptrs;
    for (const auto& v : values) ptrs.push_back(v.c_str());
    hid_t attr = H5Acreate2(file_, name.c_str(), type, space, H5P_DEFAULT, H5P_DEFAULT);
    EXPECT_GE(H5Awrite(attr, type, ptrs.data()), 0);
    H5Aclose(attr);
    H5Sclose(space);
    H5Tclose(type);
  }
  bool has_attr(const std::string& name) const { return H5Aexists(file_, name.c_str()) > 0; }
  bool has_link(const std::string& name) const {
    return H5Lexists(file_, name.c_str(), H5P_DEFAULT) > 0;
  }

 private:
  hid_t file_ = H5I_INVALID_HID;
};

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// Runs a tool on the checkpoints (h5dump, python3) in the test's directory.
vitk::testing::ProcessResult run(const std::string& dir, const std::vector<std::string>& argv) {
  vitk::testing::Command c;
  c.argv = argv;
  c.dir = dir;
  return vitk::testing::run_process(c);
}

// Runs in a death-test child: the save fails halfway through writing, and must throw an Error
// naming the path.
void save_with_file_size_limit(const std::string& path, const ParamStore& params, rlim_t bytes) {
  vitk::test::exit_after_writing_past_a_size_limit(
      bytes, [&] { io::save_checkpoint(path, params, sample_meta()); }, {path});
}

class Checkpoint : public ::testing::Test {
 protected:
  void SetUp() override {
    build_model(model_);
    fill_values(model_, 1.f);
  }
  std::string file(const std::string& name) const { return dir_ + "/" + name; }
  std::set<std::string> entries() const {
    std::set<std::string> names;
    for (const auto& e : fs::directory_iterator(dir_)) names.insert(e.path().filename().string());
    return names;
  }
  // A good checkpoint of model_ (with the fake optimizer's state when asked).
  std::string save_good(const std::string& name, bool with_optimizer = false) {
    std::string path = file(name);
    FakeOptimizer opt(model_);
    fill_grads(model_, 0.5f);
    opt.step(0.1f);
    io::save_checkpoint(path, model_, sample_meta(), with_optimizer ? &opt : nullptr);
    return path;
  }

  vitk::test::TempDir temp_{"vitk_ckpt"};
  std::string dir_ = temp_.path().string();
  ParamStore model_;
};

TEST_F(Checkpoint, RoundTripRestoresValuesAndMeta) {
  const std::string path = file("model.h5");
  io::save_checkpoint(path, model_, sample_meta());

  ParamStore loaded;
  build_model(loaded);
  io::CheckpointMeta meta = io::load_checkpoint(path, loaded);
  EXPECT_EQ(arena(loaded.values()), arena(model_.values()));
  const io::CheckpointMeta expected = sample_meta();
  EXPECT_EQ(meta.config, expected.config);
  EXPECT_EQ(meta.class_names, expected.class_names);
  EXPECT_EQ(meta.step, expected.step);
  EXPECT_EQ(meta.epoch, expected.epoch);
  EXPECT_EQ(meta.train_state, expected.train_state);
  EXPECT_EQ(entries(), std::set<std::string>{"model.h5"});
}

TEST_F(Checkpoint, RoundTripRestoresOptimizerState) {
  FakeOptimizer opt(model_);
  for (int s = 0; s < 3; ++s) {
    fill_grads(model_, 0.3f * (s + 1));
    opt.step(0.01f);
  }
  const std::string path = file("resume.h5");
  io::save_checkpoint(path, model_, sample_meta(), &opt);
  const auto saved = arena(model_.values());

  ParamStore loaded;
  build_model(loaded);
  FakeOptimizer loaded_opt(loaded);
  io::load_checkpoint(path, loaded, &loaded_opt);
  EXPECT_EQ(loaded_opt.steps(), 3);
  EXPECT_EQ(arena(loaded.values()), arena(model_.values()));
  EXPECT_EQ(arena(loaded_opt.exp_avg), arena(opt.exp_avg));
  EXPECT_EQ(arena(loaded_opt.exp_avg_sq), arena(opt.exp_avg_sq));

  // Resumed training continues exactly as the original would have.
  fill_grads(model_, 2.f);
  fill_grads(loaded, 2.f);
  opt.step(0.01f);
  loaded_opt.step(0.01f);
  EXPECT_EQ(arena(loaded.values()), arena(model_.values()));

  // Inference loads the same file without an optimizer.
  ParamStore inference;
  build_model(inference);
  io::load_checkpoint(path, inference);
  EXPECT_EQ(arena(inference.values()), saved);
}

TEST_F(Checkpoint, LargeTensorsRoundTrip) {
  // Several MiB per tensor: the in-memory file grows in 1 MiB steps, and the saved file must end
  // exactly where HDF5's data ends.
  ParamStore big;
  big.add("embed.weight", {1000, 768});
  big.add("head.weight", {10, 768});
  big.finalize();
  fill_values(big, 0.25f);
  FakeOptimizer opt(big);
  fill_grads(big, 1.f);
  opt.step(0.1f);
  const std::string path = file("big.h5");
  io::save_checkpoint(path, big, {}, &opt);
  const size_t data_bytes = 3 * sizeof(float) * static_cast<size_t>(big.numel());
  EXPECT_GT(fs::file_size(path), data_bytes);
  EXPECT_LT(fs::file_size(path), data_bytes + 64 * 1024);

  ParamStore loaded;
  loaded.add("embed.weight", {1000, 768});
  loaded.add("head.weight", {10, 768});
  loaded.finalize();
  FakeOptimizer loaded_opt(loaded);
  io::load_checkpoint(path, loaded, &loaded_opt);
  EXPECT_EQ(arena(loaded.values()), arena(big.values()));
  EXPECT_EQ(arena(loaded_opt.exp_avg), arena(opt.exp_avg));
  EXPECT_EQ(arena(loaded_opt.exp_avg_sq), arena(opt.exp_avg_sq));
}

TEST_F(Checkpoint, OptimizerStateIsStoredPerParameterWithItsShape) {
  const std::string path = save_good("opt.h5", true);
  RawFile raw(path);
  EXPECT_TRUE(raw.has_attr("optimizer"));
  EXPECT_TRUE(raw.has_attr("optimizer_steps"));
  for (const char* buffer : {"exp_avg", "exp_avg_sq"}) {
    for (const auto& p : model_.params()) {
      std::string name = std::string("optimizer/") + buffer + "/" + p.name;
      ASSERT_TRUE(raw.has_link(name)) << name;
      hid_t ds = H5Dopen2(raw.get(), name.c_str(), H5P_DEFAULT);
      hid_t space = H5Dget_space(ds);
      std::vector<hsize_t> dims(static_cast<size_t>(H5Sget_simple_extent_ndims(space)));
      H5Sget_simple_extent_dims(space, dims.data(), nullptr);
      EXPECT_EQ(Shape(dims.begin(), dims.end()), p.shape) << name;
      H5Sclose(space);
      H5Dclose(ds);
    }
  }
}

TEST_F(Checkpoint, ReadMetaAndListWithoutAModel) {
  const std::string path = save_good("model.h5", true);
  io::CheckpointMeta meta = io::read_checkpoint_meta(path);
  EXPECT_EQ(meta.config.at("model"), "vit-tiny");
  EXPECT_EQ(meta.class_names.size(), 5u);
  EXPECT_EQ(meta.step, 1234);

  auto listed = io::list_checkpoint(path);
  std::vector<std::pair<std::string, Shape>> expected = {
      {"cls_token", {1, 1, 8}},
      {"encoder.layers.0.attn.qkv.bias", {24}},
      {"encoder.layers.0.attn.qkv.weight", {24, 8}},
      {"encoder.layers.0.norm1.weight", {8}},
      {"head.weight", {5, 8}},
  };
  EXPECT_EQ(listed, expected);  // sorted by name, optimizer state not listed
}

TEST_F(Checkpoint, EmptyClassNamesAndRngStateAreOmitted) {
  const std::string path = file("bare.h5");
  io::CheckpointMeta meta;
  meta.config["dim"] = "8";
  io::save_checkpoint(path, model_, meta);
  {
    RawFile raw(path);
    EXPECT_TRUE(raw.has_attr("vitk_format"));
    EXPECT_TRUE(raw.has_attr("vitk_format_version"));
    EXPECT_TRUE(raw.has_attr("config.dim"));
    EXPECT_TRUE(raw.has_attr("step"));
    EXPECT_FALSE(raw.has_attr("class_names"));
    EXPECT_FALSE(raw.has_link("train_state"));
    EXPECT_FALSE(raw.has_attr("optimizer"));
    EXPECT_FALSE(raw.has_link("optimizer"));
  }
  io::CheckpointMeta back = io::read_checkpoint_meta(path);
  EXPECT_TRUE(back.class_names.empty());
  EXPECT_TRUE(back.train_state.empty());
  EXPECT_EQ(back.config, meta.config);
}

TEST_F(Checkpoint, ManyClassNamesFit) {
  // ImageNet-21k sized: far beyond the 64 KiB an attribute may take in compact storage.
  io::CheckpointMeta meta = sample_meta();
  meta.class_names.clear();
  for (int i = 0; i < 21841; ++i) meta.class_names.push_back("class_number_" + std::to_string(i));
  const std::string path = file("big.h5");
  io::save_checkpoint(path, model_, meta);
  EXPECT_EQ(io::read_checkpoint_meta(path).class_names, meta.class_names);
}

TEST_F(Checkpoint, ReadsStringAttributesWrittenByOtherTools) {
  // A converter script may write space-padded fixed-length or variable-length strings.
  const std::string path = save_good("model.h5");
  {
    RawFile raw(path);
    raw.set_fixed_string_attr("config.dim", "16", 8);
    raw.set_vlen_strings_attr("config.model", {"vit-small"}, true);
    raw.set_vlen_strings_attr("class_names", {"cat", "", "dög"}, false);
  }
  io::CheckpointMeta meta = io::read_checkpoint_meta(path);
  EXPECT_EQ(meta.config.at("dim"), "16");
  EXPECT_EQ(meta.config.at("model"), "vit-small");
  EXPECT_EQ(meta.class_names, (std::vector<std::string>{"cat", "", "dög"}));
}

TEST_F(Checkpoint, AttributeOfTheWrongKindIsNamed) {
  const std::string path = save_good("model.h5");
  RawFile(path).set_int64_attr("config.dim", 8);
  std::string msg = error_of([&] { io::read_checkpoint_meta(path); });
  EXPECT_TRUE(contains(msg, path)) << msg;
  EXPECT_TRUE(contains(msg, "attribute 'config.dim' is i64, expected a string")) << msg;
}

TEST_F(Checkpoint, SavingTheSameStateTwiceGivesIdenticalFiles) {
  io::save_checkpoint(file("a.h5"), model_, sample_meta());
  // A second later: no object, the root group included, carries the time it was written.
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  io::save_checkpoint(file("b.h5"), model_, sample_meta());
  EXPECT_EQ(read_bytes(file("a.h5")), read_bytes(file("b.h5")));
}

TEST_F(Checkpoint, H5dumpShowsDottedNames) {
  if (access("/usr/bin/h5dump", X_OK) != 0) GTEST_SKIP() << "h5dump is not installed";
  const std::string path = save_good("model.h5", true);
  std::string out = run(dir_, {"/usr/bin/h5dump", "-H", path}).out;
  EXPECT_TRUE(contains(out, "DATASET \"encoder.layers.0.attn.qkv.weight\"")) << out;
  EXPECT_TRUE(contains(out, "( 24, 8 )")) << out;
  EXPECT_TRUE(contains(out, "H5T_IEEE_F32LE")) << out;
  EXPECT_TRUE(contains(out, "ATTRIBUTE \"vitk_format\"")) << out;
  EXPECT_TRUE(contains(out, "GROUP \"optimizer\"")) << out;
  std::string values = run(dir_, {"/usr/bin/h5dump", "-d", "/head.weight", path}).out;
  EXPECT_TRUE(contains(values, "DATASET \"/head.weight\"")) << values;
}

TEST_F(Checkpoint, H5pyReadsDottedNames) {
  if (run(dir_, {"/usr/bin/python3", "-c", "import h5py"}).status != 0)
    GTEST_SKIP() << "python3-h5py is not installed";
  const std::string path = save_good("model.h5", true);
  const std::string script = file("check.py");
  const float first = model_.get(kQkv).value.f32()[0];
  // Strings are fixed-length UTF-8, which h5py returns as bytes.
  std::ofstream(script) << "import sys, h5py, numpy as np\n"
                           "f = h5py.File(sys.argv[1], 'r')\n"
                           "w = f['encoder.layers.0.attn.qkv.weight']\n"
                           "assert w.shape == (24, 8) and w.dtype == np.float32, w\n"
                           "assert abs(float(w[0, 0]) - float(sys.argv[2])) < 1e-6, w[0, 0]\n"
                           "a = f.attrs\n"
                           "text = lambda v: v.decode('utf-8')\n"
                           "assert text(a['vitk_format']) == 'vitk-checkpoint', a['vitk_format']\n"
                           "assert a['vitk_format_version'] == 1\n"
                           "assert text(a['config.model']) == 'vit-tiny', a['config.model']\n"
                           "assert text(a['config.note']) == 'naïve ünïcode', a['config.note']\n"
                           "names = [text(n) for n in a['class_names']]\n"
                           "assert names[:2] == ['T-shirt/top', 'Trouser'], names\n"
                           "assert a['step'] == 1234 and a['epoch'] == 7\n"
                           "s = f['train_state'].attrs\n"
                           "assert s['seed'] == 0xfedcba9876543210 and s['batch'] == 42, dict(s)\n"
                           "assert s['loss_sum'] == 0.5 and text(s['batching']) == 'max-tokens'\n"
                           "assert f['train_state/rng/dropout'].attrs['counter'] == 3\n"
                           "assert text(a['optimizer']) == 'fake'\n"
                           "assert f['optimizer/exp_avg/head.weight'].shape == (5, 8)\n";
  char arg[64];
  std::snprintf(arg, sizeof arg, "%.9g", first);
  const vitk::testing::ProcessResult r = run(dir_, {"/usr/bin/python3", script, path, arg});
  EXPECT_EQ(r.status, 0) << r.err;
}

TEST_F(Checkpoint, SaveIntoMissingDirectoryThrowsAndCreatesNothing) {
  const std::string path = file("no/such/dir/model.h5");
  std::string msg = error_of([&] { io::save_checkpoint(path, model_, sample_meta()); });
  EXPECT_TRUE(contains(msg, path)) << msg;
  EXPECT_FALSE(fs::exists(file("no")));
  EXPECT_TRUE(entries().empty());
}

TEST_F(Checkpoint, SaveOverExistingFileReplacesItWhole) {
  const std::string path = file("model.h5");
  ParamStore big;
  big.add("old.only.weight", {64, 64});
  build_model(big, 16);
  fill_values(big, 5.f);
  io::save_checkpoint(path, big, sample_meta());

  io::CheckpointMeta meta;
  meta.step = 9;
  io::save_checkpoint(path, model_, meta);
  EXPECT_EQ(entries(), std::set<std::string>{"model.h5"});
  EXPECT_EQ(io::list_checkpoint(path).size(), model_.params().size());
  ParamStore loaded;
  build_model(loaded);
  io::CheckpointMeta back = io::load_checkpoint(path, loaded);
  EXPECT_EQ(arena(loaded.values()), arena(model_.values()));
  EXPECT_EQ(back.step, 9);
  EXPECT_TRUE(back.class_names.empty());
}

TEST_F(Checkpoint, FailedSaveKeepsTheExistingCheckpointAndNoTempFile) {
  const std::string path = save_good("model.h5");
  const std::string before = read_bytes(path);
  ParamStore big;
  big.add("big.weight", {512, 512});  // 1 MiB, beyond the file size limit below
  big.finalize();
  EXPECT_EXIT(save_with_file_size_limit(path, big, 64 * 1024), ::testing::ExitedWithCode(0), "");
  EXPECT_EQ(entries(), std::set<std::string>{"model.h5"});
  EXPECT_EQ(read_bytes(path), before);
  ParamStore loaded;
  build_model(loaded);
  io::load_checkpoint(path, loaded);
  EXPECT_EQ(arena(loaded.values()), arena(model_.values()));
}

TEST_F(Checkpoint, SaveRefusesBadStoresAndNames) {
  ParamStore unfinalized;
  unfinalized.add("w", {2});
  std::string msg = error_of([&] { io::save_checkpoint(file("a.h5"), unfinalized, {}); });
  EXPECT_TRUE(contains(msg, "a.h5")) << msg;
  EXPECT_TRUE(contains(load_error(file("a.h5"), unfinalized), "finalized"));

  ParamStore slash;
  slash.add("encoder/layer.weight", {2});
  slash.finalize();
  msg = error_of([&] { io::save_checkpoint(file("b.h5"), slash, {}); });
  EXPECT_TRUE(contains(msg, "encoder/layer.weight")) << msg;
  EXPECT_TRUE(entries().empty());
}

TEST_F(Checkpoint, MissingFile) {
  const std::string path = file("absent.h5");
  std::string msg = load_error(path, model_);
  EXPECT_TRUE(contains(msg, path)) << msg;
  EXPECT_TRUE(contains(msg, "No such file")) << msg;
  EXPECT_TRUE(contains(error_of([&] { io::read_checkpoint_meta(path); }), path));
}

TEST_F(Checkpoint, TextFileIsNotHdf5) {
  const std::string path = file("notes.h5");
  write_bytes(path, "this is a text file, not a checkpoint\n");
  std::string msg = load_error(path, model_);
  EXPECT_TRUE(contains(msg, path)) << msg;
  EXPECT_TRUE(contains(msg, "not an HDF5 file")) << msg;
}

TEST_F(Checkpoint, OtherHdf5FileIsNotAVitkCheckpoint) {
  const std::string path = file("other.h5");
  {
    hid_t f = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    ASSERT_GE(f, 0);
    hsize_t dims[1] = {4};
    hid_t space = H5Screate_simple(1, dims, nullptr);
    hid_t ds = H5Dcreate2(f, "data", H5T_IEEE_F32LE, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    H5Dclose(ds);
    H5Sclose(space);
    H5Fclose(f);
  }
  std::string msg = load_error(path, model_);
  EXPECT_TRUE(contains(msg, path)) << msg;
  EXPECT_TRUE(contains(msg, "not a vitk checkpoint")) << msg;
  EXPECT_TRUE(contains(error_of([&] { io::list_checkpoint(path); }), "not a vitk checkpoint"));
}

TEST_F(Checkpoint, NewerFormatVersionIsRefused) {
  const std::string path = save_good("model.h5");
  RawFile(path).set_int64_attr("vitk_format_version", 2);
  std::string msg = load_error(path, model_);
  EXPECT_TRUE(contains(msg, path)) << msg;
  EXPECT_TRUE(contains(msg, "version 2")) << msg;
}

TEST_F(Checkpoint, MissingTensorIsNamed) {
  const std::string path = save_good("model.h5");
  RawFile(path).remove("encoder.layers.0.norm1.weight");
  std::string msg = load_error(path, model_);
  EXPECT_TRUE(contains(msg, path)) << msg;
  EXPECT_TRUE(contains(msg, "'encoder.layers.0.norm1.weight' is missing")) << msg;
}

TEST_F(Checkpoint, UnexpectedTensorIsNamed) {
  const std::string path = save_good("model.h5");
  RawFile(path).add_dataset("decoder.layers.0.extra.weight", H5T_IEEE_F32LE, {3, 3});
  std::string msg = load_error(path, model_);
  EXPECT_TRUE(contains(msg, path)) << msg;
  EXPECT_TRUE(contains(msg, "unexpected tensor 'decoder.layers.0.extra.weight'")) << msg;
}

TEST_F(Checkpoint, WrongShapeNamesBothShapes) {
  ParamStore other;
  build_model(other, 16);
  const std::string path = file("model.h5");
  io::save_checkpoint(path, other, {});
  std::string msg = load_error(path, model_);
  EXPECT_TRUE(contains(msg, path)) << msg;
  EXPECT_TRUE(contains(
      msg, "tensor '" + std::string(kQkv) + "' has shape [48, 16], the model expects [24, 8]"))
      << msg;
}

TEST_F(Checkpoint, WrongDtypeF64IsNamed) {
  const std::string path = save_good("model.h5");
  RawFile(path).replace_dataset("head.weight", H5T_IEEE_F64LE, {5, 8});
  std::string msg = load_error(path, model_);
  EXPECT_TRUE(contains(msg, path)) << msg;
  EXPECT_TRUE(contains(msg, "tensor 'head.weight' has dtype f64, the model expects f32")) << msg;
}

TEST_F(Checkpoint, WrongDtypeIntIsNamed) {
  const std::string path = save_good("model.h5");
  RawFile(path).replace_dataset("cls_token", H5T_STD_I32LE, {1, 1, 8});
  std::string msg = load_error(path, model_);
  EXPECT_TRUE(contains(msg, path)) << msg;
  EXPECT_TRUE(contains(msg, "tensor 'cls_token' has dtype i32")) << msg;
}

TEST_F(Checkpoint, OptimizerMismatchesAreNamed) {
  const std::string plain = save_good("plain.h5");
  const std::string resume = save_good("resume.h5", true);
  ParamStore ps;
  build_model(ps);

  FakeOptimizer fake(ps);
  std::string msg = load_error(plain, ps, &fake);
  EXPECT_TRUE(contains(msg, plain) && contains(msg, "no optimizer state")) << msg;

  FakeOptimizer sgd(ps, "sgd");
  msg = load_error(resume, ps, &sgd);
  EXPECT_TRUE(contains(msg, resume) && contains(msg, "fake") && contains(msg, "sgd")) << msg;

  const std::string shape = save_good("shape.h5", true);
  RawFile(shape).replace_dataset("optimizer/exp_avg_sq/head.weight", H5T_IEEE_F32LE, {8, 5});
  msg = load_error(shape, ps, &fake);
  EXPECT_TRUE(contains(msg, shape)) << msg;
  EXPECT_TRUE(contains(msg,
                       "'optimizer/exp_avg_sq/head.weight' has shape [8, 5], the model "
                       "expects [5, 8]"))
      << msg;

  const std::string missing = save_good("missing.h5", true);
  RawFile(missing).remove("optimizer/exp_avg/cls_token");
  msg = load_error(missing, ps, &fake);
  EXPECT_TRUE(contains(msg, missing) && contains(msg, "'optimizer/exp_avg/cls_token' is missing"))
      << msg;

  const std::string no_buffer = save_good("nobuffer.h5", true);
  RawFile(no_buffer).remove("optimizer/exp_avg_sq");
  msg = load_error(no_buffer, ps, &fake);
  EXPECT_TRUE(contains(msg, no_buffer) && contains(msg, "'exp_avg_sq'")) << msg;
}

TEST_F(Checkpoint, FailedLoadLeavesParametersAndOptimizerUnchanged) {
  const std::string path = save_good("model.h5", true);
  // Only the last parameter is wrong: a loader that copied as it checked would already have
  // overwritten the others.
  RawFile(path).replace_dataset("head.weight", H5T_IEEE_F64LE, {5, 8});
  ParamStore ps;
  build_model(ps);
  fill_values(ps, -7.f);
  FakeOptimizer opt(ps);
  opt.exp_avg.fill(3.f);
  opt.set_steps(11);
  const auto values = arena(ps.values());
  const auto m = arena(opt.exp_avg);
  EXPECT_THROW(io::load_checkpoint(path, ps, &opt), Error);
  EXPECT_EQ(arena(ps.values()), values);
  EXPECT_EQ(arena(opt.exp_avg), m);
  EXPECT_EQ(opt.steps(), 11);

  // The same when only the optimizer state is wrong.
  const std::string bad_opt = save_good("badopt.h5", true);
  RawFile(bad_opt).replace_dataset("optimizer/exp_avg_sq/head.weight", H5T_IEEE_F64LE, {5, 8});
  EXPECT_THROW(io::load_checkpoint(bad_opt, ps, &opt), Error);
  EXPECT_EQ(arena(ps.values()), values);
  EXPECT_EQ(arena(opt.exp_avg), m);
  EXPECT_EQ(opt.steps(), 11);
}

TEST_F(Checkpoint, TruncatedFilesThrowAndNeverCrash) {
  const std::string good = save_good("model.h5", true);
  const std::string bytes = read_bytes(good);
  ASSERT_GT(bytes.size(), 1000u);
  std::vector<size_t> offsets;
  for (size_t k = 0; k < 20; ++k) offsets.push_back(bytes.size() * k / 20);
  for (size_t cut : {size_t{1}, size_t{8}, size_t{47}, bytes.size() - 1}) offsets.push_back(cut);

  ParamStore ps;
  build_model(ps);
  fill_values(ps, -1.f);
  const auto before = arena(ps.values());
  const std::string path = file("cut.h5");
  {
    // The whole file loads, so every failure below comes from the cut.
    ParamStore whole;
    build_model(whole);
    FakeOptimizer opt(whole);
    write_bytes(path, bytes);
    ASSERT_EQ(load_error(path, whole, &opt), "no exception");
  }
  for (size_t cut : offsets) {
    write_bytes(path, bytes.substr(0, cut));
    SCOPED_TRACE("truncated at " + std::to_string(cut) + " of " + std::to_string(bytes.size()));
    FakeOptimizer opt(ps);
    std::string msg = load_error(path, ps, &opt);
    EXPECT_TRUE(contains(msg, path)) << msg;
    EXPECT_FALSE(contains(msg, "wrong exception") || contains(msg, "no exception")) << msg;
    EXPECT_THROW(io::read_checkpoint_meta(path), Error);
    EXPECT_THROW(io::list_checkpoint(path), Error);
  }
  EXPECT_EQ(arena(ps.values()), before);
}

}  // namespace

TEST_F(Checkpoint, ADeviceOrPipeIsRefusedNotReplaced) {
  // The write goes to a temporary file renamed over the target; renaming over /dev/null would
  // turn the device into a plain file. It must be refused by name, before anything is written.
  struct stat before {};
  ASSERT_EQ(::stat("/dev/null", &before), 0);
  ASSERT_TRUE(S_ISCHR(before.st_mode));
  try {
    io::save_checkpoint("/dev/null", model_, sample_meta());
    FAIL() << "saving to /dev/null was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("/dev/null"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("not a regular file"), std::string::npos) << e.what();
  }
  struct stat after {};
  ASSERT_EQ(::stat("/dev/null", &after), 0);
  EXPECT_TRUE(S_ISCHR(after.st_mode));
  EXPECT_EQ(after.st_rdev, before.st_rdev);

  const std::string fifo = file("pipe");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_THROW(io::save_checkpoint(fifo, model_, sample_meta()), Error);
  ASSERT_EQ(::stat(fifo.c_str(), &after), 0);
  EXPECT_TRUE(S_ISFIFO(after.st_mode));
}
