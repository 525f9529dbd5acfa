// `vitk classify`: top-k labels of image files with a ViT checkpoint (the bundled Fashion-MNIST
// model by default). Wiring only: inputs, options and output formats; decoding, preprocessing and
// the batched model run live in vit/classify.
#include <algorithm>
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <utility>

#include "common/error.h"
#include "common/io/input_file.h"
#include "common/ops/ops.h"
#include "common/ops/profile.h"
#include "common/plot/plot.h"
#include "common/progress.h"
#include "tools/api/internal.h"
#include "tools/classify_output.h"
#include "tools/cli.h"
#include "tools/image_inputs.h"
#include "tools/vit_options.h"
#include "vit/checkpoint.h"
#include "vit/classify.h"
#include "vit/maps.h"
#include "vit/pictures.h"

namespace vitk::tools {
namespace {

namespace fs = std::filesystem;

constexpr const char* kBundledModel = "vit/models/fmnist-vit.h5";

std::vector<std::string> read_labels(const std::string& path, int64_t classes) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) throw Error("--labels " + path + ": is a directory");
  io::require_regular_file(path, "a labels file");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error("--labels " + path + ": cannot open");
  std::vector<std::string> labels;
  int line_number = 0;
  for (std::string line; std::getline(in, line);) {
    ++line_number;
    if (line_number == 1 && line.rfind("\xEF\xBB\xBF", 0) == 0) line = line.substr(3);  // BOM
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos)
      throw Error("--labels " + path + ":" + std::to_string(line_number) + ": empty label");
    labels.push_back(line);
  }
  if (static_cast<int64_t>(labels.size()) != classes)
    throw Error("--labels " + path + " has " + std::to_string(labels.size()) +
                " labels (one a line), but the model has " + std::to_string(classes) + " classes");
  return labels;
}

std::vector<float> parse_floats(const std::string& option, const std::string& text) {
  std::vector<float> out;
  std::string item;
  std::stringstream in(text);
  while (std::getline(in, item, ',')) {
    char* end = nullptr;
    const float v = std::strtof(item.c_str(), &end);
    if (item.empty() || end == item.c_str() ||
        (*end && !std::isspace(static_cast<unsigned char>(*end))))
      throw UsageError("--" + option + ": expected comma-separated numbers, got '" + text + "'");
    out.push_back(v);
  }
  if (out.empty())
    throw UsageError("--" + option + ": expected comma-separated numbers, got '" + text + "'");
  return out;
}

// A randomly initialised model of the --model.* options (a [model] section): throughput does not
// depend on the weights, so any preset can be timed without a checkpoint.
vit::LoadedVit random_model(const po::variables_map& vm) {
  vit::LoadedVit m;
  m.config = vit_config_from(vm, vit::VitConfig{});
  m.params = std::make_unique<ParamStore>();
  m.model = std::make_unique<vit::VisionTransformer>(*m.params, m.config);
  m.params->finalize(/*gradients=*/false);
  ops::Rng rng(0);
  m.model->init(rng);
  return m;
}

// "224x224, patch 16, 3 channels, 12 layers, width 768, 1000 classes"
std::string describe(const vit::VitConfig& c) {
  return std::to_string(c.image_height) + "x" + std::to_string(c.image_width) + ", patch " +
         std::to_string(c.patch_size) + ", " + std::to_string(c.channels) + " channels, " +
         std::to_string(c.layers) + " layers, width " + std::to_string(c.d_model) + ", " +
         std::to_string(c.num_classes) + " classes";
}

// What `vitk classify` settles from its options before it loads anything.
struct ClassifyRequest {
  ClassifierOptions options;
  bool json = false, csv = false, benchmark = false, random_weights = false;
  double benchmark_seconds = 0;
  vit::HeadFusion fusion = vit::HeadFusion::mean;
  std::vector<std::string> paths;  // the images
  std::string model_path;          // or "random weights"
};

// --resize, --crop-fraction, --interpolation, --mean and --std: the checkpoint's eval transform
// with these put in (checked when the model is loaded).
void read_preprocess(const po::variables_map& vm, ClassifierOptions& o) {
  if (vm.count("resize")) o.resize = vm["resize"].as<std::string>();
  if (vm.count("crop-fraction")) {
    o.crop_fraction = vm["crop-fraction"].as<float>();
    if (o.crop_fraction == 0) {  // the API's "not given": the transform's own message for it
      datasets::Preprocess p;
      p.crop_fraction = 0;
      try {
        p.validate(static_cast<int>(p.mean.size()));
      } catch (const UsageError& e) {
        throw UsageError(std::string("preprocessing: ") + e.what());
      }
    }
  }
  if (vm.count("interpolation")) o.interpolation = vm["interpolation"].as<std::string>();
  if (vm.count("mean")) o.mean = parse_floats("mean", vm["mean"].as<std::string>());
  if (vm.count("std")) o.std = parse_floats("std", vm["std"].as<std::string>());
}

// The options, checked before anything is loaded (usage errors first).
ClassifyRequest read_request(const po::variables_map& vm) {
  ClassifyRequest rq;
  rq.json = vm["json"].as<bool>(), rq.csv = vm["csv"].as<bool>();
  rq.benchmark = vm["benchmark"].as<bool>();
  if (rq.json && rq.csv) throw UsageError("--json and --csv exclude each other");
  ClassifierOptions& options = rq.options;
  precision_from(vm);  // a bad value or bf16 on this CPU, before anything is read
  options.precision = vm["precision"].defaulted() ? "" : vm["precision"].as<std::string>();
  options.packed_weights = !vm["plain-weights"].as<bool>();
  options.batch_size = vm["batch-size"].as<int64_t>();
  options.top_k = vm["top-k"].as<int>();
  options.max_pixels = vm["max-pixels"].as<int64_t>();
  if (options.max_pixels < 1) throw UsageError("--max-pixels must be at least 1");
  rq.benchmark_seconds = vm["benchmark-seconds"].as<double>();
  if (!(rq.benchmark_seconds > 0)) throw UsageError("--benchmark-seconds must be positive");

  rq.fusion = vit::parse_head_fusion(vm["rollout-heads"].as<std::string>());
  rq.paths = input_paths(vm, "image");
  if (vm.count("attention-dir") && rq.paths.empty())
    throw UsageError("--attention-dir draws the attention of images: name some");
  if (rq.paths.empty() && !rq.benchmark)
    throw UsageError(
        "no images given: name image files, '-' to read paths from standard input, "
        "or --dir DIR (see 'vitk classify --help')");

  rq.random_weights = vm["random-weights"].as<bool>();
  if (rq.random_weights && !rq.benchmark) throw UsageError("--random-weights is for --benchmark");
  if (rq.random_weights && vm.count("model"))
    throw UsageError("--random-weights and --model exclude each other");
  rq.model_path = rq.random_weights   ? "random weights"
                  : vm.count("model") ? vm["model"].as<std::string>()
                                      : bundled_file(kBundledModel);
  const Resolution res = resolution_from(vm);
  if (rq.random_weights && res.height > 0)
    throw UsageError(
        "--image-size is for a checkpoint; with --random-weights use --model.image_size");
  options.image_height = res.height, options.image_width = res.width;
  if (res.align_corners) options.align_corners = *res.align_corners ? 1 : 0;
  if (vm.count("pos-interpolation"))
    options.pos_interpolation = vm["pos-interpolation"].as<std::string>();
  read_preprocess(vm, options);
  return rq;
}

// The checkpoint through the API, or a random model of the --model.* options; with --labels,
// their class names.
Classifier load_classifier(const po::variables_map& vm, const ClassifyRequest& rq) {
  Classifier clf =
      rq.random_weights
          ? Classifier(Classifier::Impl::make(rq.model_path, random_model(vm), rq.options))
          : Classifier(rq.model_path, rq.options);
  if (rq.random_weights) clf.impl().options.precision = precision_from(vm);
  if (vm.count("labels"))
    clf.impl().labels =
        read_labels(vm["labels"].as<std::string>(), clf.impl().loaded.config.num_classes);
  return clf;
}

// --benchmark without images: times the model alone on random batches and prints images/s (with
// --profile, also where a batch spends its time).
int benchmark_model(const ClassifyRequest& rq, Classifier& clf, bool profile) {
  const vit::ClassifyOptions& options = clf.impl().options;
  const vit::LoadedVit& loaded = clf.impl().loaded;
  std::optional<ops::profile::StepProfile> batches;
  if (profile) batches.emplace("batch");
  const vit::Throughput t = vit::measure_throughput(
      *loaded.model, options.batch_size, rq.benchmark_seconds, options.precision,
      options.packed_weights, batches ? &*batches : nullptr);
  std::printf("%s: %s, %lld parameters\n", rq.model_path.c_str(), describe(loaded.config).c_str(),
              static_cast<long long>(loaded.params->numel()));
  const std::string weights = options.precision == ops::Precision::int8
                                  ? ops::describe_precision(options.precision)
                              : options.precision == ops::Precision::bf16 ? "packed bf16 weights"
                              : options.packed_weights ? "f32 weights, packed where faster"
                                                       : "plain f32 weights";
  std::printf(
      "model alone, batch %lld, %d threads, %s, %s: %.1f images/s (%lld batches in %.2f s, "
      "%.2f s of CPU: %.1f images per CPU-second)\n",
      static_cast<long long>(t.batch_size), ops::num_threads(), ops::cpu_isa().c_str(),
      weights.c_str(), t.images_per_second(), static_cast<long long>(t.batches), t.seconds,
      t.cpu_seconds,
      t.cpu_seconds > 0 ? static_cast<double>(t.batch_size * t.batches) / t.cpu_seconds : 0.0);
  if (batches)
    batches->print(std::cout, "--profile, the " + std::to_string(t.batches) + " timed batches of " +
                                  std::to_string(t.batch_size) + " (profiled while timed)");
  return kExitOk;
}

// --attention-dir: per classified image, a picture of where its classification draws from.
class AttentionPictures {
 public:
  // dir: where they go ("": no pictures).
  AttentionPictures(std::string dir, vit::VisionTransformer& model, const vit::VitConfig& config,
                    const std::vector<std::string>& labels, vit::HeadFusion fusion)
      : dir_(std::move(dir)), model_(model), config_(config), labels_(labels), fusion_(fusion) {
    if (dir_.empty()) return;
    vit::keep_attention(model_, true);
    // Loads the font now: a notice about it must reach stderr before the decode thread may be
    // capturing it (DecodeOptions::quiet).
    plot::Font::standard();
  }
  const std::string& dir() const { return dir_; }
  int64_t drawn() const { return drawn_; }

  void draw(const vit::ImageResult& r) {
    const vit::ImageAttention a = vit::image_attention(model_, r.row, fusion_);
    char predicted[64];
    std::snprintf(predicted, sizeof predicted, " (p = %.2f)", r.probabilities[0]);
    const std::vector<std::string> title = {
        r.path + ": " + labels_[static_cast<size_t>(r.classes[0])] + predicted,
        "where the classification draws from: attention rollout (Abnar & Zuidema, 2020) and "
        "the last block's heads"};
    const std::string out = (fs::path(dir_) / picture_name(r.path, names_)).string();
    plot::write_png(out, vit::attention_picture(a, r.input, config_, fusion_, title));
    ++drawn_;
  }

 private:
  std::string dir_;
  vit::VisionTransformer& model_;
  const vit::VitConfig& config_;
  const std::vector<std::string>& labels_;
  vit::HeadFusion fusion_;
  std::set<std::string> names_;  // the pictures' file names so far
  int64_t drawn_ = 0;
};

// Results on a terminal show the progress themselves; when they go to a file or a pipe, a bar on
// the terminal's stderr does (never in a log: stderr then holds only the error lines).
std::unique_ptr<Progress> progress_bar(int64_t images) {
  if (!is_terminal(2) || is_terminal(1)) return nullptr;
  ProgressOptions bar;
  bar.tty = true;
  bar.unit = "image";
  return std::make_unique<Progress>(std::cerr, "classify", images, bar);
}

// Classifies the images through the API, writing their results as they come (and their
// pictures); then, on stderr, the --benchmark speed and the pictures written. Exit 1 when an image
// failed.
int classify_images(const po::variables_map& vm, const ClassifyRequest& rq, Classifier& clf) {
  Classifier::Impl& m = clf.impl();
  const std::vector<std::string>& labels = clf.classes();
  const PicturesDir pictures_dir = attention_dir(vm);
  AttentionPictures pictures(pictures_dir.path, *m.loaded.model, m.loaded.config, labels,
                             rq.fusion);
  if (!pictures.dir().empty())
    m.observer = [&](const vit::ImageResult& r) {
      if (r.ok()) pictures.draw(r);
    };
  const int k = static_cast<int>(std::min<int64_t>(m.options.top_k, m.loaded.config.num_classes));
  std::unique_ptr<ResultWriter> writer = rq.json ? make_json_writer(std::cout, labels)
                                         : rq.csv
                                             ? make_csv_writer(std::cout, labels, k)
                                             : make_table_writer(std::cout, labels, k, rq.paths);
  std::unique_ptr<Progress> progress = progress_bar(static_cast<int64_t>(rq.paths.size()));
  int64_t done = 0, classified = 0;
  writer->begin();
  // Writing to stderr takes codec_output_mutex: the decode thread may be pointing fd 2 at a codec
  // capture (DecodeOptions::quiet). An error line waits for it; a progress redraw is skipped
  // rather than make the model wait for a decode.
  std::mutex& stderr_mutex = datasets::codec_output_mutex();
  clf.classify(rq.paths, [&](const Classification& r) {
    writer->write(r);
    ++done;
    classified += r.ok();
    if (!r.ok()) {
      std::lock_guard<std::mutex> lock(stderr_mutex);
      if (progress) progress->finish();
      std::cout.flush();
      std::cerr << "vitk: error: " << r.path << ": " << r.error << std::endl;
    }
    if (progress) {
      std::unique_lock<std::mutex> lock(stderr_mutex, std::try_to_lock);
      if (lock.owns_lock()) progress->update(done, classified, "");
    }
  });
  if (progress) {
    std::lock_guard<std::mutex> lock(stderr_mutex);
    progress->finish();
  }
  writer->end();
  std::cout.flush();
  const vit::ClassifyStats& stats = m.stats;
  if (rq.benchmark) {
    std::lock_guard<std::mutex> lock(datasets::codec_output_mutex());
    std::fprintf(stderr,
                 "vitk: classified %lld images (%lld failed) in %.2f s: %.1f images/s; model "
                 "%.2f s, reading and preprocessing %.2f s on its own thread\n",
                 static_cast<long long>(stats.images), static_cast<long long>(stats.failed),
                 stats.seconds, static_cast<double>(stats.images) / stats.seconds,
                 stats.model_seconds, stats.prepare_seconds);
  }
  if (!pictures.dir().empty()) {
    std::lock_guard<std::mutex> lock(datasets::codec_output_mutex());
    std::fprintf(stderr, "vitk: wrote %lld attention picture%s to %s\n",
                 static_cast<long long>(pictures.drawn()), pictures.drawn() == 1 ? "" : "s",
                 pictures.dir().c_str());
  }
  return stats.failed ? kExitFailure : kExitOk;
}

int run_classify(const po::variables_map& vm) {
  const ClassifyRequest rq = read_request(vm);
  Classifier clf = load_classifier(vm, rq);
  const bool model_alone = rq.benchmark && rq.paths.empty();
  const int64_t batch_size = rq.options.batch_size;
  const int64_t at_once = model_alone
                              ? batch_size
                              : std::min<int64_t>(batch_size, std::max<size_t>(1, rq.paths.size()));
  vit::check_batch_memory(clf.impl().loaded.config, at_once,
                          "--batch-size " + std::to_string(batch_size));
  const bool profile = vm["profile"].as<bool>();
  if (profile && !model_alone)
    throw UsageError("--profile is for --benchmark without images (the model alone)");
  if (model_alone) return benchmark_model(rq, clf, profile);
  return classify_images(vm, rq, clf);
}

}  // namespace

void register_classify_commands(Registry& registry) {
  Subcommand c;
  c.name = "classify";
  c.summary = "top-k labels of image files with a ViT checkpoint (default: the bundled model)";
  c.usage = "[IMAGE... | -] [--dir DIR] [options]";
  c.example =
      "vitk classify datasets/samples/*.png              # the bundled Fashion-MNIST model\n"
      "vitk classify --model runs/fmnist/best.h5 --dir photos --top-k 3 --json > out.json\n"
      "find photos -name '*.jpg' | vitk classify --model vit-b16.h5 - --csv\n"
      "vitk classify --model vit-b16.h5 --benchmark --batch-size 32   # images/s, model alone\n"
      "vitk classify --benchmark --random-weights --config configs/vit-b16.ini\n"
      "vitk classify --benchmark --random-weights --config configs/vit-b16.ini --batch-size 1 "
      "--precision bf16\n"
      "vitk classify datasets/samples/*.png --attention-dir pictures   # one PNG per image";
  c.add_options = [](po::options_description& o) {
    add_resolution_options(o,
                           "run the checkpoint at this input size, N or HxW (the position "
                           "embeddings are resampled to the new patch grid; no training)");
    o.add_options()("image", po::value<std::vector<std::string>>()->value_name("FILE"),
                    "image files to classify (also given as bare words); '-' reads paths from "
                    "standard input, one a line. Transparent pixels are composited on white; "
                    "EXIF orientation is applied")(
        "dir", po::value<std::vector<std::string>>()->composing()->value_name("DIR"),
        "classify every image file under DIR, recursively (.png .jpg .jpeg .bmp .tif .tiff "
        ".webp .pgm .ppm ...)")("model", po::value<std::string>()->value_name("FILE"),
                                "the checkpoint (default: the bundled vit/models/fmnist-vit.h5)")(
        "top-k", value_in(1, static_cast<int>(kMaxClasses))->default_value(5)->value_name("K"),
        "labels per image, most probable first (at most the number of classes)")(
        "json", switch_value(),
        "one JSON document keyed by image path: labels, probabilities and classes, or error")(
        "csv", switch_value(), "CSV: path, label_1, probability_1, ..., error")(
        "attention-dir", po::value<std::string>()->value_name("DIR"),
        "also draw, per image, where the classification draws from (attention rollout over "
        "the input and the last block's heads) as DIR/NAME.png, NAME from the image file")(
        "rollout-heads", po::value<std::string>()->default_value("mean")->value_name("mean|max"),
        "--attention-dir: fuse each layer's heads by their mean or their maximum")(
        "labels", po::value<std::string>()->value_name("FILE"),
        "class names, one a line, instead of the checkpoint's (as many as the model's classes)")(
        "batch-size", value_in<int64_t>(1, kMaxBatchSize)->default_value(32)->value_name("N"),
        "files per batch through the model; the next batch is decoded meanwhile")(
        "resize", po::value<std::string>()->value_name("shorter|squash"),
        "override the checkpoint's resize: shorter side then centre crop, or a plain resize")(
        "crop-fraction", po::value<float>()->value_name("F"),
        "override the crop fraction (timm's crop_pct): the shorter side goes to size / F")(
        "interpolation", po::value<std::string>()->value_name("NAME"),
        "override the interpolation: bicubic, bilinear, nearest or area")(
        "mean", po::value<std::string>()->value_name("M,M,M"),
        "override the normalisation mean, one value of [0, 1] per channel")(
        "std", po::value<std::string>()->value_name("S,S,S"),
        "override the normalisation standard deviation, one per channel")(
        "max-pixels", po::value<int64_t>()->default_value(178'956'970)->value_name("N"),
        "refuse images with more pixels than this, from their header, before decoding")(
        "benchmark", switch_value(),
        "with images: also print images/s to stderr; without: time the model alone on random "
        "batches")("benchmark-seconds", po::value<double>()->default_value(10)->value_name("S"),
                   "how long --benchmark times the model alone")(
        "random-weights", switch_value(),
        "with --benchmark, instead of --model: a randomly initialised model described by the "
        "--model.* options or the [model] section of --config (default ViT-B/16 at 224)")(
        "profile", switch_value(),
        "with --benchmark (no images): also print where a batch spends its time, exclusive "
        "wall time per op and shape")(
        "plain-weights", switch_value(),
        "f32: read every weight in its stored layout instead of packing the ones where oneDNN's "
        "blocked layout is faster (for speed comparisons)");
    add_precision_option(o);
    po::options_description model(
        "Model of --random-weights (the [model] section of a config file)");
    add_vit_options(model);
    o.add(model);
  };
  c.add_positional = [](po::positional_options_description& p) { p.add("image", -1); };
  c.run = run_classify;
  registry.add(std::move(c));
}

}  // namespace vitk::tools
