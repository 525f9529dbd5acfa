// The core's sizes (common/nn/model_info.h): the sums of a table of blocks, and the registry of
// model kinds. Each model's own sizes: vit/, seq2seq/ and caption/test_model_info.cpp; every kind
// the executable registers: tools/test_model_registry.cpp.
#include <gtest/gtest.h>

#include <stdexcept>

#include "common/nn/model_info.h"

using namespace vitk;

TEST(ModelInfo, FinishSumsTheBlocksAndTheExtraMultiplyAdds) {
  nn::ModelSize size;
  size.add("a", 2, 10, 3, 5, 1, "");  // 2 blocks of 10 parameters, 3 (+1 attention) MACs x 5
  size.add("b", 1, 7, 4, 2, 0, "");
  size.finish(100);
  EXPECT_EQ(size.total_params, 27);
  EXPECT_DOUBLE_EQ(size.attention_macs_per_sequence, 2.0 * 1 * 5);
  EXPECT_DOUBLE_EQ(size.macs_per_sequence, 2.0 * 3 * 5 + 4 * 2 + 100 + 10);
}

TEST(ModelInfo, TheRegistryFindsEachKindOnce) {
  nn::ModelRegistry registry;
  nn::ModelKind kind;
  kind.type = "toy";
  kind.size = [](const std::map<std::string, std::string>&) { return nn::ModelSize{}; };
  registry.add(kind);
  EXPECT_THROW(registry.add(kind), std::logic_error);
  kind.type = "";
  EXPECT_THROW(registry.add(kind), std::logic_error);
  ASSERT_NE(registry.find("toy"), nullptr);
  EXPECT_EQ(registry.find("rnn"), nullptr);
  EXPECT_EQ(registry.all().size(), 1u);
}
