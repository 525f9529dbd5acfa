// `vitk import --format timm|hf|torchvision FILE --out CKPT.h5`: a pretrained ViT from a
// .safetensors file into a vitk checkpoint (vit/import.h does the work).
#include <cmath>
#include <iostream>
#include <sstream>

#include "common/error.h"
#include "tools/cli.h"
#include "tools/vit_options.h"
#include "vit/import.h"

namespace vitk::tools {
namespace {

std::vector<float> parse_floats(const std::string& option, const std::string& text) {
  std::vector<float> out;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');) {
    char* end = nullptr;
    float v = std::strtof(item.c_str(), &end);
    if (item.empty() || *end || !std::isfinite(v))
      throw UsageError("--" + option + ": expected comma-separated numbers, got '" + text + "'");
    out.push_back(v);
  }
  if (out.empty()) throw UsageError("--" + option + ": expected comma-separated numbers");
  return out;
}

std::string join(const std::vector<float>& v) {
  std::ostringstream os;
  for (size_t i = 0; i < v.size(); ++i) os << (i ? "," : "") << v[i];
  return os.str();
}

int run_import(const po::variables_map& vm) {
  const std::string input = vm["input"].as<std::string>();
  const std::string out_path = vm["out"].as<std::string>();
  vit::ImportOptions o = vit::options_for(vit::parse_import_format(vm["format"].as<std::string>()));
  // Flags given on top of the Hugging Face config override it.
  if (vm.count("hf-config")) {
    if (o.format != vit::ImportFormat::hf) throw UsageError("--hf-config goes with --format hf");
    vit::apply_hf_config(vm["hf-config"].as<std::string>(), o);
  }
  if (vm.count("heads")) {
    o.heads = vm["heads"].as<int64_t>();
    if (o.heads < 1) throw UsageError("--heads must be at least 1");
  }
  if (vm.count("image-size"))
    std::tie(o.image_height, o.image_width) = image_size_option(vm, "image-size");
  if (vm.count("num-classes")) o.num_classes = vm["num-classes"].as<int64_t>();
  if (vm.count("norm-eps")) {
    o.norm_eps = vm["norm-eps"].as<float>();
    if (!(o.norm_eps > 0)) throw UsageError("--norm-eps must be positive");
  }
  if (vm.count("align-corners")) o.align_corners = vm["align-corners"].as<bool>();
  if (vm.count("mean")) o.preprocess.mean = parse_floats("mean", vm["mean"].as<std::string>());
  if (vm.count("std")) o.preprocess.std = parse_floats("std", vm["std"].as<std::string>());
  if (vm.count("resize")) o.preprocess.resize = vm["resize"].as<std::string>();
  if (vm.count("crop-fraction")) o.preprocess.crop_fraction = vm["crop-fraction"].as<float>();
  if (vm.count("interpolation")) o.preprocess.interpolation = vm["interpolation"].as<std::string>();
  if (vm.count("labels")) o.class_names = vit::read_labels(vm["labels"].as<std::string>());

  const vit::ImportedVit m = vit::import_vit(input, o);
  vit::save_imported(m, out_path);

  const vit::VitConfig& c = m.config;
  const auto& p = c.preprocess;
  std::cout << "imported " << vit::import_format_name(o.format) << " ViT " << input << " -> "
            << out_path << "\n"
            << "  " << c.layers << " blocks, d_model " << c.d_model << ", heads " << c.heads
            << ", d_ff " << c.d_ff << ", patch " << c.patch_size << ", image " << c.image_height
            << "x" << c.image_width << ", " << c.channels << " channels, " << c.num_classes
            << " classes, pool " << c.pool << ", " << m.params->numel() << " parameters\n"
            << "  norm eps " << c.norm_eps << "; eval: " << p.resize << " resize, crop "
            << p.crop_fraction << ", " << p.interpolation << ", mean " << join(p.mean) << ", std "
            << join(p.std) << "\n";
  for (const std::string& note : m.notes) std::cout << "  note: " << note << "\n";
  return kExitOk;
}

}  // namespace

void register_import_commands(Registry& registry) {
  Subcommand c;
  c.name = "import";
  c.summary = "convert a timm, Hugging Face or torchvision ViT (.safetensors) to a vitk checkpoint";
  c.example =
      "vitk import --format timm model.safetensors --out vit_b16.h5 --labels imagenet.txt\n"
      "vitk import --format hf vit-base/model.safetensors --hf-config vit-base/config.json "
      "--out vit_hf.h5\n"
      "vitk import --format torchvision vit_b_16.safetensors --out vit_tv.h5 --image-size 384";
  c.usage = "--format timm|hf|torchvision FILE --out CHECKPOINT [options]";
  c.add_options = [](po::options_description& o) {
    o.add_options()("input", po::value<std::string>()->required()->value_name("FILE"),
                    "the .safetensors file (F32, F16 or BF16 tensors)")(
        "format", po::value<std::string>()->required()->value_name("NAME"),
        "naming of the file: timm, hf (ViTModel / ViTForImageClassification) or torchvision "
        "(vit_b_16, ...)")("out", po::value<std::string>()->required()->value_name("FILE"),
                           "the vitk checkpoint to write (HDF5)")(
        "labels", po::value<std::string>()->value_name("FILE"),
        "class names, one per line (default: class_0, class_1, ...)")(
        "hf-config", po::value<std::string>()->value_name("FILE"),
        "with --format hf: the model's config.json, for the heads, layer-norm epsilon, image "
        "size and class names (id2label)")(
        "heads", po::value<int64_t>()->value_name("N"),
        "attention heads (default: the standard for the width, else d_model / 64)")(
        "image-size", po::value<std::string>()->value_name("SIZE"),
        "input size, N or HxW (default: the source's; another size resamples the position "
        "embeddings)")("align-corners", switch_value(std::nullopt),
                       "resample positions with align_corners (--align-corners=false: without; "
                       "default: true for torchvision, "
                       "false for timm and hf)")(
        "num-classes", value_in<int64_t>(1, kMaxClasses)->value_name("N"),
        "for a file without a classifier (a backbone): add a zero head of N classes")(
        "norm-eps", po::value<float>()->value_name("X"),
        "layer-norm epsilon (default: 1e-6 timm and torchvision, 1e-12 hf)")(
        "mean", po::value<std::string>()->value_name("R,G,B"),
        "normalisation mean (default: 0.5 timm and hf, ImageNet's for torchvision)")(
        "std", po::value<std::string>()->value_name("R,G,B"),
        "normalisation std (default: 0.5 timm and hf, ImageNet's for torchvision)")(
        "resize", po::value<std::string>()->value_name("MODE"),
        "eval resize: shorter (then centre crop) or squash (default: squash for hf)")(
        "crop-fraction", po::value<float>()->value_name("X"),
        "eval crop fraction (default: 0.9 timm, 0.875 torchvision)")(
        "interpolation", po::value<std::string>()->value_name("NAME"),
        "eval resize interpolation: bicubic (timm), bilinear (hf, torchvision), nearest, area");
  };
  c.add_positional = [](po::positional_options_description& p) { p.add("input", 1); };
  c.run = run_import;
  registry.add(std::move(c));
}

}  // namespace vitk::tools
