// The scenes' extension of the captioning task (vit/caption/scenes/extras.h).
#include "vit/caption/scenes/extras.h"

#include <algorithm>
#include <cmath>
#include <ostream>

#include "common/dist/world.h"
#include "common/error.h"
#include "common/ops/ops.h"
#include "common/progress.h"
#include "datasets/scenes.h"
#include "vit/caption/captioner.h"

namespace vitk::caption::scenes {

void SceneTrainOptions::validate() const {
  auto need = [](bool ok, const std::string& what) {
    if (!ok) throw UsageError(what);
  };
  need(article_flip >= 0.f && article_flip <= 1.f, "--article-flip must be in [0, 1]");
  need(article_erase >= 0.f && article_erase <= 1.f, "--article-erase must be in [0, 1]");
  need(std::isfinite(guided_attention) && guided_attention >= 0.f,
       "--guided-attention must be >= 0");
  need(std::isfinite(article_loss) && article_loss >= 0.f, "--article-loss must be >= 0");
  need(distillation_type == "soft" || distillation_type == "hard",
       "--distillation-type must be soft or hard, got '" + distillation_type + "'");
  need(distillation_alpha >= 0.f && distillation_alpha <= 1.f,
       "--distillation-alpha must be in [0, 1]");
  // Beyond 100 both softmaxes are flat to within a few parts in 10^4 and the loss, scaled by
  // tau², only grows: a temperature there is a typo, not a setting.
  need(std::isfinite(distillation_tau) && distillation_tau > 0.f && distillation_tau <= 100.f,
       "--distillation-tau must be in (0, 100], got " + format_general(distillation_tau));
  need(teacher.empty() || article_loss > 0.f,
       "--teacher is distilled onto the article loss: give --article-loss as well");
}

SceneExtras::SceneExtras(const SceneTrainOptions& options) : o_(options) {
  o_.validate();
}

void SceneExtras::check_data(const CaptionTask& task) {
  const auto& images = task.train_set().images;
  const bool scenes =
      std::any_of(images.begin(), images.end(), [](const auto& i) { return !i.objects.empty(); });
  auto need_scenes = [&](float value, const std::string& what) {
    if (value > 0.f && !scenes)
      throw UsageError(what + " of generated scenes, and " + task.paths().train_captions +
                       " has no scene boxes (vitk make-scenes writes them)");
  };
  need_scenes(o_.article_flip, "--article-flip mirrors the articles");
  need_scenes(o_.article_erase, "--article-erase erases parts of the articles");
  need_scenes(o_.guided_attention, "--guided-attention points the attention at the articles");
  need_scenes(o_.article_loss, "--article-loss classifies the articles");
}

void SceneExtras::setup(const CaptionTask& task) {
  // These options read the boxes: one pass over them, naming the first option given.
  if (o_.article_flip > 0.f || o_.article_erase > 0.f || o_.guided_attention > 0.f ||
      o_.article_loss > 0.f)
    check_article_boxes(task, o_.article_flip > 0.f       ? "--article-flip"
                              : o_.article_erase > 0.f    ? "--article-erase"
                              : o_.guided_attention > 0.f ? "--guided-attention"
                                                          : "--article-loss");
  const bool guided = o_.guided_attention > 0.f || o_.article_loss > 0.f;  // the nouns' cells
  points_.clear();
  mirrored_points_.clear();
  if (guided) points_ = find_guide_points(task, false);
  if (guided && task.options().hflip > 0.f) mirrored_points_ = find_guide_points(task, true);
  teacher_ = TeacherLabels();
  if (!o_.teacher.empty()) {
    ArticleTeacher distillation;
    distillation.alpha = o_.distillation_alpha;
    distillation.tau = o_.distillation_tau;
    distillation.hard = o_.distillation_type == "hard";
    teacher_ = read_teacher(task, o_.teacher, distillation, points_);
  }
}

void SceneExtras::check_article_boxes(const CaptionTask& task, const std::string& option) const {
  const int64_t H = task.config().encoder.image_height, W = task.config().encoder.image_width;
  for (const datasets::CaptionedImage& image : task.train_set().images) {
    try {
      datasets::check_boxes_inside(image.objects, H, W);
    } catch (const Error& e) {
      throw UsageError(option + ": " + image.file_name + " of " + task.paths().train_captions +
                       ": " + e.what() + " of the model: its image size must be the scenes'");
    }
  }
}

void SceneExtras::augment(const CaptionTask& task, datasets::Batch& batch) {
  if (!(o_.article_flip > 0.f || o_.article_erase > 0.f)) return;
  const vit::VitConfig& enc = task.config().encoder;
  const int64_t C = enc.channels, H = enc.image_height, W = enc.image_width;
  for (int64_t r = 0; r < batch.labels.numel(); ++r) {
    const int64_t image = batch.labels.i32()[r];
    const bool mirrored = !batch.mirrored.empty() && batch.mirrored.at(static_cast<size_t>(r));
    // Keyed by (seed, epoch, image): the same draws on any rank and after a resume.
    auto key = [&](uint64_t salt) {
      return ops::Rng::hash(ops::Rng::hash(task.seed() ^ salt, static_cast<uint64_t>(task.epoch())),
                            static_cast<uint64_t>(image));
    };
    const auto& scene = task.train_set().images.at(static_cast<size_t>(image));
    float* chw = batch.images.f32() + r * C * H * W;
    // The boxes fit (check_article_boxes).
    if (o_.article_flip > 0.f)
      datasets::flip_articles(chw, C, H, W, scene.objects, mirrored, o_.article_flip,
                              key(0xF11BA7));
    if (o_.article_erase > 0.f)
      datasets::erase_articles(chw, C, H, W, scene.objects, mirrored, o_.article_erase,
                               key(0xE4A5E));
  }
}

const std::vector<GuidePoint>& SceneExtras::guide_points_of(const CaptionTask& task,
                                                            int64_t row) const {
  const size_t image = static_cast<size_t>(task.batch().labels.i32()[row]);
  const auto& points = task.mirrored_row(row) ? mirrored_points_.at(image) : points_.at(image);
  return points.at(task.target_index(row));
}

void SceneExtras::start_batch(const CaptionTask& task) {
  if (points_.empty()) return;
  // The terms are means over the global batch's nouns: the count of every rank's rows.
  int64_t nouns = 0;
  for (int64_t r = 0; r < task.batch().labels.numel(); ++r)
    nouns += static_cast<int64_t>(guide_points_of(task, r).size());
  const train::Partition& part = task.partition();
  if (part.ranks > 1) part.world->allreduce_sum(&nouns, 1);
  global_guides_ = nouns;
}

std::vector<AttentionGuide> SceneExtras::guides(const CaptionTask& task, int64_t begin,
                                                int64_t end) const {
  const int64_t W = task.config().encoder.image_width;
  std::vector<AttentionGuide> out;
  for (int64_t r = begin; r < end; ++r) {
    const size_t image = static_cast<size_t>(task.batch().labels.i32()[r]);
    const auto& objects = task.train_set().images.at(image).objects;
    const bool mirrored = task.mirrored_row(r);
    const std::vector<int32_t>& target = task.target_of(r);
    for (const GuidePoint& p : guide_points_of(task, r)) {
      datasets::Box cell = objects.at(static_cast<size_t>(p.object)).cell;
      if (mirrored) cell.x = W - cell.x - cell.width;
      const float* teacher = teacher_.logits.empty() ? nullptr
                                                     : teacher_.logits.at(image).data() +
                                                           static_cast<size_t>(p.object) *
                                                               teacher_.teacher.tokens.size();
      out.push_back({r - begin, p.token, patches_in(task.config(), cell),
                     target.at(static_cast<size_t>(p.token)), teacher});
    }
  }
  return out;
}

double SceneExtras::add_loss(const CaptionTask& task, const CaptionModel::LossHooks& model,
                             int64_t begin, int64_t end) {
  double nouns = 0;  // the mean over the global batch's nouns, of each term
  if (points_.empty() || global_guides_ == 0) return nouns;
  const std::vector<AttentionGuide> g = guides(task, begin, end);
  const float per_noun = 1.f / static_cast<float>(global_guides_);
  const double here = static_cast<double>(std::max<size_t>(g.size(), 1));
  if (o_.guided_attention > 0.f)
    nouns += guided_attention(model, g, o_.guided_attention, per_noun) / here;
  if (o_.article_loss > 0.f)
    nouns += article_loss(model, g, o_.article_loss, per_noun,
                          teacher_.logits.empty() ? nullptr : &teacher_.teacher) /
             here;
  return nouns;
}

std::vector<std::string> SceneExtras::loss_terms() const {
  return {"guided attention " + (o_.guided_attention > 0 ? format_general(o_.guided_attention) +
                                                               " (nouns to their cells)"
                                                         : std::string("off")),
          "article loss " + (o_.article_loss > 0
                                 ? format_general(o_.article_loss) + " (cells to their nouns)"
                                 : std::string("off"))};
}

void SceneExtras::log_setup(std::ostream& L) const {
  if (!o_.teacher.empty())
    L << "teacher: " << o_.teacher << ", " << o_.distillation_type << " distillation onto the "
      << "article loss, alpha " << format_general(o_.distillation_alpha)
      << (o_.distillation_type == "soft" ? ", tau " + format_general(o_.distillation_tau) : "")
      << "; it read " << teacher_.articles << " articles in " << format_fixed(teacher_.seconds, 1)
      << " s and names "
      << format_fixed(100.0 * static_cast<double>(teacher_.agrees) /
                          static_cast<double>(std::max<int64_t>(teacher_.articles, 1)),
                      2)
      << "% of them as the scenes do\n";
  if (o_.article_flip > 0.f)
    L << "augment: each article mirrored in its box with probability "
      << format_general(o_.article_flip) << "\n";
  if (o_.article_erase > 0.f)
    L << "augment: a random rectangle of each article's box erased with probability "
      << format_general(o_.article_erase) << "\n";
}

void SceneExtras::recipe(std::map<std::string, std::string>& recipe) const {
  if (o_.article_flip > 0.f) recipe["article-flip"] = format_general(o_.article_flip);
  if (o_.article_erase > 0.f) recipe["article-erase"] = format_general(o_.article_erase);
  if (o_.guided_attention > 0.f) recipe["guided-attention"] = format_general(o_.guided_attention);
  if (o_.article_loss > 0.f) recipe["article-loss"] = format_general(o_.article_loss);
  if (!o_.teacher.empty()) {
    recipe["teacher"] = o_.teacher;
    recipe["distillation-type"] = o_.distillation_type;
    recipe["distillation-alpha"] = format_general(o_.distillation_alpha);
    if (o_.distillation_type == "soft")
      recipe["distillation-tau"] = format_general(o_.distillation_tau);
  }
}

train::Result train_captions(const CaptionTrainOptions& options, const SceneTrainOptions& scenes,
                             std::ostream& log, bool tty, const std::atomic<int>* stop) {
  options.validate();  // the general options' errors first, as the command line checks them
  SceneExtras extras(scenes);
  return caption::train_captions(options, {&extras}, log, tty, stop);
}

}  // namespace vitk::caption::scenes
