// `vitk export-samples`: a few images of a dataset split written as PNG files named after their
// index and class (0003-sandal.png), e.g. the bundled datasets/samples. Wiring only.
#include <algorithm>
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <map>

#include <opencv2/imgcodecs.hpp>

#include "common/error.h"
#include "common/io/atomic_file.h"
#include "datasets/dataset.h"
#include "tools/cli.h"

namespace vitk::tools {
namespace {

namespace fs = std::filesystem;

// "T-shirt/top" -> "t-shirt-top", "Ankle boot" -> "ankle-boot": lower-case letters and digits,
// anything else one '-'.
std::string slug(const std::string& name) {
  std::string out;
  for (char c : name) {
    const unsigned char u = static_cast<unsigned char>(c);
    if (std::isalnum(u))
      out += static_cast<char>(std::tolower(u));
    else if (!out.empty() && out.back() != '-')
      out += '-';
  }
  while (!out.empty() && out.back() == '-') out.pop_back();
  return out.empty() ? "class" : out;
}

int run_export_samples(const po::variables_map& vm) {
  const std::string data = vm["data"].as<std::string>();
  const std::string split_name = vm["split"].as<std::string>();
  if (split_name != "train" && split_name != "val")
    throw UsageError("--split must be train or val, not '" + split_name + "'");
  const int64_t count = vm["count"].as<int64_t>(), per_class = vm["per-class"].as<int64_t>();
  const int64_t start = vm["start"].as<int64_t>();
  if (count < 1) throw UsageError("--count must be at least 1");
  if (per_class < 0) throw UsageError("--per-class must not be negative");
  if (start < 0) throw UsageError("--start must not be negative");
  const fs::path out = vm["out"].as<std::string>();

  auto dataset = datasets::open_dataset(
      data, split_name == "train" ? datasets::Split::train : datasets::Split::val);
  const auto& classes = dataset->class_names();
  // Which samples: the first --count from --start, or the first --per-class of every class.
  std::vector<int64_t> chosen;
  if (per_class > 0) {
    std::map<int, int64_t> taken;
    for (int64_t i = start;
         i < dataset->size() &&
         static_cast<int64_t>(chosen.size()) < per_class * static_cast<int64_t>(classes.size());
         ++i)
      if (taken[dataset->label(i)]++ < per_class) chosen.push_back(i);
  } else {
    for (int64_t i = start; i < dataset->size() && static_cast<int64_t>(chosen.size()) < count; ++i)
      chosen.push_back(i);
  }
  if (chosen.empty())
    throw Error(dataset->source() + ": no samples from index " + std::to_string(start) +
                " (it has " + std::to_string(dataset->size()) + ")");

  std::error_code ec;
  fs::create_directories(out, ec);
  if (ec) throw Error("--out " + out.string() + ": " + ec.message());
  const int digits = std::max<int>(4, static_cast<int>(std::to_string(dataset->size() - 1).size()));
  int failed = 0;
  for (int64_t i : chosen) {
    cv::Mat image;
    std::string why;
    if (!dataset->load(i, image, why)) {
      std::cerr << "vitk: error: " << dataset->describe(i) << ": " << why << std::endl;
      ++failed;
      continue;
    }
    char index[32];
    std::snprintf(index, sizeof index, "%0*lld", digits, static_cast<long long>(i));
    const fs::path file = out / (std::string(index) + "-" +
                                 slug(classes[static_cast<size_t>(dataset->label(i))]) + ".png");
    std::vector<uint8_t> png;
    if (!cv::imencode(".png", image, png)) throw Error(file.string() + ": cannot encode as PNG");
    io::write_file_atomic(file.string(), png.data(), png.size());
    std::cout << file.string() << "\n";
  }
  return failed ? kExitFailure : kExitOk;
}

}  // namespace

void register_export_commands(Registry& registry) {
  Subcommand c;
  c.name = "export-samples";
  c.summary = "write images of a dataset split as PNG files named like 0003-sandal.png";
  c.usage = "DATA --out DIR [options]";
  c.example =
      "vitk export-samples data/fashion-mnist --per-class 2 --out datasets/samples\n"
      "vitk export-samples data/imagenette --split val --count 20 --start 100 --out /tmp/s";
  c.add_options = [](po::options_description& o) {
    o.add_options()("data", po::value<std::string>()->required()->value_name("PATH"),
                    "the dataset: an IDX directory, an image-folder root or a CSV list")(
        "out", po::value<std::string>()->required()->value_name("DIR"),
        "where to write the PNG files (created if missing)")(
        "split", po::value<std::string>()->default_value("val")->value_name("train|val"),
        "which split")("count", po::value<int64_t>()->default_value(10)->value_name("N"),
                       "how many samples, in dataset order")(
        "per-class", po::value<int64_t>()->default_value(0)->value_name("K"),
        "instead: the first K samples of every class")(
        "start", po::value<int64_t>()->default_value(0)->value_name("I"),
        "the first sample index to consider");
  };
  c.add_positional = [](po::positional_options_description& p) { p.add("data", 1); };
  c.run = run_export_samples;
  registry.add(std::move(c));
}

}  // namespace vitk::tools
