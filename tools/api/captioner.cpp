// vitk::Captioner: a captioning checkpoint and its SentencePiece model; images read and
// preprocessed as the classifier reads them, captioned by vit/caption/captioner's search.
#include <algorithm>

#include "datasets/image_io.h"
#include "tools/api/internal.h"

namespace vitk {
namespace {

Caption to_public(std::string path, std::string error, caption::CaptionResult& r) {
  Caption c;
  c.path = std::move(path);
  c.error = std::move(error);
  for (size_t k = 0; k < r.hypotheses.size(); ++k)
    c.hypotheses.push_back(api::to_hypothesis(r.hypotheses[k], std::move(r.texts[k])));
  return c;
}

}  // namespace

Captioner::Captioner(const std::string& checkpoint, const CaptionerOptions& options) {
  api::guard([&] {
    auto m = std::make_unique<Impl>();
    static_cast<api::RunSettings&>(*m) =
        api::run_settings(checkpoint, options.precision, options.batch_size, options.threads);
    m->loaded = caption::load_captioner(checkpoint);
    impl_ = std::move(m);
  });
}

Captioner::~Captioner() = default;
Captioner::Captioner(Captioner&&) noexcept = default;
Captioner& Captioner::operator=(Captioner&&) noexcept = default;

int64_t Captioner::image_height() const {
  return impl_->loaded.config.encoder.image_height;
}
int64_t Captioner::image_width() const {
  return impl_->loaded.config.encoder.image_width;
}
int64_t Captioner::channels() const {
  return impl_->loaded.config.encoder.channels;
}
std::string Captioner::precision() const {
  return ops::precision_name(impl_->precision);
}

caption::CaptionRunOptions Captioner::Impl::run_options(const SearchOptions& search) const {
  caption::CaptionRunOptions o;
  o.search = api::to_search(search, precision, loaded.config.vocab_size);
  o.precision = precision;
  o.batch_size = batch_size;
  return o;
}

void Captioner::Impl::check_memory(const caption::CaptionRunOptions& options,
                                   int64_t images) const {
  api::check_search_memory(caption::caption_search_sizes(loaded.config, options.search),
                           options.search, std::min(images, options.batch_size), options.batch_size,
                           "image");
}

std::vector<caption::CaptionResult> Captioner::Impl::run(
    const Tensor& images, const caption::CaptionRunOptions& options) {
  check_memory(options, images.dim(0));
  std::lock_guard<std::mutex> lock(api::compute_mutex());
  api::ThreadScope scope(threads);
  return caption::caption_images(*loaded.model, loaded.tokenizer, images, options);
}

std::vector<caption::CaptionResult> Captioner::Impl::run_files(
    const std::vector<std::string>& paths, const caption::CaptionRunOptions& options,
    std::vector<std::string>& errors) {
  const vit::VitConfig& c = loaded.config.encoder;
  const int64_t n = static_cast<int64_t>(paths.size());
  check_memory(options, n);  // before any image is read
  std::vector<caption::CaptionResult> results(paths.size());
  errors.assign(paths.size(), std::string());
  datasets::DecodeOptions decode;
  const int64_t floats = c.channels * c.image_height * c.image_width;
  for (int64_t start = 0; start < n; start += batch_size) {
    const int64_t end = std::min(n, start + batch_size);
    // The batch's readable files, preprocessed, and which path each row is.
    Tensor images({end - start, c.channels, c.image_height, c.image_width});
    std::vector<int64_t> rows;
    for (int64_t i = start; i < end; ++i) {
      if (vit::read_image_file(paths[static_cast<size_t>(i)], c.channels, c.image_height,
                               c.image_width, c.preprocess, decode,
                               images.f32() + static_cast<int64_t>(rows.size()) * floats,
                               errors[static_cast<size_t>(i)]))
        rows.push_back(i);
    }
    if (rows.empty()) continue;
    std::vector<caption::CaptionResult> batch =
        run(images.rows(0, static_cast<int64_t>(rows.size())), options);
    for (size_t b = 0; b < rows.size(); ++b) {
      batch[b].image = rows[b];
      results[static_cast<size_t>(rows[b])] = std::move(batch[b]);
    }
  }
  for (int64_t i = 0; i < n; ++i) results[static_cast<size_t>(i)].image = i;
  return results;
}

std::vector<Caption> Captioner::caption(const std::vector<std::string>& paths,
                                        const SearchOptions& search) const {
  std::vector<Caption> out;
  api::guard([&] {
    std::vector<std::string> errors;
    std::vector<caption::CaptionResult> results =
        impl_->run_files(paths, impl_->run_options(search), errors);
    for (size_t i = 0; i < paths.size(); ++i)
      out.push_back(to_public(paths[i], std::move(errors[i]), results[i]));
  });
  return out;
}

std::vector<Caption> Captioner::caption(const std::vector<Image>& images,
                                        const SearchOptions& search) const {
  std::vector<Caption> out;
  api::guard([&] {
    const vit::VitConfig& c = impl_->loaded.config.encoder;
    const Tensor input =
        api::preprocess_images(images, c.channels, c.image_height, c.image_width, c.preprocess);
    std::vector<caption::CaptionResult> results = impl_->run(input, impl_->run_options(search));
    for (caption::CaptionResult& r : results) out.push_back(to_public("", "", r));
  });
  return out;
}

}  // namespace vitk
