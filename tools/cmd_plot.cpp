// `vitk plot positions|mask|metrics`: pictures of position encodings, attention masks and
// training curves. Wiring only: the values come from common/nn, vit/maps and common/metrics_csv,
// the drawing from common/plot and vit/pictures.
#include <cstdio>
#include <filesystem>
#include <iostream>

#include "common/error.h"
#include "common/io/checkpoint.h"
#include "common/metrics_csv.h"
#include "common/nn/mask.h"
#include "common/nn/nn.h"
#include "common/plot/metrics_chart.h"
#include "common/plot/plot.h"
#include "tools/cli.h"
#include "vit/checkpoint.h"
#include "vit/maps.h"
#include "vit/pictures.h"

namespace vitk::tools {
namespace {

namespace fs = std::filesystem;

void save(const std::string& path, const cv::Mat& picture) {
  plot::write_png(path, picture);
  std::cout << "wrote " << path << " (" << picture.cols << "x" << picture.rows << ")\n";
}

std::string out_path(const po::variables_map& vm, const std::string& fallback) {
  if (!vm.count("out")) return fallback;
  const std::string out = vm["out"].as<std::string>();
  if (out.empty()) throw UsageError("--out: empty path");
  return out;
}

int64_t positive(const po::variables_map& vm, const char* name, int64_t fallback, int64_t max) {
  const int64_t v = vm.count(name) ? vm[name].as<int64_t>() : fallback;
  if (v < 1 || v > max)
    throw UsageError(std::string("--") + name + " must be from 1 to " + std::to_string(max) +
                     ", got " + std::to_string(v));
  return v;
}

// The paper's sinusoids, positions down and dimensions across.
cv::Mat sinusoid_picture(int64_t length, int64_t d_model, const std::string& source) {
  plot::Heatmap h;
  h.values = nn::sinusoidal_positions(length, d_model);  // [length, d_model]
  h.title = "Sinusoidal position encodings, " + std::to_string(length) + " positions x d_model " +
            std::to_string(d_model) + source;
  h.subtitle = {
      "pe[pos, 2i] = sin(pos / 10000^(2i/d)), pe[pos, 2i+1] = cos(pos / 10000^(2i/d)): "
      "fast waves on the left, slow ones on the right"};
  h.x_label = "dimension";
  h.y_label = "position";
  h.bar.vmin = -1, h.bar.vmax = 1;
  h.bar.label = "value";
  return plot::render_heatmap(h);
}

int run_positions(const po::variables_map& vm) {
  const std::string out = out_path(vm, "positions.png");
  if (!vm.count("model")) {
    save(out, sinusoid_picture(positive(vm, "length", 64, 4096), positive(vm, "d-model", 128, 4096),
                               ""));
    return kExitOk;
  }
  if (vm.count("d-model"))
    throw UsageError("--d-model describes sinusoids; with --model the checkpoint's are drawn");
  const std::string path = vm["model"].as<std::string>();
  const io::CheckpointMeta meta = io::read_checkpoint_meta(path);
  const auto type = meta.config.find("type");
  if (type != meta.config.end() && type->second == "transformer") {
    // A translation model's positions are the fixed sinusoids of its width.
    const auto d = meta.config.find("d_model");
    if (d == meta.config.end()) throw Error(path + ": no d_model in the model configuration");
    const int64_t d_model = std::stoll(d->second);
    save(out, sinusoid_picture(positive(vm, "length", 64, 4096), d_model,
                               " (" + fs::path(path).filename().string() + ")"));
    return kExitOk;
  }
  if (vm.count("length"))
    throw UsageError("--length describes sinusoids; a ViT checkpoint has one position per patch");
  vit::LoadedVit m = vit::load_vit(path);
  const Parameter* pos = m.params->find("pos_embed");
  if (!pos) throw Error(path + ": no pos_embed tensor");
  const vit::VitConfig& c = m.config;
  const Tensor similarity = vit::position_similarity(pos->value, c);
  const std::vector<std::string> title = {
      "Position embedding similarity: " + path,
      "each small map: one patch's learned position embedding against every patch's (cosine), "
      "in the " +
          std::to_string(c.grid_height()) + "x" + std::to_string(c.grid_width()) + " patch grid"};
  save(out, vit::position_similarity_picture(similarity, c, title));
  return kExitOk;
}

int run_mask(const po::variables_map& vm) {
  const bool causal = vm["causal"].as<bool>();
  const int64_t length = positive(vm, "length", 8, 64);
  const int64_t keys = positive(vm, "key-length", length, length);
  const bool padded = vm.count("key-length") > 0;
  if (!causal && !padded)
    throw UsageError("nothing to mask: give --causal, --key-length K, or both");
  nn::AttentionMask mask;
  mask.causal = causal;
  if (padded) {
    mask.key_lengths = Tensor({1}, DType::i32);
    mask.key_lengths.i32()[0] = static_cast<int32_t>(keys);
  }
  plot::Heatmap h;
  h.values = nn::mask_matrix(mask, 0, length, length);  // [length, length]: 1 visible, 0 hidden
  const float* v = h.values.f32();
  for (int64_t k = 0; k < h.values.numel(); ++k) h.cell_text.push_back(v[k] > 0 ? "1" : "0");
  h.annotate = true;
  std::string what = causal && padded ? "Causal and padding attention mask"
                     : causal         ? "Causal attention mask"
                                      : "Padding attention mask";
  h.title = what + ", " + std::to_string(length) + " positions" +
            (padded ? ", keys 0 to " + std::to_string(keys - 1) + " real" : "");
  h.subtitle = {
      "row i: the keys query i may attend to; 1 visible, 0 hidden (-inf added to its "
      "score before the softmax)"};
  if (causal) h.subtitle.push_back("causal: query i sees keys j <= i, never the future");
  if (padded)
    h.subtitle.push_back("padding: keys from " + std::to_string(keys) +
                         " on are padding and hidden from every query");
  h.x_label = "key position j";
  h.y_label = "query position i";
  h.bar.vmin = 0, h.bar.vmax = 1;
  h.bar.ticks = {{0.f, "0 hidden"}, {1.f, "1 visible"}};
  h.cell = 40;
  save(out_path(vm, "mask.png"), plot::render_heatmap(h));
  return kExitOk;
}

int run_metrics(const po::variables_map& vm) {
  if (!vm.count("file"))
    throw UsageError("vitk plot metrics needs the metrics.csv of a run: vitk plot metrics RUN.csv");
  const std::string csv = vm["file"].as<std::string>();
  std::error_code ec;
  if (fs::is_directory(csv, ec)) throw Error(csv + ": is a directory (give RUN/metrics.csv)");
  const MetricsTable table = read_metrics_csv(csv);
  const std::string out = out_path(vm, fs::path(csv).replace_extension(".png").string());
  save(out, plot::render_chart(plot::metrics_chart(table, csv)));
  return kExitOk;
}

int run_plot(const po::variables_map& vm) {
  const std::string what = vm["what"].as<std::string>();
  if (what != "metrics" && vm.count("file"))
    throw UsageError("unexpected argument '" + vm["file"].as<std::string>() + "' for vitk plot " +
                     what);
  auto only_for = [&](std::initializer_list<const char*> names, const char* sub) {
    for (const char* n : names)
      if (option_given(vm, n) && what != sub)
        throw UsageError(std::string("--") + n + " is for vitk plot " + sub);
  };
  only_for({"d-model", "model"}, "positions");
  only_for({"causal", "key-length"}, "mask");
  if (vm["causal"].as<bool>() && what != "mask") throw UsageError("--causal is for vitk plot mask");
  if (what == "positions") return run_positions(vm);
  if (what == "mask") return run_mask(vm);
  if (what == "metrics") {
    if (vm.count("length")) throw UsageError("--length is for vitk plot positions or mask");
    return run_metrics(vm);
  }
  throw UsageError("unknown picture '" + what + "' (expected positions, mask or metrics)");
}

}  // namespace

void register_plot_commands(Registry& registry) {
  Subcommand c;
  c.name = "plot";
  c.summary = "pictures (PNG): position encodings, attention masks, training curves";
  c.usage = "positions|mask|metrics [RUN.csv] [options]";
  c.example =
      "vitk plot positions --d-model 128 --length 64              # positions.png\n"
      "vitk plot positions --model vit/models/fmnist-vit.h5 --out pos.png\n"
      "vitk plot mask --causal --length 8                         # mask.png\n"
      "vitk plot mask --causal --length 8 --key-length 6 --out both.png\n"
      "vitk plot metrics runs/fmnist/metrics.csv                  # runs/fmnist/metrics.png";
  c.add_options = [](po::options_description& o) {
    o.add_options()  //
        ("what", po::value<std::string>()->required()->value_name("NAME"),
         "positions (sinusoids, or a ViT checkpoint's learned positions), mask (an attention "
         "mask) or metrics (a training run's curves)")  //
        ("file", po::value<std::string>()->value_name("CSV"),
         "metrics: the run's metrics.csv (vitk train or vitk mt-train)")  //
        ("out", po::value<std::string>()->value_name("FILE"),
         "the PNG to write (default: positions.png, mask.png, or the CSV's name with .png); "
         "written whole or not at all")                                                        //
        ("d-model", po::value<int64_t>()->value_name("D"), "positions: sinusoid width (128)")  //
        ("length", po::value<int64_t>()->value_name("T"),
         "positions: sinusoid positions (64); mask: positions (8, at most 64)")  //
        ("model", po::value<std::string>()->value_name("CKPT"),
         "positions: a ViT checkpoint (similarity of its learned position embeddings) or a "
         "translation checkpoint (its sinusoids)")                    //
        ("causal", switch_value(), "mask: query i sees keys j <= i")  //
        ("key-length", po::value<int64_t>()->value_name("K"),
         "mask: keys from K on are padding (hidden from every query)");
  };
  c.add_positional = [](po::positional_options_description& p) { p.add("what", 1).add("file", 1); };
  c.run = run_plot;
  registry.add(std::move(c));
}

}  // namespace vitk::tools
