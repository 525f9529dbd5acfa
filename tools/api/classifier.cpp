// vitk::Classifier: a ViT checkpoint, its class names and preprocessing, run on image files
// (vit/classify's decode-ahead pipeline) or on images in memory.
#include <algorithm>
#include <exception>
#include <optional>

#include "tools/api/internal.h"

namespace vitk {
namespace {

// The checkpoint's eval transform with the options' overrides, checked as `vitk classify` checks
// its flags.
datasets::Preprocess preprocess_of(const ClassifierOptions& o, datasets::Preprocess p,
                                   int64_t channels) {
  if (!o.resize.empty()) p.resize = o.resize;
  if (o.crop_fraction != 0) p.crop_fraction = o.crop_fraction;
  if (!o.interpolation.empty()) p.interpolation = o.interpolation;
  if (!o.mean.empty()) p.mean = o.mean;
  if (!o.std.empty()) p.std = o.std;
  try {
    p.validate(static_cast<int>(channels));
  } catch (const UsageError& e) {
    throw UsageError(std::string("preprocessing: ") + e.what());
  }
  return p;
}

// The model at the options' input size.
vit::LoadedVit load(const std::string& path, const ClassifierOptions& o) {
  if ((o.image_height > 0) != (o.image_width > 0) || o.image_height < 0 || o.image_width < 0)
    throw UsageError("image size " + std::to_string(o.image_height) + "x" +
                     std::to_string(o.image_width) + ": give both sides, or neither");
  std::optional<bool> align_corners;
  if (o.align_corners >= 0) align_corners = o.align_corners != 0;
  const vit::PosInterpolation interpolation =
      o.pos_interpolation.empty()
          ? vit::PosInterpolation::bicubic
          : vit::parse_pos_interpolation(o.pos_interpolation, "--pos-interpolation");
  try {
    return vit::load_vit(path, o.image_height, o.image_width, align_corners, interpolation);
  } catch (const UsageError& e) {  // load_vit's only one: a size it cannot run at
    if (o.image_height <= 0) throw;
    throw UsageError("--image-size " + std::to_string(o.image_height) + "x" +
                     std::to_string(o.image_width) + ": " + e.what());
  }
}

Classification to_public(const vit::ImageResult& r, const std::vector<std::string>& labels) {
  Classification c;
  c.path = r.path;
  c.error = r.error;
  c.classes = r.classes;
  c.probabilities = r.probabilities;
  for (int k : r.classes) c.labels.push_back(labels[static_cast<size_t>(k)]);
  return c;
}

vit::ClassifyOptions with_top_k(vit::ClassifyOptions o, int top_k) {
  if (top_k < 0) throw UsageError("--top-k must be at least 1");
  if (top_k > 0) o.top_k = top_k;
  return o;
}

}  // namespace

std::unique_ptr<Classifier::Impl> Classifier::Impl::make(std::string name, vit::LoadedVit loaded,
                                                         const ClassifierOptions& o) {
  auto m = std::make_unique<Impl>();
  m->name = std::move(name);
  m->loaded = std::move(loaded);
  const vit::VitConfig& config = m->loaded.config;
  vit::ClassifyOptions& options = m->options;
  options.batch_size = o.batch_size;
  options.top_k = o.top_k;
  options.packed_weights = o.packed_weights;
  options.decode.max_pixels = o.max_pixels;
  options.decode.quiet = true;  // codec chatter would break one-line-per-file errors
  options.decode.max_pixels_option = "--max-pixels";
  options.model = m->name;
  api::check_run_options(o.batch_size, o.threads);
  if (o.top_k < 1) throw UsageError("--top-k must be at least 1");
  if (o.max_pixels < 1) throw UsageError("--max-pixels must be at least 1");
  m->threads = o.threads;
  options.preprocess = preprocess_of(o, config.preprocess, config.channels);
  m->labels = o.labels.empty() ? m->loaded.meta.class_names : o.labels;
  if (!o.labels.empty() && static_cast<int64_t>(o.labels.size()) != config.num_classes)
    throw UsageError(std::to_string(o.labels.size()) + " labels given, but the model has " +
                     std::to_string(config.num_classes) + " classes");
  if (m->labels.empty())
    for (int64_t i = 0; i < config.num_classes; ++i) m->labels.push_back(std::to_string(i));
  return m;
}

Classifier::Classifier(const std::string& checkpoint, const ClassifierOptions& options) {
  api::guard([&] {
    const ops::Precision precision = api::resolve_precision(options.precision, checkpoint);
    impl_ = Impl::make(checkpoint, load(checkpoint, options), options);
    impl_->options.precision = precision;
  });
}

Classifier::Classifier(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Classifier::~Classifier() = default;
Classifier::Classifier(Classifier&&) noexcept = default;
Classifier& Classifier::operator=(Classifier&&) noexcept = default;

const std::vector<std::string>& Classifier::classes() const {
  return impl_->labels;
}
int64_t Classifier::image_height() const {
  return impl_->loaded.config.image_height;
}
int64_t Classifier::image_width() const {
  return impl_->loaded.config.image_width;
}
int64_t Classifier::channels() const {
  return impl_->loaded.config.channels;
}
std::string Classifier::precision() const {
  return ops::precision_name(impl_->options.precision);
}

void Classifier::classify(const std::vector<std::string>& paths,
                          const std::function<void(const Classification&)>& on_result,
                          int top_k) const {
  // An exception of on_result is the caller's own: it stops the run and reaches the caller as
  // it was thrown, not turned into a vitk::Error.
  struct Stopped {};
  std::exception_ptr caller;
  try {
    api::guard([&] {
      Impl& m = *impl_;
      const vit::ClassifyOptions options = with_top_k(m.options, top_k);
      vit::check_batch_memory(
          m.loaded.config, std::min<int64_t>(options.batch_size, std::max<size_t>(1, paths.size())),
          "batch_size " + std::to_string(options.batch_size));
      std::lock_guard<std::mutex> lock(api::compute_mutex());
      api::ThreadScope threads(m.threads);
      m.stats =
          vit::classify_files(*m.loaded.model, paths, options, [&](const vit::ImageResult& r) {
            if (m.observer) m.observer(r);
            try {
              on_result(to_public(r, m.labels));
            } catch (...) {
              caller = std::current_exception();
              throw Stopped{};
            }
          });
    });
  } catch (const Stopped&) {
    std::rethrow_exception(caller);
  }
}

std::vector<Classification> Classifier::classify(const std::vector<std::string>& paths,
                                                 int top_k) const {
  std::vector<Classification> out;
  out.reserve(paths.size());
  classify(
      paths, [&](const Classification& c) { out.push_back(c); }, top_k);
  return out;
}

std::vector<float> Classifier::logits(const std::vector<Image>& images) const {
  std::vector<float> out;
  api::guard([&] {
    Impl& m = *impl_;
    const vit::VitConfig& c = m.loaded.config;
    const Tensor input = api::preprocess_images(images, c.channels, c.image_height, c.image_width,
                                                m.options.preprocess);
    vit::check_batch_memory(c, std::min<int64_t>(m.options.batch_size, input.dim(0)),
                            "batch_size " + std::to_string(m.options.batch_size));
    std::lock_guard<std::mutex> lock(api::compute_mutex());
    api::ThreadScope threads(m.threads);
    const Tensor logits = vit::classify_logits(*m.loaded.model, input, m.options, m.arena);
    out.assign(logits.f32(), logits.f32() + logits.numel());
  });
  return out;
}

std::vector<Classification> Classifier::classify(const std::vector<Image>& images,
                                                 int top_k) const {
  std::vector<Classification> out;
  api::guard([&] {
    const vit::ClassifyOptions options = with_top_k(impl_->options, top_k);
    const std::vector<float> all = logits(images);
    const int64_t classes = impl_->loaded.config.num_classes;
    for (size_t i = 0; i < images.size(); ++i) {
      vit::ImageResult r;
      vit::top_k(all.data() + static_cast<int64_t>(i) * classes, classes, options.top_k, r.classes,
                 r.probabilities);
      out.push_back(to_public(r, impl_->labels));
    }
  });
  return out;
}

}  // namespace vitk
