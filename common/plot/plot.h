#pragma once
// Pictures of what the models compute, drawn with OpenCV into BGR images and written as PNG: a
// perceptual colour map, text (UTF-8 through FreeType when there is a font, else ASCII), heat maps
// with axes, tick labels and a colour bar, grids of small panels, line charts in stacked panels,
// and an atomic PNG writer. Nothing here knows about models: callers compute the values (a
// Tensor [rows, cols] each) and label them; the values stay testable without decoding a PNG.
//
// Files: colormap.cpp, text.cpp (Font), layout.cpp (colour bar, stacking, panels, overlay),
// heatmap.cpp, chart.cpp, png.cpp.
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <opencv2/core.hpp>

#include "common/tensor.h"

namespace vitk::plot {

// ---- Colours ----
// Viridis (matplotlib's default map: perceptually uniform, readable in grey and by most colour-
// blind readers) at t in [0, 1] (clamped; NaN gives grey), as BGR.
cv::Vec3b viridis(double t);
// A categorical colour for series i (the ten "tab10" colours, repeating), as BGR.
cv::Scalar series_colour(int i);

// ---- Text ----
// Draws text with a TrueType font through OpenCV's freetype module (UTF-8: accents, "▁") or, when
// the module or the font is missing, with OpenCV's Hershey font after transliterating to ASCII.
// Coordinates are the top-left corner of a line box of line_height(h) pixels for a font of h
// pixels, so that both kinds of font lay out alike.
class Font {
 public:
  Font();                                      // Hershey, ASCII only
  explicit Font(const std::string& ttf_path);  // vitk::Error when it cannot be used
  // The font pictures use: $VITK_FONT if set, else DejaVu Sans (fonts-dejavu-core); Hershey when
  // neither loads, with a one-line notice on stderr the first time.
  static const Font& standard();
  bool unicode() const { return impl_ != nullptr; }
  const std::string& path() const { return path_; }

  static int line_height(int h) { return (h * 5 + 3) / 4; }
  cv::Size measure(const std::string& text, int h) const;  // width, line_height(h)
  void draw(cv::Mat& image, const std::string& text, cv::Point top_left, int h,
            cv::Scalar colour = cv::Scalar(0, 0, 0)) const;
  // Rotated 90° counter-clockwise (reads bottom to top), e.g. a y-axis title; top_left is the
  // corner of the rotated box, which is line_height(h) wide and measure().width tall.
  void draw_vertical(cv::Mat& image, const std::string& text, cv::Point top_left, int h,
                     cv::Scalar colour = cv::Scalar(0, 0, 0)) const;
  // What is drawn: the text itself with a TrueType font, to_ascii(text) with Hershey.
  std::string shown(const std::string& text) const;

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;  // null: Hershey
  std::string path_;
};

// UTF-8 to ASCII for the Hershey font: Latin letters lose their accents (á → a, ñ → n, ß → ss),
// SentencePiece's word marker "▁" becomes "_", typographic quotes and dashes their ASCII forms,
// anything else "?". Invalid UTF-8 bytes become "?" too.
std::string to_ascii(const std::string& utf8);

// Font sizes (pixels) of every picture, so that they look alike.
constexpr int kTickSize = 13, kLabelSize = 15, kTitleSize = 18;

// ---- Building blocks ----
// Cells of values [rows, cols] coloured by viridis over [vmin, vmax] (a constant range shows the
// middle colour), each cell_w × cell_h pixels.
cv::Mat colour_cells(const Tensor& values, float vmin, float vmax, int cell_w, int cell_h);
// The smallest and largest finite value (0, 1 when there is none).
std::pair<float, float> value_range(const Tensor& values);

struct ColourBar {
  float vmin = 0, vmax = 0;  // vmin == vmax in a Heatmap: the values' range
  std::string label;         // drawn vertically beside the ticks
  // Tick labels at chosen values (e.g. {0, "hidden"}, {1, "visible"}); empty: about five numbers.
  std::vector<std::pair<float, std::string>> ticks;
};
// A vertical colour bar with its ticks and label, on white: the gradient (vmax at the top) spans
// rows [colour_bar_margin(), colour_bar_margin() + height) of the image, which has that margin
// above and below for the end ticks' labels.
cv::Mat render_colour_bar(const ColourBar& bar, int height, const Font& font);
int colour_bar_margin();
// A tick label: as many decimals as `step` needs ("0.25", "1000"), or "1e-04" style for tiny and
// huge values.
std::string format_tick(double value, double step);

// Side by side (top-aligned) or one above the other (left-aligned), `gap` white pixels apart.
cv::Mat hstack(const std::vector<cv::Mat>& parts, int gap);
cv::Mat vstack(const std::vector<cv::Mat>& parts, int gap);
// A white border around image.
cv::Mat pad(const cv::Mat& image, int top, int right, int bottom, int left);
// Lines of text above image (the first line larger: a title), centred on the wider of the two.
cv::Mat with_title(const cv::Mat& image, const std::vector<std::string>& lines, const Font& font);
// The map [rows, cols] upscaled to image's size (nearest: one block per cell) in viridis over
// [vmin, vmax], laid over a BGR image with the given opacity.
cv::Mat overlay(const cv::Mat& image, const Tensor& map, float vmin, float vmax, double opacity);

// Panels of equal size in a grid of `columns` with a caption above each, all on one colour scale
// shown by one colour bar on the right.
struct PanelGrid {
  std::vector<cv::Mat> panels;        // BGR, all the same size
  std::vector<std::string> captions;  // one per panel, or none
  int columns = 4;
  ColourBar bar;
};
cv::Mat render_panel_grid(const PanelGrid& grid, const Font& font);

// ---- Heat maps ----
struct Heatmap {
  Tensor values;  // f32 [rows, cols]
  std::string title;
  std::vector<std::string> subtitle;          // lines under the title
  std::string x_label, y_label;               // axis titles
  std::vector<std::string> x_ticks, y_ticks;  // one per column / row; empty: numbers
  int first_index = 0;                        // the number of the first row and column
  ColourBar bar;                              // with vmin == vmax: the values' range
  bool annotate = false;                      // write each cell's value in it
  const char* cell_format = "%.2f";           // ... with this format, unless cell_text is set
  std::vector<std::string> cell_text;         // rows · cols strings, row-major
  int cell = 0;                               // pixels per cell; 0: chosen from the size
};
cv::Mat render_heatmap(const Heatmap& heatmap, const Font& font = Font::standard());

// ---- Line charts ----
struct Series {
  std::string name;
  std::vector<double> x, y;  // non-finite y values are gaps
};
struct Panel {
  std::string y_label;
  std::vector<Series> series;  // coloured series_colour(0), (1), ... with a legend on the right
};
struct Chart {
  std::string title;
  std::vector<std::string> subtitle;
  std::string x_label;
  std::vector<Panel> panels;  // stacked, sharing the x axis
  int width = 820, panel_height = 210;
};
cv::Mat render_chart(const Chart& chart, const Font& font = Font::standard());
// "Nice" axis ticks covering [lo, hi]: about `count` multiples of 1, 2 or 5 × 10^k.
std::vector<double> nice_ticks(double lo, double hi, int count);

// ---- Files ----
// Encodes image as PNG and writes it to a temporary file beside path, renamed over path once
// complete: a failure never leaves a half-written picture. vitk::Error naming path otherwise.
void write_png(const std::string& path, const cv::Mat& image);

}  // namespace vitk::plot
