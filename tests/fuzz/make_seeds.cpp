// Writes the seed corpora of the fuzz harnesses (tests/fuzz/corpus/<parser>/) with vitk's own
// writers: tiny checkpoints of the three models (io::save_checkpoint, seq2seq::save_translation;
// one quantised to int8), a trained tokenizer, safetensors files, IDX files (plain and gzip),
// images of every format the header check knows, corpora, caption files, INI and metrics files.
// Deterministic; run it after a format changes: `cmake --build build --target fuzz_make_seeds &&
// build/tests/fuzz/fuzz_make_seeds tests/fuzz/corpus .` (from the source root). Each seed is small
// (a few KB; HDF5 checkpoints a little more), so that the fuzzer mutates structure rather than bulk
// data.
#include <zlib.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <sentencepiece_trainer.h>
#include <opencv2/imgcodecs.hpp>

#include "../util/safetensors_writer.h"
#include "common/io/checkpoint.h"
#include "common/metrics_csv.h"
#include "common/ops/ops.h"
#include "common/seq2seq/checkpoint.h"
#include "datasets/tokenizer.h"
#include "vit/caption/captioner.h"
#include "vit/caption/model.h"
#include "vit/vit.h"

namespace fs = std::filesystem;

namespace {

fs::path g_root;

void put(const std::string& parser, const std::string& name, const std::string& bytes) {
  const fs::path dir = g_root / parser;
  fs::create_directories(dir);
  std::ofstream(dir / name, std::ios::binary) << bytes;
}

std::string slurp(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

std::string be32(uint32_t v) {
  return {static_cast<char>(v >> 24), static_cast<char>(v >> 16), static_cast<char>(v >> 8),
          static_cast<char>(v)};
}

std::string gzip(const std::string& raw) {
  const fs::path tmp = fs::temp_directory_path() / "vitk_make_seeds.gz";
  gzFile f = gzopen(tmp.c_str(), "wb9");
  gzwrite(f, raw.data(), static_cast<unsigned>(raw.size()));
  gzclose(f);
  std::string out = slurp(tmp);
  fs::remove(tmp);
  return out;
}

vitk::Tensor ramp(const vitk::Shape& shape) {
  vitk::Tensor t(shape);
  for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = 0.25f * static_cast<float>(i % 7) - 0.5f;
  return t;
}

void safetensors() {
  using vitk::test::NamedTensor;
  const std::vector<NamedTensor> tensors = {
      {"cls_token", ramp({1, 1, 4})}, {"head.weight", ramp({2, 4})}, {"head.bias", ramp({2})}};
  put("safetensors", "f32.safetensors", vitk::test::safetensors_from(tensors, "F32"));
  put("safetensors", "f16.safetensors", vitk::test::safetensors_from(tensors, "F16"));
  put("safetensors", "bf16.safetensors", vitk::test::safetensors_from(tensors, "BF16"));
  put("safetensors", "mixed.safetensors",
      vitk::test::safetensors_bytes(R"({"a":{"dtype":"F64","shape":[2],"data_offsets":[0,16]},)"
                                    R"("b":{"dtype":"I64","shape":[1,1],"data_offsets":[16,24]},)"
                                    R"("c":{"dtype":"U8","shape":[0],"data_offsets":[24,24]},)"
                                    R"("__metadata__":{"format":"pt","note":"x"}})",
                                    std::string(24, '\x01')));
}

void json() {
  put("json", "header.json",
      R"({"__metadata__":{"format":"pt"},"w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]}})");
  put("json", "config.json",
      "{\n  \"hidden_size\": 192,\n  \"num_hidden_layers\": 12,\n  \"layer_norm_eps\": 1e-12,\n"
      "  \"id2label\": {\"0\": \"cat\", \"1\": \"caf\\u00e9 \\ud83d\\ude00\"},\n"
      "  \"qkv_bias\": true, \"architectures\": [\"ViTForImageClassification\"], \"x\": null\n}\n");
  put("json", "numbers.json", "[0, -1, 1.5e300, -0.0, 18446744073709551615, 9223372036854775808]");
}

void metrics() {
  const fs::path tmp = fs::temp_directory_path() / "vitk_make_seeds.csv";
  {
    vitk::MetricsCsv csv(tmp.string(), "epoch,train_loss,val_loss,val_acc,lr,seconds", -1);
    csv.row({"1", "2.1", "1.9", "0.31", "0.001", "12.5"});
    csv.row({"2", "1.4", "1.5", "0.52", "0.0009", "12.4"});
  }
  put("metrics_csv", "vit.csv", slurp(tmp));
  {
    vitk::MetricsCsv csv(tmp.string(), "step,train_loss,val_loss,bleu,tokens_per_second", -1);
    csv.row({"500", "5.2", "5.0", "", "1200"});
    csv.row({"1000", "4.1", "nan", "12.5", "1210"});
  }
  put("metrics_csv", "mt.csv", slurp(tmp));
  fs::remove(tmp);
}

void idx() {
  // 3 images of 4x4, labels 0..9: [labels length][labels file][images file] (fuzz_idx.cpp).
  std::string labels = be32(0x801) + be32(3) + std::string{'\x00', '\x07', '\x09'};
  std::string images = be32(0x803) + be32(3) + be32(4) + be32(4);
  for (int i = 0; i < 48; ++i) images += static_cast<char>(i * 5);
  put("idx", "plain", static_cast<char>(labels.size()) + labels + images);
  const std::string gl = gzip(labels);
  put("idx", "gzip", static_cast<char>(gl.size()) + gl + gzip(images));
}

void images(const fs::path& source) {
  cv::Mat grey(6, 8, CV_8UC1), colour(5, 7, CV_8UC3), alpha(4, 4, CV_8UC4);
  cv::randu(grey, 0, 255), cv::randu(colour, 0, 255), cv::randu(alpha, 0, 255);
  const auto encode = [](const std::string& ext, const cv::Mat& m) {
    std::vector<uint8_t> out;
    cv::imencode(ext, m, out);
    return std::string(out.begin(), out.end());
  };
  put("image", "grey.png", encode(".png", grey));
  put("image", "rgba.png", encode(".png", alpha));
  put("image", "colour.jpg", encode(".jpg", colour));
  put("image", "colour.bmp", encode(".bmp", colour));
  put("image", "grey.tif", encode(".tif", grey));
  put("image", "colour.webp", encode(".webp", colour));
  put("image", "grey.pgm", encode(".pgm", grey));
  put("image", "colour.ppm", encode(".ppm", colour));
  for (const char* name : {"exif_rotate90.jpg", "palette.png", "bilevel.png"})
    put("image", name, slurp(source / "tests/fixtures/images" / name));
}

void parallel() {
  // [mode][split] then text (fuzz_parallel.cpp): mode bit 0 = two files, bits 1.. = max bytes.
  put("parallel", "tsv",
      std::string("\x00\x00", 2) +
          "\xEF\xBB\xBF"
          "Hello world\tHola mundo\r\n"
          "\t\nThe child\tEl ni\xC3\xB1o\nlong line here\tx\n");
  const std::string src = "one\ntwo\n\nthree\n", tgt = "uno\ndos\nx\ntres\n";
  put("parallel", "two_files",
      std::string(1, '\x01') + static_cast<char>(255 * src.size() / (src.size() + tgt.size())) +
          src + tgt);
  put("parallel", "limit", std::string("\x10\x00", 2) + "short\tcorto\na much longer line\tx\n");
}

void captions(const fs::path& source) {
  // The reader's fixture (three images, a scene) and a scene of each grid size.
  put("captions", "coco.json", slurp(source / "tests/fixtures/captions/coco.json"));
  put("captions", "scene3.json",
      "{\"images\": [{\"id\": 0, \"file_name\": \"train/000000.png\", \"width\": 84, "
      "\"height\": 84, \"vitk_scene\": {\"grid\": 3, \"objects\": [{\"name\": \"bag\", "
      "\"row\": 0, \"col\": 2, \"box\": [56, 0, 28, 28], \"cell\": [56, 0, 28, 28]}, "
      "{\"name\": \"t-shirt\", \"row\": 2, \"col\": 0, \"box\": [0, 56, 28, 28], "
      "\"cell\": [0, 56, 28, 28]}]}}], \"annotations\": [{\"id\": 0, \"image_id\": 0, "
      "\"caption\": \"a bag above a t-shirt\"}, {\"id\": 1, \"image_id\": 0, "
      "\"caption\": \"a t-shirt below a bag\"}]}\n");
}

void ini(const fs::path& source) {
  // [subcommand index] then the file (fuzz_ini.cpp; the order of tools/main.cpp's table).
  put("ini", "env", std::string(1, '\x00') + "\xEF\xBB\xBF# env\nseed = 7\nname = caf\xC3\xA9\n");
  put("ini", "train_fmnist", std::string(1, '\x02') + slurp(source / "configs/vit-fmnist.ini"));
  put("ini", "mt_train_small",
      std::string(1, '\x0a') + slurp(source / "configs/transformer-small.ini"));
  put("ini", "classify",
      std::string(1, '\x04') +
          "[classify]\nmodel = m.h5\ntop-k = 3\nalign-corners = true\n"
          "image-size = 32x48\n[model]\nd_model = 8\n");
}

// A model as Tokenizer::train makes it (the same special ids), but with the identity normalizer:
// the default one (NFKC) carries a 230 KB table that the fuzzer would spend its time mutating.
vitk::datasets::Tokenizer tokenizer() {
  std::string text;
  const char* words[] = {"cre\xC3\xB3", "Dios", "los", "cielos", "y", "la", "tierra", "agua"};
  for (int i = 0; i < 40; ++i) {
    for (int k = 0; k < 3 + i % 4; ++k) text += std::string(k ? " " : "") + words[(i * 3 + k) % 8];
    text += "\n";
  }
  const fs::path tmp = fs::temp_directory_path() / "vitk_make_seeds.txt";
  std::ofstream(tmp) << text;
  const fs::path prefix = fs::temp_directory_path() / "vitk_make_seeds_spm";
  const auto status = sentencepiece::SentencePieceTrainer::Train(
      "--input=" + tmp.string() + " --model_prefix=" + prefix.string() +
      " --model_type=bpe --vocab_size=40 --pad_id=0 --unk_id=1 --bos_id=2 --eos_id=3"
      " --normalization_rule_name=identity --minloglevel=2");
  if (!status.ok()) throw std::runtime_error(status.ToString());
  const std::string bytes = slurp(prefix.string() + ".model");
  fs::remove(tmp), fs::remove(prefix.string() + ".model"), fs::remove(prefix.string() + ".vocab");
  return vitk::datasets::Tokenizer::from_bytes(bytes);
}

void checkpoints(const vitk::datasets::Tokenizer& tok) {
  const fs::path tmp = fs::temp_directory_path() / "vitk_make_seeds.h5";
  vitk::ops::Rng rng(1);
  {
    vitk::vit::VitConfig c;
    c.image_height = c.image_width = 8, c.patch_size = 4, c.channels = 1, c.num_classes = 2;
    c.d_model = 8, c.heads = 2, c.d_ff = 8, c.layers = 1;
    c.preprocess.mean = {0.5f}, c.preprocess.std = {0.25f};
    vitk::ParamStore params;
    vitk::vit::VisionTransformer model(params, c);
    params.finalize();
    model.init(rng);
    vitk::io::CheckpointMeta meta;
    meta.config = vitk::vit::to_config_map(c);
    meta.class_names = {"a", "b"};
    vitk::io::save_checkpoint(tmp.string(), params, meta);
    put("checkpoint", "vit.h5", slurp(tmp));
    // As `vitk quantize` writes it: the blocks' and the head's matrices int8, with NAME_scale.
    vitk::ParamStore params8;
    vitk::vit::VisionTransformer model8(params8, c);
    params8.finalize();
    std::copy_n(params.values().f32(), params.arena_floats(), params8.values().f32());
    for (vitk::Parameter& p : params8.params()) {
      if (p.shape.size() != 2 || p.name.rfind("blocks.", 0) != 0) continue;
      p.quantized =
          std::make_shared<vitk::ops::QuantizedWeight>(vitk::ops::quantize_weight(p.value.clone()));
      vitk::release_value(p);
    }
    vitk::io::save_checkpoint(tmp.string(), params8, meta);
    put("checkpoint", "vit_int8.h5", slurp(tmp));
    c.stem_channels = {4}, c.pos_conv_blocks = {0}, c.ffn_conv_blocks = {0}, c.pool = "avg";
    vitk::ParamStore params2;
    vitk::vit::VisionTransformer model2(params2, c);
    params2.finalize();
    model2.init(rng);
    meta.config = vitk::vit::to_config_map(c);
    meta.step = 3, meta.epoch = 1;
    vitk::io::save_checkpoint(tmp.string(), params2, meta);
    put("checkpoint", "vit_stem.h5", slurp(tmp));
  }
  {
    vitk::seq2seq::TransformerConfig c;
    c.vocab_size = tok.size(), c.d_model = 8, c.heads = 2, c.d_ff = 8;
    c.layers = 1, c.decoder_layers = 1, c.max_length = 16;
    vitk::ParamStore params;
    vitk::seq2seq::Transformer model(params, c);
    params.finalize();
    model.init(rng);
    vitk::seq2seq::save_translation(tmp.string(), params, c, tok.bytes(), 5);
    put("checkpoint", "translation.h5", slurp(tmp));
  }
  {
    vitk::caption::CaptionConfig c;
    c.encoder.image_height = c.encoder.image_width = 8, c.encoder.patch_size = 4;
    c.encoder.channels = 1, c.encoder.num_classes = 0, c.encoder.d_model = 8;
    c.encoder.heads = 2, c.encoder.d_ff = 8, c.encoder.layers = 1;
    c.encoder.preprocess.mean = {0.5f}, c.encoder.preprocess.std = {0.25f};
    c.vocab_size = tok.size(), c.max_length = 8, c.decoder_layers = 1, c.decoder_heads = 2;
    c.memory_class_token = false;
    vitk::ParamStore params;
    vitk::caption::CaptionModel model(params, c);
    params.finalize();
    model.init(rng);
    vitk::io::CheckpointMeta meta;
    meta.config = vitk::caption::to_config_map(c);
    meta.files[vitk::caption::kCaptionTokenizerFile] = tok.bytes();
    vitk::io::save_checkpoint(tmp.string(), params, meta);
    put("checkpoint", "caption.h5", slurp(tmp));
  }
  fs::remove(tmp);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::cerr << "usage: fuzz_make_seeds CORPUS_DIR SOURCE_DIR\n";
    return 2;
  }
  g_root = argv[1];
  const fs::path source = argv[2];
  safetensors();
  json();
  metrics();
  idx();
  images(source);
  parallel();
  captions(source);
  ini(source);
  const vitk::datasets::Tokenizer tok = tokenizer();
  put("tokenizer", "spm.model", tok.bytes());
  checkpoints(tok);
  for (const auto& dir : fs::directory_iterator(g_root))
    for (const auto& f : fs::directory_iterator(dir))
      std::cout << f.path().string() << " " << fs::file_size(f) << "\n";
  return 0;
}
