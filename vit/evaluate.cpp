// Evaluation of a ViT: top-1, top-5, loss and the confusion matrix, and `vitk eval`'s report.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ostream>
#include <sstream>

#include "common/error.h"
#include "common/finite.h"
#include "common/ops/ops.h"
#include "datasets/loader.h"
#include "vit/checkpoint.h"
#include "vit/classify.h"
#include "vit/evaluate.h"

namespace vitk::vit {
namespace {

constexpr int64_t kTopK = 5;
constexpr int64_t kMaxMatrixClasses = 40;  // wider matrices are unreadable on a terminal

// Columns of one image's logits: the arg-max (first on ties, as torch.argmax) and whether the
// label is among the k largest (ties broken by index, as a stable sort would).
void score_row(const float* row, int64_t classes, int label, int64_t& predicted, bool& in_top_k) {
  predicted = std::max_element(row, row + classes) - row;
  const float x = row[label];
  int64_t rank = 0;
  for (int64_t j = 0; j < classes; ++j) rank += row[j] > x || (row[j] == x && j < label);
  in_top_k = rank < kTopK;
}

std::string percent(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f%%", x);
  return buf;
}

// Each row's logits finite, or a vitk::Error naming the image (when settings can) and the model.
void require_finite_rows(const Tensor& logits, int64_t batch, const EvalSettings& settings) {
  for (int64_t row = 0; row < logits.dim(0); ++row) {
    const Tensor one = logits.rows(row, row + 1);
    if (first_non_finite(one.f32(), one.numel()) < 0) continue;
    std::string what = settings.name_row ? settings.name_row(batch, row) : "";
    if (what.empty())
      what = "image " + std::to_string(row) + " of evaluation batch " + std::to_string(batch);
    require_finite_logits(one, what, settings.model);
  }
}

}  // namespace

EvalResult evaluate(VisionTransformer& model, datasets::Loader& loader, Arena& arena,
                    Progress* progress, const std::atomic<int>* stop,
                    const EvalSettings& settings) {
  const int64_t classes = model.config().num_classes;
  EvalResult r;
  r.classes = classes;
  r.confusion.assign(static_cast<size_t>(classes * classes), 0);
  if (settings.compare) r.comparison = PrecisionComparison{*settings.compare};
  double loss_sum = 0, abs_diff_sum = 0;
  loader.start_epoch(0);
  datasets::Batch batch;
  int64_t batches = 0;
  while (loader.next(batch)) {
    ++batches;
    if (batch.labels.numel() == 0) {  // every sample of the batch was unreadable
      if (progress) progress->update(batches, r.count, "");
      continue;
    }
    arena.reset();
    nn::Context ctx;
    ctx.training = false;
    ctx.arena = &arena;
    nn::set_inference_precision(ctx, settings.precision);
    // Not when comparing: the model runs at two precisions.
    ctx.one_copy_of_weights = settings.one_copy_of_weights && !settings.compare;
    ctx.free_block_activations = true;
    ctx.packed_weights = settings.packed_weights;
    const Tensor logits = model.forward(ctx, batch.images);  // [B, classes]
    require_finite_rows(logits, batch.index, settings);
    if (r.comparison) {
      nn::Context other = ctx;
      nn::set_inference_precision(other, *settings.compare);
      const Tensor second = model.forward(other, batch.images);  // [B, classes]
      PrecisionComparison& c = *r.comparison;
      const int32_t* labels = batch.labels.i32();
      for (int64_t i = 0; i < logits.dim(0); ++i) {
        const float* a = logits.f32() + i * classes;
        const float* b = second.f32() + i * classes;
        const int64_t pa = std::max_element(a, a + classes) - a;
        const int64_t pb = std::max_element(b, b + classes) - b;
        c.agree += pa == pb;
        c.top1 += pb == labels[i];
        for (int64_t j = 0; j < classes; ++j) {
          const double d = std::fabs(static_cast<double>(a[j]) - b[j]);
          c.max_abs_diff = std::max(c.max_abs_diff, d);
          c.max_abs_logit = std::max(c.max_abs_logit, std::fabs(static_cast<double>(a[j])));
          abs_diff_sum += d;
        }
      }
    }
    const ops::CrossEntropyStats s = ops::cross_entropy_forward(logits, batch.labels, 0.f);
    loss_sum += s.loss * static_cast<double>(s.count);
    r.batch_loss_sums.emplace_back(batch.index, s.loss * static_cast<double>(s.count));
    const int64_t b = logits.dim(0);
    const float* x = logits.f32();
    const int32_t* labels = batch.labels.i32();
    for (int64_t i = 0; i < b; ++i) {
      int64_t predicted = 0;
      bool top_k = false;
      score_row(x + i * classes, classes, labels[i], predicted, top_k);
      r.top1 += predicted == labels[i];
      r.top5 += top_k;
      ++r.confusion[static_cast<size_t>(labels[i] * classes + predicted)];
    }
    r.count += b;
    if (progress) {
      char metrics[64];
      std::snprintf(metrics, sizeof metrics, "top-1 %.2f%%", r.top1_percent());
      progress->update(batches, r.count, metrics);
    }
    if (stop && stop->load() != 0) {
      r.complete = false;
      break;
    }
  }
  if (progress) progress->finish();
  r.skipped = loader.skipped();
  r.loss = r.count ? loss_sum / static_cast<double>(r.count) : 0.0;
  if (r.comparison && r.count)
    r.comparison->mean_abs_diff = abs_diff_sum / static_cast<double>(r.count * classes);
  return r;
}

std::string format_comparison(const EvalResult& r, ops::Precision first) {
  if (!r.comparison) return "";
  const PrecisionComparison& c = *r.comparison;
  const double n = static_cast<double>(std::max<int64_t>(r.count, 1));
  char line[512];
  std::snprintf(line, sizeof line,
                "%s against %s on the same %lld images:\n"
                "  top-1 agreement: %s (%lld predictions differ)\n"
                "  top-1 accuracy: %s at %s, %s at %s\n"
                "  logits: max |difference| %.4g, mean |difference| %.3g (max |logit| %.4g)\n",
                ops::precision_name(c.precision), ops::precision_name(first),
                static_cast<long long>(r.count), percent(100.0 * c.agree / n).c_str(),
                static_cast<long long>(r.count - c.agree), percent(r.top1_percent()).c_str(),
                ops::precision_name(first), percent(100.0 * c.top1 / n).c_str(),
                ops::precision_name(c.precision), c.max_abs_diff, c.mean_abs_diff, c.max_abs_logit);
  return line;
}

std::string format_eval_report(const EvalResult& r, const std::vector<std::string>& names) {
  std::ostringstream out;
  auto name = [&](int64_t c) {
    return c < static_cast<int64_t>(names.size()) ? names[static_cast<size_t>(c)]
                                                  : std::to_string(c);
  };
  char line[512];
  std::snprintf(line, sizeof line, "top-1 accuracy: %s (%lld of %lld images)\n",
                percent(r.top1_percent()).c_str(), static_cast<long long>(r.top1),
                static_cast<long long>(r.count));
  out << line;
  std::snprintf(line, sizeof line, "top-5 accuracy: %s (%lld of %lld images)\n",
                percent(r.top5_percent()).c_str(), static_cast<long long>(r.top5),
                static_cast<long long>(r.count));
  out << line;
  std::snprintf(line, sizeof line, "loss: %.4f (cross-entropy, no smoothing)\n", r.loss);
  out << line;
  if (r.skipped)
    out << "skipped: " << r.skipped << " unreadable image" << (r.skipped == 1 ? "" : "s")
        << " (see the warnings above), not counted\n";

  // Per-class accuracy: recall of each true class.
  size_t width = 5;  // "class"
  for (int64_t c = 0; c < r.classes; ++c) width = std::max(width, name(c).size());
  const int w = static_cast<int>(width);
  out << "\nper-class accuracy:\n";
  std::snprintf(line, sizeof line, "  %3s  %-*s %8s %8s %9s\n", "#", w, "class", "images",
                "correct", "accuracy");
  out << line;
  for (int64_t c = 0; c < r.classes; ++c) {
    int64_t total = 0;
    for (int64_t p = 0; p < r.classes; ++p) total += r.at(c, p);
    const int64_t hit = r.at(c, c);
    std::snprintf(line, sizeof line, "  %3lld  %-*s %8lld %8lld %9s\n", static_cast<long long>(c),
                  w, name(c).c_str(), static_cast<long long>(total), static_cast<long long>(hit),
                  total ? percent(100.0 * hit / total).c_str() : "-");
    out << line;
  }

  if (r.classes > kMaxMatrixClasses) {
    out << "\n(confusion matrix omitted: " << r.classes << " classes)\n";
    return out.str();
  }
  // Confusion matrix: rows are true classes (index and name), columns predicted class indices.
  int64_t largest = 1;
  for (int64_t v : r.confusion) largest = std::max(largest, v);
  const size_t cell = std::max<size_t>(4, std::to_string(largest).size() + 1);
  auto pad = [cell](int64_t v) {
    std::string t = std::to_string(v);
    return std::string(cell - std::min(cell, t.size()), ' ') + t;
  };
  out << "\nconfusion matrix (rows: true class, columns: predicted class):\n";
  out << "  " << std::string(static_cast<size_t>(3 + 2 + w), ' ');
  for (int64_t p = 0; p < r.classes; ++p) out << pad(p);
  out << "\n";
  for (int64_t c = 0; c < r.classes; ++c) {
    std::snprintf(line, sizeof line, "  %3lld  %-*s", static_cast<long long>(c), w,
                  name(c).c_str());
    out << line;
    for (int64_t p = 0; p < r.classes; ++p) out << pad(r.at(c, p));
    out << "\n";
  }
  return out.str();
}

datasets::LoaderOptions eval_loader_options(const VitConfig& config, int64_t batch_size,
                                            int prefetch) {
  datasets::LoaderOptions lo;
  lo.batch_size = batch_size;
  lo.height = config.image_height;
  lo.width = config.image_width;
  lo.channels = static_cast<int>(config.channels);
  lo.num_classes = config.num_classes;
  lo.training = false;
  lo.preprocess = config.preprocess;
  lo.prefetch = prefetch;
  return lo;
}

EvalResult run_eval(const EvalOptions& o, std::ostream& out, bool tty) {
  if (o.model.empty()) throw UsageError("--model is required: the checkpoint to evaluate");
  if (o.data.empty()) throw UsageError("--data is required: the images to evaluate on");
  if (o.batch_size < 1)
    throw UsageError("--batch-size must be at least 1, got " + std::to_string(o.batch_size));
  LoadedVit loaded;
  try {
    loaded = load_vit(o.model, o.image_height, o.image_width, o.align_corners, o.pos_interpolation);
  } catch (const UsageError& e) {  // the only one load_vit throws: a size the patches do not tile
    throw UsageError("--image-size " + std::to_string(o.image_height) + "x" +
                     std::to_string(o.image_width) + ": " + e.what());
  }
  const VitConfig& cfg = loaded.config;
  std::unique_ptr<datasets::Dataset> data = datasets::open_dataset(o.data, o.split);
  const std::vector<std::string>& data_names = data->class_names();
  std::vector<std::string> names = loaded.meta.class_names;
  if (names.empty()) {
    if (static_cast<int64_t>(data_names.size()) != cfg.num_classes)
      throw Error(o.data + " has " + std::to_string(data_names.size()) + " classes, the model " +
                  o.model + " " + std::to_string(cfg.num_classes));
    names = data_names;
  } else if (names != data_names) {
    std::string detail = std::to_string(data_names.size()) + " classes in the data, " +
                         std::to_string(names.size()) + " in the model";
    for (size_t i = 0; i < std::min(names.size(), data_names.size()); ++i)
      if (names[i] != data_names[i]) {
        detail = "class " + std::to_string(i) + " is '" + data_names[i] + "' in the data, '" +
                 names[i] + "' in the model";
        break;
      }
    throw Error(o.data + ": the data's classes are not the model's (" + detail + ", " + o.model +
                ")");
  }

  // The memory of one image was checked at load; a batch is the images evaluated at once.
  const int64_t at_once = std::min<int64_t>(o.batch_size, std::max<int64_t>(1, data->size()));
  check_batch_memory(cfg, at_once, "--batch-size " + std::to_string(o.batch_size));
  datasets::Loader loader(*data, eval_loader_options(cfg, o.batch_size, o.prefetch));

  out << "model: " << o.model << " (vit " << cfg.image_height << "x" << cfg.image_width << "x"
      << cfg.channels << ", " << cfg.num_classes << " classes, step " << loaded.meta.step
      << ", epoch " << loaded.meta.epoch << ")\n";
  if (loaded.resampled)
    out << "positions resampled from " << loaded.stored_height << "x" << loaded.stored_width
        << " (grid " << loaded.stored_height / cfg.patch_size << "x"
        << loaded.stored_width / cfg.patch_size << ") to " << cfg.image_height << "x"
        << cfg.image_width << " (grid " << cfg.grid_height() << "x" << cfg.grid_width() << "), "
        << interpolation_name(loaded.interpolation) << ", align_corners "
        << (loaded.align_corners ? "true" : "false") << "\n";
  out << "precision: " << ops::describe_precision(o.precision);
  if (o.compare_precision)
    out << ", every batch also at " << ops::precision_name(*o.compare_precision);
  out << "\n";
  out << "data: " << data->source() << " (" << (o.split == datasets::Split::val ? "val" : "train")
      << " split, " << data->size() << " images)\n"
      << std::flush;
  ProgressOptions po;
  po.tty = tty;
  po.unit = "batch";
  po.line_every = 100;
  Progress progress(out, "eval", loader.batches_per_epoch(), po);
  Arena arena;
  EvalSettings settings;
  settings.precision = o.precision;
  settings.packed_weights = true;
  settings.compare = o.compare_precision;
  settings.one_copy_of_weights = true;
  settings.model = o.model;
  settings.name_row = [&](int64_t batch, int64_t row) {
    // The loader keeps the data's order; a row is its sample only while none was left out.
    const int64_t index = batch * o.batch_size + row;
    return loader.skipped() == 0 && index < data->size() ? data->describe(index) : std::string();
  };
  EvalResult r = evaluate(*loaded.model, loader, arena, &progress, nullptr, settings);
  if (r.count == 0)
    throw Error(data->source() + ": none of its " + std::to_string(data->size()) +
                " images can be read; see the warnings above");
  char line[128];
  std::snprintf(line, sizeof line, "%.1f images/s\n\n", progress.items_per_second());
  out << line << format_eval_report(r, names);
  if (r.comparison) out << "\n" << format_comparison(r, o.precision);
  return r;
}

}  // namespace vitk::vit
