// `vitk info`: parameter counts and multiply-adds of a model configuration. Wiring only: each model
// sizes itself through the kind it registers (tools/model_registry.h).
#include <cstdio>
#include <iostream>
#include <map>
#include <set>

#include "common/error.h"
#include "tools/cli.h"
#include "tools/model_registry.h"
#include "tools/settings_options.h"

namespace vitk::tools {
namespace {

std::string grouped(double x) {
  // 86567656 -> "86,567,656"
  std::string digits = std::to_string(static_cast<long long>(x + 0.5));
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

// The [model] keys of every registered kind, each once: the help of the first kind that has it
// and the kinds that take it.
std::vector<settings::FieldInfo> all_fields() {
  std::vector<settings::FieldInfo> fields;
  std::map<std::string, std::string> kinds_of;
  for (const nn::ModelKind& kind : model_registry().all())
    for (const settings::FieldInfo& f : kind.fields) {
      std::string& kinds = kinds_of[f.key];
      if (kinds.empty()) fields.push_back(f);
      kinds += (kinds.empty() ? "" : ", ") + kind.type;
    }
  for (settings::FieldInfo& f : fields) f.help += " (" + kinds_of[f.key] + ")";
  return fields;
}

std::string type_help() {
  std::string help = "the model:";
  for (const nn::ModelKind& kind : model_registry().all())
    help += " " + kind.type + " (" + kind.summary + "),";
  help.back() = ';';
  return help + " the other settings default to its own (default: transformer)";
}

void print_size(const nn::ModelSize& size) {
  std::cout << "model: " << size.summary << "\n";
  std::cout << "sequence: " << size.sequence << "\n\n";
  char line[256];
  std::snprintf(line, sizeof line, "%-24s %5s %14s %16s %14s  %s\n", "block", "count",
                "params/block", "MACs/token", "attn MACs/tok", "linear MACs counted as");
  std::cout << line;
  for (const auto& b : size.blocks) {
    std::snprintf(line, sizeof line, "%-24s %5d %14s %16s %14s  %s\n", b.name.c_str(), b.count,
                  grouped(static_cast<double>(b.params)).c_str(),
                  grouped(static_cast<double>(b.macs)).c_str(),
                  b.attention_macs ? grouped(static_cast<double>(b.attention_macs)).c_str() : "",
                  b.note.c_str());
    std::cout << line;
  }
  std::cout << "\ntotal parameters: " << grouped(static_cast<double>(size.total_params)) << " ("
            << size.total_params / 1e6 << " M)\n";
  std::snprintf(line, sizeof line,
                "multiply-adds per %s: %.3f G, of which attention (q·kᵀ and p·v, 2·T·d per token "
                "and layer) %.3f G\n",
                size.unit.c_str(), size.macs_per_sequence * 1e-9,
                size.attention_macs_per_sequence * 1e-9);
  std::cout << line;
}

int run_info(const po::variables_map& vm) {
  const std::string type =
      vm.count("model.type") ? vm["model.type"].as<std::string>() : std::string("transformer");
  const nn::ModelKind* kind = model_registry().find(type);
  if (!kind) throw UsageError("--model.type: no model '" + type + "' (" + type_help() + ")");
  std::map<std::string, std::string> keys = given_settings(vm);
  // A captioner's or a translation model's vocabulary is its tokenizer's: [data] vocab-size of a
  // training preset, when the [model] section does not say.
  if (!keys.count("vocab_size") && option_given(vm, "vocab-size"))
    keys["vocab_size"] = std::to_string(vm["vocab-size"].as<int64_t>());
  print_size(kind->size(keys));
  return kExitOk;
}

}  // namespace

void register_info_commands(Registry& registry) {
  Subcommand c;
  c.name = "info";
  c.summary = "parameter counts and multiply-adds of a model configuration";
  c.example =
      "vitk info --config configs/vit-b16.ini\n"
      "vitk info --config configs/transformer-base.ini --model.sequence_length 50\n"
      "vitk info --config configs/caption-scenes.ini";
  c.add_options = [](po::options_description& o) {
    add_settings_options(o, all_fields(), type_help(), /*with_defaults=*/false);
    o.add_options()("vocab-size", po::value<int64_t>()->value_name("N"),
                    "the vocabulary, when model.vocab_size is not given (a training preset's "
                    "tokenizer size)");
  };
  c.run = run_info;
  registry.add(std::move(c));
}

}  // namespace vitk::tools
