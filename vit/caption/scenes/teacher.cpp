// --teacher (vit/caption/scenes/teacher.h): the classifier loaded and checked, then run over every
// article of the training scenes.
#include "vit/caption/scenes/teacher.h"

#include <algorithm>
#include <cctype>
#include <utility>

#include "common/error.h"
#include "common/io/checkpoint_config.h"
#include "common/timer.h"
#include "datasets/scenes.h"
#include "vit/caption/task.h"
#include "vit/checkpoint.h"
#include "vit/classify.h"
#include "vit/evaluate.h"

namespace vitk::caption::scenes {

std::vector<int32_t> teacher_tokens(const datasets::Tokenizer& tokenizer,
                                    const std::vector<std::string>& class_names,
                                    const std::string& teacher, std::vector<std::string>* names) {
  const std::vector<std::string>& nouns = datasets::scene_nouns();
  std::vector<int32_t> tokens;
  if (names) names->clear();
  for (size_t k = 0; k < class_names.size(); ++k) {
    std::string name = class_names[k].substr(0, class_names[k].find('/'));  // "T-shirt/top"
    std::transform(name.begin(), name.end(), name.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    if (std::find(nouns.begin(), nouns.end(), name) == nouns.end())
      throw UsageError("--teacher " + teacher + ": class " + std::to_string(k) + ", \"" +
                       class_names[k] + "\", is not an article of the scenes (a classifier " +
                       "of Fashion-MNIST's classes, such as vit/models/fmnist-vit.h5)");
    const std::string last = name.substr(name.rfind(' ') + 1);  // "boot" of "ankle boot"
    const std::vector<int> ids = tokenizer.encode(last);
    if (ids.empty())
      throw UsageError("--teacher " + teacher + ": the tokenizer has no piece for \"" + last +
                       "\"");
    tokens.push_back(static_cast<int32_t>(ids.front()));
    if (names) names->push_back(name);
  }
  return tokens;
}

namespace {

// The classifier at `path`: one with a name for each class, reading the captioner's channels.
// Its weights are read as f32: a file of `vitk quantize` is refused, as is one of another model
// (each named with the option).
vit::LoadedVit load_teacher(const std::string& path, const vit::VitConfig& captioner) {
  vit::LoadedVit t;
  try {
    io::require_f32_checkpoint(io::read_checkpoint_meta(path), path, "--teacher", "a teacher");
    t = vit::load_vit(path);
  } catch (const UsageError&) {
    throw;
  } catch (const Error& e) {
    throw Error(std::string("--teacher ") + e.what());
  }
  const vit::VitConfig& tc = t.config;
  if (tc.num_classes < 1 || static_cast<int64_t>(t.meta.class_names.size()) != tc.num_classes)
    throw UsageError("--teacher " + path + ": a classifier with a name for each of its " +
                     std::to_string(tc.num_classes) + " classes, not " +
                     std::to_string(t.meta.class_names.size()));
  if (tc.channels != captioner.channels)
    throw UsageError("--teacher " + path + " reads " + std::to_string(tc.channels) +
                     "-channel images, the captioner " + std::to_string(captioner.channels) +
                     "-channel ones");
  return t;
}

// A check of teacher_tokens' rule against the pieces named_cells found in the training captions:
// each noun of a class of the teacher (`nouns`) is its token there.
void check_teacher_nouns(const CaptionTask& task, const GuidePoints& points,
                         const std::vector<std::string>& nouns,
                         const std::vector<int32_t>& tokens) {
  const datasets::CaptionSet& set = task.train_set();
  for (size_t i = 0; i < points.size(); ++i)
    for (size_t c = 0; c < points[i].size(); ++c)
      for (const GuidePoint& p : points[i][c]) {
        const std::string& noun = set.images[i].objects.at(static_cast<size_t>(p.object)).name;
        const auto k = std::find(nouns.begin(), nouns.end(), noun);
        const int32_t said = task.caption_ids(i, false)[c].at(static_cast<size_t>(p.token));
        if (k != nouns.end() && tokens[static_cast<size_t>(k - nouns.begin())] != said)
          throw Error("--teacher: the noun \"" + noun + "\" is piece " + std::to_string(said) +
                      " in a caption of " + set.images[i].file_name + ", not " +
                      std::to_string(tokens[static_cast<size_t>(k - nouns.begin())]));
      }
}

// The articles' boxes are the teacher's input: no resizing, an article as the scene file drew it,
// so each box must be the teacher's h x w.
void check_article_sizes(const CaptionTask& task, const std::string& path, int64_t h, int64_t w) {
  for (const datasets::CaptionedImage& image : task.train_set().images)
    for (const datasets::SceneObject& o : image.objects)
      if (o.box.height != h || o.box.width != w)
        throw UsageError("--teacher " + path + " reads " + std::to_string(h) + "x" +
                         std::to_string(w) + " images, and the " + o.name + " of " +
                         image.file_name + " (" + task.paths().train_captions + ") is " +
                         std::to_string(o.box.height) + "x" + std::to_string(o.box.width));
}

// The teacher's logits for the crops of the training articles, a batch of them at a time.
class ArticleReader {
 public:
  ArticleReader(const vit::LoadedVit& teacher, const std::string& path,
                const std::vector<std::string>& nouns, const datasets::CaptionSet& set,
                TeacherLabels& out)
      : t_(teacher),
        path_(path),
        nouns_(nouns),
        set_(set),
        out_(out),
        crops_({kCrops, teacher.config.channels, teacher.config.image_height,
                teacher.config.image_width}) {
    ctx_.training = false;
    ctx_.arena = &arena_;
    nn::set_inference_precision(ctx_, ops::Precision::f32);
    ctx_.one_copy_of_weights = true;
    ctx_.free_block_activations = true;
  }

  // Where the crop of article `object` of image `image` goes; a full batch runs after it.
  float* next(size_t image, size_t object) {
    const auto& c = t_.config;
    float* crop = crops_.f32() + static_cast<int64_t>(owners_.size()) * c.channels *
                                     c.image_height * c.image_width;
    owners_.emplace_back(image, object);
    return crop;
  }
  bool full() const { return static_cast<int64_t>(owners_.size()) == kCrops; }

  // The teacher on the crops so far: their logits under their articles.
  void run() {
    if (owners_.empty()) return;
    arena_.reset();
    const int64_t n = static_cast<int64_t>(owners_.size()), K = t_.config.num_classes;
    const Tensor logits = t_.model->forward(ctx_, crops_.rows(0, n));  // [n, K]
    vit::require_finite_logits(logits, "--teacher " + path_);
    for (int64_t j = 0; j < n; ++j) {
      const auto [image, object] = owners_[static_cast<size_t>(j)];
      const float* z = logits.f32() + j * K;
      std::copy_n(z, K, out_.logits[image].data() + static_cast<int64_t>(object) * K);
      const size_t top = static_cast<size_t>(std::max_element(z, z + K) - z);
      out_.agrees += nouns_[top] == set_.images[image].objects[object].name ? 1 : 0;
    }
    out_.articles += n;
    owners_.clear();
  }

 private:
  static constexpr int64_t kCrops = 256;
  const vit::LoadedVit& t_;
  const std::string& path_;
  const std::vector<std::string>& nouns_;
  const datasets::CaptionSet& set_;
  TeacherLabels& out_;
  Arena arena_;
  nn::Context ctx_;
  Tensor crops_;
  std::vector<std::pair<size_t, size_t>> owners_;  // (image, object) of each crop
};

// Every article of the training scenes through the teacher, the loader's pixels (the eval
// transform) back to [0, 1] with the captioner's mean and std, then normalised as the teacher's.
void read_articles(const CaptionTask& task, ArticleReader& reader, const vit::VitConfig& tc,
                   TeacherLabels& out) {
  const vit::VitConfig& e = task.config().encoder;
  const int64_t K = tc.num_classes, C = e.channels, H = e.image_height, W = e.image_width;
  const int64_t h = tc.image_height, w = tc.image_width;
  const std::vector<float>&cm = e.preprocess.mean, &cs = e.preprocess.std;
  const std::vector<float>&tm = tc.preprocess.mean, &ts = tc.preprocess.std;
  const datasets::CaptionSet& set = task.train_set();
  datasets::LoaderOptions lo = vit::eval_loader_options(e, 64, task.options().prefetch);
  lo.num_classes = task.train_images().size();
  datasets::Loader loader(task.train_images(), lo);
  loader.start_epoch(0);
  datasets::Batch batch;
  while (loader.next(batch)) {
    for (int64_t r = 0; r < batch.labels.numel(); ++r) {
      const size_t image = static_cast<size_t>(batch.labels.i32()[r]);
      const auto& objects = set.images[image].objects;
      out.logits[image].assign(objects.size() * static_cast<size_t>(K), 0.f);
      const float* chw = batch.images.f32() + r * C * H * W;
      for (size_t o = 0; o < objects.size(); ++o) {
        const datasets::Box& b = objects[o].box;
        float* crop = reader.next(image, o);
        for (int64_t c = 0; c < C; ++c)
          for (int64_t y = 0; y < h; ++y)
            for (int64_t x = 0; x < w; ++x) {
              const size_t ch = static_cast<size_t>(c);
              const float pixel = chw[(c * H + b.y + y) * W + b.x + x] * cs[ch] + cm[ch];
              crop[(c * h + y) * w + x] = (pixel - tm[ch]) / ts[ch];
            }
        if (reader.full()) reader.run();
      }
    }
  }
  reader.run();
}

}  // namespace

TeacherLabels read_teacher(const CaptionTask& task, const std::string& path,
                           const ArticleTeacher& distillation, const GuidePoints& points) {
  Timer timer;
  const vit::LoadedVit t = load_teacher(path, task.config().encoder);
  TeacherLabels out;
  std::vector<std::string> nouns;  // of the teacher's classes
  out.teacher = distillation;
  out.teacher.tokens = teacher_tokens(task.tokenizer(), t.meta.class_names, path, &nouns);
  check_teacher_nouns(task, points, nouns, out.teacher.tokens);
  check_article_sizes(task, path, t.config.image_height, t.config.image_width);
  const datasets::CaptionSet& set = task.train_set();
  out.logits.assign(set.images.size(), {});
  ArticleReader reader(t, path, nouns, set, out);
  read_articles(task, reader, t.config, out);
  // The loader leaves out what it cannot read; an image the teacher did not see has no labels.
  for (size_t i = 0; i < out.logits.size(); ++i)
    if (out.logits[i].empty() && !set.images[i].objects.empty())
      throw Error("--teacher: " + set.images[i].file_name + " of " + task.paths().train_captions +
                  " could not be read, so the teacher has no labels for its articles");
  out.seconds = timer.seconds();
  return out;
}

}  // namespace vitk::caption::scenes
