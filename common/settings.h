#pragma once
// A configuration's settings, declared once. A Schema<C> is the table of the fields of a settings
// struct C: each field's key, the values it accepts, its help and whether checkpoints store it;
// its type and default are those of C's member. Everything that reads or shows settings works
// from that one table:
//   to_map / read      the text form: checkpoint attributes and a config file's [model] section
//                      (read also serves --model.KEY on the command line)
//   check              the range of every field, named as "model.KEY"
//   fields             key, help, default and value name of each field, for the command line's
//                      options, `vitk info` and `vitk inspect`
// A model declares its plain fields in one table macro that expands both to the struct's members
// and to the schema's lines, so that a new field is one line (vit/vit.h, VITK_VIT_SETTINGS); a
// field that needs its own text form (an image size "224x160") is added with Schema::add_custom.
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "common/config_text.h"
#include "common/error.h"

namespace vitk::settings {

// The values a field accepts: numbers in an interval (each element of a list), or text among
// choices. Checked by Schema::check, described in messages and help.
struct Range {
  double lo = -std::numeric_limits<double>::infinity();
  double hi = std::numeric_limits<double>::infinity();
  bool lo_open = false, hi_open = false;
  std::vector<std::string> choices;  // text fields: one of these (empty: any text)

  bool contains(double x) const;
  bool allows(const std::string& text) const;
  // "in [0, 1)", "at least 1", "positive", "one of token, avg"; empty for any value.
  std::string describe() const;
};

Range any();
Range between(double lo, double hi);  // [lo, hi]
Range at_least(double lo);            // [lo, ∞)
Range positive();                     // (0, ∞)
Range fraction();                     // [0, 1): a dropout rate, a share left out
Range share();                        // (0, 1]: a share kept
template <typename... Texts>
Range one_of(Texts... texts) {
  Range r;
  r.choices = {std::string(texts)...};
  return r;
}

// The text form of each field type, as checkpoints and config files hold it. Floats read back
// exactly; lists are comma-separated, an empty integer list is "none".
std::string text(int64_t v);
std::string text(int v);
std::string text(float v);
std::string text(double v);
std::string text(bool v);
std::string text(const std::string& v);
std::string text(const std::vector<int64_t>& v);
std::string text(const std::vector<float>& v);

// The reverse: vitk::Error naming the reader's source and the key for text that is not of the
// type (an int beyond int's range included). Ranges are Schema::check's.
void parse(const SettingReader& r, const std::string& key, const std::string& s, int64_t& out);
void parse(const SettingReader& r, const std::string& key, const std::string& s, int& out);
void parse(const SettingReader& r, const std::string& key, const std::string& s, float& out);
void parse(const SettingReader& r, const std::string& key, const std::string& s, double& out);
void parse(const SettingReader& r, const std::string& key, const std::string& s, bool& out);
void parse(const SettingReader& r, const std::string& key, const std::string& s, std::string& out);
// "0,2", "0 2" -> {0, 2}; "" or "none" -> {}.
void parse(const SettingReader& r, const std::string& key, const std::string& s,
           std::vector<int64_t>& out);
// "0.5,0.5" -> {0.5, 0.5}; at least one number.
void parse(const SettingReader& r, const std::string& key, const std::string& s,
           std::vector<float>& out);

// vitk::UsageError "model.KEY must be RANGE, got VALUE" when a value (each element of a list) is
// outside the range.
void check_range(const std::string& key, const Range& range, double v, const std::string& shown);
void check_range(const std::string& key, const Range& range, int64_t v);
void check_range(const std::string& key, const Range& range, int v);
void check_range(const std::string& key, const Range& range, float v);
void check_range(const std::string& key, const Range& range, double v);
void check_range(const std::string& key, const Range& range, bool v);
void check_range(const std::string& key, const Range& range, const std::string& v);
void check_range(const std::string& key, const Range& range, const std::vector<int64_t>& v);
void check_range(const std::string& key, const Range& range, const std::vector<float>& v);

// A settings error as the command line names it, for the options --model.KEY: "--model.KEY ..."
// (check() and validate() name "model.KEY"; the readers "--model.KEY: ..." when given that
// source), else "model option ..." (a check that names only the key).
UsageError option_error(const std::exception& e);

// What the command line, `vitk info` and `vitk inspect` show of a field.
struct FieldInfo {
  std::string key;
  std::string help;
  std::string default_text;  // the default's text form
  std::string value_name;    // in --help: "N", "X", "V", "LIST", "N|HxW", ...
  bool is_switch = false;    // a boolean: a switch on the command line
  bool stored = true;        // checkpoints store it (false: a setting of `vitk info` only)
  bool show_default = true;  // false: the command line shows no default (it comes from the data)
};

// Options of a field beyond its range and help.
enum Flag : unsigned { kNotStored = 1, kNoShownDefault = 2 };

template <typename C>
struct Field {
  FieldInfo info;
  std::function<std::string(const C&)> write;
  std::function<void(C&, const SettingReader&, const std::string&)> read;
  std::function<void(const C&)> check;  // vitk::UsageError naming "model.KEY"
};

template <typename C>
class Schema {
 public:
  // `type`: the value of the "type" key, which names the model; `noun`: what a model of it is, for
  // messages ("a 'X' model, not a NOUN (TYPE)").
  Schema(std::string type, std::string noun) : type_(std::move(type)), noun_(std::move(noun)) {}

  const std::string& type() const { return type_; }
  const std::string& noun() const { return noun_; }
  const std::vector<Field<C>>& fields() const { return fields_; }

  // A plain field: C's member, its text form that of the member's type.
  template <typename T>
  Schema& add(const char* key, T C::*member, Range range, std::string help, unsigned flags = 0) {
    Field<C> f;
    f.info = info_of(key, std::move(help), text(C{}.*member), value_name_of<T>(), flags);
    f.info.is_switch = std::is_same_v<T, bool>;
    const std::string k = key;
    f.write = [member](const C& c) { return text(c.*member); };
    f.read = [member, k](C& c, const SettingReader& r, const std::string& s) {
      parse(r, k, s, c.*member);
    };
    f.check = [member, k, range](const C& c) { check_range(k, range, c.*member); };
    fields_.push_back(std::move(f));
    return *this;
  }

  // A field with its own text form and check (the default's text: write(C{})).
  Schema& add_custom(const char* key, std::string help, std::string value_name,
                     std::function<std::string(const C&)> write,
                     std::function<void(C&, const SettingReader&, const std::string&)> read,
                     std::function<void(const C&)> check, unsigned flags = 0) {
    Field<C> f;
    f.info = info_of(key, std::move(help), write(C{}), std::move(value_name), flags);
    f.write = std::move(write);
    f.read = std::move(read);
    f.check = check ? std::move(check) : [](const C&) {};
    fields_.push_back(std::move(f));
    return *this;
  }

  // Every field of `sub`, but those named in `except`, as fields of the member `part` of C
  // (a captioner's encoder is a ViT).
  template <typename S>
  Schema& include(const Schema<S>& sub, S C::*part, const std::set<std::string>& except = {}) {
    for (const Field<S>& s : sub.fields()) {
      if (except.count(s.info.key)) continue;
      Field<C> f;
      f.info = s.info;
      f.info.default_text = s.write(C{}.*part);
      f.write = [part, w = s.write](const C& c) { return w(c.*part); };
      f.read = [part, rd = s.read](C& c, const SettingReader& r, const std::string& t) {
        rd(c.*part, r, t);
      };
      f.check = [part, ck = s.check](const C& c) { ck(c.*part); };
      fields_.push_back(std::move(f));
    }
    return *this;
  }

  const Field<C>* find(const std::string& key) const {
    for (const Field<C>& f : fields_)
      if (f.info.key == key) return &f;
    return nullptr;
  }

  // The stored fields as text, with "type".
  std::map<std::string, std::string> to_map(const C& c) const {
    std::map<std::string, std::string> m;
    m["type"] = type_;
    for (const Field<C>& f : fields_)
      if (f.info.stored) m[f.info.key] = f.write(c);
    return m;
  }

  // `base` with every key of `map` read in. A "type" other than this schema's, an unknown key or
  // text that is not of the field's type is a vitk::Error naming `source` and the key; a missing
  // key keeps base's value (checkpoints written before a key existed load as they did). Ranges
  // are not checked here: check() does.
  C read(const std::map<std::string, std::string>& map, const std::string& source,
         C base = C{}) const {
    if (const auto t = map.find("type"); t != map.end() && t->second != type_)
      throw Error(source + ": a '" + t->second + "' model, not a " + noun_ + " (" + type_ + ")");
    const SettingReader r{source};
    for (const auto& [key, value] : map) {
      if (key == "type") continue;
      const Field<C>* f = find(key);
      if (!f) throw Error(source + ": unknown model setting '" + key + "'");
      f->read(base, r, value);
    }
    return base;
  }

  // Every field's range, in the table's order: vitk::UsageError "model.KEY must be ...".
  void check(const C& c) const {
    for (const Field<C>& f : fields_) f.check(c);
  }

  // What the command line and `vitk info` show: the fields with the defaults of `defaults`.
  std::vector<FieldInfo> infos(const C& defaults = C{}) const {
    std::vector<FieldInfo> out;
    for (const Field<C>& f : fields_) {
      FieldInfo i = f.info;
      i.default_text = f.write(defaults);
      out.push_back(std::move(i));
    }
    return out;
  }

 private:
  static FieldInfo info_of(const char* key, std::string help, std::string default_text,
                           std::string value_name, unsigned flags) {
    FieldInfo i;
    i.key = key;
    i.help = std::move(help);
    i.default_text = std::move(default_text);
    i.value_name = std::move(value_name);
    i.stored = !(flags & kNotStored);
    i.show_default = !(flags & kNoShownDefault);
    return i;
  }
  template <typename T>
  static std::string value_name_of() {
    if constexpr (std::is_same_v<T, int64_t> || std::is_same_v<T, int>) return "N";
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) return "X";
    if constexpr (std::is_same_v<T, std::vector<int64_t>> || std::is_same_v<T, std::vector<float>>)
      return "LIST";
    return "V";
  }

  std::string type_, noun_;
  std::vector<Field<C>> fields_;
};

}  // namespace vitk::settings

// Expands one line of a settings table, X(type, name, default, range, help), to a member of the
// settings struct: `type name = default;`.
#define VITK_SETTING_MEMBER(type, name, default_value, range, help) type name = default_value;
// ... and to a line of its schema: .add("name", &Self::name, range, help), with `Self` the struct.
#define VITK_SETTING_FIELD(type, name, default_value, range, help) \
  .add(#name, &Self::name, settings::range, help)
