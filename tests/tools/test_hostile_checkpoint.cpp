// Hostile inputs (issue 31): checkpoints with absurd or missing sizes, non-finite weights and
// logits, FIFOs as input files, options whose memory no machine has, names with a NUL byte. Each
// must fail quickly with a message naming the file and the key, tensor or option. The runs of
// vitk have a memory ceiling and a time limit, so that a regression fails the test instead of
// taking the machine's memory or hanging it.
#include <gtest/gtest.h>
#include <hdf5.h>
#include <sys/stat.h>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "common/decode/search.h"
#include "common/error.h"
#include "common/io/safetensors.h"
#include "common/memory.h"
#include "common/params.h"
#include "common/seq2seq/checkpoint.h"
#include "common/seq2seq/search.h"
#include "common/seq2seq/text_model.h"
#include "util/idx_data.h"
#include "util/safetensors_writer.h"
#include "util/test_util.h"
#include "util/tiny_models.h"
#include "util/vitk_process.h"
#include "vit/checkpoint.h"
#include "vit/classify.h"

namespace {

namespace fs = std::filesystem;
using vitk::test::contains;
using vitk::test::TempDir;
using vitk::testing::ProcessResult;

const std::string kBundled = std::string(VITK_SOURCE_DIR) + "/vit/models/fmnist-vit.h5";

// Edits a copy of a checkpoint with the HDF5 C API, as a user with h5py would.
class Edit {
 public:
  explicit Edit(const std::string& path) {
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
    file_ = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    EXPECT_GE(file_, 0) << path;
  }
  ~Edit() { H5Fclose(file_); }
  void remove_attr(const std::string& name) {
    if (H5Aexists(file_, name.c_str()) > 0) {
      EXPECT_GE(H5Adelete(file_, name.c_str()), 0);
    }
  }
  void set_attr(const std::string& name, const std::string& value) {
    remove_attr(name);
    hid_t type = H5Tcopy(H5T_C_S1);
    H5Tset_size(type, value.size());
    hid_t space = H5Screate(H5S_SCALAR);
    hid_t attr = H5Acreate2(file_, name.c_str(), type, space, H5P_DEFAULT, H5P_DEFAULT);
    EXPECT_GE(H5Awrite(attr, type, value.data()), 0);
    H5Aclose(attr), H5Sclose(space), H5Tclose(type);
  }
  // Every value of the f32 dataset `name` set to `value`.
  void fill(const std::string& name, float value) {
    hid_t ds = H5Dopen2(file_, name.c_str(), H5P_DEFAULT);
    ASSERT_GE(ds, 0) << name;
    hid_t space = H5Dget_space(ds);
    std::vector<float> values(static_cast<size_t>(H5Sget_simple_extent_npoints(space)), value);
    EXPECT_GE(H5Dwrite(ds, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data()), 0);
    H5Sclose(space), H5Dclose(ds);
  }

 private:
  hid_t file_ = H5I_INVALID_HID;
};

class Hostile : public ::testing::Test {
 protected:
  // A copy of the bundled model in the test's directory.
  std::string vit_copy(const std::string& name = "model.h5") {
    const std::string path = (dir_ / name).string();
    fs::copy_file(kBundled, path);
    return path;
  }

  // A tiny translation checkpoint (its tokenizer stands in: nothing here tokenizes).
  std::string translation(const std::string& name) {
    vitk::testing::TinyTranslation t;
    const std::string path = (dir_ / name).string();
    vitk::seq2seq::save_translation(path, t.params, t.config, "tokenizer bytes", 1);
    return path;
  }

  // vitk with args in the test's directory, under a 3 GB memory ceiling and a time limit:
  // without the checks, these runs would take gigabytes or never end.
  ProcessResult run(const std::vector<std::string>& args) {
    vitk::testing::Command c = vitk::testing::vitk_command(dir_.path(), args);
    vitk::testing::under_3gb_ceiling(c);
    c.timeout_seconds = 20;
    ProcessResult r = vitk::testing::run_process(c);
    EXPECT_FALSE(r.timed_out) << "timed out: vitk " << args[0];
    return r;
  }

  TempDir dir_{"vitk_hostile"};
};

// ---- sizes in the configuration

TEST_F(Hostile, AbsurdLayerCountsFailFastNamingFileAndKey) {
  for (const char* layers : {"1000000000", "100000", "1000", "4294967302"}) {
    const std::string model = vit_copy(std::string("layers") + layers + ".h5");
    Edit(model).set_attr("config.layers", layers);
    for (const std::vector<std::string>& args :
         {std::vector<std::string>{"classify", "--model", model, "/dev/null"},
          {"eval", "--model", model, "--data", "nowhere"}}) {
      const ProcessResult r = run(args);
      EXPECT_EQ(r.status, 1) << layers << " " << args[0] << ": " << r.err;
      EXPECT_TRUE(contains(r.err, model)) << r.err;
      EXPECT_TRUE(contains(r.err, "layers")) << r.err;
      EXPECT_FALSE(contains(r.err, "bad_alloc") || contains(r.err, "out of memory")) << r.err;
    }
  }
}

TEST_F(Hostile, SizesThatDisagreeWithTheTensorsNameTheKey) {
  struct Case {
    const char* key;
    const char* value;
    const char* said;
  };
  for (const Case& c :
       {Case{"config.image_size", "20000", "config.image_size = 20000"},
        Case{"config.d_model", "805306368", "d_model must be in [1, 65536], got 805306368"},
        Case{"config.d_model", "384", "config.d_model = 384"},
        Case{"config.num_classes", "11", "config.num_classes = 11"},
        Case{"config.layers", "7", "config.layers = 7"}}) {
    const std::string model = vit_copy();
    Edit(model).set_attr(c.key, c.value);
    const ProcessResult r = run({"classify", "--model", model, "/dev/null"});
    EXPECT_EQ(r.status, 1) << c.key << " " << r.err;
    EXPECT_TRUE(contains(r.err, model + ": ")) << r.err;
    EXPECT_TRUE(contains(r.err, c.said)) << r.err;
    EXPECT_FALSE(contains(r.err, "negative dimension")) << r.err;
    fs::remove(model);
  }
}

TEST_F(Hostile, AMissingSizeKeyIsNamedNotDefaulted) {
  const std::string model = vit_copy();
  Edit(model).remove_attr("config.d_model");
  const ProcessResult r = run({"classify", "--model", model, "/dev/null"});
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_TRUE(contains(r.err, model + ": has no config.d_model attribute")) << r.err;
  EXPECT_FALSE(contains(r.err, "cls_token")) << r.err;
}

TEST_F(Hostile, TranslationCheckpointsToo) {
  const std::string a = translation("a.h5"), b = translation("b.h5");
  Edit(b).set_attr("config.layers", "1000000");
  ProcessResult r = run({"average", a, b, "--out", "avg.h5"});
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_TRUE(contains(r.err, b + ": ")) << r.err;
  EXPECT_TRUE(contains(r.err, "layers")) << r.err;
  EXPECT_FALSE(fs::exists(dir_ / "avg.h5"));

  Edit(b).set_attr("config.layers", "3");
  r = run({"translate", "--model", b, "--input", "nowhere.txt"});
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_TRUE(contains(r.err, "config.layers = 3 does not match")) << r.err;

  Edit(b).set_attr("config.layers", "1");
  Edit(b).remove_attr("config.vocab_size");
  r = run({"translate", "--model", b, "--input", "nowhere.txt"});
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_TRUE(contains(r.err, "has no config.vocab_size attribute")) << r.err;
}

TEST_F(Hostile, CaptioningCheckpointsToo) {
  struct Case {
    const char* key;
    const char* value;  // nullptr: the key removed
    const char* said;
  };
  const std::string bundled = std::string(VITK_SOURCE_DIR) + "/vit/models/scenes-caption.h5";
  for (const Case& c :
       {Case{"config.decoder_layers", "1000000", "decoder_layers"},
        Case{"config.decoder_layers", "3", "config.decoder_layers = 3 does not match"},
        Case{"config.layers", "5", "config.layers = 5 does not match"},
        Case{"config.vocab_size", "900000", "config.vocab_size = 900000 does not match"},
        Case{"config.max_length", "41", "config.max_length = 41 does not match"},
        Case{"config.decoder_d_ff", "100000", "does not match"},
        Case{"config.decoder_heads", nullptr, "has no config.decoder_heads attribute"}}) {
    const std::string model = (dir_ / "caption.h5").string();
    fs::copy_file(bundled, model, fs::copy_options::overwrite_existing);
    if (c.value)
      Edit(model).set_attr(c.key, c.value);
    else
      Edit(model).remove_attr(c.key);
    for (const char* command : {"caption", "caption-eval"}) {
      const ProcessResult r =
          std::string(command) == "caption"
              ? run({"caption", "--model", model, "/dev/null"})
              : run({"caption-eval", "--model", model, "--captions", "none.json", "--images", "."});
      EXPECT_EQ(r.status, 1) << c.key << " " << command << ": " << r.err;
      EXPECT_TRUE(contains(r.err, model + ": ")) << r.err;
      EXPECT_TRUE(contains(r.err, c.said)) << c.key << ": " << r.err;
      EXPECT_FALSE(contains(r.err, "bad_alloc") || contains(r.err, "out of memory")) << r.err;
    }
  }
}

TEST_F(Hostile, TextClassifierCheckpointsToo) {
  struct Case {
    const char* key;
    const char* value;  // nullptr: the key removed
    const char* said;
  };
  for (const Case& c :
       {Case{"config.layers", "1000000", "layers"},
        Case{"config.layers", "2", "config.layers = 2 does not match"},
        Case{"config.vocab_size", "900000", "config.vocab_size = 900000 does not match"},
        Case{"config.num_classes", "3", "config.num_classes = 3 does not match"},
        Case{"config.d_model", "805306368", "d_model"},
        Case{"config.num_classes", nullptr, "has no config.num_classes attribute"},
        Case{"config.type", "transformer", "not a text classifier checkpoint"}}) {
    // A tiny classifier of two labels (its tokenizer stands in: the checks come first).
    vitk::seq2seq::TextClassifierConfig config;
    config.vocab_size = 16, config.num_classes = 2, config.d_model = 8, config.heads = 2;
    config.d_ff = 16, config.layers = 1, config.max_length = 16;
    vitk::ParamStore params;
    vitk::seq2seq::TextClassifier model(params, config);
    params.finalize();
    vitk::io::CheckpointMeta meta;
    meta.config = vitk::seq2seq::to_config_map(config);
    meta.class_names = {"a", "b"};
    meta.files[vitk::seq2seq::kTokenizerFile] = "tokenizer bytes";
    const std::string path = (dir_ / "text.h5").string();
    vitk::io::save_checkpoint(path, params, meta);
    if (c.value)
      Edit(path).set_attr(c.key, c.value);
    else
      Edit(path).remove_attr(c.key);
    for (const std::vector<std::string>& args :
         {std::vector<std::string>{"text-classify", "--model", path, "--input", "nowhere.txt"},
          std::vector<std::string>{"text-eval", "--model", path, "--data", "nowhere.tsv"}}) {
      const ProcessResult r = run(args);
      EXPECT_EQ(r.status, 1) << c.key << " " << args[0] << ": " << r.err;
      EXPECT_TRUE(contains(r.err, path + ": ")) << r.err;
      EXPECT_TRUE(contains(r.err, c.said)) << c.key << ": " << r.err;
      EXPECT_FALSE(contains(r.err, "bad_alloc") || contains(r.err, "out of memory")) << r.err;
    }
  }
}

// ---- memory: the configuration's and the options'

TEST_F(Hostile, MemoryEstimatesSaturateAndNameTheAmount) {
  EXPECT_EQ(vitk::sat_mul(uint64_t{1} << 40, uint64_t{1} << 40),
            std::numeric_limits<uint64_t>::max());
  EXPECT_EQ(vitk::sat_product({-5, 7}), 0u);
  EXPECT_EQ(vitk::memory_shortfall(1024), "");
  const std::string said = vitk::memory_shortfall(uint64_t{1} << 60);
  EXPECT_TRUE(contains(said, "needs at least 1.0 EiB")) << said;
  EXPECT_TRUE(contains(said, "of memory this machine has")) << said;

  vitk::vit::VitConfig c;  // ViT-B/16 at the largest size validate() accepts
  c.image_height = c.image_width = 65536;
  EXPECT_NE(vitk::memory_shortfall(vitk::vit::memory_bytes(c, 1)), "");
  c.image_height = c.image_width = 224;
  EXPECT_EQ(vitk::memory_shortfall(vitk::vit::memory_bytes(c, 1)), "");
}

TEST_F(Hostile, ClassifyImageSizeBeyondMemoryIsAUsageError) {
  const ProcessResult r = run({"classify", "--image-size", "60000", "/dev/null"});
  EXPECT_EQ(r.status, 2) << r.err;
  EXPECT_TRUE(contains(r.err, "--image-size 60000x60000")) << r.err;
  EXPECT_TRUE(contains(r.err, "needs at least")) << r.err;
}

// A size at which one image fits the machine but a batch does not: eval and classify weigh the
// images they would run at once (the batch, or fewer when there are fewer images), not one.
TEST_F(Hostile, ABatchBeyondMemoryIsAUsageErrorNamingABatchThatFits) {
  const std::string model = vit_copy("m.h5");
  const vitk::io::CheckpointMeta meta = vitk::io::read_checkpoint_meta(model);
  vitk::vit::VitConfig c = vitk::vit::stored_config(model, meta);
  const int images = static_cast<int>(meta.class_names.size());  // one image per class, below
  int64_t side = 28;
  for (; side <= 65536; side += 28) {
    c.image_height = c.image_width = side;
    if (!vitk::memory_shortfall(vitk::vit::memory_bytes(c, images)).empty()) break;
  }
  ASSERT_LE(side, 65536) << "no size at which " << images << " images exceed the memory";
  ASSERT_EQ(vitk::memory_shortfall(vitk::vit::memory_bytes(c, 1)), "") << side;
  const std::string size = std::to_string(side);

  ProcessResult r = run(
      {"classify", "--model", model, "--image-size", size, "--benchmark", "--batch-size", "64"});
  EXPECT_EQ(r.status, 2) << r.err;
  EXPECT_TRUE(contains(r.err, "--batch-size 64 at " + size + "x" + size +
                                  ": a batch of 64 images "
                                  "needs at least"))
      << r.err;
  EXPECT_TRUE(contains(r.err, " would fit.")) << r.err;

  // eval of `images` Fashion-MNIST-like IDX images: the batch of 64 holds them all.
  const fs::path data = dir_ / "fashion";
  fs::create_directories(data);
  std::ofstream(data / "t10k-images-idx3-ubyte", std::ios::binary)
      << vitk::testing::idx_images(images, 28, 28);
  std::vector<uint8_t> labels;
  for (int i = 0; i < images; ++i) labels.push_back(static_cast<uint8_t>(i));
  std::ofstream(data / "t10k-labels-idx1-ubyte", std::ios::binary)
      << vitk::testing::idx_labels(labels);
  r = run({"eval", "--model", model, "--data", data.string(), "--image-size", size, "--batch-size",
           "64"});
  EXPECT_EQ(r.status, 2) << r.err;
  EXPECT_TRUE(contains(r.err, "--batch-size 64 at " + size + "x" + size + ": a batch of " +
                                  std::to_string(images) + " images needs at least"))
      << r.err;
}

TEST_F(Hostile, BeamSizeBeyondMemoryIsAUsageError) {
  const std::string model = translation("mt.h5");
  const ProcessResult r =
      run({"translate", "--model", model, "--input", "nowhere.txt", "--beam-size", "1000000000"});
  EXPECT_EQ(r.status, 2) << r.err;
  EXPECT_TRUE(contains(r.err, "--beam-size 1000000000")) << r.err;
  EXPECT_TRUE(contains(r.err, "needs at least")) << r.err;
}

// ---- non-finite weights and logits

TEST_F(Hostile, NonFiniteWeightsAreRefusedAtLoadNamingTheTensor) {
  for (float bad : {std::nanf(""), std::numeric_limits<float>::infinity()}) {
    const std::string model = vit_copy();
    Edit(model).fill("head.bias", bad);
    for (const std::vector<std::string>& args :
         {std::vector<std::string>{"classify", "--model", model, "/dev/null"},
          {"eval", "--model", model, "--data", "nowhere"}}) {
      const ProcessResult r = run(args);
      EXPECT_EQ(r.status, 1) << r.err;
      EXPECT_TRUE(contains(r.err, model + ": tensor 'head.bias' holds a non-finite value"))
          << r.err;
    }
    fs::remove(model);
  }
}

TEST_F(Hostile, AverageWritesNoNonFiniteCheckpoint) {
  const std::string a = translation("a.h5"), b = translation("b.h5");
  Edit(b).fill("encoder.layers.0.mlp.fc1.bias", std::nanf(""));
  const ProcessResult r = run({"average", a, b, "--out", "avg.h5"});
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_TRUE(contains(r.err, b + ": tensor 'encoder.layers.0.mlp.fc1.bias'")) << r.err;
  EXPECT_FALSE(fs::exists(dir_ / "avg.h5"));
}

TEST_F(Hostile, NonFiniteLogitsAreAnErrorNotAScore) {
  vitk::Tensor logits({2, 3});
  for (int64_t i = 0; i < 6; ++i) logits.f32()[i] = 0.5f;
  EXPECT_NO_THROW(vitk::vit::require_finite_logits(logits, "x.png"));
  logits.f32()[4] = std::numeric_limits<float>::infinity();
  const std::string said =
      vitk::test::error_of([&] { vitk::vit::require_finite_logits(logits, "x.png"); });
  EXPECT_TRUE(contains(said, "x.png: the model's logits are not finite")) << said;

  // A translation model whose finite weights overflow: the search refuses its logits.
  vitk::testing::TinyTranslation t;
  vitk::ParamStore& params = t.params;
  vitk::seq2seq::Transformer& model = *t.model;
  float* w = params.get("embed_tokens.weight").value.f32();
  for (int64_t i = 0; i < 16 * 8; ++i) w[i] = i % 2 ? 3e38f : -3e38f;
  params.mark_changed();
  vitk::Tensor source({1, 3}, vitk::DType::i32), lengths({1}, vitk::DType::i32);
  for (int i = 0; i < 3; ++i) source.i32()[i] = 5 + i;
  lengths.i32()[0] = 3;
  for (auto method : {vitk::decode::SearchMethod::beam, vitk::decode::SearchMethod::greedy}) {
    vitk::decode::SearchOptions o;
    o.method = method;
    vitk::decode::Searcher searcher(model, o);
    const std::string error = vitk::test::error_of(
        [&] { vitk::seq2seq::search_source(model, searcher, source, lengths); });
    EXPECT_TRUE(contains(error, "logits are not finite")) << error;
  }
}

// ---- FIFOs and other non-regular files

TEST_F(Hostile, AFifoIsRefusedNotWaitedOn) {
  const std::string fifo = (dir_ / "pipe").string();
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"inspect", fifo},
        {"classify", "--model", fifo, "/dev/null"},
        {"import", "--format", "timm", fifo, "--out", "out.h5"},
        {"translate", "--model", fifo, "--input", "nowhere.txt"},
        {"bleu", "--ref", fifo, fifo},
        {"plot", "metrics", fifo, "--out", "plot.png"}}) {
    const ProcessResult r = run(args);
    EXPECT_EQ(r.status, 1) << args[0] << ": " << r.err;
    EXPECT_TRUE(contains(r.err, fifo + ": not a regular file")) << args[0] << ": " << r.err;
  }
  const ProcessResult r = run({"inspect", kBundled, "--config", fifo});
  EXPECT_EQ(r.status, 2) << r.err;
  EXPECT_TRUE(contains(r.err, "not a regular file")) << r.err;
}

// ---- names

TEST_F(Hostile, ANulByteInATensorNameDoesNotCutTheMessage) {
  const std::string header =
      std::string(R"({"bad\u0000name": {"dtype": "F32", "shape": [2], "data_offsets": [0, 4]}})");
  const std::string path = (dir_ / "nul.safetensors").string();
  vitk::test::write_file(path, vitk::test::safetensors_bytes(header, std::string(8, '\0')));
  const std::string said = vitk::test::error_of([&] { vitk::io::SafetensorsFile f(path); });
  EXPECT_TRUE(contains(said, "'bad\\x00name'")) << said;
  const size_t name_at = said.find("bad\\x00name");
  ASSERT_NE(name_at, std::string::npos);
  EXPECT_GT(said.size(), name_at + 20) << "the message stops at the name: " << said;
}

}  // namespace
