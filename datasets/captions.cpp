// Reading captioned image collections (see captions.h): COCO captions JSON through the strict
// JSON reader, Flickr8k/30k caption lines by hand.
#include "datasets/captions.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <limits>
#include <unordered_map>
#include <utility>

#include "common/error.h"
#include "common/io/input_file.h"
#include "common/io/json.h"
#include "common/quoted_name.h"
#include "datasets/image_io.h"

namespace vitk::datasets {
namespace {

namespace fs = std::filesystem;
using io::Json;

// COCO's captions_train2017.json is under 100 MB and the Flickr files smaller still: a caption
// file over 2 GB is a wrong path, and as a JSON document it would take tens of GB of memory.
constexpr uint64_t kMaxCaptionFileBytes = uint64_t{2} << 30;
// Pixel coordinates and sizes are held to what an image can have (PNG's limit), so that x + width
// cannot overflow.
constexpr uint64_t kMaxPixels = (uint64_t{1} << 31) - 1;
constexpr uint64_t kMaxId = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

std::string trim(const std::string& s) {
  size_t begin = 0, end = s.size();
  while (begin < end && is_space(s[begin])) ++begin;
  while (end > begin && is_space(s[end - 1])) --end;
  return s.substr(begin, end - begin);
}

// The caption file open for reading, refused when it is no regular file or over the size limit
// (checked before anything is read or allocated).
std::ifstream open_caption_file(const std::string& path) {
  std::ifstream in = io::open_input_file(path, "a caption file");
  std::error_code ec;
  const uint64_t size = fs::file_size(path, ec);
  if (ec) throw Error(path + ": cannot read its size: " + ec.message());
  if (size > kMaxCaptionFileBytes)
    throw Error(path + ": " + std::to_string(size) + " bytes, more than a caption file can have (" +
                std::to_string(kMaxCaptionFileBytes) + ")");
  return in;
}

// Why `name` cannot name a file inside the image folder, or "" when it can: an image path must
// stay inside the folder the user gave, whatever the caption file says.
std::string unsafe_file_name(const std::string& name) {
  if (name.empty()) return "an empty file name";
  if (name.find('\0') != std::string::npos) return "a file name with a NUL byte";
  if (name[0] == '/') return "an absolute path, outside the image folder";
  const fs::path p(name);
  for (const fs::path& part : p)
    if (part == "..") return "a path with '..', which may leave the image folder";
  const fs::path last = p.filename();
  if (last.empty() || last == ".") return "a folder, not a file name";
  return "";
}

// One spelling per file ("./a.png" and "a//a.png" are "a.png"), to find a file named twice.
std::string file_key(const std::string& name) {
  return fs::path(name).lexically_normal().string();
}

std::string image_path(const std::string& image_dir, const std::string& file_name) {
  return image_dir.empty() ? file_name : (fs::path(image_dir) / file_name).string();
}

// "" when path is a regular file, else why it cannot be the image.
std::string image_problem(const std::string& path) {
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (st.type() == fs::file_type::not_found) return "image file not found";
  if (ec) return "cannot look at the image file: " + ec.message();
  if (!fs::is_regular_file(st)) return "not a regular file, so not an image";
  return "";
}

// Keeps the images that have captions and whose file is in the folder (when looked at), counting
// the others. `where(i)` says where image i came from, for the error on a missing file.
template <typename Where>
void keep_images(std::vector<CaptionedImage>& all, const CaptionReadOptions& options, Where where,
                 CaptionSet& set) {
  for (size_t i = 0; i < all.size(); ++i) {
    CaptionedImage& image = all[i];
    if (image.captions.empty()) {
      ++set.images_without_captions;
      continue;
    }
    if (options.check_images) {
      const std::string problem = image_problem(image.path);
      if (!problem.empty()) {
        if (!options.skip_missing_images)
          throw Error(image.path + ": " + problem + " (" + where(i) + ")");
        ++set.missing_images;
        if (set.missing_examples.size() < 3) set.missing_examples.push_back(image.path);
        continue;
      }
    }
    set.images.push_back(std::move(image));
  }
}

// ---- COCO ----------------------------------------------------------------------------------

// The member `key` of `object` (already known to be an object), or an error naming it.
const Json& required(const Json& object, const std::string& key, const std::string& where) {
  const Json* value = io::member(object, key);
  if (!value) throw Error(where + ": missing key \"" + key + "\"");
  return *value;
}

int64_t as_bounded(const Json& value, const std::string& what, uint64_t max) {
  const uint64_t n = io::as_uint(value, what);
  if (n > max)
    throw Error(what + ": " + std::to_string(n) + " is larger than " + std::to_string(max));
  return static_cast<int64_t>(n);
}

// [x, y, width, height] in pixels, width and height positive.
Box read_box(const Json& value, const std::string& what) {
  const Json& a = io::as_array(value, what);
  if (a.size() != 4)
    throw Error(what + ": expected [x, y, width, height], got an array of " +
                std::to_string(a.size()));
  Box b;
  b.x = as_bounded(a[0], what + "[0]", kMaxPixels);
  b.y = as_bounded(a[1], what + "[1]", kMaxPixels);
  b.width = as_bounded(a[2], what + "[2]", kMaxPixels);
  b.height = as_bounded(a[3], what + "[3]", kMaxPixels);
  if (b.width == 0 || b.height == 0) throw Error(what + ": an empty box (width or height 0)");
  return b;
}

bool inside(const Box& inner, const Box& outer) {
  return inner.x >= outer.x && inner.y >= outer.y &&
         inner.x + inner.width <= outer.x + outer.width &&
         inner.y + inner.height <= outer.y + outer.height;
}

std::string box_text(const Box& b) {
  return "[" + std::to_string(b.x) + ", " + std::to_string(b.y) + ", " + std::to_string(b.width) +
         ", " + std::to_string(b.height) + "]";
}

// "vitk_scene": {"grid": 2|3, "objects": [{"name", "row", "col", "box", "cell"}, ...]}. Other
// keys are left for later versions of the generator.
void read_scene(const Json& value, const std::string& where, CaptionedImage& image) {
  io::as_object(value, where);
  const std::string grid_where = where + ".grid";
  const int64_t grid = as_bounded(required(value, "grid", where), grid_where, kMaxId);
  if (grid != 2 && grid != 3)
    throw Error(grid_where + ": expected 2 or 3, got " + std::to_string(grid));
  const std::string objects_where = where + ".objects";
  const Json& objects = io::as_array(required(value, "objects", where), objects_where);
  if (objects.empty()) throw Error(objects_where + ": a scene has at least one article");
  std::vector<SceneObject> out;
  std::vector<int64_t> holder(static_cast<size_t>(grid * grid), -1);  // object in each cell
  for (size_t i = 0; i < objects.size(); ++i) {
    const std::string at = objects_where + "[" + std::to_string(i) + "]";
    const Json& o = io::as_object(objects[i], at);
    SceneObject obj;
    obj.name = io::as_string(required(o, "name", at), at + ".name");
    if (trim(obj.name).empty()) throw Error(at + ".name: an empty name");
    obj.row = as_bounded(required(o, "row", at), at + ".row", kMaxId);
    obj.col = as_bounded(required(o, "col", at), at + ".col", kMaxId);
    if (obj.row >= grid)
      throw Error(at + ".row: " + std::to_string(obj.row) + " is outside the grid of " +
                  std::to_string(grid) + " rows");
    if (obj.col >= grid)
      throw Error(at + ".col: " + std::to_string(obj.col) + " is outside the grid of " +
                  std::to_string(grid) + " columns");
    int64_t& other = holder[static_cast<size_t>(obj.row * grid + obj.col)];
    if (other >= 0)
      throw Error(at + ": cell (" + std::to_string(obj.row) + ", " + std::to_string(obj.col) +
                  ") already holds objects[" + std::to_string(other) + "]");
    other = static_cast<int64_t>(i);
    obj.box = read_box(required(o, "box", at), at + ".box");
    obj.cell = read_box(required(o, "cell", at), at + ".cell");
    if (!inside(obj.box, obj.cell))
      throw Error(at + ".box: " + box_text(obj.box) + " is not inside its cell " +
                  box_text(obj.cell));
    out.push_back(std::move(obj));
  }
  image.grid = grid;
  image.objects = std::move(out);
}

std::vector<CaptionedImage> read_coco_images(const Json& images, const std::string& file,
                                             const std::string& image_dir,
                                             std::unordered_map<uint64_t, size_t>& by_id) {
  std::vector<CaptionedImage> out;
  std::unordered_map<std::string, size_t> by_name;
  for (size_t i = 0; i < images.size(); ++i) {
    const std::string at = file + ": images[" + std::to_string(i) + "]";
    const Json& entry = io::as_object(images[i], at);
    CaptionedImage image;
    image.id = as_bounded(required(entry, "id", at), at + ".id", kMaxId);
    image.file_name = io::as_string(required(entry, "file_name", at), at + ".file_name");
    const std::string unsafe = unsafe_file_name(image.file_name);
    if (!unsafe.empty())
      throw Error(at + ".file_name: " + quoted_name(image.file_name) + " is " + unsafe);
    const auto id = by_id.emplace(static_cast<uint64_t>(image.id), i);
    if (!id.second)
      throw Error(at + ".id: " + std::to_string(image.id) + " is also the id of images[" +
                  std::to_string(id.first->second) + "]");
    const auto name = by_name.emplace(file_key(image.file_name), i);
    if (!name.second)
      throw Error(at + ".file_name: " + quoted_name(image.file_name) +
                  " is also the file of images[" + std::to_string(name.first->second) + "]");
    if (const Json* scene = io::member(entry, "vitk_scene"))
      read_scene(*scene, at + ".vitk_scene", image);
    image.path = image_path(image_dir, image.file_name);
    out.push_back(std::move(image));
  }
  return out;
}

// ---- Flickr --------------------------------------------------------------------------------

// Byte offset of the first byte that does not start valid UTF-8 in s (overlong forms, surrogates
// and code points past U+10FFFF included), or npos: the captions go to the tokenizer as UTF-8.
size_t bad_utf8_at(const std::string& s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  for (size_t i = 0; i < s.size();) {
    const unsigned c = p[i];
    size_t n = 0;
    unsigned min_second = 0x80, max_second = 0xbf;
    if (c < 0x80)
      n = 1;
    else if (c >= 0xc2 && c <= 0xdf)
      n = 2;
    else if (c >= 0xe0 && c <= 0xef)
      n = 3, min_second = c == 0xe0 ? 0xa0 : 0x80, max_second = c == 0xed ? 0x9f : 0xbf;
    else if (c >= 0xf0 && c <= 0xf4)
      n = 4, min_second = c == 0xf0 ? 0x90 : 0x80, max_second = c == 0xf4 ? 0x8f : 0xbf;
    else
      return i;
    if (n > 1) {
      if (i + n > s.size() || p[i + 1] < min_second || p[i + 1] > max_second) return i;
      for (size_t k = 2; k < n; ++k)
        if ((p[i + k] & 0xc0) != 0x80) return i;
    }
    i += n;
  }
  return std::string::npos;
}

bool all_digits(const std::string& s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// The Flickr30k header "image_name| comment_number| comment" (spaces around the bars free).
bool is_results_header(const std::string& line) {
  std::vector<std::string> fields;
  size_t start = 0;
  for (size_t bar; (bar = line.find('|', start)) != std::string::npos; start = bar + 1)
    fields.push_back(trim(line.substr(start, bar - start)));
  fields.push_back(trim(line.substr(start)));
  return fields == std::vector<std::string>{"image_name", "comment_number", "comment"};
}

struct FlickrLine {
  std::string file_name, caption;
};

constexpr const char* kTokenForm = "expected \"image#number<TAB>caption\"";
constexpr const char* kResultsForm = "expected \"image| number| caption\"";

// Flickr8k.token.txt: "1000268201_693b08cb0e.jpg#0<TAB>A child in a pink dress ...".
bool parse_token_line(const std::string& line, FlickrLine& out) {
  const size_t tab = line.find('\t');
  if (tab == std::string::npos) return false;
  const std::string key = line.substr(0, tab);
  const size_t hash = key.rfind('#');
  if (hash == std::string::npos || !all_digits(trim(key.substr(hash + 1)))) return false;
  out.file_name = trim(key.substr(0, hash));
  out.caption = trim(line.substr(tab + 1));
  return true;
}

// results.csv: "1000092795.jpg| 0| Two young guys ...", split at the first two bars only (a
// caption may hold one). The published file has one line with the second bar missing
// ("2199200615.jpg| 4 A dog runs across the grass ."): a number followed by a space is taken as
// the end of the number there too.
bool parse_results_line(const std::string& line, FlickrLine& out) {
  const size_t bar = line.find('|');
  if (bar == std::string::npos) return false;
  size_t i = bar + 1;
  while (i < line.size() && line[i] == ' ') ++i;
  const size_t digits = i;
  while (i < line.size() && line[i] >= '0' && line[i] <= '9') ++i;
  if (i == digits) return false;
  const size_t after_number = i;
  while (i < line.size() && line[i] == ' ') ++i;
  if (i < line.size() && line[i] == '|')
    ++i;
  else if (i == after_number)
    return false;
  out.file_name = trim(line.substr(0, bar));
  out.caption = trim(line.substr(i));
  return true;
}

}  // namespace

int64_t CaptionSet::captions() const {
  int64_t n = 0;
  for (const CaptionedImage& image : images) n += static_cast<int64_t>(image.captions.size());
  return n;
}

CaptionSet read_coco_captions(const std::string& json_path, const std::string& image_dir,
                              const CaptionReadOptions& options) {
  Json root;
  {
    std::ifstream in = open_caption_file(json_path);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (in.bad()) throw Error(json_path + ": read error");
    root = io::parse_json(text, json_path);
  }
  io::as_object(root, json_path + ": the top level");
  const Json& images = io::as_array(required(root, "images", json_path), json_path + ": images");
  const Json& annotations =
      io::as_array(required(root, "annotations", json_path), json_path + ": annotations");

  CaptionSet set;
  set.source = json_path;
  set.image_dir = image_dir;
  std::unordered_map<uint64_t, size_t> by_id;
  std::vector<CaptionedImage> all = read_coco_images(images, json_path, image_dir, by_id);
  for (size_t i = 0; i < annotations.size(); ++i) {
    const std::string at = json_path + ": annotations[" + std::to_string(i) + "]";
    const Json& a = io::as_object(annotations[i], at);
    const uint64_t image_id = io::as_uint(required(a, "image_id", at), at + ".image_id");
    std::string caption = trim(io::as_string(required(a, "caption", at), at + ".caption"));
    if (caption.empty()) throw Error(at + ".caption: an empty caption");
    const auto it = by_id.find(image_id);
    if (it == by_id.end()) {
      ++set.unknown_image_captions;
      continue;
    }
    all[it->second].captions.push_back(std::move(caption));
  }
  keep_images(
      all, options,
      [&](size_t i) { return json_path + ": images[" + std::to_string(i) + "].file_name"; }, set);
  return set;
}

CaptionSet read_flickr_captions(const std::string& path, const std::string& image_dir,
                                const CaptionReadOptions& options) {
  std::ifstream in = open_caption_file(path);
  enum class Format { unknown, token, results } format = Format::unknown;
  std::vector<CaptionedImage> all;
  std::vector<int64_t> first_line;  // of each image, for messages
  std::unordered_map<std::string, size_t> by_name;
  int64_t number = 0;
  for (std::string line; std::getline(in, line);) {
    ++number;
    const std::string at = path + ":" + std::to_string(number);
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (number == 1 && line.compare(0, 3, "\xef\xbb\xbf") == 0) line.erase(0, 3);
    if (trim(line).empty()) continue;
    const size_t bad = bad_utf8_at(line);
    if (bad != std::string::npos)
      throw Error(at + ": invalid UTF-8 at byte " + std::to_string(bad) + " of the line");
    if (format == Format::unknown) {
      if (is_results_header(line)) {
        format = Format::results;
        continue;
      }
      if (line.find('\t') != std::string::npos)
        format = Format::token;
      else if (line.find('|') != std::string::npos)
        format = Format::results;  // a results.csv without its header
      else
        throw Error(at +
                    ": neither a Flickr8k token line (\"image#number<TAB>caption\") nor the "
                    "Flickr30k header \"image_name| comment_number| comment\"");
    }
    FlickrLine f;
    if (format == Format::token ? !parse_token_line(line, f) : !parse_results_line(line, f))
      throw Error(at + ": " + (format == Format::token ? kTokenForm : kResultsForm));
    const std::string unsafe = unsafe_file_name(f.file_name);
    if (!unsafe.empty()) throw Error(at + ": " + quoted_name(f.file_name) + " is " + unsafe);
    if (f.caption.empty()) throw Error(at + ": an empty caption");
    const auto slot = by_name.emplace(file_key(f.file_name), all.size());
    if (slot.second) {
      CaptionedImage image;
      image.id = static_cast<int64_t>(all.size());
      image.path = image_path(image_dir, f.file_name);
      image.file_name = std::move(f.file_name);
      all.push_back(std::move(image));
      first_line.push_back(number);
    }
    all[slot.first->second].captions.push_back(std::move(f.caption));
  }
  if (in.bad()) throw Error(path + ": read error");
  CaptionSet set;
  set.source = path;
  set.image_dir = image_dir;
  keep_images(
      all, options, [&](size_t i) { return path + ":" + std::to_string(first_line[i]); }, set);
  return set;
}

CaptionSet read_captions(const std::string& path, const std::string& image_dir,
                         const CaptionReadOptions& options) {
  std::string ext = fs::path(path).extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) {
    return static_cast<char>(c >= 'A' && c <= 'Z' ? c + 32 : c);
  });
  return ext == ".json" ? read_coco_captions(path, image_dir, options)
                        : read_flickr_captions(path, image_dir, options);
}

std::string normalize_caption(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  bool gap = false;  // a space is owed before the next kept byte
  for (const char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    const bool keep = c >= 0x80 || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                      (c >= '0' && c <= '9') || c == '-' || c == '\'';
    if (!keep) {  // whitespace, control bytes and the other ASCII punctuation
      gap = true;
      continue;
    }
    if (gap && !out.empty()) out += ' ';
    gap = false;
    out += c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : ch;
  }
  return out;
}

std::vector<std::string> caption_words(const std::string& normalised) {
  std::vector<std::string> words;
  size_t start = 0;
  while (start < normalised.size()) {
    size_t end = normalised.find(' ', start);
    if (end == std::string::npos) end = normalised.size();
    words.push_back(normalised.substr(start, end - start));
    start = end + 1;
  }
  return words;
}

std::string swap_words(const std::string& text,
                       const std::vector<std::pair<std::string, std::string>>& pairs) {
  std::string out;
  for (std::string word : caption_words(text)) {
    for (const auto& [a, b] : pairs) {
      if (word == a || word == b) {
        word = word == a ? b : a;
        break;
      }
    }
    out += (out.empty() ? "" : " ") + word;
  }
  return out;
}

namespace {

class CaptionImages : public Dataset {
 public:
  explicit CaptionImages(const CaptionSet& set) : set_(set) {}
  int64_t size() const override { return static_cast<int64_t>(set_.images.size()); }
  int label(int64_t index) const override { return static_cast<int>(index); }
  const std::vector<std::string>& class_names() const override { return none_; }
  bool load(int64_t index, cv::Mat& image, std::string& error) const override {
    return decode_image_file(set_.images[static_cast<size_t>(index)].path, image, error);
  }
  std::string describe(int64_t index) const override {
    return set_.images[static_cast<size_t>(index)].path;
  }
  std::string source() const override { return set_.source; }

 private:
  const CaptionSet& set_;
  std::vector<std::string> none_;
};

}  // namespace

std::unique_ptr<Dataset> caption_images(const CaptionSet& set) {
  if (set.images.size() > static_cast<size_t>(std::numeric_limits<int>::max()))
    throw Error(set.source + ": " + std::to_string(set.images.size()) +
                " images, more than the loader takes");
  return std::make_unique<CaptionImages>(set);
}

}  // namespace vitk::datasets
