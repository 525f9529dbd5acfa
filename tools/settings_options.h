#pragma once
// A model's settings (common/settings.h) on the command line: --model.KEY for every field of its
// schema ("[model]" KEY = VALUE in a config file), and back into the settings struct. The options
// take text and are read as a checkpoint's attributes are, so that a config file, the command
// line and a checkpoint spell values the same way; a boolean is a switch (--model.diag_mask,
// --model.diag_mask=false).
#include <map>
#include <set>
#include <string>
#include <vector>

#include "common/settings.h"
#include "tools/cli.h"

namespace vitk::tools {

// Declares --model.type (help `type_help`) and --model.KEY for each field, in the table's order.
// with_defaults: each shows the field's default from `fields` (else an option has a value only when
// given: the settings come from a checkpoint); keys in `no_default` never show one (it comes from
// the data).
void add_settings_options(po::options_description& options,
                          const std::vector<settings::FieldInfo>& fields,
                          const std::string& type_help, bool with_defaults = true,
                          const std::set<std::string>& no_default = {});

// The model options that were given (on the command line or in the config file, not defaults),
// as text by key without the "model." prefix; "type" is left out.
std::map<std::string, std::string> given_settings(const po::variables_map& vm);

// `base` with every given model option of `schema` read in, and validated unless told not to. A
// bad value, a --model.type other than the schema's and a failed validation are vitk::UsageError
// naming the option ("--model.KEY ...").
template <typename C>
C settings_from(const po::variables_map& vm, const settings::Schema<C>& schema, C base,
                bool validate = true);

// The keys of given_settings.
std::vector<std::string> given_setting_keys(const po::variables_map& vm);

// ---- implementation ----

// Throws the UsageError for a --model.type other than `type`.
void check_model_type(const po::variables_map& vm, const std::string& type);

template <typename C>
C settings_from(const po::variables_map& vm, const settings::Schema<C>& schema, C base,
                bool validate) {
  check_model_type(vm, schema.type());
  try {
    for (const auto& [key, value] : given_settings(vm))
      if (const settings::Field<C>* f = schema.find(key))
        f->read(base, SettingReader{"--model." + key}, value);
    if (validate) base.validate();
  } catch (const std::runtime_error& e) {  // vitk::Error from a reader, UsageError from a check
    throw settings::option_error(e);
  }
  return base;
}

}  // namespace vitk::tools
