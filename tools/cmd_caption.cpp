// `vitk caption-train` (a captioning model on COCO-format captions, the one training loop),
// `vitk caption` (captions of image files, n-best, sampling, JSON, attention pictures) and
// `vitk caption-eval` (BLEU-4, exact scene match, attention-in-cell on a caption set). Wiring
// only: the model is vit/caption/model, the task vit/caption/task with the generated scenes' extras
// (vit/caption/scenes/extras), running it vit/caption/captioner.
#include <unistd.h>

#include <filesystem>
#include <iostream>
#include <map>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "common/io/atomic_file.h"
#include "common/plot/plot.h"
#include "common/progress.h"
#include "common/quoted_name.h"
#include "tools/api/internal.h"
#include "tools/cli.h"
#include "tools/image_inputs.h"
#include "tools/search_options.h"
#include "tools/settings_options.h"
#include "tools/train_options.h"
#include "tools/vit_options.h"
#include "vit/caption/captioner.h"
#include "vit/caption/scenes/extras.h"
#include "vit/caption/task.h"
#include "vit/pictures.h"

namespace vitk::tools {
namespace {

namespace fs = std::filesystem;

constexpr const char* kBundledCaptioner = "vit/models/scenes-caption.h5";

std::string str(const po::variables_map& vm, const char* name) {
  return vm.count(name) ? vm[name].as<std::string>() : std::string();
}

// ---- caption-train -------------------------------------------------------------------------

// The [model] options of caption-train: every setting of caption::caption_schema() but the
// vocabulary, which is the tokenizer's (--vocab-size).
std::vector<settings::FieldInfo> caption_model_fields() {
  std::vector<settings::FieldInfo> fields;
  for (settings::FieldInfo& f : caption::caption_schema().infos())
    if (f.key != "vocab_size") fields.push_back(std::move(f));
  return fields;
}

void add_caption_train_options(po::options_description& o) {
  po::options_description data("Data and output");
  data.add_options()  //
      ("data", po::value<std::string>()->value_name("DIR"),
       "captions and images: vitk make-scenes's folder (captions_train.json, images/train, ...) "
       "or COCO 2017's (annotations/captions_train2017.json, train2017/, ...)")  //
      ("train-captions", po::value<std::string>()->value_name("FILE"),
       "training captions: COCO JSON, Flickr8k token file or Flickr30k results.csv")  //
      ("train-images", po::value<std::string>()->value_name("DIR"),
       "the folder of the training images (default: the captions file's folder)")            //
      ("val-captions", po::value<std::string>()->value_name("FILE"), "validation captions")  //
      ("val-images", po::value<std::string>()->value_name("DIR"),
       "the folder of the validation images")  //
      ("val-images-max", value_in<int64_t>(0, 1 << 30)->default_value(0)->value_name("N"),
       "validate on the first N images only (0: all)")  //
      ("output", po::value<std::string>()->value_name("DIR"),
       "run directory for last.h5, best.h5, metrics.csv")  //
      ("resume", po::value<std::string>()->value_name("CKPT"),
       "continue a run exactly from its checkpoint (OUTPUT/last.h5)")  //
      ("spm", po::value<std::string>()->value_name("MODEL"),
       "a SentencePiece .model (default: train one on the training captions)")  //
      ("vocab-size", value_in(8, static_cast<int>(kMaxVocabulary))->default_value(1000),
       "vocabulary of the SentencePiece model trained")  //
      ("phrases", po::value<std::string>()->value_name("LIST"),
       "comma-separated phrases the trained SentencePiece model keeps as one piece each, e.g. "
       "\"to the left of,to the right of\": the piece that decides the relation then follows "
       "the noun")  //
      ("encoder-from", po::value<std::string>()->value_name("CKPT"),
       "start the encoder from a ViT checkpoint (e.g. vit/models/fmnist-vit.h5): its architecture "
       "and weights at the model's image size, the classifier's head dropped")  //
      ("encoder-lr-scale", po::value<float>()->default_value(1.f, "1")->value_name("S"),
       "the encoder's learning rate as a share of --lr; 0 freezes it");
  po::options_description opt("Optimization (AdamW, linear warmup, cosine per step)");
  opt.add_options()                                                                       //
      ("epochs", value_in(1, static_cast<int>(kMaxEpochs))->default_value(10), "epochs")  //
      ("steps", value_in<int64_t>(0, int64_t{1} << 40)->default_value(0)->value_name("N"),
       "the run's length in optimizer steps instead of --epochs (0: off)")                       //
      ("batch-size", value_in<int64_t>(1, kMaxBatchSize)->default_value(64), "images per step")  //
      ("lr", po::value<float>()->default_value(5e-4f, "5e-4"), "peak learning rate")             //
      ("min-lr", po::value<float>()->default_value(1e-5f, "1e-5"), "at the end of the cosine")   //
      ("warmup-epochs", po::value<float>()->default_value(1.f, "1"), "linear warmup")            //
      ("weight-decay", po::value<float>()->default_value(0.05f, "0.05"),
       "AdamW's, not on biases, norms, positions")                                               //
      ("clip-grad", po::value<float>()->default_value(1.f, "1"), "max global L2 norm (0: off)")  //
      ("label-smoothing", po::value<float>()->default_value(0.1f, "0.1"), "label smoothing")     //
      ("attention-penalty", po::value<float>()->default_value(0.f, "0")->value_name("LAMBDA"),
       "the doubly stochastic attention penalty: LAMBDA * sum_i (1 - sum_t alpha_ti)^2 per "
       "image (Show, Attend and Tell; 0: off)")  //
      ("guided-attention", po::value<float>()->default_value(0.f, "0")->value_name("LAMBDA"),
       "on vitk make-scenes data: train the attention of each word that names an article to "
       "fall in that article's cell, loss LAMBDA * -log(its attention there) per noun "
       "(supervised attention; 0: off)")  //
      ("article-loss", po::value<float>()->default_value(0.f, "0")->value_name("LAMBDA"),
       "on vitk make-scenes data: the output layer, reading the mean of the memory tokens in "
       "the cell of each article a caption names, should write its noun, loss LAMBDA * "
       "-log p(noun) per noun (an auxiliary article classification; 0: off)")  //
      ("teacher", po::value<std::string>()->default_value("")->value_name("CKPT"),
       "a Fashion-MNIST classifier (vit/models/fmnist-vit.h5) distilled onto the article loss: "
       "its logits for each training article's box take a share of each noun's loss")  //
      ("distillation-type", po::value<std::string>()->default_value("soft")->value_name("TYPE"),
       "soft (the teacher's softmax at --distillation-tau) or hard (its top class)")  //
      ("distillation-alpha", po::value<float>()->default_value(0.5f, "0.5")->value_name("A"),
       "the teacher's share of the article loss, in [0, 1]")  //
      ("distillation-tau", po::value<float>()->default_value(1.f, "1")->value_name("T"),
       "the temperature of soft distillation, in (0, 100] (the loss is scaled by T^2)")  //
      ("references", po::value<std::string>()->default_value("random")->value_name("HOW"),
       "which of an image's reference captions a step trains on: random (one per image and "
       "epoch) or likeliest (the one the model scores highest before the step: it settles on "
       "one way to say each image)")  //
      ("hflip", po::value<float>()->default_value(0.f, "0")->value_name("P"),
       "mirror a training image left-right with probability P, its captions read with the "
       "words of --hflip-swap exchanged")  //
      ("hflip-swap", po::value<std::string>()->default_value("left:right")->value_name("PAIRS"),
       "comma-separated WORD:WORD pairs that a mirrored image's captions exchange")  //
      ("article-flip", po::value<float>()->default_value(0.f, "0")->value_name("P"),
       "on vitk make-scenes data: mirror each article inside its box with probability P (its "
       "captions stay true)")  //
      ("article-erase", po::value<float>()->default_value(0.f, "0")->value_name("P"),
       "on vitk make-scenes data: erase a random rectangle of each article's box with "
       "probability P (random erasing per article, so that none vanishes from its captions)")  //
      ("model-ema", switch_value(), "keep an EMA of the weights (ema.h5)")                     //
      ("model-ema-decay", po::value<double>()->default_value(0.999, "0.999"), "its decay")     //
      ("seed", po::value<uint64_t>()->default_value(42), "initialisation, order, dropout")     //
      ("max-steps", po::value<int64_t>()->default_value(0),
       "stop after this many steps (0: off)")                                                 //
      ("val-interval", po::value<int64_t>()->default_value(1), "epochs between validations")  //
      ("log-interval", po::value<int64_t>()->default_value(50),
       "steps between progress lines when the output is not a terminal")  //
      ("prefetch", value_in(1, kMaxPrefetch)->default_value(3), "batches prepared ahead");
  add_profile_options(opt);
  add_parallel_options(opt);
  add_checkpoint_every_option(opt);
  add_precision_option(opt, /*training=*/true);
  po::options_description model("Model (the [model] section of a config file)");
  add_settings_options(model, caption_model_fields(), "model type: caption");
  o.add(data).add(opt).add(model);
}

// --phrases "to the left of, to the right of": each item normalised as captions are.
std::vector<std::string> caption_phrases(const std::string& list) {
  std::vector<std::string> phrases;
  if (list.empty()) return phrases;
  std::istringstream in(list);
  for (std::string item; std::getline(in, item, ',');) {
    const std::string phrase = datasets::normalize_caption(item);
    if (phrase.empty())
      throw UsageError("--phrases '" + list +
                       "': an empty phrase (phrases are separated by commas)");
    phrases.push_back(phrase);
  }
  if (list.back() == ',')
    throw UsageError("--phrases '" + list + "': an empty phrase (phrases are separated by commas)");
  return phrases;
}

// --hflip-swap "left:right,up:down": the words themselves are checked by
// CaptionTrainOptions::validate.
caption::WordSwaps hflip_swaps(const std::string& list) {
  auto refused = [&](const std::string& item) {
    return UsageError("--hflip-swap takes WORD:WORD pairs separated by commas, got '" + item +
                      "' in '" + list + "'");
  };
  caption::WordSwaps swaps;
  std::istringstream in(list);
  for (std::string item; std::getline(in, item, ',');) {
    const size_t colon = item.find(':');
    if (colon == std::string::npos || item.find(':', colon + 1) != std::string::npos)
      throw refused(item);
    swaps.emplace_back(item.substr(0, colon), item.substr(colon + 1));
  }
  if (list.empty() || list.back() == ',') throw refused("");
  return swaps;
}

caption::CaptionTrainOptions caption_train_options(const po::variables_map& vm) {
  caption::CaptionTrainOptions t;
  t.data = str(vm, "data");
  t.paths = {str(vm, "train-captions"), str(vm, "train-images"), str(vm, "val-captions"),
             str(vm, "val-images")};
  read_loop_options(vm, t.loop);
  t.spm = str(vm, "spm");
  t.vocab_size = vm["vocab-size"].as<int>();
  t.phrases = caption_phrases(str(vm, "phrases"));
  t.encoder_from = str(vm, "encoder-from");
  t.encoder_lr_scale = vm["encoder-lr-scale"].as<float>();
  t.model = settings_from(vm, caption::caption_schema(), caption::CaptionConfig{});
  t.model_keys_given = given_setting_keys(vm);
  t.loop.epochs = vm["epochs"].as<int>();
  t.loop.steps = vm["steps"].as<int64_t>();
  if (option_given(vm, "steps") && option_given(vm, "epochs") && t.loop.steps > 0)
    throw UsageError("give --epochs or --steps, not both");
  t.batch_size = vm["batch-size"].as<int64_t>();
  t.lr = vm["lr"].as<float>();
  t.min_lr = vm["min-lr"].as<float>();
  t.warmup_epochs = vm["warmup-epochs"].as<float>();
  t.warmup_epochs_given = given_on_command_line(vm, "warmup-epochs");
  t.weight_decay = vm["weight-decay"].as<float>();
  t.loop.clip_grad = vm["clip-grad"].as<float>();
  t.smoothing = vm["label-smoothing"].as<float>();
  t.attention_penalty = vm["attention-penalty"].as<float>();
  t.references = vm["references"].as<std::string>();
  t.hflip = vm["hflip"].as<float>();
  t.hflip_swap = hflip_swaps(vm["hflip-swap"].as<std::string>());
  t.loop.model_ema = vm["model-ema"].as<bool>();
  t.loop.model_ema_decay = vm["model-ema-decay"].as<double>();
  t.loop.valid_every = vm["val-interval"].as<int64_t>();
  t.val_images = vm["val-images-max"].as<int64_t>();
  t.prefetch = vm["prefetch"].as<int>();
  return t;
}

// The options of generated scenes (vitk make-scenes), an extension of the task.
caption::scenes::SceneTrainOptions scene_train_options(const po::variables_map& vm) {
  caption::scenes::SceneTrainOptions t;
  t.article_flip = vm["article-flip"].as<float>();
  t.article_erase = vm["article-erase"].as<float>();
  t.guided_attention = vm["guided-attention"].as<float>();
  t.article_loss = vm["article-loss"].as<float>();
  t.teacher = vm["teacher"].as<std::string>();
  t.distillation_type = vm["distillation-type"].as<std::string>();
  t.distillation_alpha = vm["distillation-alpha"].as<float>();
  t.distillation_tau = vm["distillation-tau"].as<float>();
  return t;
}

int run_caption_train(const po::variables_map& vm) {
  check_input_files(vm, {"train-captions", "val-captions", "spm", "encoder-from", "resume"});
  const caption::CaptionTrainOptions options = caption_train_options(vm);
  const caption::scenes::SceneTrainOptions scenes = scene_train_options(vm);
  options.validate();
  scenes.validate();
  // The scenes' extension always: with its options off it only names them off in the header.
  return run_trainer([&](std::ostream& log, bool tty, const std::atomic<int>& stop) {
    return caption::scenes::train_captions(options, scenes, log, tty, &stop);
  });
}

// ---- caption and caption-eval ----------------------------------------------------------------

std::string model_path(const po::variables_map& vm) {
  const std::string path =
      vm.count("model") ? vm["model"].as<std::string>() : bundled_file(kBundledCaptioner);
  check_input_file("--model", path);
  return path;
}

// The run's options: the search (each option checked by name before anything is loaded) and, for
// attention pictures, which layer and head. The precision is the captioner's: a quantised
// checkpoint (vitk quantize) runs at int8 unless another precision is asked for, which is refused.
struct RunRequest {
  SearchOptions search;
  bool attention = false;
  int attention_layer = -1, attention_head = -1;
};

RunRequest run_request(const po::variables_map& vm, bool attention) {
  RunRequest r;
  r.search = search_options(vm);
  r.search.max_length = vm["max-length"].as<int64_t>();
  r.attention = attention;
  r.attention_layer = attention_index(vm, "attention-layer", "last");
  r.attention_head = attention_index(vm, "attention-head", "mean");
  return r;
}

// The captioner of --model, --precision and --batch-size, through the API.
Captioner load_captioner(const po::variables_map& vm, const std::string& model) {
  CaptionerOptions o;
  o.precision = precision_option(vm);
  o.batch_size = vm["batch-size"].as<int64_t>();
  return Captioner(model, o);
}

caption::CaptionRunOptions run_options(const Captioner& captioner, const RunRequest& r) {
  caption::CaptionRunOptions o = captioner.impl().run_options(r.search);
  o.attention = r.attention;
  o.attention_layer = r.attention_layer;
  o.attention_head = r.attention_head;
  return o;
}

void add_run_options(po::options_description& o) {
  o.add_options()  //
      ("model", po::value<std::string>()->value_name("CKPT"),
       "a captioning checkpoint of vitk caption-train (default: the bundled scenes model, "
       "vit/models/scenes-caption.h5)")  //
      ("batch-size", value_in<int64_t>(1, kMaxBatchSize)->default_value(32)->value_name("N"),
       "images per search")  //
      ("attention-layer", po::value<std::string>()->default_value("last")->value_name("N"),
       "the decoder layer of the attention, 0-based, or 'last'")  //
      ("attention-head", po::value<std::string>()->default_value("mean")->value_name("N"),
       "one head, 0-based, or 'mean' of all heads");
  o.add_options()("max-length", value_in<int64_t>(0, 65536)->default_value(0)->value_name("N"),
                  "at most N tokens, EOS included (0: the model's limit)");
  add_search_options(o);
}

// The pieces of a caption as the picture labels them: its words' pieces and "<eos>".
std::vector<std::string> picture_pieces(const Vocabulary& tokenizer, const decode::Hypothesis& best,
                                        int64_t rows) {
  std::vector<std::string> pieces =
      tokenizer.pieces(std::vector<int>(best.tokens.begin(), best.tokens.end()));
  const std::string marker = "\xe2\x96\x81";  // "▁", where a word begins
  for (std::string& p : pieces) {
    if (p.rfind(marker, 0) == 0) p = p.substr(marker.size());
    // A phrase piece (caption-train --phrases) holds more words: "to the left of".
    for (size_t at = p.find(marker); at != std::string::npos; at = p.find(marker, at + 1))
      p.replace(at, marker.size(), " ");
  }
  pieces.resize(static_cast<size_t>(std::min<int64_t>(rows, static_cast<int64_t>(pieces.size()))));
  while (static_cast<int64_t>(pieces.size()) < rows) pieces.push_back("<eos>");
  return pieces;
}

int run_caption(const po::variables_map& vm) {
  const std::vector<std::string> paths = input_paths(vm, "image");
  if (paths.empty())
    throw UsageError(
        "no images given: name image files, '-' to read paths from standard input, or --dir DIR");
  const std::string model = model_path(vm);
  const RunRequest request = run_request(vm, vm.count("attention-dir") > 0);
  const PicturesDir pictures_dir = attention_dir(vm);
  const std::string& pictures = pictures_dir.path;
  std::set<std::string> picture_names;
  const Captioner captioner = load_captioner(vm, model);
  Captioner::Impl& api = captioner.impl();
  const caption::CaptionRunOptions ro = run_options(captioner, request);
  const caption::LoadedCaptioner& m = api.loaded;
  std::vector<std::string> errors;
  const std::vector<caption::CaptionResult> results = api.run_files(paths, ro, errors);
  const bool json = vm["json"].as<bool>();
  const bool nbest = ro.search.nbest > 1;
  nlohmann::json out = nlohmann::json::array();
  int failed = 0;
  for (const caption::CaptionResult& r : results) {
    const std::string& path = paths[static_cast<size_t>(r.image)];
    if (!r.read) {
      ++failed;
      std::cout.flush();
      std::cerr << "vitk: error: " << path << ": " << errors[static_cast<size_t>(r.image)]
                << std::endl;
      continue;
    }
    if (json) {
      nlohmann::json item{{"image", path}};
      nlohmann::json hyps = nlohmann::json::array();
      for (size_t k = 0; k < r.hypotheses.size(); ++k)
        hyps.push_back({{"caption", r.texts[k]},
                        {"log_prob", r.hypotheses[k].log_prob},
                        {"score", r.hypotheses[k].score}});
      item["captions"] = hyps;
      out.push_back(item);
    } else if (nbest) {
      for (size_t k = 0; k < r.hypotheses.size(); ++k)
        std::cout << path << " ||| " << r.texts[k] << " ||| " << r.hypotheses[k].score << "\n";
    } else {
      std::cout << path << "\t" << (r.texts.empty() ? std::string() : r.texts.front()) << "\n";
    }
    if (!pictures.empty() && !r.attention.empty()) {
      const std::vector<std::string> pieces =
          picture_pieces(m.tokenizer, r.hypotheses.front(), r.attention.dim(0));
      const cv::Mat picture = vit::caption_attention_picture(
          r.input.f32(), m.config.encoder, r.attention, m.config.memory_class_token, pieces,
          {fs::path(path).filename().string() + ": " + r.texts.front(),
           "cross-attention of " +
               (ro.attention_layer < 0 ? std::string("the last decoder layer")
                                       : "decoder layer " + std::to_string(ro.attention_layer)) +
               (ro.attention_head < 0 ? ", mean of the heads"
                                      : ", head " + std::to_string(ro.attention_head))});
      plot::write_png((fs::path(pictures) / picture_name(path, picture_names)).string(), picture);
    }
  }
  // File names may hold bytes that are not UTF-8: they become U+FFFD (as in classify --json), so
  // that the document is written and stays valid.
  if (json) std::cout << out.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  std::cout << std::flush;
  if (failed > 0) {
    std::cerr << "vitk caption: " << failed << " of " << results.size()
              << " images could not be read\n";
    return kExitFailure;
  }
  return kExitOk;
}

// caption-eval's set has no image to score (vitk::Error, exit 1): which folder was looked in and
// the first images missing from it, or that the file lists no captioned image.
void require_images(const datasets::CaptionSet& set) {
  if (!set.images.empty()) return;
  std::string why;
  if (set.missing_images > 0) {
    const std::string folder = set.image_dir.empty() ? "." : set.image_dir;
    std::error_code ec;
    why = "none of its " + std::to_string(set.missing_images) + " captioned images is in " +
          quoted_name(folder) +
          (fs::is_directory(folder, ec) ? ""
                                        : " (no such folder; --images names the images' folder)");
    for (size_t i = 0; i < set.missing_examples.size(); ++i)
      why += (i ? ", " : "; missing: ") + quoted_name(set.missing_examples[i]);
    if (set.missing_images > static_cast<int64_t>(set.missing_examples.size())) why += ", ...";
  } else {
    why = "it lists no image with a caption (" + std::to_string(set.images_without_captions) +
          " images without captions, " + std::to_string(set.unknown_image_captions) +
          " captions of unknown images)";
  }
  throw Error(set.source + ": no image was found to score: " + why);
}

int run_caption_eval(const po::variables_map& vm) {
  check_input_file("--captions", vm["captions"].as<std::string>());
  const std::string model = model_path(vm);
  const RunRequest request = run_request(vm, /*attention=*/true);
  const Captioner captioner = load_captioner(vm, model);
  const caption::CaptionRunOptions ro = run_options(captioner, request);
  caption::LoadedCaptioner& m = captioner.impl().loaded;
  const std::string captions = vm["captions"].as<std::string>();
  const std::string images = vm.count("images") ? vm["images"].as<std::string>()
                                                : fs::path(captions).parent_path().string();
  datasets::CaptionSet set = datasets::read_captions(captions, images);
  if (vm["limit"].as<int64_t>() > 0 &&
      static_cast<int64_t>(set.images.size()) > vm["limit"].as<int64_t>())
    set.images.resize(static_cast<size_t>(vm["limit"].as<int64_t>()));
  captioner.impl().check_memory(ro, static_cast<int64_t>(set.images.size()));
  require_images(set);
  ProgressOptions po;
  po.tty = is_terminal(STDERR_FILENO);
  po.unit = "image";
  Progress progress(std::cerr, "caption", static_cast<int64_t>(set.images.size()), po);
  const std::vector<caption::CaptionResult> results =
      caption::caption_set(*m.model, m.tokenizer, set, ro, &progress);
  progress.finish();
  const caption::CaptionScores s = caption::score_captions(m.config, m.tokenizer, set, results);
  if (s.images == 0)
    throw Error(set.source + ": no image was scored: none of its " +
                std::to_string(set.images.size()) + " images could be read");
  std::cout << set.source << ": " << s.images << " images, " << set.captions()
            << " reference captions";
  if (set.missing_images + set.unknown_image_captions > 0)
    std::cout << " (" << set.missing_images << " missing images and " << set.unknown_image_captions
              << " captions of unknown images skipped)";
  std::cout << "\n";
  std::cout << decode::format_bleu(s.bleu) << "\n";
  if (s.scenes > 0) {
    // "71.20% (1424 of 2000 scenes)"
    auto share = [](int64_t part, int64_t whole, const std::string& unit = "") {
      return format_fixed(
                 whole ? 100.0 * static_cast<double>(part) / static_cast<double>(whole) : 0, 2) +
             "% (" + std::to_string(part) + " of " + std::to_string(whole) + unit + ")";
    };
    std::cout << "exact scene match: " << share(s.exact, s.scenes, " scenes") << "\n"
              << "  every article named once, no other: " << share(s.articles, s.scenes, " scenes")
              << "\n"
              << "  relations true: left/right (one row) " << share(s.horizontal_true, s.horizontal)
              << ", above/below " << share(s.vertical_true, s.vertical) << "\n";
    std::cout << "attention in the named article's cell: "
              << share(s.in_cell, s.nouns, " article nouns") << "\n";
    if (s.nouns > 0) {
      std::cout << "  by the noun's place in the caption:";
      const char* place[] = {"1st", "2nd", "3rd", "4th"};
      for (size_t k = 0; k < s.nouns_at.size(); ++k)
        if (s.nouns_at[k] > 0)
          std::cout << (k ? ", " : " ") << place[k] << " " << share(s.in_cell_at[k], s.nouns_at[k]);
      std::cout << "\n";
    }
  }
  return kExitOk;
}

}  // namespace

void register_caption_commands(Registry& registry) {
  Subcommand t;
  t.name = "caption-train";
  t.summary = "train an image captioning model (ViT encoder, Transformer decoder; resume, EMA)";
  t.example =
      "vitk make-scenes --out data/scenes\n"
      "vitk caption-train --config configs/caption-scenes.ini --data data/scenes --output "
      "runs/caption\n"
      "vitk caption-train --config configs/caption-scenes.ini --data data/scenes --output "
      "runs/caption --encoder-from vit/models/fmnist-vit.h5 --encoder-lr-scale 0.1\n"
      "# Ctrl-C (SIGINT) or SIGTERM: finish the step, save OUTPUT/last.h5, exit 130 (143)";
  t.add_options = add_caption_train_options;
  t.run = run_caption_train;
  registry.add(std::move(t));

  Subcommand c;
  c.name = "caption";
  c.summary = "caption image files (default: the bundled scenes model); beam, n-best, sampling";
  c.usage = "[options] IMAGE...";
  c.example =
      "vitk caption datasets/scene-samples/*.png\n"
      "vitk caption --model runs/caption/best.h5 --dir photos --nbest 3 --beam-size 5\n"
      "vitk caption scene.png --sample --temperature 0.7 --seed 1 --json\n"
      "vitk caption scene.png --attention-dir pictures   # one panel per word: where it looked";
  c.add_options = [](po::options_description& o) {
    o.add_options()  //
        ("image", po::value<std::vector<std::string>>()->value_name("IMAGE"),
         "image files ('-': read paths from standard input, one a line)")  //
        ("dir", po::value<std::vector<std::string>>()->value_name("DIR"),
         "also every image under DIR (recursively, sorted)")                                   //
        ("json", switch_value(), "print a JSON array of {image, captions: [{caption, ...}]}")  //
        ("attention-dir", po::value<std::string>()->value_name("DIR"),
         "draw, per image, its cross-attention for each word of the caption as DIR/NAME.png");
    add_run_options(o);
  };
  c.add_positional = [](po::positional_options_description& p) { p.add("image", -1); };
  c.run = run_caption;
  registry.add(std::move(c));

  Subcommand e;
  e.name = "caption-eval";
  e.summary =
      "score a captioning model: BLEU-4 against every reference; on make-scenes sets, exact scene "
      "match and attention-in-cell, broken down";
  e.example =
      "vitk caption-eval --captions data/scenes/captions_test.json --images "
      "data/scenes/images/test\n"
      "vitk caption-eval --model runs/caption/best.h5 --captions captions_val2017.json "
      "--images val2017 --beam-size 3";
  e.add_options = [](po::options_description& o) {
    o.add_options()  //
        ("captions", po::value<std::string>()->required()->value_name("FILE"),
         "COCO captions JSON, Flickr8k token file or Flickr30k results.csv")  //
        ("images", po::value<std::string>()->value_name("DIR"),
         "the images' folder (default: the captions file's folder)")  //
        ("limit", value_in<int64_t>(0, int64_t{1} << 40)->default_value(0)->value_name("N"),
         "the first N images only (0: all)");
    add_run_options(o);
  };
  e.run = run_caption_eval;
  registry.add(std::move(e));
}

}  // namespace vitk::tools
