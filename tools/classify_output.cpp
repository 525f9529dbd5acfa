// Table, JSON and CSV output of `vitk classify`.
#include "tools/classify_output.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <utility>

#include <nlohmann/json.hpp>

namespace vitk::tools {
namespace {

// A probability in the CSV: 7 significant digits; "null" when not finite (a model gone wrong), as
// in the JSON output.
std::string number(float p) {
  if (!std::isfinite(p)) return "null";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.7g", static_cast<double>(p));
  return buf;
}

std::string pad(const std::string& s, size_t width) {
  const size_t w = display_width(s);
  return w >= width ? s : s + std::string(width - w, ' ');
}

class TableWriter : public ResultWriter {
 public:
  TableWriter(std::ostream& out, const std::vector<std::string>& labels, int k,
              const std::vector<std::string>& paths)
      : out_(out), labels_(labels), k_(k) {
    path_width_ = display_width("image");
    for (const std::string& p : paths) path_width_ = std::max(path_width_, display_width(p));
    path_width_ = std::min<size_t>(path_width_, 60);
    label_width_ = display_width("label " + std::to_string(k));
    for (const std::string& l : labels) label_width_ = std::max(label_width_, display_width(l));
    label_width_ = std::min<size_t>(label_width_, 40);
  }
  void begin() override {
    std::string line = pad("image", path_width_);
    for (int i = 1; i <= k_; ++i)
      line += "  " + pad("label " + std::to_string(i), label_width_) + "    prob";
    out_ << trimmed(line) << "\n";
  }
  void write(const Classification& r) override {
    if (!r.ok()) return;
    std::string line = pad(r.path, path_width_);
    for (size_t i = 0; i < r.classes.size(); ++i) {
      char prob[16];
      std::snprintf(prob, sizeof prob, "%8.4f", static_cast<double>(r.probabilities[i]));
      line += "  " + pad(labels_[static_cast<size_t>(r.classes[i])], label_width_) + prob;
    }
    out_ << trimmed(line) << "\n" << std::flush;
  }
  void end() override {}

 private:
  static std::string trimmed(std::string s) {
    while (!s.empty() && s.back() == ' ') s.pop_back();
    return s;
  }
  std::ostream& out_;
  const std::vector<std::string>& labels_;
  int k_;
  size_t path_width_ = 0, label_width_ = 0;
};

// The document is framed here and each entry serialised by nlohmann/json as soon as its image is
// classified (a whole-document dump would hold everything back until the last image). Entries keep
// the documented key order (labels, probabilities, classes) and hold the probabilities as
// single-precision numbers, which the library prints in the fewest digits that read back as the
// same float (0.1, not 0.10000000149011612); a non-finite one is null.
using EntryJson = nlohmann::basic_json<nlohmann::ordered_map, std::vector, std::string, bool,
                                       std::int64_t, std::uint64_t, float>;

class JsonWriter : public ResultWriter {
 public:
  JsonWriter(std::ostream& out, const std::vector<std::string>& labels)
      : out_(out), labels_(labels) {}
  void begin() override { out_ << "{"; }
  void write(const Classification& r) override {
    EntryJson entry = EntryJson::object();
    if (!r.ok()) {
      entry["error"] = r.error;
    } else {
      // Filled before they go in: an ordered object is a vector, whose next insertion would
      // invalidate a reference to an earlier member.
      EntryJson labels = EntryJson::array(), probabilities = EntryJson::array(),
                classes = EntryJson::array();
      for (size_t i = 0; i < r.classes.size(); ++i) {
        labels.push_back(labels_[static_cast<size_t>(r.classes[i])]);
        probabilities.push_back(r.probabilities[i]);
        classes.push_back(r.classes[i]);
      }
      entry["labels"] = std::move(labels);
      entry["probabilities"] = std::move(probabilities);
      entry["classes"] = std::move(classes);
    }
    out_ << (first_ ? "\n  " : ",\n  ") << json_string(r.path) << ": " << dump(entry) << std::flush;
    first_ = false;
  }
  void end() override { out_ << (first_ ? "}\n" : "\n}\n"); }

 private:
  // File names and class names may hold bytes that are not UTF-8: they become U+FFFD, so that
  // the document stays valid.
  static std::string dump(const EntryJson& value) {
    return value.dump(-1, ' ', false, EntryJson::error_handler_t::replace);
  }
  std::ostream& out_;
  const std::vector<std::string>& labels_;
  bool first_ = true;
};

class CsvWriter : public ResultWriter {
 public:
  CsvWriter(std::ostream& out, const std::vector<std::string>& labels, int k)
      : out_(out), labels_(labels), k_(k) {}
  void begin() override {
    out_ << "path";
    for (int i = 1; i <= k_; ++i) out_ << ",label_" << i << ",probability_" << i;
    out_ << ",error\n";
  }
  void write(const Classification& r) override {
    out_ << csv_field(r.path);
    for (int i = 0; i < k_; ++i) {
      if (r.ok() && i < static_cast<int>(r.classes.size()))
        out_ << "," << csv_field(labels_[static_cast<size_t>(r.classes[i])]) << ","
             << number(r.probabilities[i]);
      else
        out_ << ",,";
    }
    out_ << "," << csv_field(r.error) << "\n" << std::flush;
  }
  void end() override {}

 private:
  std::ostream& out_;
  const std::vector<std::string>& labels_;
  int k_;
};

}  // namespace

std::string json_string(const std::string& s) {
  return nlohmann::json(s).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\r\n") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + "\"";
}

size_t display_width(const std::string& s) {
  size_t n = 0;
  for (char c : s) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return n;
}

std::unique_ptr<ResultWriter> make_table_writer(std::ostream& out,
                                                const std::vector<std::string>& labels, int k,
                                                const std::vector<std::string>& paths) {
  return std::make_unique<TableWriter>(out, labels, k, paths);
}

std::unique_ptr<ResultWriter> make_json_writer(std::ostream& out,
                                               const std::vector<std::string>& labels) {
  return std::make_unique<JsonWriter>(out, labels);
}

std::unique_ptr<ResultWriter> make_csv_writer(std::ostream& out,
                                              const std::vector<std::string>& labels, int k) {
  return std::make_unique<CsvWriter>(out, labels, k);
}

}  // namespace vitk::tools
