// Table, JSON and CSV output of `vitk classify`.
#include "tools/classify_output.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace vitk::tools {
namespace {

std::string number(float p) {
  if (!std::isfinite(p)) return "null";  // JSON has no NaN; a model gone wrong must not break it
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
  void write(const vit::ImageResult& r) override {
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

class JsonWriter : public ResultWriter {
 public:
  JsonWriter(std::ostream& out, const std::vector<std::string>& labels)
      : out_(out), labels_(labels) {}
  void begin() override { out_ << "{"; }
  void write(const vit::ImageResult& r) override {
    out_ << (first_ ? "\n  " : ",\n  ") << json_string(r.path) << ": {";
    first_ = false;
    if (!r.ok()) {
      out_ << "\"error\": " << json_string(r.error) << "}" << std::flush;
      return;
    }
    std::string labels, probabilities, classes;
    for (size_t i = 0; i < r.classes.size(); ++i) {
      const char* sep = i ? ", " : "";
      labels += sep + json_string(labels_[static_cast<size_t>(r.classes[i])]);
      probabilities += sep + number(r.probabilities[i]);
      classes += sep + std::to_string(r.classes[i]);
    }
    out_ << "\"labels\": [" << labels << "], \"probabilities\": [" << probabilities
         << "], \"classes\": [" << classes << "]}" << std::flush;
  }
  void end() override { out_ << (first_ ? "}\n" : "\n}\n"); }

 private:
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
  void write(const vit::ImageResult& r) override {
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

// Length of the valid UTF-8 sequence at s[i], or 0 if there is none.
size_t utf8_length(const std::string& s, size_t i) {
  const auto b = [&](size_t j) { return static_cast<unsigned char>(s[j]); };
  const unsigned char c = b(i);
  size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
  if (n == 0 || i + n > s.size()) return 0;
  for (size_t j = 1; j < n; ++j)
    if ((b(i + j) & 0xC0) != 0x80) return 0;
  // Overlong forms and surrogates are not UTF-8 either.
  if (n == 2 && c < 0xC2) return 0;
  if (n == 3 && ((c == 0xE0 && b(i + 1) < 0xA0) || (c == 0xED && b(i + 1) >= 0xA0))) return 0;
  if (n == 4 && ((c == 0xF0 && b(i + 1) < 0x90) || c > 0xF4 || (c == 0xF4 && b(i + 1) >= 0x90)))
    return 0;
  return n;
}

}  // namespace

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    const size_t n = utf8_length(s, i);
    if (n == 0) {
      out += "\xEF\xBF\xBD";  // U+FFFD
      ++i;
      continue;
    }
    if (n > 1) {
      out.append(s, i, n);
    } else if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c < 0x20 || c == 0x7F) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
    i += n;
  }
  return out + "\"";
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
