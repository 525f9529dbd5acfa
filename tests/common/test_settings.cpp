// The settings schema (common/settings.h): one table of fields gives the text form, the ranges and
// the help of a settings struct; a field added to the table is read, written, checked and shown
// with nothing else to write.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common/error.h"
#include "common/settings.h"

using namespace vitk;

namespace {

#define TOY_SETTINGS(X)                                                 \
  X(int64_t, width, 64, between(1, 4096), "width")                      \
  X(int, depth, 2, between(1, 100), "depth")                            \
  X(float, rate, 0.1f, fraction(), "a rate in [0, 1)")                  \
  X(float, eps, 1e-5f, positive(), "a positive epsilon")                \
  X(bool, tied, true, any(), "tied or not")                             \
  X(std::string, pool, "token", one_of("token", "avg"), "token or avg") \
  X(std::vector<int64_t>, blocks, {}, at_least(0), "block indices")     \
  X(std::vector<float>, mean, (std::vector<float>{0.5f, 0.25f}), any(), "a mean per channel")

struct Toy {
  TOY_SETTINGS(VITK_SETTING_MEMBER)
};

struct Outer {
  Toy inner;
  int64_t extra = 3;
};

const settings::Schema<Toy>& toy_schema() {
  using Self = Toy;
  static const auto* schema = new settings::Schema<Toy>(settings::Schema<Toy>("toy", "toy model")
                                                            TOY_SETTINGS(VITK_SETTING_FIELD));
  return *schema;
}

std::string usage_error(const Toy& t) {
  try {
    toy_schema().check(t);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "";
}

std::string read_error(const std::map<std::string, std::string>& map) {
  try {
    toy_schema().read(map, "toy.h5");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(Settings, TheTableDeclaresMembersWithTheirDefaults) {
  const Toy t;
  EXPECT_EQ(t.width, 64);
  EXPECT_EQ(t.depth, 2);
  EXPECT_FLOAT_EQ(t.rate, 0.1f);
  EXPECT_TRUE(t.tied);
  EXPECT_EQ(t.pool, "token");
  EXPECT_TRUE(t.blocks.empty());
  EXPECT_EQ(t.mean, (std::vector<float>{0.5f, 0.25f}));
}

TEST(Settings, TextRoundTripsEveryFieldExactly) {
  Toy t;
  t.width = 48;
  t.depth = 7;
  t.rate = 0.3f;  // not a short decimal in binary: written so that it reads back the same
  t.eps = 1e-6f;
  t.tied = false;
  t.pool = "avg";
  t.blocks = {0, 2, 5};
  t.mean = {0.286f};
  const auto map = toy_schema().to_map(t);
  EXPECT_EQ(map.at("type"), "toy");
  EXPECT_EQ(map.at("blocks"), "0,2,5");
  EXPECT_EQ(map.at("tied"), "false");
  EXPECT_EQ(toy_schema().to_map(Toy{}).at("blocks"), "none");
  const Toy back = toy_schema().read(map, "test");
  EXPECT_EQ(toy_schema().to_map(back), map);
  EXPECT_EQ(back.rate, t.rate);
  EXPECT_EQ(back.eps, t.eps);
  EXPECT_EQ(back.blocks, t.blocks);
  // A missing key keeps the default (a checkpoint written before the key existed).
  EXPECT_EQ(toy_schema().read({{"width", "8"}}, "old.h5").depth, 2);
}

TEST(Settings, ReadErrorsNameTheSourceAndTheKey) {
  EXPECT_EQ(read_error({{"width", "x"}}),
            "toy.h5: model setting 'width': expected an integer, got 'x'");
  EXPECT_NE(read_error({{"depth", "99999999999"}}).find("'depth': 99999999999 is out of range"),
            std::string::npos);
  EXPECT_NE(read_error({{"tied", "yes"}}).find("'tied'"), std::string::npos);
  EXPECT_NE(read_error({{"blocks", "1,x"}}).find("'blocks'"), std::string::npos);
  EXPECT_NE(read_error({{"mean", "0.5,,1"}}).find("'mean'"), std::string::npos);
  EXPECT_EQ(read_error({{"depht", "3"}}), "toy.h5: unknown model setting 'depht'");
  EXPECT_EQ(read_error({{"type", "vit"}}), "toy.h5: a 'vit' model, not a toy model (toy)");
  EXPECT_EQ(read_error({{"type", "toy"}, {"width", "3"}}), "");
}

TEST(Settings, RangesAreCheckedAndNamed) {
  EXPECT_EQ(usage_error(Toy{}), "");
  Toy t;
  t.width = 0;
  EXPECT_EQ(usage_error(t), "model.width must be in [1, 4096], got 0");
  t = Toy{};
  t.rate = 1.f;
  EXPECT_EQ(usage_error(t), "model.rate must be in [0, 1), got 1");
  t = Toy{};
  t.eps = 0.f;
  EXPECT_EQ(usage_error(t), "model.eps must be positive, got 0");
  t = Toy{};
  t.pool = "max";
  EXPECT_EQ(usage_error(t), "model.pool must be one of token, avg, got 'max'");
  t = Toy{};
  t.depth = 101;
  EXPECT_EQ(usage_error(t), "model.depth must be in [1, 100], got 101");
}

TEST(Settings, InfosShowKeyHelpDefaultAndSwitches) {
  Toy defaults;
  defaults.width = 32;
  const auto infos = toy_schema().infos(defaults);
  ASSERT_EQ(infos.size(), 8u);
  EXPECT_EQ(infos[0].key, "width");
  EXPECT_EQ(infos[0].default_text, "32");
  EXPECT_EQ(infos[0].help, "width");
  EXPECT_EQ(infos[0].value_name, "N");
  EXPECT_FALSE(infos[0].is_switch);
  EXPECT_TRUE(infos[4].is_switch);  // tied
  EXPECT_EQ(infos[6].value_name, "LIST");
  for (const auto& i : infos) EXPECT_TRUE(i.stored) << i.key;
}

TEST(Settings, IncludeAndCustomFieldsComposeSchemas) {
  settings::Schema<Outer> outer("outer", "outer model");
  outer.include(toy_schema(), &Outer::inner, {"depth"});
  outer.add_custom(
      "extra", "an extra setting", "N", [](const Outer& o) { return std::to_string(o.extra); },
      [](Outer& o, const SettingReader& r, const std::string& s) {
        o.extra = r.integer("extra", s);
      },
      [](const Outer& o) {
        if (o.extra < 0) throw UsageError("model.extra must be >= 0");
      });
  outer.add("hidden", &Outer::extra, settings::at_least(0), "not stored", settings::kNotStored);
  const auto map = outer.to_map(Outer{});
  EXPECT_EQ(map.count("depth"), 0u);  // left out of the included fields
  EXPECT_EQ(map.at("width"), "64");
  EXPECT_EQ(map.at("extra"), "3");
  EXPECT_EQ(map.count("hidden"), 0u);  // kNotStored
  const Outer o = outer.read({{"width", "12"}, {"extra", "9"}}, "x");
  EXPECT_EQ(o.inner.width, 12);
  EXPECT_EQ(o.extra, 9);
  Outer bad;
  bad.inner.width = 0;
  EXPECT_THROW(outer.check(bad), UsageError);
  EXPECT_THROW(outer.read({{"depth", "3"}}, "x"), Error);
}
