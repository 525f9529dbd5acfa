// `vitk make-scenes`: a captioning dataset made from Fashion-MNIST (datasets/scenes.h). Wiring
// only: options in, a summary out.
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <utility>

#include "common/error.h"
#include "common/io/input_file.h"
#include "common/io/json.h"
#include "datasets/scenes.h"
#include "tools/cli.h"

namespace vitk::tools {
namespace {

namespace fs = std::filesystem;

// How many images and captions a written captions file holds, read back for the summary.
std::pair<size_t, size_t> count_split(const fs::path& json_path) {
  std::ifstream in = io::open_input_file(json_path.string(), "a captions file");
  std::ostringstream text;
  text << in.rdbuf();
  const io::Json doc = io::parse_json(text.str(), json_path.string());
  return {doc.at("images").size(), doc.at("annotations").size()};
}

int run_make_scenes(const po::variables_map& vm) {
  datasets::SceneOptions o;
  o.fashion_mnist = vm["data"].as<std::string>();
  o.output = vm["out"].as<std::string>();
  o.train = vm["train"].as<int64_t>();
  o.val = vm["val"].as<int64_t>();
  o.test = vm["test"].as<int64_t>();
  o.captions_per_image = vm["captions-per-image"].as<int64_t>();
  o.min_objects = vm["min-objects"].as<int64_t>();
  o.max_objects = vm["max-objects"].as<int64_t>();
  o.seed = vm["seed"].as<uint64_t>();
  datasets::make_scenes(o);

  for (const char* split : {"train", "val", "test"}) {
    const auto [images, captions] =
        count_split(fs::path(o.output) / (std::string("captions_") + split + ".json"));
    std::cout << split << ": " << images << " scenes, " << captions << " captions\n";
  }
  std::cout << "written to " << o.output << " (captions_SPLIT.json, images/SPLIT/)" << std::endl;
  return kExitOk;
}

}  // namespace

void register_make_scenes_commands(Registry& registry) {
  Subcommand c;
  c.name = "make-scenes";
  c.summary = "make a captioning dataset: Fashion-MNIST articles on a grid, with captions";
  c.usage = "--out DIR [options]";
  c.example =
      "vitk make-scenes --out data/scenes\n"
      "vitk make-scenes --data /usr/share/datasets/fashion-mnist --out /tmp/scenes --train 2000 "
      "--val 200 --test 200 --captions-per-image 3 --seed 7";
  c.add_options = [](po::options_description& o) {
    o.add_options()  //
        ("data",
         po::value<std::string>()
             ->default_value("/usr/share/datasets/fashion-mnist")
             ->value_name("DIR"),
         "the Fashion-MNIST IDX folder: train and val scenes take its training articles (the "
         "first 50,000 and the last 10,000), test scenes its t10k articles")  //
        ("out", po::value<std::string>()->required()->value_name("DIR"),
         "the folder to write (new or empty): captions_{train,val,test}.json (COCO captions) "
         "and images/{train,val,test}/NNNNNN.png")  //
        ("train", po::value<int64_t>()->default_value(20000)->value_name("N"),
         "training scenes (0..1000000)")  //
        ("val", po::value<int64_t>()->default_value(1000)->value_name("N"),
         "validation scenes")  //
        ("test", po::value<int64_t>()->default_value(2000)->value_name("N"),
         "test scenes")  //
        ("captions-per-image", po::value<int64_t>()->default_value(5)->value_name("K"),
         "distinct captions per scene, 1..24 (a scene of n articles has at most n! of them)")  //
        ("min-objects", po::value<int64_t>()->default_value(2)->value_name("N"),
         "fewest articles in a scene (2..4)")  //
        ("max-objects", po::value<int64_t>()->default_value(4)->value_name("N"),
         "most articles in a scene (2..4; a 2x2 grid holds four)")  //
        ("seed", po::value<uint64_t>()->default_value(1)->value_name("S"),
         "seed of the scenes: the same options give the same files");
  };
  c.run = run_make_scenes;
  registry.add(std::move(c));
}

}  // namespace vitk::tools
