#pragma once
// The ViT parity fixtures (tests/parity/make_vit_fixtures.py) and the model configuration each
// stores, for the tests that build the same models. (Comparing with them: parity.h.)
#include <gtest/gtest.h>

#include <string>

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

}  // namespace vitk::test
