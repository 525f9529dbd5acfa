// `vitk make-scenes`: captioned scenes of Fashion-MNIST articles (datasets/scenes.h), and the
// strict reader of their caption grammar that tests and attention-in-cell checks rely on.
#include "datasets/scenes.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include <signal.h>
#include <sys/types.h>
#include <unistd.h>

#include <opencv2/core.hpp>
#include <opencv2/imgcodecs.hpp>

#include "common/error.h"
#include "common/io/atomic_file.h"
#include "common/io/folder_lock.h"
#include "common/io/json.h"
#include "common/ops/ops.h"
#include "datasets/augment.h"
#include "datasets/dataset.h"

namespace vitk::datasets {
namespace {

namespace fs = std::filesystem;
using io::Json;

constexpr int64_t kArticle = 28;           // Fashion-MNIST's side, never scaled
constexpr int64_t kCanvas = 3 * kArticle;  // 84: three articles or two 42-pixel cells a side
constexpr int64_t kMaxScenes = 1'000'000;
constexpr int64_t kMaxObjects = 4;    // a 2×2 grid holds four
constexpr int64_t kMaxCaptions = 24;  // 4! orders of four articles
constexpr int kClasses = 10;

// ---- Options -----------------------------------------------------------------------------------

// The messages name the `vitk make-scenes` options, which is how a user meets these fields.
void check_count(const char* option, int64_t value, int64_t lo, int64_t hi) {
  if (value < lo || value > hi)
    throw UsageError(std::string(option) + " must be in " + std::to_string(lo) + ".." +
                     std::to_string(hi) + ", got " + std::to_string(value));
}

void check_options(const SceneOptions& o) {
  if (o.fashion_mnist.empty()) throw UsageError("--data: no Fashion-MNIST folder given");
  if (o.output.empty()) throw UsageError("--out: no output folder given");
  check_count("--train", o.train, 0, kMaxScenes);
  check_count("--val", o.val, 0, kMaxScenes);
  check_count("--test", o.test, 0, kMaxScenes);
  if (o.train + o.val + o.test == 0)
    throw UsageError("--train, --val and --test are all 0: no scenes to make");
  check_count("--captions-per-image", o.captions_per_image, 1, kMaxCaptions);
  check_count("--min-objects", o.min_objects, 2, kMaxObjects);
  check_count("--max-objects", o.max_objects, 2, kMaxObjects);
  if (o.max_objects < o.min_objects)
    throw UsageError("--max-objects " + std::to_string(o.max_objects) +
                     " is less than --min-objects " + std::to_string(o.min_objects));
}

// The output folder must be new or empty: scenes of another run left beside these would be read
// back as part of this set. Checked once this run holds it (its lock file does not count).
void check_output(const std::string& output) {
  std::error_code ec;
  for (fs::directory_iterator it(output, ec), end; !ec && it != end; it.increment(ec))
    if (it->path().filename() != io::FolderLock::kFileName)
      throw UsageError("--out " + output + ": the folder is not empty; give a new or empty one");
  if (ec) throw Error("--out " + output + ": " + ec.message());
}

// A folder given as --out that is not one.
void check_not_a_file(const std::string& output) {
  std::error_code ec;
  const fs::file_status st = fs::status(output, ec);
  if (ec && ec != std::errc::no_such_file_or_directory)
    throw Error("--out " + output + ": " + ec.message());
  if (fs::exists(st) && !fs::is_directory(st))
    throw UsageError("--out " + output + ": exists and is not a folder");
}

// The scenes are written into OUT.tmp-PID beside the output folder and renamed onto it at the
// end, so that an interrupted run leaves no half-made set in OUT. The folders of that kind that a
// dead process left (a kill -9, a full disk) are removed first.
fs::path temporary_beside(const fs::path& out) {
  return out.parent_path() / (out.filename().string() + ".tmp-" + std::to_string(::getpid()));
}

void remove_stale_temporaries_of(const fs::path& out) {
  const std::string prefix = out.filename().string() + ".tmp-";
  const fs::path parent = out.parent_path().empty() ? fs::path(".") : out.parent_path();
  std::error_code ec;
  for (fs::directory_iterator it(parent, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.rfind(prefix, 0) != 0 || !it->is_directory(ec)) continue;
    const std::string digits = name.substr(prefix.size());
    if (digits.empty() || digits.size() > 9 ||
        digits.find_first_not_of("0123456789") != std::string::npos)
      continue;
    const pid_t pid = static_cast<pid_t>(std::stol(digits));
    if (pid == ::getpid() || (::kill(pid, 0) != 0 && errno == ESRCH)) {
      std::error_code ignored;  // only clutter when it stays
      fs::remove_all(it->path(), ignored);
    }
  }
}

// Puts the finished set `tmp` in place as `out` (an empty folder, or none): one rename, or, when
// `out` cannot be replaced (a mount point), each entry moved into it.
void move_into_place(const fs::path& tmp, const fs::path& out) {
  if (::rename(tmp.c_str(), out.c_str()) == 0) return;
  const int error = errno;
  const std::string kept = "; the scenes are in " + tmp.string();
  if (error == ENOTEMPTY || error == EEXIST)
    throw Error("--out " + out.string() + ": another run wrote into it meanwhile" + kept);
  std::error_code ec;
  for (fs::directory_iterator it(tmp, ec), end; !ec && it != end; it.increment(ec)) {
    fs::rename(it->path(), out / it->path().filename(), ec);
    if (ec) break;
  }
  if (ec)
    throw Error("--out " + out.string() + ": cannot move the scenes into it (" + ec.message() +
                ")" + kept);
  fs::remove(tmp, ec);
}

// ---- Random draws ------------------------------------------------------------------------------

// Uniform in [0, n) by rejection, so the draws are the same with every standard library (the
// distributions of <random> are not specified bit for bit).
int64_t below(ops::Rng& rng, int64_t n) {
  const uint64_t range = static_cast<uint64_t>(n);
  const uint64_t limit = -range % range;  // 2^64 mod n: the biased low values to skip
  uint64_t x = rng.next_u64();
  while (x < limit) x = rng.next_u64();
  return static_cast<int64_t>(x % range);
}

template <typename T>
void shuffle(std::vector<T>& v, ops::Rng& rng) {
  for (int64_t i = static_cast<int64_t>(v.size()) - 1; i > 0; --i)
    std::swap(v[static_cast<size_t>(i)], v[static_cast<size_t>(below(rng, i + 1))]);
}

// ---- Articles ----------------------------------------------------------------------------------

// One split's articles: indices [begin, end) of a Fashion-MNIST file, listed by class.
struct ArticleRange {
  const Dataset* data = nullptr;
  int64_t begin = 0, end = 0;
  std::vector<std::vector<int64_t>> by_class;  // [class] -> article indices
  std::vector<int> classes;                    // those with at least one article
};

ArticleRange article_range(const Dataset& data, int64_t begin, int64_t end, int64_t needed,
                           const char* split) {
  ArticleRange r;
  r.data = &data;
  r.begin = begin;
  r.end = end;
  r.by_class.resize(kClasses);
  for (int64_t i = begin; i < end; ++i) r.by_class[static_cast<size_t>(data.label(i))].push_back(i);
  for (int c = 0; c < kClasses; ++c)
    if (!r.by_class[static_cast<size_t>(c)].empty()) r.classes.push_back(c);
  if (static_cast<int64_t>(r.classes.size()) < needed)
    throw Error(data.source() + ": articles " + std::to_string(begin) + ".." +
                std::to_string(end - 1) + " (the " + split + " scenes') have " +
                std::to_string(r.classes.size()) + " classes, a scene needs up to " +
                std::to_string(needed) + " distinct ones");
  return r;
}

std::unique_ptr<Dataset> open_articles(const std::string& dir, Split split) {
  auto data = open_dataset(dir, split);
  if (data->class_names().size() != kClasses)
    throw Error(data->source() + ": has " + std::to_string(data->class_names().size()) +
                " classes, expected Fashion-MNIST's " + std::to_string(kClasses));
  if (data->size() == 0) throw Error(data->source() + ": no articles");
  return data;
}

cv::Mat load_article(const Dataset& data, int64_t index) {
  cv::Mat image;
  std::string why;
  if (!data.load(index, image, why)) throw Error(data.describe(index) + ": " + why);
  if (image.rows != kArticle || image.cols != kArticle || image.type() != CV_8UC1)
    throw Error(data.describe(index) + ": a " + std::to_string(image.cols) + "x" +
                std::to_string(image.rows) + " image with " + std::to_string(image.channels()) +
                " channel(s), expected 28x28 grey as in Fashion-MNIST");
  return image;
}

// ---- Scenes ------------------------------------------------------------------------------------

struct PlacedArticle {
  SceneObject object;
  int64_t article = 0;  // index in its Fashion-MNIST file
};

struct Scene {
  int64_t grid = 0;
  std::vector<PlacedArticle> articles;  // in row-major cell order
  std::vector<std::string> captions;
};

const char* relation(const SceneObject& a, const SceneObject& b) {
  if (a.row != b.row) return a.row < b.row ? "above" : "below";
  return a.col < b.col ? "to the left of" : "to the right of";
}

std::string render_caption(const std::vector<const SceneObject*>& order) {
  std::string text =
      "a " + order[0]->name + " " + relation(*order[0], *order[1]) + " a " + order[1]->name;
  for (size_t k = 2; k < order.size(); ++k)
    text += " and a " + order[k]->name + " " + relation(*order[k], *order[k - 1]) + " it";
  return text;
}

Scene draw_scene(const ArticleRange& range, const SceneOptions& o, ops::Rng& rng) {
  Scene scene;
  scene.grid = below(rng, 2) == 0 ? 2 : 3;
  const int64_t cells = scene.grid * scene.grid;
  const int64_t most = std::min(o.max_objects, cells);
  const int64_t n = o.min_objects + below(rng, most - o.min_objects + 1);

  std::vector<int> classes = range.classes;
  shuffle(classes, rng);
  std::vector<int64_t> where(static_cast<size_t>(cells));
  std::iota(where.begin(), where.end(), 0);
  shuffle(where, rng);

  const int64_t cell_side = kCanvas / scene.grid;
  for (int64_t k = 0; k < n; ++k) {
    PlacedArticle p;
    const int label = classes[static_cast<size_t>(k)];
    const auto& candidates = range.by_class[static_cast<size_t>(label)];
    p.article =
        candidates[static_cast<size_t>(below(rng, static_cast<int64_t>(candidates.size())))];
    SceneObject& obj = p.object;
    obj.name = scene_nouns()[static_cast<size_t>(label)];
    obj.row = where[static_cast<size_t>(k)] / scene.grid;
    obj.col = where[static_cast<size_t>(k)] % scene.grid;
    obj.cell = {obj.col * cell_side, obj.row * cell_side, cell_side, cell_side};
    const int64_t slack = cell_side - kArticle;  // 14 on a 2×2 grid, 0 on a 3×3 one
    const int64_t dx = slack > 0 ? below(rng, slack + 1) : 0;
    const int64_t dy = slack > 0 ? below(rng, slack + 1) : 0;
    obj.box = {obj.cell.x + dx, obj.cell.y + dy, kArticle, kArticle};
    scene.articles.push_back(std::move(p));
  }
  std::sort(scene.articles.begin(), scene.articles.end(),
            [](const PlacedArticle& a, const PlacedArticle& b) {
              return std::make_pair(a.object.row, a.object.col) <
                     std::make_pair(b.object.row, b.object.col);
            });

  // Every order of the articles, shuffled; the first captions_per_image are distinct captions.
  std::vector<std::vector<const SceneObject*>> orders;
  std::vector<size_t> perm(scene.articles.size());
  std::iota(perm.begin(), perm.end(), size_t{0});
  do {
    std::vector<const SceneObject*> order;
    for (size_t i : perm) order.push_back(&scene.articles[i].object);
    orders.push_back(std::move(order));
  } while (std::next_permutation(perm.begin(), perm.end()));
  shuffle(orders, rng);
  const size_t keep = std::min(orders.size(), static_cast<size_t>(o.captions_per_image));
  for (size_t i = 0; i < keep; ++i) scene.captions.push_back(render_caption(orders[i]));
  return scene;
}

std::vector<uint8_t> render_png(const Scene& scene, const Dataset& data, const std::string& file) {
  cv::Mat canvas = cv::Mat::zeros(static_cast<int>(kCanvas), static_cast<int>(kCanvas), CV_8UC1);
  for (const PlacedArticle& p : scene.articles) {
    const Box& b = p.object.box;
    load_article(data, p.article)
        .copyTo(canvas(cv::Rect(static_cast<int>(b.x), static_cast<int>(b.y),
                                static_cast<int>(b.width), static_cast<int>(b.height))));
  }
  std::vector<uint8_t> png;
  if (!cv::imencode(".png", canvas, png)) throw Error(file + ": cannot encode as PNG");
  return png;
}

Json box_json(const Box& b) {
  return Json::array({b.x, b.y, b.width, b.height});
}

Json image_json(int64_t id, const std::string& file_name, const Scene& scene) {
  Json objects = Json::array();
  for (const PlacedArticle& p : scene.articles)
    objects.push_back({{"name", p.object.name},
                       {"row", p.object.row},
                       {"col", p.object.col},
                       {"box", box_json(p.object.box)},
                       {"cell", box_json(p.object.cell)},
                       {"article", p.article}});
  return {{"id", id},
          {"file_name", file_name},
          {"width", kCanvas},
          {"height", kCanvas},
          {"vitk_scene", {{"grid", scene.grid}, {"objects", std::move(objects)}}}};
}

struct SplitPlan {
  const char* name;
  int key;  // keys the split's draws, so one split's scenes do not depend on another's size
  int64_t count;
  const ArticleRange* range;
};

void write_split(const SceneOptions& o, const SplitPlan& split) {
  const fs::path image_dir = fs::path(o.output) / "images" / split.name;
  std::error_code ec;
  fs::create_directories(image_dir, ec);
  if (ec) throw Error(image_dir.string() + ": cannot create: " + ec.message());

  Json images = Json::array(), annotations = Json::array();
  int64_t caption_id = 0;
  for (int64_t i = 0; i < split.count; ++i) {
    ops::Rng rng(ops::Rng::hash(ops::Rng::hash(o.seed, static_cast<uint64_t>(split.key)),
                                static_cast<uint64_t>(i)));
    const Scene scene = draw_scene(*split.range, o, rng);
    const int64_t id = i + 1;
    char name[32];
    std::snprintf(name, sizeof name, "%06lld.png", static_cast<long long>(id));
    const std::string file = (image_dir / name).string();
    const std::vector<uint8_t> png = render_png(scene, *split.range->data, file);
    io::write_file_atomic(file, png.data(), png.size());
    images.push_back(image_json(id, name, scene));
    for (const std::string& caption : scene.captions)
      annotations.push_back({{"id", ++caption_id}, {"image_id", id}, {"caption", caption}});
  }

  const ArticleRange& r = *split.range;
  Json info = {{"description", "Fashion-MNIST articles on a 2x2 or 3x3 grid (vitk make-scenes)"},
               {"split", split.name},
               {"seed", o.seed},
               {"captions_per_image", o.captions_per_image},
               {"min_objects", o.min_objects},
               {"max_objects", o.max_objects}};
  if (r.data)  // the file name only, so that the bytes do not depend on where the data sits
    info["articles"] = fs::path(r.data->source()).filename().string() + "[" +
                       std::to_string(r.begin) + ":" + std::to_string(r.end) + "]";
  const Json doc = {{"info", std::move(info)},
                    {"images", std::move(images)},
                    {"annotations", std::move(annotations)}};
  const std::string path =
      (fs::path(o.output) / (std::string("captions_") + split.name + ".json")).string();
  io::write_file_atomic(path, doc.dump() + "\n");
}

// ---- Caption grammar ---------------------------------------------------------------------------

std::vector<std::string> words_of(const std::string& caption) {
  return caption_words(normalize_caption(caption));
}

// The noun at words[i] (one or two words), advancing i past it; "" when there is none.
std::string noun_at(const std::vector<std::string>& words, size_t& i) {
  if (i >= words.size()) return {};
  for (const std::string& noun : scene_nouns()) {
    const size_t space = noun.find(' ');
    if (space == std::string::npos) {
      if (words[i] != noun) continue;
      i += 1;
      return noun;
    }
    if (i + 1 < words.size() && words[i] == noun.substr(0, space) &&
        words[i + 1] == noun.substr(space + 1)) {
      i += 2;
      return noun;
    }
  }
  return {};
}

// The relation at words[i], advancing i past it; "" when there is none.
std::string relation_at(const std::vector<std::string>& words, size_t& i) {
  auto word = [&](size_t k) { return i + k < words.size() ? words[i + k] : std::string(); };
  if (word(0) == "above" || word(0) == "below") return words[i++];
  if (word(0) == "to" && word(1) == "the" && (word(2) == "left" || word(2) == "right") &&
      word(3) == "of") {
    const std::string rel = "to the " + word(2) + " of";
    i += 4;
    return rel;
  }
  return {};
}

}  // namespace

const std::vector<std::string>& scene_nouns() {
  static const std::vector<std::string> nouns{"t-shirt", "trouser",   "pullover", "dress",
                                              "coat",    "sandal",    "shirt",    "sneaker",
                                              "bag",     "ankle boot"};
  return nouns;
}

void make_scenes(const SceneOptions& options) {
  check_options(options);
  check_not_a_file(options.output);
  // One run per folder; a folder left empty by a refused run goes with the lock.
  fs::path out = fs::path(options.output).lexically_normal();
  if (!out.has_filename()) out = out.parent_path();  // "data/scenes/"
  std::error_code ec;
  if (fs::is_symlink(out, ec)) out = fs::canonical(out);  // the rename replaces the folder itself
  io::FolderLock lock(out.string(), "--out");
  check_output(options.output);

  // Read everything before creating anything, so that bad data leaves no half-made folder.
  std::unique_ptr<Dataset> train_file, test_file;
  ArticleRange train_range, val_range, test_range;
  if (options.train + options.val > 0) {
    train_file = open_articles(options.fashion_mnist, Split::train);
    // Fashion-MNIST's 60,000: the first 50,000 for train, the last 10,000 for val; a smaller file
    // (tests) is cut in the same proportion.
    const int64_t n = train_file->size(), val_begin = n - n / 6;
    if (options.train > 0)
      train_range = article_range(*train_file, 0, val_begin, options.max_objects, "train");
    if (options.val > 0)
      val_range = article_range(*train_file, val_begin, n, options.max_objects, "val");
  }
  if (options.test > 0) {
    test_file = open_articles(options.fashion_mnist, Split::val);
    test_range = article_range(*test_file, 0, test_file->size(), options.max_objects, "test");
  }
  for (const Dataset* data : {train_file.get(), test_file.get()})
    if (data) load_article(*data, 0);  // the size check, before any folder is made

  remove_stale_temporaries_of(out);
  SceneOptions into = options;
  const fs::path tmp = temporary_beside(out);
  into.output = tmp.string();
  const SplitPlan plans[] = {{"train", 0, options.train, &train_range},
                             {"val", 1, options.val, &val_range},
                             {"test", 2, options.test, &test_range}};
  try {
    for (const SplitPlan& plan : plans) write_split(into, plan);
  } catch (...) {
    fs::remove_all(tmp, ec);
    throw;
  }
  lock.remove_file();
  move_into_place(tmp, out);
}

SceneCaptionCheck check_scene_caption(const std::string& caption,
                                      const std::vector<SceneObject>& objects) {
  // The grammar: "a N1 R1 a N2" then (" and a Nk Rk it")*, where R1 relates N1 to N2 and Rk
  // relates Nk to N(k-1).
  const std::vector<std::string> words = words_of(caption);
  std::vector<std::string> nouns, relations;
  size_t i = 0;
  auto noun = [&]() {
    if (i >= words.size() || words[i] != "a") return false;
    ++i;
    nouns.push_back(noun_at(words, i));
    return !nouns.back().empty();
  };
  auto stated = [&]() {
    relations.push_back(relation_at(words, i));
    return !relations.back().empty();
  };
  SceneCaptionCheck check;
  if (!noun() || !stated() || !noun()) return check;
  while (i < words.size()) {
    if (words[i++] != "and" || !noun() || !stated() || i >= words.size() || words[i++] != "it")
      return check;
  }
  check.grammatical = true;

  // Each noun's article: nouns name articles by class, and a scene with two articles of one class
  // (which make-scenes never writes) has no right caption.
  std::vector<const SceneObject*> named;
  std::vector<int> times(objects.size(), 0);
  bool distinct = objects.size() >= 2;
  for (size_t a = 0; a < objects.size(); ++a)
    for (size_t b = a + 1; b < objects.size(); ++b) distinct &= objects[a].name != objects[b].name;
  for (const std::string& name : nouns) {
    const auto it = std::find_if(objects.begin(), objects.end(),
                                 [&](const SceneObject& o) { return o.name == name; });
    named.push_back(it == objects.end() ? nullptr : &*it);
    if (it != objects.end()) ++times[static_cast<size_t>(it - objects.begin())];
  }
  check.articles = distinct && nouns.size() == objects.size() &&
                   std::all_of(times.begin(), times.end(), [](int t) { return t == 1; });
  if (!distinct) return check;
  for (size_t k = 0; k < relations.size(); ++k) {
    // Relation k: the first noun to the second, then each later noun to the one before it.
    const SceneObject* subject = named[k == 0 ? 0 : k + 1];
    const SceneObject* other = named[k == 0 ? 1 : k];
    if (!subject || !other || subject == other) continue;
    const bool right = relations[k] == relation(*subject, *other);
    if (subject->row == other->row) {
      ++check.horizontal;
      check.horizontal_true += right ? 1 : 0;
    } else {
      ++check.vertical;
      check.vertical_true += right ? 1 : 0;
    }
  }
  return check;
}

void check_boxes_inside(const std::vector<SceneObject>& objects, int64_t height, int64_t width) {
  for (const SceneObject& o : objects) {
    const Box& b = o.box;
    if (b.x < 0 || b.y < 0 || b.width <= 0 || b.height <= 0 || b.x + b.width > width ||
        b.y + b.height > height)
      throw Error("the box of the scene's " + o.name + " (" + std::to_string(b.x) + ", " +
                  std::to_string(b.y) + ", " + std::to_string(b.width) + ", " +
                  std::to_string(b.height) + ") is not inside the " + std::to_string(height) + "x" +
                  std::to_string(width) + " image");
  }
}

int64_t flip_articles(float* chw, int64_t channels, int64_t height, int64_t width,
                      const std::vector<SceneObject>& objects, bool mirrored, float p,
                      uint64_t key) {
  check_boxes_inside(objects, height, width);
  int64_t flipped = 0;
  for (size_t k = 0; k < objects.size(); ++k) {
    const Box& b = objects[k].box;
    if (ops::Rng::to_uniform(ops::Rng::hash(key, static_cast<uint64_t>(k))) >= p) continue;
    const int64_t x0 = mirrored ? width - b.x - b.width : b.x;
    for (int64_t c = 0; c < channels; ++c)
      for (int64_t y = b.y; y < b.y + b.height; ++y) {
        float* row = chw + (c * height + y) * width + x0;
        std::reverse(row, row + b.width);
      }
    ++flipped;
  }
  return flipped;
}

int64_t erase_articles(float* chw, int64_t channels, int64_t height, int64_t width,
                       const std::vector<SceneObject>& objects, bool mirrored, float p,
                       uint64_t key) {
  check_boxes_inside(objects, height, width);
  int64_t erased = 0;
  std::vector<float> box;
  for (size_t k = 0; k < objects.size(); ++k) {
    const Box& b = objects[k].box;
    const int64_t x0 = mirrored ? width - b.x - b.width : b.x;
    // The box copied out as an image of its own, erased, and copied back.
    box.resize(static_cast<size_t>(channels * b.height * b.width));
    auto rows = [&](bool out) {
      for (int64_t c = 0; c < channels; ++c)
        for (int64_t y = 0; y < b.height; ++y) {
          float* image_row = chw + (c * height + b.y + y) * width + x0;
          float* box_row = box.data() + (c * b.height + y) * b.width;
          if (out)
            std::copy(image_row, image_row + b.width, box_row);
          else
            std::copy(box_row, box_row + b.width, image_row);
        }
    };
    rows(true);
    ops::Rng rng(ops::Rng::hash(key, static_cast<uint64_t>(k)));
    if (!random_erasing(box.data(), channels, b.height, b.width, p, rng)) continue;
    rows(false);
    ++erased;
  }
  return erased;
}

bool caption_matches_scene(const std::string& caption, const std::vector<SceneObject>& objects) {
  return check_scene_caption(caption, objects).exact();
}

std::vector<NamedArticle> named_articles(const std::string& caption) {
  const std::vector<std::string> words = words_of(caption);
  std::vector<NamedArticle> found;
  for (size_t i = 0; i < words.size();) {
    const std::string noun = noun_at(words, i);
    if (noun.empty())
      ++i;
    else
      found.push_back({noun, static_cast<int64_t>(i) - 1});  // i is past the noun's last word
  }
  return found;
}

}  // namespace vitk::datasets
