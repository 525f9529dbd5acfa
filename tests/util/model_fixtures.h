#pragma once
// The model configurations stored in the PyTorch parity fixtures (tests/parity/make_vit_fixtures.py
// and make_seq2seq_fixture.py), for the tests that build the same models, and the tolerance of
// the models' outputs with bf16 products, which the parity tests check in each precision.
//
// The bf16 tolerance. Rounding an operand to bf16 (8 significant bits, round to nearest) changes
// it by at most u = 2⁻⁸ relative, so a product Σ_k x_k·w_k on rounded operands is off by at most
// about 2u·Σ_k |x_k·w_k| (the products of bf16 values are exact in f32, and f32 accumulation adds
// ~1e-7). Along the network the errors of the P products a value passes through add up (layer
// norms keep the scale), which gives
//   max |logit_bf16 − logit_exact| ≤ 2u·P·max(1, max |logit_exact|),
// with P = 6 per encoder layer (qkv, q·kᵀ, p·v, proj, fc1, fc2), 11 per decoder layer (the
// cross-attention adds q, kv, q·kᵀ, p·v, proj) plus the patch embedding and the head (ViT) or the
// output layer (translation); gradients pass through about three times as many products. Rounding
// errors of independent sign mostly cancel, so the measured error is far below this bound (the
// tests print both); each test also checks that bf16 is further from the reference than f32's
// tolerance, so that an f32 run in disguise fails.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>

#include "common/seq2seq/config.h"
#include "util/fixture_io.h"
#include "vit/vit.h"

namespace vitk::test {

// The ViT parity fixtures (tests/fixtures/vit/<name>.h5), which the parity and the bf16 tests
// both run: a new fixture goes here once.
inline constexpr const char* kVitFixtures[] = {
    "01_token_rgb_square",    "02_avg_gray_rect",
    "03_token_gray_rect",     "04_stem_avg_gray",
    "05_stem_token_rgb_rect", "06_stem_strides_avg_rgb",
    "07_patch_drop_avg_gray", "08_patch_drop_stem_token_rgb",
    "09_pos_conv_avg_gray",   "10_pos_conv_stem_token_rgb",
    "11_diag_mask_avg_gray",  "12_diag_mask_patch_drop_token_rgb",
    "13_ffn_conv_avg_gray",   "14_ffn_conv_pos_conv_stem_token_rgb"};

constexpr double kBf16Roundoff = 1.0 / 256;  // bf16's unit roundoff, 2⁻⁸

// How far a model's output is from a reference: max |a − b|, max(1, max |b|) and
// ‖a − b‖₂ / ‖b‖₂.
struct OutputDiff {
  double max_abs = 0, scale = 1, rel_l2 = 0;
};
inline OutputDiff output_diff(const Tensor& a, const Tensor& b) {
  OutputDiff d;
  double num = 0, den = 0;
  for (int64_t i = 0; i < b.numel(); ++i) {
    const double x = a.f32()[i], y = b.f32()[i];
    d.max_abs = std::max(d.max_abs, std::fabs(x - y));
    if (std::isnan(x)) d.max_abs = INFINITY;
    d.scale = std::max(d.scale, std::fabs(y));
    num += (x - y) * (x - y);
    den += y * y;
  }
  d.rel_l2 = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
  return d;
}

// gtest's name for a fixture's test: "case<name>".
inline std::string fixture_case_name(const ::testing::TestParamInfo<const char*>& p) {
  return std::string("case") + p.param;
}

inline vit::VitConfig vit_config_of(const FixtureFile& f) {
  vit::VitConfig c;
  c.image_height = f.attr_int("image_height");
  c.image_width = f.attr_int("image_width");
  c.patch_size = f.attr_int("patch_size");
  c.channels = f.attr_int("channels");
  c.num_classes = f.attr_int("num_classes");
  c.d_model = f.attr_int("d_model");
  c.heads = f.attr_int("heads");
  c.d_ff = f.attr_int("d_ff");
  c.layers = static_cast<int>(f.attr_int("layers"));
  c.pool = f.attr_string("pool");
  c.norm_eps = static_cast<float>(f.attr_float("norm_eps"));
  if (f.has_attr("stem_channels"))
    c.stem_channels = vit::parse_stem_channels(f.attr_string("stem_channels"));
  if (f.has_attr("stem_strides"))
    c.stem_strides = vit::parse_stem_strides(f.attr_string("stem_strides"));
  if (f.has_attr("pos_conv_blocks"))
    c.pos_conv_blocks = vit::parse_pos_conv_blocks(f.attr_string("pos_conv_blocks"));
  if (f.has_attr("patch_drop")) c.patch_drop = static_cast<float>(f.attr_float("patch_drop"));
  if (f.has_attr("diag_mask")) c.diag_mask = f.attr_int("diag_mask") != 0;
  if (f.has_attr("ffn_conv_blocks"))
    c.ffn_conv_blocks = vit::parse_ffn_conv_blocks(f.attr_string("ffn_conv_blocks"));
  c.preprocess.mean.assign(static_cast<size_t>(c.channels), 0.5f);
  c.preprocess.std.assign(static_cast<size_t>(c.channels), 0.5f);
  return c;
}

inline seq2seq::TransformerConfig seq2seq_config_of(const FixtureFile& f) {
  std::map<std::string, std::string> settings;
  for (const char* key :
       {"vocab_size", "d_model", "heads", "d_ff", "layers", "decoder_layers", "activation",
        "pre_norm", "tied_embeddings", "max_length", "dropout", "attention_dropout"})
    settings[key] = f.attr_string(key);
  return seq2seq::from_config_map(settings, f.path());
}

}  // namespace vitk::test
