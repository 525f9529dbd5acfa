// _vitk: the pybind11 bindings of vitk's public API (<vitk/vitk.h>), which the package `vitk`
// (vitk/__init__.py) re-exports. Each call turns its Python arguments into C++ values first, then
// releases the GIL while vitk computes, so that other Python threads run meanwhile; the numpy
// arrays it reads are held (and so kept alive) by the call until it returns.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <signal.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <vitk/vitk.h>

namespace py = pybind11;

namespace {

// vitk.Error and vitk.UsageError, made here since pybind11's py::exception<> takes one base and
// UsageError has two (Error and ValueError). Never freed: the module is never unloaded.
PyObject* g_error = nullptr;
PyObject* g_usage_error = nullptr;

// Text from vitk (labels, translations, messages with file names) as str, bad UTF-8 replaced
// rather than raised: a file name in bytes must not turn a vitk.Error into a UnicodeDecodeError.
py::str text_of(const std::string& s) {
  PyObject* text = PyUnicode_DecodeUTF8(s.data(), static_cast<Py_ssize_t>(s.size()), "replace");
  if (!text) throw py::error_already_set();
  return py::reinterpret_steal<py::str>(text);
}

// "<class 'int'>", for messages.
std::string type_name(py::handle h) {
  return py::repr(py::type::handle_of(h)).cast<std::string>();
}

// ---- Inputs ----------------------------------------------------------------------------------

bool is_path(py::handle h) {
  return py::isinstance<py::str>(h) || py::isinstance<py::bytes>(h) || py::hasattr(h, "__fspath__");
}

// A path (str, bytes or os.PathLike) as the file system's bytes: os.fsencode keeps names that are
// not UTF-8 (surrogate escapes) as the bytes they were.
std::string path_of(py::handle h) {
  return py::module_::import("os").attr("fsencode")(h).cast<std::string>();
}

// Images in memory: the views vitk reads, and the arrays that hold their pixels.
struct Images {
  std::vector<py::array> arrays;
  std::vector<vitk::Image> views;
};

std::string shape_of(const py::array& a) {
  std::string s = "(";
  for (py::ssize_t d = 0; d < a.ndim(); ++d)
    s += (d ? ", " : "") + std::to_string(a.shape(d)) + (a.ndim() == 1 ? "," : "");
  return s + ")";
}

// `where` names the input in messages: "" for one array, "input 3: " in a list.
py::array checked_uint8(py::handle h, const std::string& where) {
  py::array a = py::array::ensure(h);
  if (!a) {
    PyErr_Clear();
    throw vitk::UsageError(where + "not an image: " + type_name(h));
  }
  if (a.dtype().kind() != 'u' || a.itemsize() != 1)
    throw vitk::UsageError(where + "images are arrays of dtype uint8 (8-bit pixels), not " +
                           py::str(a.dtype()).cast<std::string>() +
                           "; convert with np.clip(a * 255, 0, 255).astype(np.uint8) if it "
                           "holds [0, 1], or a.astype(np.uint8)");
  return a;
}

// Adds the images of `a`, whose last three axes are height, width and channels (batch: axis 0 is
// the image), as views of its pixels where they lie as vitk::Image reads them (each row's pixels
// packed, rows a stride apart), of a C-contiguous copy where they do not.
void add_images(Images& out, py::array a, bool batch, bool channels_axis) {
  const int h_axis = batch ? 1 : 0, w_axis = h_axis + 1, c_axis = h_axis + 2;
  auto fits = [&](const py::array& x) {
    const py::ssize_t w = x.shape(w_axis), c = channels_axis ? x.shape(c_axis) : 1;
    return (!channels_axis || c == 1 || x.strides(c_axis) == 1) &&
           (w == 1 || x.strides(w_axis) == c) &&
           (x.shape(h_axis) == 1 || x.strides(h_axis) >= w * c);
  };
  if (!fits(a)) a = py::array::ensure(a, py::array::c_style);
  const py::ssize_t n = batch ? a.shape(0) : 1, h = a.shape(h_axis), w = a.shape(w_axis);
  const py::ssize_t c = channels_axis ? a.shape(c_axis) : 1;
  const auto* base = static_cast<const uint8_t*>(a.data());
  for (py::ssize_t i = 0; i < n; ++i) {
    vitk::Image image;
    image.data = base + (batch ? i * a.strides(0) : 0);
    image.height = h;
    image.width = w;
    image.channels = c;
    image.row_stride = h > 1 ? a.strides(h_axis) : 0;
    image.order = vitk::Image::Order::rgb;
    out.views.push_back(image);
  }
  out.arrays.push_back(std::move(a));
}

// One array of images: [H, W] one grey image, [N, H, W] grey images, [N, H, W, C] images of C
// channels.
void add_array(Images& out, const py::array& a) {
  if (a.ndim() == 2) return add_images(out, a, false, false);
  if (a.ndim() == 3) return add_images(out, a, true, false);
  if (a.ndim() == 4) return add_images(out, a, true, true);
  throw vitk::UsageError("an array of images is [H, W] (one grey image), [N, H, W] (grey " +
                         std::string("images) or [N, H, W, C] (images of C channels), not of ") +
                         "shape " + shape_of(a));
}

// One image of a list: [H, W] grey, or [H, W, C].
void add_listed(Images& out, const py::array& a, size_t index) {
  if (a.ndim() == 2) return add_images(out, a, false, false);
  if (a.ndim() == 3) return add_images(out, a, false, true);
  const std::string where = "input " + std::to_string(index) + ": ";
  throw vitk::UsageError(where + "an image in a list is [H, W] (grey) or [H, W, C], not of shape " +
                         shape_of(a));
}

// What classify() and caption() take: image files or images in memory, never both at once.
struct Inputs {
  std::vector<std::string> paths;
  Images images;
  bool files = false;
  size_t size() const { return files ? paths.size() : images.views.size(); }
};

Inputs inputs_of(py::handle inputs) {
  Inputs in;
  if (is_path(inputs)) {
    in.files = true;
    in.paths.push_back(path_of(inputs));
    return in;
  }
  if (py::isinstance<py::array>(inputs)) {
    add_array(in.images, checked_uint8(inputs, ""));
    return in;
  }
  if (!py::isinstance<py::iterable>(inputs))
    throw vitk::UsageError(
        "inputs are a list of image paths, a list of images (uint8 arrays) or "
        "one uint8 array of images, not " +
        type_name(inputs));
  size_t index = 0, paths = 0;
  for (py::handle item : inputs) {
    if (is_path(item)) {
      in.paths.push_back(path_of(item));
      ++paths;
    } else {
      const std::string where = "input " + std::to_string(index) + ": ";
      add_listed(in.images, checked_uint8(item, where), index);
    }
    if (paths != 0 && paths != index + 1)
      throw vitk::UsageError("input " + std::to_string(index) + ": a list holds image paths or " +
                             "images in memory, not both; make one call for each");
    ++index;
  }
  in.files = paths > 0;
  return in;
}

// Images in memory only (logits()).
Images images_of(py::handle inputs) {
  Inputs in = inputs_of(inputs);
  if (in.files)
    throw vitk::UsageError("logits() takes images in memory (uint8 arrays), not paths; read the " +
                           std::string("files first, or classify() them"));
  return std::move(in.images);
}

// ---- Search options --------------------------------------------------------------------------

struct Search {
  vitk::SearchOptions options;
  bool scores = false;  // n-best lists of (text, score) rather than one text per input
};

Search search_of(int beam_size, float length_penalty, int nbest, bool greedy, bool sample,
                 float temperature, int64_t top_k, uint64_t seed, int64_t max_length,
                 int64_t max_length_offset, bool return_scores) {
  if (greedy && sample) throw vitk::UsageError("greedy and sample exclude each other");
  if (!sample && (temperature != 1.f || top_k != 0 || seed != 0))
    throw vitk::UsageError("temperature, top_k and seed are for sampling: give sample=True too");
  Search s;
  vitk::SearchOptions& o = s.options;
  o.method = sample   ? vitk::SearchOptions::Method::sample
             : greedy ? vitk::SearchOptions::Method::greedy
                      : vitk::SearchOptions::Method::beam;
  o.beam_size = beam_size;
  o.nbest = nbest;
  o.length_penalty = length_penalty;
  o.temperature = temperature;
  o.top_k = top_k;
  o.seed = seed;
  o.max_length = max_length;
  o.max_length_offset = max_length_offset;
  s.scores = nbest != 1 || return_scores;
  return s;
}

// One result per input: its best text, or its n-best list of (text, score).
py::list results_of(const std::vector<std::vector<vitk::Hypothesis>>& all, bool scores) {
  py::list out;
  for (const std::vector<vitk::Hypothesis>& hypotheses : all) {
    if (!scores) {
      out.append(hypotheses.empty() ? py::str("") : text_of(hypotheses[0].text));
      continue;
    }
    // An empty sentence has no hypotheses; as `vitk translate --nbest` it gets ("", 0).
    py::list nbest;
    for (const vitk::Hypothesis& h : hypotheses)
      nbest.append(py::make_tuple(text_of(h.text), h.score));
    if (hypotheses.empty()) nbest.append(py::make_tuple(py::str(""), 0.0));
    out.append(nbest);
  }
  return out;
}

int64_t positive(int64_t value, const char* name) {
  if (value < 1)
    throw vitk::UsageError(std::string(name) + " must be at least 1, not " + std::to_string(value));
  return value;
}

int threads_of(int threads) {
  if (threads < 0)
    throw vitk::UsageError("threads must be at least 1 (or 0: OpenMP's default), not " +
                           std::to_string(threads));
  return threads;
}

// ---- The four models ------------------------------------------------------------------------

// Each model with the path it was loaded from (for repr()).
struct Classifier {
  std::string path;
  vitk::Classifier model;
};
struct Translator {
  std::string path;
  vitk::Translator model;
};
struct Captioner {
  std::string path;
  vitk::Captioner model;
};
struct TextClassifier {
  std::string path;
  vitk::TextClassifier model;
};

std::pair<int64_t, int64_t> image_size_of(const py::object& size) {
  if (size.is_none()) return {0, 0};
  if (py::isinstance<py::int_>(size)) {
    const int64_t n = size.cast<int64_t>();
    return {n, n};
  }
  if (py::isinstance<py::sequence>(size) && !py::isinstance<py::str>(size) && py::len(size) == 2)
    return {size[py::int_(0)].cast<int64_t>(), size[py::int_(1)].cast<int64_t>()};
  throw vitk::UsageError("image_size is an int or (height, width), not " +
                         py::repr(size).cast<std::string>());
}

std::unique_ptr<Classifier> make_classifier(const py::object& path,
                                            const std::optional<std::string>& precision,
                                            int threads, int top_k, int64_t batch_size,
                                            const py::object& image_size,
                                            const std::optional<std::vector<std::string>>& labels) {
  vitk::ClassifierOptions o;
  o.precision = precision.value_or("");
  o.threads = threads_of(threads);
  o.top_k = static_cast<int>(positive(top_k, "top_k"));
  o.batch_size = positive(batch_size, "batch_size");
  std::tie(o.image_height, o.image_width) = image_size_of(image_size);
  if (labels) o.labels = *labels;
  std::string file = path_of(path);
  py::gil_scoped_release release;
  vitk::Classifier model(file, o);
  return std::make_unique<Classifier>(Classifier{std::move(file), std::move(model)});
}

py::list classify(const Classifier& self, const py::object& inputs, std::optional<int> top_k) {
  const int k = top_k ? static_cast<int>(positive(*top_k, "top_k")) : 0;
  const Inputs in = inputs_of(inputs);
  std::vector<vitk::Classification> results;
  if (in.size() > 0) {
    py::gil_scoped_release release;
    if (in.files) {
      // The first file that cannot be read stops the run: the caller gets its error, as the
      // command prints it, without waiting for the rest.
      self.model.classify(
          in.paths,
          [&](const vitk::Classification& c) {
            if (!c.ok()) throw vitk::Error(c.path + ": " + c.error);
            results.push_back(c);
          },
          k);
    } else {
      results = self.model.classify(in.images.views, k);
    }
  }
  py::list out;
  for (const vitk::Classification& c : results) {
    py::list top;
    for (size_t i = 0; i < c.labels.size(); ++i)
      top.append(py::make_tuple(text_of(c.labels[i]), static_cast<double>(c.probabilities[i])));
    out.append(top);
  }
  return out;
}

py::array_t<float> logits(const Classifier& self, const py::object& inputs) {
  const Images images = images_of(inputs);
  const auto classes = static_cast<py::ssize_t>(self.model.classes().size());
  const auto n = static_cast<py::ssize_t>(images.views.size());
  auto values = std::make_unique<std::vector<float>>();
  if (n > 0) {
    py::gil_scoped_release release;
    *values = self.model.logits(images.views);
  }
  // The array owns the vector: no copy of the logits.
  float* data = values->data();
  py::capsule owner(values.release(), [](void* v) { delete static_cast<std::vector<float>*>(v); });
  return py::array_t<float>({n, classes}, data, owner);
}

std::unique_ptr<Translator> make_translator(const py::object& path,
                                            const std::optional<std::string>& precision,
                                            int threads, int64_t batch_size) {
  vitk::TranslatorOptions o;
  o.precision = precision.value_or("");
  o.threads = threads_of(threads);
  o.batch_size = positive(batch_size, "batch_size");
  std::string file = path_of(path);
  py::gil_scoped_release release;
  vitk::Translator model(file, o);
  return std::make_unique<Translator>(Translator{std::move(file), std::move(model)});
}

std::vector<std::string> sentences_of(const py::object& sentences) {
  if (py::isinstance<py::str>(sentences)) return {sentences.cast<std::string>()};
  if (!py::isinstance<py::iterable>(sentences))
    throw vitk::UsageError("sentences are a list of str, not " + type_name(sentences));
  std::vector<std::string> out;
  for (py::handle s : sentences) {
    if (!py::isinstance<py::str>(s))
      throw vitk::UsageError("sentence " + std::to_string(out.size()) + ": a str, not " +
                             type_name(s));
    out.push_back(s.cast<std::string>());
  }
  return out;
}

py::list translate(const Translator& self, const py::object& sentences, const Search& search) {
  const std::vector<std::string> text = sentences_of(sentences);
  std::vector<std::vector<vitk::Hypothesis>> hypotheses;
  if (!text.empty()) {
    py::gil_scoped_release release;
    for (vitk::Translation& t : self.model.translate(text, search.options))
      hypotheses.push_back(std::move(t.hypotheses));
  }
  return results_of(hypotheses, search.scores);
}

std::unique_ptr<Captioner> make_captioner(const py::object& path,
                                          const std::optional<std::string>& precision, int threads,
                                          int64_t batch_size) {
  vitk::CaptionerOptions o;
  o.precision = precision.value_or("");
  o.threads = threads_of(threads);
  o.batch_size = positive(batch_size, "batch_size");
  std::string file = path_of(path);
  py::gil_scoped_release release;
  vitk::Captioner model(file, o);
  return std::make_unique<Captioner>(Captioner{std::move(file), std::move(model)});
}

py::list caption(const Captioner& self, const py::object& inputs, const Search& search) {
  const Inputs in = inputs_of(inputs);
  std::vector<std::vector<vitk::Hypothesis>> hypotheses;
  if (in.size() > 0) {
    py::gil_scoped_release release;
    std::vector<vitk::Caption> captions = in.files
                                              ? self.model.caption(in.paths, search.options)
                                              : self.model.caption(in.images.views, search.options);
    for (vitk::Caption& c : captions) {
      if (!c.ok()) throw vitk::Error(c.path + ": " + c.error);
      hypotheses.push_back(std::move(c.hypotheses));
    }
  }
  return results_of(hypotheses, search.scores);
}

std::unique_ptr<TextClassifier> make_text_classifier(const py::object& path,
                                                     const std::optional<std::string>& precision,
                                                     int threads, int top_k, int64_t batch_size) {
  vitk::TextClassifierOptions o;
  o.precision = precision.value_or("");
  o.threads = threads_of(threads);
  o.top_k = static_cast<int>(positive(top_k, "top_k"));
  o.batch_size = positive(batch_size, "batch_size");
  std::string file = path_of(path);
  py::gil_scoped_release release;
  vitk::TextClassifier model(file, o);
  return std::make_unique<TextClassifier>(TextClassifier{std::move(file), std::move(model)});
}

py::list classify_text(const TextClassifier& self, const py::object& sentences,
                       std::optional<int> top_k) {
  const int k = top_k ? static_cast<int>(positive(*top_k, "top_k")) : 0;
  const std::vector<std::string> text = sentences_of(sentences);
  std::vector<vitk::TextClassification> results;
  if (!text.empty()) {
    py::gil_scoped_release release;
    results = self.model.classify(text, k);
  }
  py::list out;
  for (const vitk::TextClassification& c : results) {
    py::list top;
    for (size_t i = 0; i < c.labels.size(); ++i)
      top.append(py::make_tuple(text_of(c.labels[i]), static_cast<double>(c.probabilities[i])));
    out.append(top);
  }
  return out;
}

// vitk.main(): the words as a `vitk` command line. The training commands catch SIGINT and
// SIGTERM (finish the step, save, exit 130); the interpreter's own handlers are put back after.
int run_main(const py::object& args) {
  py::object words = args;
  if (words.is_none()) words = py::module_::import("sys").attr("argv")[py::slice(1, {}, {})];
  if (py::isinstance<py::str>(words) || py::isinstance<py::bytes>(words))
    throw vitk::UsageError("main() takes a list of words, e.g. ['inspect', 'model.h5'], not a str");
  std::vector<std::string> argv;
  for (py::handle w : words)
    argv.push_back(is_path(w) ? path_of(w) : py::str(w).cast<std::string>());
  // The command writes to file descriptors 1 and 2 itself: what Python buffered goes first.
  for (const char* stream : {"stdout", "stderr"}) {
    py::object s = py::module_::import("sys").attr(stream);
    if (!s.is_none()) s.attr("flush")();
  }
  using Action = struct sigaction;
  Action interrupt{}, terminate{};
  sigaction(SIGINT, nullptr, &interrupt);
  sigaction(SIGTERM, nullptr, &terminate);
  int code = 0;
  {
    py::gil_scoped_release release;
    code = vitk::run_command(argv);
  }
  sigaction(SIGINT, &interrupt, nullptr);
  sigaction(SIGTERM, &terminate, nullptr);
  return code;
}

// ---- Docstrings ------------------------------------------------------------------------------
// Each starts with the Python signature, written out: pybind11's own would show C++ types.

constexpr const char* kImages = R"(
    Images in memory are uint8 arrays of RGB (or grey) pixels, rows top to bottom:

    - one array: [H, W] one grey image, [N, H, W] N grey images, or [N, H, W, C]
      N images of C channels (1 grey, 3 RGB, 4 RGBA: alpha composited on white).
      A single colour image is [1, H, W, C], or a list of one array;
    - a list of arrays (or of objects numpy converts, such as PIL images), each
      one image: [H, W] grey or [H, W, C].

    Arrays whose rows are packed (C-contiguous ones, and crops of them) are read
    in place; others are copied first. Images are resized and normalised as the
    model's checkpoint says, exactly as image files are.)";

constexpr const char* kSearch = R"(

    Search (the defaults are `vitk translate`'s):
      beam_size (int): beam width (4).
      length_penalty (float): GNMT's ((5 + n) / 6) ** alpha; 0: the raw
          log-probability (0.6).
      nbest (int): hypotheses per input, best first, at most beam_size (1).
      greedy (bool): greedy search instead of beam search.
      sample (bool): draw each token from the model's distribution, with
          temperature (p ~ exp(logit / T); 1.0), top_k (among the K likeliest
          tokens only; 0: all) and seed (0).
      max_length (int): at most this many tokens, EOS included (0: the model's
          limit).
      max_length_offset (int): translation: at most the source's length + this
          many tokens (50).
      return_scores (bool): return (text, score) pairs even for nbest=1.

    Returns:
      list[str], one text per input, when nbest is 1 and return_scores is
      False; else list[list[tuple[str, float]]]: per input its n-best list of
      (text, score), score = log-probability / length penalty.)";

constexpr const char* kClassifier = R"(A ViT image classifier loaded from a vitk checkpoint.

    Classifier(path, *, precision=None, threads=0, top_k=5, batch_size=32,
               image_size=None, labels=None)

    Args:
      path (str | os.PathLike): a checkpoint of `vitk train`, `finetune`,
          `import` or `quantize`, e.g. "vit/models/fmnist-vit.h5".
      precision (str | None): "f32", "bf16" (a CPU with AVX512_BF16 or AMX) or
          "int8"; None: the checkpoint's (int8 for a file of `vitk quantize`).
      threads (int): OpenMP threads of the matrix products; 0: OMP_NUM_THREADS,
          else one per core.
      top_k (int): labels per image of classify(), capped at the classes.
      batch_size (int): images through the model at once.
      image_size (int | (int, int) | None): run at another input size, the
          position embeddings resampled (as `vitk classify --image-size`).
      labels (list[str] | None): class names instead of the checkpoint's.

    Raises vitk.Error for a checkpoint that cannot be read, vitk.UsageError for
    a bad argument.

    One Classifier may be used by several Python threads at once; the model
    runs one call at a time, with the GIL released.

    Example:
      >>> clf = vitk.Classifier("vit/models/fmnist-vit.h5", threads=2)
      >>> clf.classify(["datasets/samples/0000-ankle-boot.png"], top_k=2)
      [[('Ankle boot', 0.91...), ('Coat', 0.01...)]])";

constexpr const char* kClassify = R"(classify(inputs, top_k=None) -> list[list[tuple[str, float]]]

    The top_k classes of each input, most probable first, with their softmax
    probabilities, in input order (one list per image, also for one image).

    Args:
      inputs: image files, a list of paths (str or os.PathLike; one path alone
          is a list of one), read as `vitk classify` reads them (PNG, JPEG, BMP,
          TIFF, WebP, PNM); or images in memory (below). Not both in one call.
      top_k (int | None): labels per image; None: the Classifier's.

    Raises vitk.Error "PATH: reason" for the first file that cannot be read,
    vitk.UsageError for an array of the wrong dtype or shape.
)";

constexpr const char* kClassifyExample = R"(

    Example:
      >>> clf.classify(np.zeros((2, 28, 28), np.uint8), top_k=1)
      [[('Sandal', 0.86...)], [('Sandal', 0.86...)]])";

constexpr const char* kLogits = R"(logits(images) -> numpy.ndarray

    The model's logits (before the softmax) of images in memory: float32,
    shape [N, len(classes)], row i image i's.
)";

constexpr const char* kTranslator = R"(A translation Transformer loaded from a vitk checkpoint.

    Translator(path, *, precision=None, threads=0, batch_size=32)

    Args:
      path (str | os.PathLike): a checkpoint of `vitk mt-train` (or `average`,
          `quantize`); it holds its SentencePiece model.
      precision, threads: as Classifier's.
      batch_size (int): sentences per search.

    Thread-safe, the GIL released while it translates, as Classifier.)";

constexpr const char* kTranslate =
    R"(translate(sentences, *, beam_size=4, length_penalty=0.6, nbest=1,
              greedy=False, sample=False, temperature=1.0, top_k=0, seed=0,
              max_length=0, max_length_offset=50, return_scores=False)

    Translates sentences (a list of str, one str alone a list of one) as
    `vitk translate` does line by line; an empty sentence gives "" (and
    [("", 0.0)] as an n-best list). Sources longer than max_source_tokens
    subwords are cut.)";

constexpr const char* kTranslateExample = R"(

    Example:
      >>> vitk.Translator("runs/mt/best.h5").translate(["en el principio"])
      ['in the beginning'])";

constexpr const char* kCaptioner = R"(An image captioner loaded from a vitk checkpoint.

    Captioner(path, *, precision=None, threads=0, batch_size=32)

    Args:
      path (str | os.PathLike): a checkpoint of `vitk caption-train`, e.g.
          "vit/models/scenes-caption.h5"; it holds its SentencePiece model.
      precision, threads: as Classifier's.
      batch_size (int): images per search.

    Thread-safe, the GIL released while it captions, as Classifier.)";

constexpr const char* kCaption = R"(caption(inputs, *, beam_size=4, length_penalty=0.6, nbest=1,
            greedy=False, sample=False, temperature=1.0, top_k=0, seed=0,
            max_length=0, max_length_offset=50, return_scores=False)

    Captions images, in input order, as `vitk caption` does.

    Args:
      inputs: image files, a list of paths (str or os.PathLike; one path alone
          is a list of one), or images in memory (below). Not both in one call.

    Raises vitk.Error "PATH: reason" for a file that cannot be read,
    vitk.UsageError for a wrong argument, array dtype or shape.
)";

constexpr const char* kCaptionExample = R"(

    Example:
      >>> vitk.Captioner("vit/models/scenes-caption.h5").caption("scene.png")
      ['a bag above a sandal'])";

constexpr const char* kTextClassifier = R"(A text classifier loaded from a vitk checkpoint.

    TextClassifier(path, *, precision=None, threads=0, top_k=5, batch_size=64)

    Args:
      path (str | os.PathLike): a checkpoint of `vitk text-train` (or
          `quantize`); it holds its SentencePiece model and its labels.
      precision, threads: as Classifier's.
      top_k (int): labels per sentence of classify(), capped at the labels.
      batch_size (int): sentences through the model at once.

    Thread-safe, the GIL released while it classifies, as Classifier.)";

constexpr const char* kClassifyText =
    R"(classify(sentences, top_k=None) -> list[list[tuple[str, float]]]

    The top_k labels of each sentence (a list of str; one str alone is a list of
    one), most probable first, with their softmax probabilities, in input order,
    as `vitk text-classify` gives them. Sentences longer than max_tokens
    subwords are cut. Raises vitk.UsageError for an empty sentence.

    Example:
      >>> clf = vitk.TextClassifier("runs/books-en/best.h5")
      >>> clf.classify(["Jesus answered them."], top_k=2)
      [[('John', 0.62...), ('Matt', 0.25...)]])";

constexpr const char* kMain = R"(main(args=None) -> int

    Runs one `vitk` subcommand in this process, as the executable would with
    these words after "vitk"; returns its exit code (0 success, 1 a failure,
    2 a usage error). Its output goes to this process's stdout and stderr (file
    descriptors 1 and 2, not sys.stdout). args: a list of str (os.PathLike and
    numbers are turned into words); None: sys.argv[1:].

    Example:
      >>> vitk.main(["inspect", "vit/models/fmnist-vit.h5"])
      0)";

// ---- The module ------------------------------------------------------------------------------

void add_exceptions(py::module_& m) {
  g_error = PyErr_NewExceptionWithDoc(
      "vitk.Error",
      "An error of vitk: a file that cannot be read, data that is wrong. The message is the one\n"
      "the `vitk` command prints after 'vitk: error: ' and names the file or value at fault.",
      PyExc_RuntimeError, nullptr);
  if (!g_error) throw py::error_already_set();
  py::tuple usage_bases = py::make_tuple(py::handle(g_error), py::handle(PyExc_ValueError));
  g_usage_error = PyErr_NewExceptionWithDoc(
      "vitk.UsageError",
      "A wrong call: an unknown precision, a top_k of 0, an array of the wrong dtype or shape.\n"
      "Both a vitk.Error and a ValueError.",
      usage_bases.ptr(), nullptr);
  if (!g_usage_error) throw py::error_already_set();
  m.add_object("Error", py::handle(g_error));
  m.add_object("UsageError", py::handle(g_usage_error));
  py::register_exception_translator([](std::exception_ptr p) {
    auto raise = [](PyObject* type, const char* what) {
      py::str message = text_of(what);
      PyErr_SetObject(type, message.ptr());
    };
    try {
      if (p) std::rethrow_exception(p);
    } catch (const vitk::UsageError& e) {
      raise(g_usage_error, e.what());
    } catch (const vitk::Exception& e) {
      raise(g_error, e.what());
    }
  });
}

std::string repr_of(const char* name, const std::string& path, const std::string& precision) {
  return std::string("vitk.") + name + "(" + py::repr(text_of(path)).cast<std::string>() +
         ", precision='" + precision + "')";
}

// The properties and repr() the four classes share.
template <class T>
void add_common(py::class_<T>& cls, const char* name) {
  cls.def_property_readonly(
         "precision", [](const T& t) { return t.model.precision(); },
         "str: the precision the model runs at: 'f32', 'bf16' or 'int8'.")
      .def_property_readonly(
          "path", [](const T& t) { return text_of(t.path); },
          "str: the checkpoint's path, as given.")
      .def("__repr__", [name](const T& t) { return repr_of(name, t.path, t.model.precision()); });
}

// A method of the search's keyword arguments: run(self, inputs, search).
template <class T, class Run>
void add_search_method(py::class_<T>& cls, const char* name, const char* inputs, Run run,
                       const std::string& doc) {
  cls.def(
      name,
      [run](const T& self, const py::object& in, int beam_size, float length_penalty, int nbest,
            bool greedy, bool sample, float temperature, int64_t top_k, uint64_t seed,
            int64_t max_length, int64_t max_length_offset, bool return_scores) {
        return run(self, in,
                   search_of(beam_size, length_penalty, nbest, greedy, sample, temperature, top_k,
                             seed, max_length, max_length_offset, return_scores));
      },
      py::arg(inputs), py::kw_only(), py::arg("beam_size") = 4, py::arg("length_penalty") = 0.6f,
      py::arg("nbest") = 1, py::arg("greedy") = false, py::arg("sample") = false,
      py::arg("temperature") = 1.f, py::arg("top_k") = 0, py::arg("seed") = 0,
      py::arg("max_length") = 0, py::arg("max_length_offset") = 50,
      py::arg("return_scores") = false, doc.c_str());
}

// (int, int) of a model's input.
template <class T>
py::tuple image_size(const T& t) {
  return py::make_tuple(t.model.image_height(), t.model.image_width());
}

void add_classifier(py::module_& m) {
  py::class_<Classifier> cls(m, "Classifier", kClassifier);
  cls.def(py::init(&make_classifier), py::arg("path"), py::kw_only(),
          py::arg("precision") = py::none(), py::arg("threads") = 0, py::arg("top_k") = 5,
          py::arg("batch_size") = 32, py::arg("image_size") = py::none(),
          py::arg("labels") = py::none(),
          "__init__(path, *, precision=None, threads=0, top_k=5, batch_size=32, image_size=None, "
          "labels=None): see help(vitk.Classifier).")
      .def_property_readonly(
          "classes", [](const Classifier& c) { return c.model.classes(); },
          "list[str]: the class names, in the order of the model's outputs (logits' columns).")
      .def_property_readonly(
          "image_size", &image_size<Classifier>,
          "(int, int): the model's input (height, width); images of any size are resized to it.")
      .def_property_readonly(
          "channels", [](const Classifier& c) { return c.model.channels(); },
          "int: the model's input channels, 1 (grey) or 3 (RGB); images are converted to them.")
      .def("classify", &classify, py::arg("inputs"), py::arg("top_k") = py::none(),
           (std::string(kClassify) + kImages + kClassifyExample).c_str())
      .def("logits", &logits, py::arg("images"), (std::string(kLogits) + kImages).c_str());
  add_common(cls, "Classifier");
}

void add_translator(py::module_& m) {
  py::class_<Translator> cls(m, "Translator", kTranslator);
  cls.def(py::init(&make_translator), py::arg("path"), py::kw_only(),
          py::arg("precision") = py::none(), py::arg("threads") = 0, py::arg("batch_size") = 32,
          "__init__(path, *, precision=None, threads=0, batch_size=32): see help(vitk.Translator).")
      .def_property_readonly(
          "max_source_tokens", [](const Translator& t) { return t.model.max_source_tokens(); },
          "int: sources longer than this many subwords are cut to it.");
  add_search_method(cls, "translate", "sentences", &translate,
                    std::string(kTranslate) + kSearch + kTranslateExample);
  add_common(cls, "Translator");
}

void add_captioner(py::module_& m) {
  py::class_<Captioner> cls(m, "Captioner", kCaptioner);
  cls.def(py::init(&make_captioner), py::arg("path"), py::kw_only(),
          py::arg("precision") = py::none(), py::arg("threads") = 0, py::arg("batch_size") = 32,
          "__init__(path, *, precision=None, threads=0, batch_size=32): see help(vitk.Captioner).")
      .def_property_readonly("image_size", &image_size<Captioner>,
                             "(int, int): the encoder's input (height, width); images are "
                             "resized to it.")
      .def_property_readonly(
          "channels", [](const Captioner& c) { return c.model.channels(); },
          "int: the encoder's input channels, 1 (grey) or 3 (RGB).");
  add_search_method(cls, "caption", "inputs", &caption,
                    std::string(kCaption) + kImages + kSearch + kCaptionExample);
  add_common(cls, "Captioner");
}

void add_text_classifier(py::module_& m) {
  py::class_<TextClassifier> cls(m, "TextClassifier", kTextClassifier);
  cls.def(py::init(&make_text_classifier), py::arg("path"), py::kw_only(),
          py::arg("precision") = py::none(), py::arg("threads") = 0, py::arg("top_k") = 5,
          py::arg("batch_size") = 64,
          "__init__(path, *, precision=None, threads=0, top_k=5, batch_size=64): see "
          "help(vitk.TextClassifier).")
      .def_property_readonly(
          "classes", [](const TextClassifier& c) { return c.model.classes(); },
          "list[str]: the labels, in the order of the model's outputs.")
      .def_property_readonly(
          "max_tokens", [](const TextClassifier& c) { return c.model.max_tokens(); },
          "int: sentences longer than this many subwords are cut to it.")
      .def("classify", &classify_text, py::arg("sentences"), py::arg("top_k") = py::none(),
           kClassifyText);
  add_common(cls, "TextClassifier");
}

}  // namespace

PYBIND11_MODULE(_vitk, m) {
  m.doc() = "vitk's C++ API (libvitk) for Python; import the package `vitk` rather than this.";
  py::options options;
  options.disable_function_signatures();  // the docstrings write them out
  m.attr("__version__") = vitk::version();
  add_exceptions(m);
  add_classifier(m);
  add_translator(m);
  add_captioner(m);
  add_text_classifier(m);
  m.def("main", &run_main, py::arg("args") = py::none(), kMain);
  // Shown as vitk.X, where the package puts them.
  for (const char* name : {"Classifier", "Translator", "Captioner", "TextClassifier", "main"})
    m.attr(name).attr("__module__") = "vitk";
}
