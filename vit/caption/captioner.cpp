// Loading and running a captioning model: search batch by batch, forced cross-attention, scores.
#include "vit/caption/captioner.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>

#include "common/error.h"
#include "common/io/checkpoint_config.h"
#include "common/memory.h"
#include "common/progress.h"
#include "datasets/loader.h"
#include "datasets/scenes.h"
#include "vit/checkpoint.h"
#include "vit/evaluate.h"

namespace vitk::caption {

namespace {

// The keys whose values size a captioning model (a missing one would fall back to a default).
const std::vector<std::string> kCaptionSizeKeys = {
    "image_size", "patch_size", "channels",   "d_model",        "heads",        "d_ff",
    "layers",     "vocab_size", "max_length", "decoder_layers", "decoder_heads"};

}  // namespace

uint64_t caption_memory_bytes(const CaptionConfig& c) {
  const int64_t d = c.d_model(), f = c.d_ff();
  // The decoder's parameters (a lower bound: embeddings, positions, the layers' products), each
  // held three times while a checkpoint loads, on top of the encoder's (vit::memory_bytes).
  uint64_t params = sat_product({c.vocab_size, d, c.tie_embeddings ? 1 : 2});
  params = sat_add(params, sat_product({c.max_length, d}));
  params = sat_add(params, sat_product({c.decoder_layers, 8 * d + 2 * f, d}));
  return sat_add(vit::memory_bytes(c.encoder, 1), sat_mul(12, params));
}

decode::SearchSizes caption_search_sizes(const CaptionConfig& c,
                                         const decode::SearchOptions& search) {
  decode::SearchSizes z;
  z.vocab_size = c.vocab_size;
  z.decoder_layers = c.decoder_layers;
  z.d_model = c.d_model();
  z.d_ff = c.d_ff();
  z.memory_length = c.memory_tokens();
  z.target_length = decode::target_limit(z.memory_length, search, c.max_length);
  return z;
}

CaptionConfig caption_stored_config(const std::string& path, const io::CheckpointMeta& meta) {
  io::require_model_type(path, meta.config, "caption", "captioning",
                         "vitk caption-train writes them",
                         /*required=*/true);
  io::require_config_keys(path, meta.config, kCaptionSizeKeys);
  const CaptionConfig c = caption_config_from_map(meta.config, path);  // validate()'s limits
  const vit::VitConfig& e = c.encoder;
  const io::StoredTensors stored = io::list_checkpoint(path);
  io::check_layer_count(path, meta.config, stored, "blocks.", "layers", e.layers);
  io::check_layer_count(path, meta.config, stored, "decoder.layers.", "decoder_layers",
                        c.decoder_layers);
  const std::string proj_in = e.stem_channels.empty() ? "channels" : "stem_channels";
  io::check_implied_sizes(
      path, meta.config, stored,
      {{"cls_token", 2, e.d_model, {"d_model"}},
       {"pos_embed", 1, e.tokens(), {"image_size", "patch_size"}},
       {"blocks.0.mlp.fc1.weight", 0, e.d_ff, {"d_ff"}},
       {"patch_embed.proj.weight", 1, e.proj_channels(), {proj_in}},
       {"patch_embed.proj.weight", 2, e.proj_kernel(), {"patch_size"}},
       {"decoder.embed_tokens.weight", 0, c.vocab_size, {"vocab_size"}},
       {"decoder.embed_tokens.weight", 1, c.d_model(), {"d_model"}},
       {"decoder.embed_positions.weight", 0, c.max_length, {"max_length"}},
       {"decoder.layers.0.mlp.fc1.weight", 0, c.d_ff(), {"decoder_d_ff", "d_ff"}}});
  const std::string shortfall = memory_shortfall(caption_memory_bytes(c));
  if (!shortfall.empty())
    throw Error(path + ": the captioning model of " +
                io::config_values_text(meta.config, kCaptionSizeKeys) + " " + shortfall);
  return c;
}

LoadedCaptioner load_captioner(const std::string& path) {
  LoadedCaptioner out;
  out.meta = io::read_checkpoint_meta(path);
  out.config = caption_stored_config(path, out.meta);
  const auto spm = out.meta.files.find(kCaptionTokenizerFile);
  if (spm == out.meta.files.end())
    throw Error(path + ": the captioning checkpoint has no tokenizer (files/" +
                kCaptionTokenizerFile + ")");
  try {
    out.tokenizer = datasets::Tokenizer::from_bytes(spm->second);
  } catch (const Error& e) {
    throw Error(path + ": files/" + kCaptionTokenizerFile + ": " + e.what());
  }
  if (out.tokenizer.size() != out.config.vocab_size)
    throw Error(path + ": the tokenizer has " + std::to_string(out.tokenizer.size()) +
                " pieces, the model's vocab_size is " + std::to_string(out.config.vocab_size));
  out.params = std::make_unique<ParamStore>();
  out.model = std::make_unique<CaptionModel>(*out.params, out.config);
  out.params->finalize(/*gradients=*/false);
  io::load_checkpoint(path, *out.params, nullptr, /*int8=*/true);  // also vitk quantize's files
  return out;
}

std::vector<double> caption_log_probs(CaptionModel& model, nn::Context& ctx, const Tensor& images,
                                      const std::vector<const std::vector<int32_t>*>& captions,
                                      const std::vector<int64_t>& image_of) {
  const int64_t R = static_cast<int64_t>(captions.size()), V = model.vocab_size();
  if (image_of.size() != captions.size())
    throw Error("caption_log_probs: " + std::to_string(R) + " captions but " +
                std::to_string(image_of.size()) + " image rows");
  std::vector<double> log_prob(static_cast<size_t>(R), 0.0);
  if (R == 0) return log_prob;
  const int64_t B = images.dim(0);
  int64_t T = 1;  // steps: BOS + the longest caption's tokens
  for (int64_t k = 0; k < R; ++k) {
    const int64_t n = static_cast<int64_t>(captions[static_cast<size_t>(k)]->size());
    if (n + 1 > model.max_length())
      throw Error("caption_log_probs: caption " + std::to_string(k) + " has " + std::to_string(n) +
                  " tokens, the model reads at most " + std::to_string(model.max_length() - 1));
    for (const int32_t id : *captions[static_cast<size_t>(k)])
      if (id < 0 || id >= V)
        throw Error("caption_log_probs: caption " + std::to_string(k) + " has token " +
                    std::to_string(id) + ", outside the vocabulary of " + std::to_string(V));
    const int64_t b = image_of[static_cast<size_t>(k)];
    if (b < 0 || b >= B)
      throw Error("caption_log_probs: image row " + std::to_string(b) + " of a batch of " +
                  std::to_string(B));
    T = std::max(T, n + 1);
  }
  nn::Context inference = ctx;
  inference.training = false;
  const Tensor memory = model.encode(inference, images);  // [B, Tm, d]
  Tensor memory_lengths({B}, DType::i32);
  std::fill_n(memory_lengths.i32(), B, static_cast<int32_t>(memory.dim(1)));
  nn::Decoder::State state;
  model.start(inference, memory, memory_lengths, T, state);
  state.reorder(image_of);  // each image's memory caches once per caption
  Tensor tokens({R}, DType::i32);
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t k = 0; k < R; ++k) {
      const std::vector<int32_t>& c = *captions[static_cast<size_t>(k)];
      const int64_t n = static_cast<int64_t>(c.size());
      tokens.i32()[k] = t == 0 ? Vocabulary::kBos : t <= n ? c[static_cast<size_t>(t - 1)] : 0;
    }
    const Tensor logits = model.step(inference, tokens, state);  // [R, V]
    for (int64_t k = 0; k < R; ++k) {
      const std::vector<int32_t>& c = *captions[static_cast<size_t>(k)];
      const int64_t n = static_cast<int64_t>(c.size());
      if (t > n) continue;
      const int32_t target = t < n ? c[static_cast<size_t>(t)] : Vocabulary::kEos;
      const float* z = logits.f32() + k * V;
      log_prob[static_cast<size_t>(k)] +=
          static_cast<double>(z[target]) - decode::row_stats(z, V).lse;  // as a search scores it
    }
  }
  return log_prob;
}

std::vector<int64_t> word_of_pieces(const Vocabulary& tokenizer, const std::vector<int32_t>& ids) {
  const std::vector<int> as_int(ids.begin(), ids.end());
  const std::vector<std::string> pieces = tokenizer.pieces(as_int);
  const std::string boundary = "\xe2\x96\x81";  // "▁" begins a word
  std::vector<int64_t> words(pieces.size());
  int64_t word = -1;
  for (size_t i = 0; i < pieces.size(); ++i) {
    const std::string& piece = pieces[i];
    if (word < 0 || piece.rfind(boundary, 0) == 0) ++word;
    words[i] = word;
    // A phrase piece ("▁to▁the▁left▁of", --phrases) begins more words inside it.
    for (size_t at = piece.find(boundary, 1); at != std::string::npos;
         at = piece.find(boundary, at + boundary.size()))
      ++word;
  }
  return words;
}

namespace {

// Captions one batch of preprocessed images (rows of `images`, f32 [B, C, H, W]) into
// results[first + b] for each row b (or results[ids[b]] when ids is given).
class BatchCaptioner {
 public:
  BatchCaptioner(CaptionModel& model, const Vocabulary& tokenizer, const CaptionRunOptions& options)
      : model_(model),
        tokenizer_(tokenizer),
        options_(options),
        step_model_(model),
        searcher_(step_model_, search_of(options)) {}

  void run(const Tensor& images, const std::function<CaptionResult&(int64_t)>& result_of) {
    const CaptionConfig& c = model_.config();
    const int64_t B = images.dim(0);
    nn::Context ctx = searcher_.encode_context();
    const Tensor memory = model_.encode(ctx, images);  // [B, Tm, d]
    Tensor lengths({B}, DType::i32);
    for (int64_t b = 0; b < B; ++b) lengths.i32()[b] = static_cast<int32_t>(memory.dim(1));
    std::vector<std::vector<decode::Hypothesis>> found = searcher_.search(memory, lengths);
    const int64_t image_floats =
        c.encoder.channels * c.encoder.image_height * c.encoder.image_width;
    for (int64_t b = 0; b < B; ++b) {
      CaptionResult& r = result_of(b);
      r.read = true;
      r.hypotheses = std::move(found[static_cast<size_t>(b)]);
      for (const decode::Hypothesis& h : r.hypotheses)
        r.texts.push_back(tokenizer_.decode(std::vector<int>(h.tokens.begin(), h.tokens.end())));
      if (!options_.attention || r.hypotheses.empty()) continue;
      r.input = Tensor({c.encoder.channels, c.encoder.image_height, c.encoder.image_width});
      std::copy_n(images.f32() + b * image_floats, image_floats, r.input.f32());
      attend(r);
    }
  }

 private:
  static decode::SearchOptions search_of(const CaptionRunOptions& options) {
    decode::SearchOptions so = options.search;
    so.precision = options.precision;
    return so;
  }

  // The cross-attention of r's best caption over its image.
  void attend(CaptionResult& r) {
    const CaptionConfig& c = model_.config();
    attention_arena_.reset();
    nn::Context actx{false, &attention_arena_, nullptr};
    nn::set_inference_precision(actx, options_.precision);
    const decode::Hypothesis& best = r.hypotheses.front();
    // The tokens the decoder read: as many as fit its positions.
    std::vector<int32_t> tokens = best.tokens;
    bool with_eos = best.finished;
    if (static_cast<int64_t>(tokens.size()) + (with_eos ? 1 : 0) > c.max_length) {
      tokens.resize(static_cast<size_t>(c.max_length));
      with_eos = false;
    }
    if (tokens.empty() && !with_eos) return;
    r.attention =
        model_
            .cross_attention(actx,
                             r.input.reshaped({1, r.input.dim(0), r.input.dim(1), r.input.dim(2)}),
                             tokens, with_eos, options_.attention_layer, options_.attention_head)
            .clone();
  }

  CaptionModel& model_;
  const Vocabulary& tokenizer_;
  const CaptionRunOptions& options_;
  CaptionStepModel step_model_;
  decode::Searcher searcher_;
  Arena attention_arena_;
};

}  // namespace

std::vector<CaptionResult> caption_set(CaptionModel& model, const Vocabulary& tokenizer,
                                       const datasets::CaptionSet& set,
                                       const CaptionRunOptions& options, Progress* progress) {
  const CaptionConfig& c = model.config();
  std::vector<CaptionResult> results(set.images.size());
  for (size_t i = 0; i < results.size(); ++i) results[i].image = static_cast<int64_t>(i);
  if (set.images.empty()) return results;
  const std::unique_ptr<datasets::Dataset> images = datasets::caption_images(set);
  datasets::LoaderOptions lo =
      vit::eval_loader_options(c.encoder, options.batch_size, options.prefetch);
  lo.num_classes = images->size();
  datasets::Loader loader(*images, lo);
  BatchCaptioner captioner(model, tokenizer, options);
  loader.start_epoch(0);
  datasets::Batch batch;
  int64_t done = 0;
  while (loader.next(batch)) {
    const int64_t B = batch.labels.numel();
    if (B == 0) continue;
    captioner.run(batch.images, [&](int64_t b) -> CaptionResult& {
      return results[static_cast<size_t>(batch.labels.i32()[b])];
    });
    done += B;
    if (progress) progress->update(done, done, "");
  }
  return results;
}

std::vector<CaptionResult> caption_images(CaptionModel& model, const Vocabulary& tokenizer,
                                          const Tensor& images, const CaptionRunOptions& options) {
  const int64_t n = images.dim(0);
  std::vector<CaptionResult> results(static_cast<size_t>(n));
  BatchCaptioner captioner(model, tokenizer, options);
  for (int64_t start = 0; start < n; start += options.batch_size) {
    const int64_t end = std::min(n, start + options.batch_size);
    captioner.run(images.rows(start, end), [&](int64_t b) -> CaptionResult& {
      CaptionResult& r = results[static_cast<size_t>(start + b)];
      r.image = start + b;
      return r;
    });
  }
  return results;
}

std::vector<NamedCell> named_cells(const Vocabulary& tokenizer, const std::vector<int32_t>& ids,
                                   const std::string& normalised,
                                   const std::vector<datasets::SceneObject>& objects) {
  const std::vector<int64_t> words = word_of_pieces(tokenizer, ids);
  std::vector<NamedCell> cells;
  for (const datasets::NamedArticle& named : datasets::named_articles(normalised)) {
    NamedCell c;
    const auto object = std::find_if(objects.begin(), objects.end(),
                                     [&](const auto& o) { return o.name == named.name; });
    if (object != objects.end()) c.object = &*object;
    const auto piece = std::find(words.begin(), words.end(), named.word);
    if (piece != words.end()) c.token = piece - words.begin();
    cells.push_back(c);
  }
  return cells;
}

std::vector<int32_t> patches_in(const CaptionConfig& config, const datasets::Box& box) {
  const int64_t P = config.encoder.patch_size, Wg = config.encoder.grid_width();
  const int64_t Hg = config.encoder.grid_height(), first = config.memory_class_token ? 1 : 0;
  std::vector<int32_t> rows;
  for (int64_t p = 0; p < Hg * Wg; ++p) {
    const double x = (static_cast<double>(p % Wg) + 0.5) * static_cast<double>(P);
    const double y = (static_cast<double>(p / Wg) + 0.5) * static_cast<double>(P);
    if (box.contains(x, y)) rows.push_back(static_cast<int32_t>(first + p));
  }
  return rows;
}

CaptionScores score_captions(const CaptionConfig& config, const Vocabulary& tokenizer,
                             const datasets::CaptionSet& set,
                             const std::vector<CaptionResult>& results) {
  CaptionScores s;
  std::vector<std::string> hyps;
  std::vector<std::vector<std::string>> refs;
  size_t most_refs = 0;
  for (const auto& image : set.images) most_refs = std::max(most_refs, image.captions.size());
  refs.resize(most_refs);
  const int64_t first_patch = config.memory_class_token ? 1 : 0;
  for (const CaptionResult& r : results) {
    const datasets::CaptionedImage& image = set.images.at(static_cast<size_t>(r.image));
    if (!r.read || image.captions.empty()) continue;
    ++s.images;
    const std::string text =
        r.texts.empty() ? std::string() : datasets::normalize_caption(r.texts.front());
    hyps.push_back(text);
    for (size_t k = 0; k < most_refs; ++k)
      refs[k].push_back(k < image.captions.size() ? datasets::normalize_caption(image.captions[k])
                                                  : std::string());
    if (image.objects.empty()) continue;
    ++s.scenes;
    const datasets::SceneCaptionCheck check = datasets::check_scene_caption(text, image.objects);
    s.exact += check.exact() ? 1 : 0;
    s.articles += check.articles ? 1 : 0;
    s.horizontal += check.horizontal;
    s.horizontal_true += check.horizontal_true;
    s.vertical += check.vertical;
    s.vertical_true += check.vertical_true;
    if (r.attention.empty() || r.hypotheses.empty()) continue;
    const std::vector<NamedCell> named =
        named_cells(tokenizer, r.hypotheses.front().tokens, text, image.objects);
    for (size_t k = 0; k < named.size(); ++k) {
      if (!named[k].object) continue;  // a noun the scene does not have
      const size_t place = std::min<size_t>(k, s.nouns_at.size() - 1);
      ++s.nouns;
      ++s.nouns_at[place];
      const int64_t row = named[k].token;
      if (row < 0 || row >= r.attention.dim(0)) continue;
      const int64_t Tm = r.attention.dim(1);
      const float* w = r.attention.f32() + row * Tm;
      const int64_t best = std::max_element(w + first_patch, w + Tm) - w;
      const std::vector<int32_t> cell = patches_in(config, named[k].object->cell);
      const int64_t hit = std::binary_search(cell.begin(), cell.end(), best) ? 1 : 0;
      s.in_cell += hit;
      s.in_cell_at[place] += hit;
    }
  }
  if (!hyps.empty()) s.bleu = decode::corpus_bleu(hyps, refs);
  return s;
}

}  // namespace vitk::caption
