// `vitk import`: tiny ViTs written by torchvision and renamed to timm's and Hugging Face's names
// (tests/parity/make_import_fixtures.py) must give PyTorch's logits after import, at their own
// size and, with resampled position embeddings, at others; broken or foreign files must fail with
// an error naming the file and the tensor.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/io/checkpoint.h"
#include "common/io/safetensors.h"
#include "util/fixture_io.h"
#include "util/safetensors_writer.h"
#include "util/test_util.h"
#include "util/vitk_process.h"
#include "vit/checkpoint.h"
#include "vit/import.h"

namespace {

namespace fs = std::filesystem;
using vitk::Error;
using vitk::Tensor;
using vitk::UsageError;
using vitk::vit::ImportFormat;
using vitk::vit::ImportOptions;

const std::string kDir = std::string(VITK_SOURCE_DIR) + "/tests/fixtures/import/";
constexpr double kTolerance = 1e-4;  // absolute, on logits of magnitude about 2

struct Source {
  ImportFormat format;
  const char* file;
};
const Source kSources[] = {{ImportFormat::torchvision, "tiny_torchvision_f32.safetensors"},
                           {ImportFormat::timm, "tiny_timm_bf16.safetensors"},
                           {ImportFormat::hf, "tiny_hf_f16.safetensors"}};

ImportOptions tiny_options(ImportFormat format) {
  ImportOptions o = vitk::vit::options_for(format);
  o.heads = 2;  // width 32: neither a standard width nor a multiple of 64
  return o;
}

class Import : public ::testing::Test {
 protected:
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  // Imports a fixture and writes it as a vitk checkpoint; returns the checkpoint's path.
  std::string import_to_checkpoint(const Source& s, ImportOptions o, const std::string& name) {
    vitk::vit::ImportedVit m = vitk::vit::import_vit(kDir + s.file, o);
    std::string out = path(name);
    vitk::vit::save_imported(m, out);
    return out;
  }

  // All tensors of a fixture as f32, to write modified copies.
  static std::vector<vitk::test::NamedTensor> tensors_of(const std::string& file) {
    vitk::io::SafetensorsFile f(kDir + file);
    std::vector<vitk::test::NamedTensor> out;
    for (const auto& e : f.entries()) out.push_back({e.name, f.read_f32(e.name)});
    return out;
  }

  // Imports a modified copy of the torchvision fixture; returns the error message ("" if none).
  std::string import_error(const std::function<void(std::vector<vitk::test::NamedTensor>&)>& edit,
                           ImportOptions o = tiny_options(ImportFormat::torchvision)) {
    auto tensors = tensors_of("tiny_torchvision_f32.safetensors");
    edit(tensors);
    std::string file = path("edited.safetensors");
    vitk::test::write_file(file, vitk::test::safetensors_from(tensors));
    try {
      vitk::vit::import_vit(file, o);
    } catch (const std::exception& e) {
      return e.what();
    }
    return "";
  }

  vitk::test::TempDir temp_{"vitk_import"};
  fs::path dir_ = temp_.path();
};

double max_abs_diff(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.shape(), b.shape());
  if (a.shape() != b.shape()) return INFINITY;
  double m = 0;
  for (int64_t i = 0; i < a.numel(); ++i)
    m = std::max(m, static_cast<double>(std::abs(a.f32()[i] - b.f32()[i])));
  return m;
}

Tensor run(vitk::vit::LoadedVit& m, const Tensor& x) {
  vitk::Arena arena;
  vitk::nn::Context ctx;
  ctx.arena = &arena;
  return m.model->forward(ctx, x).clone();
}

TEST_F(Import, LogitsMatchEachSourceLibrary) {
  vitk::test::FixtureFile fx(kDir + "tiny_vit.h5");
  const Tensor x32 = fx.read_f32("input/x32");
  for (const Source& s : kSources) {
    const std::string fmt = vitk::vit::import_format_name(s.format);
    std::string ckpt = import_to_checkpoint(s, tiny_options(s.format), fmt + ".h5");
    vitk::vit::LoadedVit m = vitk::vit::load_vit(ckpt);
    const double err = max_abs_diff(run(m, x32), fx.read_f32("logits/" + fmt + "_32"));
    std::printf("[ parity ] %-11s at 32x32: max |logit error| %.3g\n", fmt.c_str(), err);
    EXPECT_LT(err, kTolerance) << fmt;
  }
}

TEST_F(Import, LogitsAtAnotherSizeMatchEachLibrarysResampling) {
  vitk::test::FixtureFile fx(kDir + "tiny_vit.h5");
  const Tensor x48 = fx.read_f32("input/x48");
  for (const Source& s : kSources) {
    const std::string fmt = vitk::vit::import_format_name(s.format);
    std::string ckpt = import_to_checkpoint(s, tiny_options(s.format), fmt + ".h5");
    // torchvision's interpolate_embeddings aligns corners; timm and Hugging Face do not.
    const bool align = s.format == ImportFormat::torchvision;
    vitk::vit::LoadedVit m = vitk::vit::load_vit(ckpt, 48, 48, align);
    EXPECT_EQ(m.config.image_height, 48);
    EXPECT_EQ(m.params->get("pos_embed").shape, (vitk::Shape{1, 37, 32}));
    const double err = max_abs_diff(run(m, x48), fx.read_f32("logits/" + fmt + "_48"));
    std::printf("[ parity ] %-11s at 48x48: max |logit error| %.3g\n", fmt.c_str(), err);
    EXPECT_LT(err, kTolerance) << fmt;
    // The other convention is far off: the fixture tells the two apart.
    vitk::vit::LoadedVit other = vitk::vit::load_vit(ckpt, 48, 48, !align);
    EXPECT_GT(max_abs_diff(run(other, x48), fx.read_f32("logits/" + fmt + "_48")), 100 * kTolerance)
        << fmt;
  }
}

TEST_F(Import, RecordsTheResamplingConventionSoThatLaterSizesNeedNoFlag) {
  vitk::test::FixtureFile fx(kDir + "tiny_vit.h5");
  const Tensor x48 = fx.read_f32("input/x48");
  for (const Source& s : kSources) {
    const std::string fmt = vitk::vit::import_format_name(s.format);
    std::string ckpt = import_to_checkpoint(s, tiny_options(s.format), fmt + ".h5");
    const bool align = s.format == ImportFormat::torchvision;
    EXPECT_EQ(vitk::io::read_checkpoint_meta(ckpt).config.at("pos_embed_align_corners"),
              align ? "true" : "false")
        << fmt;
    // No align_corners given: the checkpoint's own convention, which matches the library.
    vitk::vit::LoadedVit m = vitk::vit::load_vit(ckpt, 48, 48);
    EXPECT_TRUE(m.resampled);
    EXPECT_EQ(m.align_corners, align) << fmt;
    EXPECT_EQ(m.stored_height, 32);
    EXPECT_LT(max_abs_diff(run(m, x48), fx.read_f32("logits/" + fmt + "_48")), kTolerance) << fmt;
  }
  // --align-corners at import overrides the format's convention, and is what gets recorded.
  ImportOptions o = tiny_options(ImportFormat::torchvision);
  o.align_corners = false;
  std::string ckpt = import_to_checkpoint(kSources[0], o, "tv_false.h5");
  EXPECT_FALSE(vitk::vit::load_vit(ckpt).config.pos_embed_align_corners);
}

TEST_F(Import, RectangularGrid) {
  vitk::test::FixtureFile fx(kDir + "tiny_vit.h5");
  std::string ckpt = import_to_checkpoint(kSources[1], tiny_options(ImportFormat::timm), "t.h5");
  vitk::vit::LoadedVit m = vitk::vit::load_vit(ckpt, 40, 56);
  EXPECT_EQ(m.params->get("pos_embed").shape, (vitk::Shape{1, 1 + 5 * 7, 32}));
  const double err =
      max_abs_diff(run(m, fx.read_f32("input/x40x56")), fx.read_f32("logits/timm_40x56"));
  std::printf("[ parity ] timm        at 40x56: max |logit error| %.3g\n", err);
  EXPECT_LT(err, kTolerance);
}

TEST_F(Import, ResamplesAtImportWithTheFormatsConvention) {
  vitk::test::FixtureFile fx(kDir + "tiny_vit.h5");
  ImportOptions o = tiny_options(ImportFormat::torchvision);
  o.image_height = o.image_width = 48;
  vitk::vit::ImportedVit imported =
      vitk::vit::import_vit(kDir + "tiny_torchvision_f32.safetensors", o);
  EXPECT_EQ(imported.source_height, 32);
  EXPECT_EQ(imported.config.image_width, 48);
  std::string ckpt = path("tv48.h5");
  vitk::vit::save_imported(imported, ckpt);
  vitk::vit::LoadedVit m = vitk::vit::load_vit(ckpt);
  EXPECT_LT(max_abs_diff(run(m, fx.read_f32("input/x48")), fx.read_f32("logits/torchvision_48")),
            kTolerance);
}

TEST_F(Import, RecordsWhatTheWeightsDoNotSay) {
  ImportOptions o = tiny_options(ImportFormat::hf);
  o.class_names = {"a", "b", "c", "d", "e", "f", "g", "h", "i", "j"};
  std::string ckpt = import_to_checkpoint(kSources[2], o, "hf.h5");
  vitk::vit::LoadedVit hf = vitk::vit::load_vit(ckpt);
  EXPECT_EQ(hf.config.norm_eps, 1e-12f);
  EXPECT_EQ(hf.config.preprocess.resize, "squash");
  EXPECT_EQ(hf.config.preprocess.mean, (std::vector<float>{0.5f, 0.5f, 0.5f}));
  EXPECT_EQ(hf.meta.class_names, o.class_names);
  EXPECT_EQ(hf.config.image_height, 32);
  EXPECT_EQ(hf.config.patch_size, 8);
  EXPECT_EQ(hf.config.layers, 2);
  EXPECT_EQ(hf.config.heads, 2);
  EXPECT_EQ(hf.config.d_ff, 64);
  EXPECT_EQ(hf.config.num_classes, 10);
  EXPECT_EQ(hf.config.pool, "token");

  vitk::vit::LoadedVit tv = vitk::vit::load_vit(
      import_to_checkpoint(kSources[0], tiny_options(ImportFormat::torchvision), "tv.h5"));
  EXPECT_EQ(tv.config.norm_eps, 1e-6f);
  EXPECT_EQ(tv.config.preprocess.mean, (std::vector<float>{0.485f, 0.456f, 0.406f}));
  EXPECT_EQ(tv.config.preprocess.std, (std::vector<float>{0.229f, 0.224f, 0.225f}));
  EXPECT_EQ(tv.meta.class_names.front(), "class_0");
  EXPECT_EQ(tv.meta.class_names.back(), "class_9");

  vitk::vit::LoadedVit timm = vitk::vit::load_vit(
      import_to_checkpoint(kSources[1], tiny_options(ImportFormat::timm), "timm.h5"));
  EXPECT_EQ(timm.config.preprocess.interpolation, "bicubic");
  EXPECT_EQ(timm.config.preprocess.crop_fraction, 0.9f);
}

TEST_F(Import, HeadsComeFromTheTableOrAFlag) {
  ImportOptions o = vitk::vit::options_for(ImportFormat::torchvision);  // no heads given
  try {
    vitk::vit::import_vit(kDir + "tiny_torchvision_f32.safetensors", o);
    FAIL();
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("number of heads"), std::string::npos) << e.what();
  }
  o.heads = 3;  // does not divide 32
  EXPECT_THROW(vitk::vit::import_vit(kDir + "tiny_torchvision_f32.safetensors", o), Error);
}

TEST_F(Import, ErrorsNameTheFileAndTheTensor) {
  auto has = [](const std::string& msg, const std::string& part) {
    return msg.find(part) != std::string::npos;
  };
  // Unknown tensor.
  std::string e = import_error([](auto& t) {
    t.push_back({"encoder.layers.encoder_layer_0.ls1.gamma", Tensor({32})});
  });
  EXPECT_TRUE(has(e, "edited.safetensors") &&
              has(e, "'encoder.layers.encoder_layer_0.ls1.gamma'") && has(e, "layer scale"))
      << e;
  e = import_error([](auto& t) { t.push_back({"something.else", Tensor({2})}); });
  EXPECT_TRUE(has(e, "'something.else'") && has(e, "no counterpart")) << e;
  // Missing tensor: the message names what the file should have held.
  e = import_error([](auto& t) {
    t.erase(std::remove_if(
                t.begin(), t.end(),
                [](auto& x) { return x.name == "encoder.layers.encoder_layer_1.ln_2.bias"; }),
            t.end());
  });
  EXPECT_TRUE(has(e, "missing tensor 'encoder.layers.encoder_layer_1.ln_2.bias'") &&
              has(e, "blocks.1.norm2.bias"))
      << e;
  // Wrong shape.
  e = import_error([](auto& t) {
    for (auto& x : t)
      if (x.name == "encoder.layers.encoder_layer_0.mlp.3.weight") x.value = Tensor({32, 63});
  });
  EXPECT_TRUE(has(e, "'encoder.layers.encoder_layer_0.mlp.3.weight' has shape [32, 63]") &&
              has(e, "expected [32, 64]"))
      << e;
  // A gap in the blocks.
  e = import_error([](auto& t) {
    for (auto& x : t) {
      const std::string from = "encoder_layer_1.", to = "encoder_layer_2.";
      auto pos = x.name.find(from);
      if (pos != std::string::npos) x.name.replace(pos, from.size(), to);
    }
  });
  EXPECT_TRUE(has(e, "missing tensor 'encoder.layers.encoder_layer_1.")) << e;
  // Positions that are not a square grid, with no size given.
  e = import_error([](auto& t) {
    for (auto& x : t)
      if (x.name == "encoder.pos_embedding") x.value = Tensor({1, 13, 32});
  });
  EXPECT_TRUE(has(e, "12 positions, not a square grid")) << e;
  // The wrong --format: the file's names are another format's.
  try {
    vitk::vit::import_vit(kDir + "tiny_timm_bf16.safetensors", tiny_options(ImportFormat::hf));
    FAIL();
  } catch (const Error& err) {
    EXPECT_TRUE(has(err.what(), "tiny_timm_bf16.safetensors") &&
                has(err.what(), "looks like --format timm"))
        << err.what();
  }
}

TEST_F(Import, BackboneWithoutAHead) {
  auto tensors = tensors_of("tiny_hf_f16.safetensors");
  tensors.erase(std::remove_if(tensors.begin(), tensors.end(),
                               [](auto& x) { return x.name.rfind("classifier.", 0) == 0; }),
                tensors.end());
  // ViTModel: no "vit." prefix, and a pooler that classification does not use.
  for (auto& x : tensors) x.name = x.name.substr(4);
  tensors.push_back({"pooler.dense.weight", Tensor({32, 32})});
  tensors.push_back({"pooler.dense.bias", Tensor({32})});
  std::string file = path("vitmodel.safetensors");
  vitk::test::write_file(file, vitk::test::safetensors_from(tensors));
  ImportOptions o = tiny_options(ImportFormat::hf);
  try {
    vitk::vit::import_vit(file, o);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no classifier head ('classifier.weight')"),
              std::string::npos)
        << e.what();
  }
  o.num_classes = 7;
  vitk::vit::ImportedVit m = vitk::vit::import_vit(file, o);
  EXPECT_EQ(m.config.num_classes, 7);
  const Tensor& head = m.params->get("head.weight").value;
  for (int64_t i = 0; i < head.numel(); ++i) ASSERT_EQ(head.f32()[i], 0.f);
  const std::string notes = [&] {
    std::string s;
    for (const auto& n : m.notes) s += n + "\n";
    return s;
  }();
  EXPECT_NE(notes.find("skipped pooler.dense.weight"), std::string::npos) << notes;
  EXPECT_NE(notes.find("zero head of 7 classes"), std::string::npos) << notes;
}

TEST_F(Import, TruncatedFile) {
  std::string file = path("cut.safetensors");
  fs::copy_file(kDir + "tiny_torchvision_f32.safetensors", file);
  fs::resize_file(file, fs::file_size(file) - 100);
  try {
    vitk::vit::import_vit(file, tiny_options(ImportFormat::torchvision));
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cut.safetensors: tensor 'heads.head.bias'"),
              std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("truncated"), std::string::npos) << e.what();
  }
}

TEST_F(Import, LoadAtASizeThePatchDoesNotDivide) {
  std::string ckpt =
      import_to_checkpoint(kSources[0], tiny_options(ImportFormat::torchvision), "tv.h5");
  EXPECT_THROW(vitk::vit::load_vit(ckpt, 36, 36), UsageError);
  // The same size is a plain load.
  EXPECT_EQ(vitk::vit::load_vit(ckpt, 32, 32).params->get("pos_embed").shape,
            (vitk::Shape{1, 17, 32}));
}

TEST_F(Import, Labels) {
  std::ofstream(path("labels.txt"), std::ios::binary) << "cat\r\ndog\nbig bird\n\n";
  EXPECT_EQ(vitk::vit::read_labels(path("labels.txt")),
            (std::vector<std::string>{"cat", "dog", "big bird"}));
  std::ofstream(path("gap.txt"), std::ios::binary) << "cat\n\ndog\n";
  EXPECT_THROW(vitk::vit::read_labels(path("gap.txt")), Error);
  EXPECT_THROW(vitk::vit::read_labels(path("absent.txt")), Error);
  ImportOptions o = tiny_options(ImportFormat::timm);
  o.class_names = {"cat", "dog", "big bird"};
  EXPECT_THROW(vitk::vit::import_vit(kDir + "tiny_timm_bf16.safetensors", o), UsageError);
}

TEST_F(Import, HuggingFaceConfig) {
  std::string labels;
  for (int k = 0; k < 10; ++k)
    labels += (k ? "," : "") + ("\"" + std::to_string(k) + "\": \"n" + std::to_string(k) + "\"");
  std::ofstream(path("config.json"))
      << "{\"architectures\": [\"ViTForImageClassification\"], \"hidden_act\": \"gelu\", "
         "\"num_attention_heads\": 2, \"layer_norm_eps\": 1e-12, \"image_size\": 32, "
         "\"qkv_bias\": true, \"id2label\": {"
      << labels << "}}";
  ImportOptions o = vitk::vit::options_for(ImportFormat::hf);
  o.norm_eps = 0.5f;
  vitk::vit::apply_hf_config(path("config.json"), o);
  EXPECT_EQ(o.heads, 2);
  EXPECT_EQ(o.norm_eps, 1e-12f);
  EXPECT_EQ(o.image_height, 32);
  ASSERT_EQ(o.class_names.size(), 10u);
  EXPECT_EQ(o.class_names[7], "n7");
  vitk::vit::ImportedVit m = vitk::vit::import_vit(kDir + "tiny_hf_f16.safetensors", o);
  EXPECT_EQ(m.class_names[9], "n9");
  EXPECT_EQ(m.config.heads, 2);

  auto error = [&](const std::string& json) {
    std::ofstream(path("bad.json")) << json;
    ImportOptions bad = vitk::vit::options_for(ImportFormat::hf);
    try {
      vitk::vit::apply_hf_config(path("bad.json"), bad);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(error("{\"hidden_act\": \"gelu_new\"}").find("bad.json: hidden_act is 'gelu_new'"),
            std::string::npos);
  EXPECT_NE(error("{\"id2label\": {\"0\": \"a\", \"2\": \"b\"}}").find("id2label '2'"),
            std::string::npos);
  EXPECT_NE(error("{\"num_attention_heads\": \"12\"}").find("num_attention_heads"),
            std::string::npos);
  EXPECT_NE(error("{\"qkv_bias\": false}").find("qkv_bias"), std::string::npos);
  EXPECT_NE(error("{\"a\": 1,}").find("bad.json"), std::string::npos);
  EXPECT_EQ(error("{}"), "");
}

// ---- the command ----

TEST_F(Import, Command) {
  auto run = [&](const std::vector<std::string>& args) {
    return vitk::testing::run_vitk(dir_, args);
  };
  std::ofstream(path("labels.txt"))
      << "zero\none\ntwo\nthree\nfour\nfive\nsix\nseven\neight\nnine\n";
  vitk::testing::ProcessResult r =
      run({"import", "--format", "hf", kDir + "tiny_hf_f16.safetensors", "--out", path("m.h5"),
           "--heads", "2", "--labels", path("labels.txt")});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("2 blocks, d_model 32, heads 2, d_ff 64, patch 8, image 32x32"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("norm eps 1e-12"), std::string::npos) << r.out;
  vitk::io::CheckpointMeta meta = vitk::io::read_checkpoint_meta(path("m.h5"));
  EXPECT_EQ(meta.class_names.at(9), "nine");
  EXPECT_EQ(meta.config.at("norm_eps"), "1e-12");

  r = run({"import", "--format", "torchvision", kDir + "tiny_torchvision_f32.safetensors", "--out",
           path("m48.h5"), "--heads", "2", "--image-size", "48", "--mean", "0.5,0.5,0.5", "--std",
           "0.25,0.25,0.25"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("resampled from a 4x4 to a 6x6 grid (bicubic, align_corners true)"),
            std::string::npos)
      << r.out;
  meta = vitk::io::read_checkpoint_meta(path("m48.h5"));
  EXPECT_EQ(meta.config.at("image_size"), "48");
  EXPECT_EQ(meta.config.at("std"), "0.25,0.25,0.25");

  // Usage errors exit 2, bad files 1; both say what is wrong.
  r = run({"import", "--format", "keras", "x.safetensors", "--out", "y.h5"});
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("unknown import format 'keras'"), std::string::npos) << r.err;
  r = run({"import", "x.safetensors", "--out", "y.h5"});
  EXPECT_EQ(r.status, 2) << r.err;
  r = run(
      {"import", "--format", "timm", path("absent.safetensors"), "--out", "y.h5", "--heads", "2"});
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("absent.safetensors"), std::string::npos) << r.err;
  r = run({"import", "--format", "timm", kDir + "tiny_torchvision_f32.safetensors", "--out",
           path("y.h5")});
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("looks like --format torchvision"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(path("y.h5")));
  r = run({"import", "--help"});
  EXPECT_EQ(r.status, 0);
  EXPECT_NE(r.out.find("vitk import --format timm"), std::string::npos) << r.out;
}

}  // namespace

// The full-size check's C++ half (tests/bench/vit_b16_torchvision_parity.py runs it; not in CI):
// VITK_PARITY_CHECKPOINT is an imported checkpoint, VITK_PARITY_DATA an HDF5 file with, per
// case NAME, input/NAME [B, C, H, W], logits/NAME [B, classes] and align/NAME (i32 [1]: the
// align_corners of the resampling to H x W). Prints one line per case.
TEST(ImportBench, DISABLED_LogitsFromEnvironment) {
  const char* ckpt = std::getenv("VITK_PARITY_CHECKPOINT");
  const char* data = std::getenv("VITK_PARITY_DATA");
  if (!ckpt || !data) GTEST_SKIP() << "VITK_PARITY_CHECKPOINT and VITK_PARITY_DATA are not set";
  vitk::test::FixtureFile fx(data);
  for (const std::string& name : fx.names("input")) {
    const Tensor x = fx.read_f32("input/" + name);
    const bool align = fx.read_i32("align/" + name).i32()[0] != 0;
    vitk::vit::LoadedVit m = vitk::vit::load_vit(ckpt, x.dim(2), x.dim(3), align);
    const double err = max_abs_diff(run(m, x), fx.read_f32("logits/" + name));
    std::printf("[ parity ] %s: max |logit error| %.6g\n", name.c_str(), err);
  }
}
