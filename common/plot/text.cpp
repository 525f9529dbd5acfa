// Text in pictures. Subword labels are UTF-8 (Spanish accents, SentencePiece's "▁"), which
// OpenCV's own Hershey fonts cannot draw; OpenCV's freetype module (libopencv-contrib) draws them
// with a TrueType font. Without the module or a font, text is transliterated to ASCII and drawn
// in Hershey, and the user is told once.
#include <cstdio>
#include <cstdlib>
#include <mutex>

#include <opencv2/imgproc.hpp>

#include "common/error.h"
#include "common/plot/plot.h"

#if defined(VITK_HAVE_FREETYPE)
#include <opencv2/freetype.hpp>
#endif

namespace vitk::plot {
namespace {

constexpr const char* kDefaultFonts[] = {
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",  // fonts-dejavu-core
};

// Hershey glyphs drawn `h` pixels tall in the same line box as FreeType's: FreeType puts the
// baseline h pixels below the top it is given; capitals are about 0.73·h tall.
double hershey_scale(int h) {
  static const int cap = cv::getTextSize("H", cv::FONT_HERSHEY_SIMPLEX, 1.0, 1, nullptr).height;
  return 0.73 * h / cap;
}

// One code point from s at i (advancing i); -1 for an invalid sequence (one byte consumed).
long next_code_point(const std::string& s, size_t& i) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = b(i);
  int extra = c < 0x80 ? 0 : (c >> 5) == 6 ? 1 : (c >> 4) == 14 ? 2 : (c >> 3) == 30 ? 3 : -1;
  if (extra < 0 || i + extra >= s.size()) {
    ++i;
    return -1;
  }
  long cp = extra == 0 ? c : c & (0x3F >> extra);
  for (int k = 1; k <= extra; ++k) {
    if ((b(i + k) & 0xC0) != 0x80) {
      ++i;
      return -1;
    }
    cp = (cp << 6) | (b(i + k) & 0x3F);
  }
  i += extra + 1;
  return cp;
}

// U+00A0..U+00FF and U+0100..U+017F (Latin-1 Supplement, Latin Extended-A) without accents.
const char* const kLatin1[96] = {" ",  "!",   "c", "L",  "?",   "Y",   "|",   "S",
                                 "\"", "(c)", "a", "\"", "-",   "-",   "(R)", "-",  // A0
                                 "o",  "+-",  "2", "3",  "'",   "u",   "P",   ".",
                                 ",",  "1",   "o", "\"", "1/4", "1/2", "3/4", "?",  // B0
                                 "A",  "A",   "A", "A",  "A",   "A",   "AE",  "C",
                                 "E",  "E",   "E", "E",  "I",   "I",   "I",   "I",  // C0
                                 "D",  "N",   "O", "O",  "O",   "O",   "O",   "x",
                                 "O",  "U",   "U", "U",  "U",   "Y",   "Th",  "ss",  // D0
                                 "a",  "a",   "a", "a",  "a",   "a",   "ae",  "c",
                                 "e",  "e",   "e", "e",  "i",   "i",   "i",   "i",  // E0
                                 "d",  "n",   "o", "o",  "o",   "o",   "o",   "/",
                                 "o",  "u",   "u", "u",  "u",   "y",   "th",  "y"};  // F0
constexpr char kExtendedA[] =
    "AaAaAaCcCcCcCcDdDdEeEeEeEeEeGgGgGgGgHhHhIiIiIiIiIiIiJjKkkLlLlLlLlLlNnNnNnnNnOoOoOoOoRrRrRrSs"
    "SsSsSsTtTtTtUuUuUuUuUuUuWwYyYZzZzZzs";
static_assert(sizeof(kExtendedA) == 128 + 1, "one letter per code point of U+0100..U+017F");

}  // namespace

std::string to_ascii(const std::string& utf8) {
  std::string out;
  for (size_t i = 0; i < utf8.size();) {
    const long cp = next_code_point(utf8, i);
    if (cp >= 0 && cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp >= 0xA0 && cp < 0x100) {
      out += kLatin1[cp - 0xA0];
    } else if (cp == 0x152 || cp == 0x153) {
      out += cp == 0x152 ? "OE" : "oe";
    } else if (cp == 0x132 || cp == 0x133) {
      out += cp == 0x132 ? "IJ" : "ij";
    } else if (cp >= 0x100 && cp < 0x180) {
      out += kExtendedA[cp - 0x100];
    } else if (cp == 0x2581) {  // SentencePiece's "▁": a word starts here
      out += '_';
    } else if (cp == 0x2018 || cp == 0x2019 || cp == 0x201A) {
      out += '\'';
    } else if (cp == 0x201C || cp == 0x201D || cp == 0x201E) {
      out += '"';
    } else if (cp == 0x2013 || cp == 0x2014 || cp == 0x2212) {
      out += '-';
    } else if (cp == 0x2026) {
      out += "...";
    } else if (cp == 0x2192) {
      out += "->";
    } else {
      out += '?';
    }
  }
  return out;
}

#if defined(VITK_HAVE_FREETYPE)
struct Font::Impl {
  cv::Ptr<cv::freetype::FreeType2> ft;
};
#else
struct Font::Impl {};
#endif

Font::Font() = default;

Font::Font(const std::string& ttf_path) : path_(ttf_path) {
#if defined(VITK_HAVE_FREETYPE)
  auto impl = std::make_shared<Impl>();
  try {
    impl->ft = cv::freetype::createFreeType2();
    impl->ft->loadFontData(ttf_path, 0);
  } catch (const cv::Exception& e) {
    throw Error(ttf_path + ": cannot load as a TrueType font: " + e.err);
  }
  impl_ = impl;
#else
  throw Error(ttf_path + ": this vitk was built without OpenCV's freetype module");
#endif
}

const Font& Font::standard() {
  static const Font font = [] {
    std::string tried;
    std::vector<std::string> candidates;
    if (const char* env = std::getenv("VITK_FONT"); env && *env) candidates.push_back(env);
    for (const char* p : kDefaultFonts) candidates.push_back(p);
    for (const std::string& p : candidates) {
      try {
        return Font(p);
      } catch (const Error& e) {
        tried += std::string(tried.empty() ? "" : "; ") + e.what();
      }
    }
    std::fprintf(
        stderr,
        "vitk: note: labels in pictures are drawn in ASCII (accents dropped, \"\xE2\x96\x81\" "
        "as \"_\"): no TrueType font (%s)\n",
        tried.c_str());
    return Font();
  }();
  return font;
}

std::string Font::shown(const std::string& text) const {
  return impl_ ? text : to_ascii(text);
}

cv::Size Font::measure(const std::string& text, int h) const {
  if (text.empty()) return cv::Size(0, line_height(h));
  int width = 0;
#if defined(VITK_HAVE_FREETYPE)
  if (impl_) {
    int baseline = 0;
    width = impl_->ft->getTextSize(text, h, -1, &baseline).width;
  }
#endif
  if (!impl_)
    width = cv::getTextSize(to_ascii(text), cv::FONT_HERSHEY_SIMPLEX, hershey_scale(h), 1, nullptr)
                .width;
  return cv::Size(width, line_height(h));
}

void Font::draw(cv::Mat& image, const std::string& text, cv::Point top_left, int h,
                cv::Scalar colour) const {
  if (text.empty()) return;
#if defined(VITK_HAVE_FREETYPE)
  if (impl_) {
    impl_->ft->putText(image, text, top_left, h, colour, -1, cv::LINE_AA, false);
    return;
  }
#endif
  cv::putText(image, to_ascii(text), top_left + cv::Point(0, h), cv::FONT_HERSHEY_SIMPLEX,
              hershey_scale(h), colour, 1, cv::LINE_AA);
}

void Font::draw_vertical(cv::Mat& image, const std::string& text, cv::Point top_left, int h,
                         cv::Scalar colour) const {
  const cv::Size size = measure(text, h);
  if (size.width == 0) return;
  // Drawn on white, turned, then darkened into place: labels sit on white margins.
  cv::Mat flat(size.height, size.width + 2, CV_8UC3, cv::Scalar::all(255));
  draw(flat, text, cv::Point(1, 0), h, colour);
  cv::Mat turned;
  cv::rotate(flat, turned, cv::ROTATE_90_COUNTERCLOCKWISE);
  const cv::Rect want(top_left, turned.size());
  const cv::Rect fit = want & cv::Rect(0, 0, image.cols, image.rows);
  if (fit.empty()) return;
  cv::Mat dst = image(fit);
  cv::min(dst, turned(cv::Rect(fit.tl() - want.tl(), fit.size())), dst);
}

}  // namespace vitk::plot
