// The model kinds the executable registers (tools/model_registry.h): `vitk info` sizes a model from
// [model] keys as text through them.
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "common/error.h"
#include "tools/model_registry.h"

using namespace vitk;

// Each model registers its kind: `vitk info` sizes a model from [model] keys as text, and a bad
// value or a setting that contradicts another is a usage error naming it.
TEST(ModelInfo, KindsSizeFromTextAndRefuseBadSettings) {
  const nn::ModelRegistry& registry = tools::model_registry();
  for (const char* type : {"vit", "caption", "transformer", "encoder"})
    EXPECT_NE(registry.find(type), nullptr) << type;
  EXPECT_EQ(registry.find("rnn"), nullptr);
  const nn::ModelKind& vit = *registry.find("vit");
  const std::map<std::string, std::string> b16 = {{"d_model", "768"}, {"heads", "12"}};
  EXPECT_EQ(vit.size(b16).total_params, 86567656);
  // Keys of another kind are not this one's business (one preset serves `vitk info` for all).
  auto with_other = b16;
  with_other["activation"] = "gelu";
  EXPECT_EQ(vit.size(with_other).total_params, 86567656);
  for (const auto& [key, value] : std::map<std::string, std::string>{
           {"heads", "7"}, {"patch_size", "15"}, {"d_model", "x"}, {"layers", "0"}}) {
    auto bad = b16;
    bad[key] = value;
    try {
      vit.size(bad);
      ADD_FAILURE() << key << " " << value;
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find("--model."), std::string::npos) << e.what();
    }
  }
  const nn::ModelKind& transformer = *registry.find("transformer");
  EXPECT_EQ(transformer.size({{"sequence_length", "50"}}).tokens, 50);
  EXPECT_THROW(transformer.size({{"score", "cosine"}}), UsageError);
  // The settings each kind shows are its schema's, with its defaults.
  bool found = false;
  for (const auto& f : vit.fields)
    if (f.key == "d_model") found = f.default_text == "768";
  EXPECT_TRUE(found);
}
