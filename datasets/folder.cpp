// Image files on disk: root/<class>/<image> folders (torchvision's ImageFolder) and CSV lists of
// "path,label". The file list is checked when the dataset opens; the files themselves are decoded
// lazily, so a corrupt one shows up at load() as a reason, never as an exception.
#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "common/error.h"
#include "datasets/dataset.h"
#include "datasets/image_io.h"

namespace vitk::datasets {
namespace {

namespace fs = std::filesystem;

const char* const kExtensions[] = {".png",  ".jpg",  ".jpeg", ".bmp", ".tif",
                                   ".tiff", ".webp", ".pgm",  ".ppm"};

bool has_image_extension(const fs::path& p) {
  std::string ext = p.extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return std::find(std::begin(kExtensions), std::end(kExtensions), ext) != std::end(kExtensions);
}

bool hidden(const fs::path& p) {
  const std::string name = p.filename().string();
  return !name.empty() && name[0] == '.';
}

std::string extension_list() {
  std::string s;
  for (const char* e : kExtensions) s += (s.empty() ? "" : " ") + std::string(e);
  return s;
}

// Samples as paths and labels; loading decodes the file.
class FileDataset : public Dataset {
 public:
  FileDataset(std::string source, std::vector<std::string> class_names,
              std::vector<std::string> paths, std::vector<int> labels)
      : source_(std::move(source)),
        class_names_(std::move(class_names)),
        paths_(std::move(paths)),
        labels_(std::move(labels)) {}

  int64_t size() const override { return static_cast<int64_t>(paths_.size()); }
  int label(int64_t index) const override { return labels_.at(static_cast<size_t>(index)); }
  const std::vector<std::string>& class_names() const override { return class_names_; }
  bool load(int64_t index, cv::Mat& image, std::string& error) const override {
    if (index < 0 || index >= size()) {
      error = "index " + std::to_string(index) + " out of range";
      return false;
    }
    return decode_image_file(paths_[static_cast<size_t>(index)], image, error);
  }
  std::string describe(int64_t index) const override {
    return paths_.at(static_cast<size_t>(index));
  }
  std::string source() const override { return source_; }

 private:
  std::string source_;
  std::vector<std::string> class_names_;
  std::vector<std::string> paths_;
  std::vector<int> labels_;
};

// Image files under dir, at any depth (as torchvision walks a class folder), sorted; hidden files
// and folders (.ipynb_checkpoints, .DS_Store) are not samples.
std::vector<std::string> list_images(const fs::path& dir) {
  std::vector<std::string> files;
  std::error_code ec;
  fs::recursive_directory_iterator it(dir, ec), end;
  if (ec) throw Error(dir.string() + ": cannot list: " + ec.message());
  for (; it != end; it.increment(ec)) {
    if (ec) throw Error(dir.string() + ": cannot list: " + ec.message());
    if (hidden(it->path())) {
      if (it->is_directory(ec)) it.disable_recursion_pending();
      continue;
    }
    // A dangling link or a file we may not read still counts: load() will say what is wrong.
    if (it->is_directory(ec)) continue;
    if (has_image_extension(it->path())) files.push_back(it->path().string());
  }
  if (ec) throw Error(dir.string() + ": cannot list: " + ec.message());
  std::sort(files.begin(), files.end());
  return files;
}

// Splits one CSV line into fields: commas separate, double quotes enclose a field that contains
// commas or quotes ("" is a quote), spaces around a field are dropped. False on a stray quote.
bool split_csv(const std::string& line, std::vector<std::string>& fields) {
  fields.assign(1, std::string());
  bool quoted = false, was_quoted = false;
  auto trim = [](std::string& s) {
    size_t b = s.find_first_not_of(" \t"), e = s.find_last_not_of(" \t");
    s = b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
  };
  for (size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    std::string& f = fields.back();
    if (quoted) {
      if (c == '"' && i + 1 < line.size() && line[i + 1] == '"') {
        f += '"';
        ++i;
      } else if (c == '"') {
        quoted = false;
      } else {
        f += c;
      }
    } else if (c == ',') {
      if (!was_quoted) trim(f);
      fields.emplace_back();
      was_quoted = false;
    } else if (c == '"') {
      std::string t = f;
      trim(t);
      if (!t.empty() || was_quoted) return false;
      f.clear();
      quoted = was_quoted = true;
    } else if (was_quoted) {
      if (c != ' ' && c != '\t') return false;  // text after a closing quote
    } else {
      f += c;
    }
  }
  if (quoted) return false;
  if (!was_quoted) trim(fields.back());
  return true;
}

// A label that is an integer: "0", "12", "-3", "+4".
bool parse_int(const std::string& s, long long& value) {
  if (s.empty()) return false;
  size_t i = (s[0] == '-' || s[0] == '+') ? 1 : 0;
  if (i == s.size() || s.size() - i > 18) return false;
  for (size_t k = i; k < s.size(); ++k)
    if (!std::isdigit(static_cast<unsigned char>(s[k]))) return false;
  value = std::stoll(s);
  return true;
}

}  // namespace

std::unique_ptr<Dataset> open_image_folder(const std::string& root) {
  std::error_code ec;
  const fs::file_status st = fs::status(root, ec);
  if (ec || !fs::exists(st)) throw Error(root + ": no such directory");
  if (!fs::is_directory(st))
    throw Error(root + ": not a directory (expected root/<class>/<image>)");

  std::vector<fs::path> class_dirs;
  bool loose_images = false, anything = false;
  fs::directory_iterator it(root, ec), end;
  if (ec) throw Error(root + ": cannot list: " + ec.message());
  for (; it != end; it.increment(ec)) {
    if (ec) throw Error(root + ": cannot list: " + ec.message());
    if (hidden(it->path())) continue;
    anything = true;
    if (it->is_directory(ec))
      class_dirs.push_back(it->path());
    else if (has_image_extension(it->path()))
      loose_images = true;
  }
  if (class_dirs.empty())
    throw Error(root +
                (!anything      ? ": is empty"
                 : loose_images ? ": has images but no class folders"
                                : ": has no class folders") +
                " (expected root/<class>/<image>)");
  std::sort(class_dirs.begin(), class_dirs.end());

  std::vector<std::string> names, paths;
  std::vector<int> labels;
  for (size_t c = 0; c < class_dirs.size(); ++c) {
    std::vector<std::string> files = list_images(class_dirs[c]);
    if (files.empty())
      throw Error(class_dirs[c].string() + ": class folder has no images (" + extension_list() +
                  ")");
    names.push_back(class_dirs[c].filename().string());
    for (std::string& f : files) {
      paths.push_back(std::move(f));
      labels.push_back(static_cast<int>(c));
    }
  }
  return std::make_unique<FileDataset>(root, std::move(names), std::move(paths), std::move(labels));
}

std::unique_ptr<Dataset> open_csv(const std::string& csv_path) {
  std::error_code ec;
  const fs::file_status st = fs::status(csv_path, ec);
  if (ec || !fs::exists(st)) throw Error(csv_path + ": no such file");
  if (!fs::is_regular_file(st)) throw Error(csv_path + ": not a regular file");
  std::ifstream in(csv_path, std::ios::binary);
  if (!in) throw Error(csv_path + ": cannot open");
  const fs::path base = fs::path(csv_path).parent_path();

  struct Row {
    std::string path, label;
    int line;
  };
  std::vector<Row> rows;
  std::string line;
  std::vector<std::string> fields;
  int number = 0;
  bool first = true;
  while (std::getline(in, line)) {
    ++number;
    if (number == 1 && line.compare(0, 3, "\xEF\xBB\xBF") == 0) line.erase(0, 3);  // UTF-8 BOM
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    const std::string where = csv_path + ":" + std::to_string(number) + ": ";
    if (line.find('\0') != std::string::npos)
      throw Error(where + "binary data; expected lines of 'path,label'");
    if (!split_csv(line, fields)) throw Error(where + "unbalanced or misplaced quotes");
    if (fields.size() != 2)
      throw Error(where + "expected 'path,label', got " + std::to_string(fields.size()) + " field" +
                  (fields.size() == 1 ? "" : "s"));
    fs::path p = fields[0];
    if (!p.empty() && p.is_relative()) p = base / p;
    // The first line is a header when it names no image: no image extension and no such file.
    if (first) {
      first = false;
      if (!has_image_extension(fields[0]) && !fs::exists(p, ec)) continue;
    }
    if (fields[0].empty()) throw Error(where + "empty path");
    if (fields[1].empty()) throw Error(where + "empty label");
    rows.push_back({p.string(), fields[1], number});
  }
  if (in.bad()) throw Error(csv_path + ": read error");
  if (rows.empty()) throw Error(csv_path + ": no samples (expected lines of 'path,label')");

  // Integer labels when every label is one, else class names (sorted, as folders are).
  bool integers = true;
  long long value = 0;
  for (const Row& r : rows)
    if (!parse_int(r.label, value)) integers = false;
  std::vector<std::string> names, paths;
  std::vector<int> labels;
  constexpr long long kMaxClasses = 1'000'000;
  if (integers) {
    long long top = -1;
    for (const Row& r : rows) {
      parse_int(r.label, value);
      const std::string where = csv_path + ":" + std::to_string(r.line) + ": ";
      if (value < 0) throw Error(where + "label " + r.label + " is negative");
      if (value >= kMaxClasses)
        throw Error(where + "label " + r.label + " is not below " + std::to_string(kMaxClasses));
      top = std::max(top, value);
      labels.push_back(static_cast<int>(value));
    }
    for (long long c = 0; c <= top; ++c) names.push_back(std::to_string(c));
  } else {
    std::set<std::string> unique;
    for (const Row& r : rows) unique.insert(r.label);
    names.assign(unique.begin(), unique.end());
    for (const Row& r : rows)
      labels.push_back(
          static_cast<int>(std::lower_bound(names.begin(), names.end(), r.label) - names.begin()));
  }
  for (Row& r : rows) paths.push_back(std::move(r.path));
  return std::make_unique<FileDataset>(csv_path, std::move(names), std::move(paths),
                                       std::move(labels));
}

}  // namespace vitk::datasets
