#include "tools/settings_options.h"

namespace vitk::tools {
namespace {

constexpr const char* kPrefix = "model.";

}  // namespace

void add_settings_options(po::options_description& options,
                          const std::vector<settings::FieldInfo>& fields,
                          const std::string& type_help, bool with_defaults,
                          const std::set<std::string>& no_default) {
  options.add_options()("model.type", po::value<std::string>()->value_name("TYPE"),
                        type_help.c_str());
  for (const settings::FieldInfo& f : fields) {
    const std::string name = kPrefix + f.key;
    const bool shown = with_defaults && !no_default.count(f.key);
    const po::value_semantic* value = nullptr;
    if (f.is_switch) {
      value = switch_value(shown ? std::optional<bool>(f.default_text == "true") : std::nullopt);
    } else {
      auto* text = po::value<std::string>()->value_name(f.value_name);
      value = shown ? text->default_value(f.default_text) : text;
    }
    options.add_options()(name.c_str(), value, f.help.c_str());
  }
}

std::map<std::string, std::string> given_settings(const po::variables_map& vm) {
  std::map<std::string, std::string> given;
  for (const auto& [name, value] : vm) {
    if (name.rfind(kPrefix, 0) != 0 || value.defaulted() || value.empty()) continue;
    const std::string key = name.substr(std::char_traits<char>::length(kPrefix));
    if (key == "type") continue;
    given[key] = value.value().type() == typeid(bool) ? settings::text(value.as<bool>())
                                                      : value.as<std::string>();
  }
  return given;
}

std::vector<std::string> given_setting_keys(const po::variables_map& vm) {
  std::vector<std::string> keys;
  for (const auto& entry : given_settings(vm)) keys.push_back(entry.first);
  return keys;
}

void check_model_type(const po::variables_map& vm, const std::string& type) {
  if (!vm.count("model.type") || vm["model.type"].defaulted()) return;
  const std::string given = vm["model.type"].as<std::string>();
  if (given != type)
    throw UsageError("--model.type: only '" + type + "' is trained by this subcommand, got '" +
                     given + "'");
}

}  // namespace vitk::tools
