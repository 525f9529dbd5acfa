// A heat map with axes: one square cell per value, tick labels on the left and below (turned
// upright when they are wider than their column), axis titles, a colour bar, a title.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <tuple>

#include <opencv2/imgproc.hpp>

#include "common/error.h"
#include "common/plot/plot.h"

namespace vitk::plot {
namespace {

const cv::Scalar kWhite(255, 255, 255), kBlack(0, 0, 0);

// Labels of n rows or columns and the stride at which to draw them: every one when given as text,
// else numbers at a stride of 1, 2, 5, 10, ... chosen so that neighbours do not touch.
struct Ticks {
  std::vector<std::string> text;
  int stride = 1;
};

Ticks make_ticks(int64_t n, const std::vector<std::string>& given, int first, int cell,
                 bool horizontal, const Font& font) {
  Ticks t;
  if (!given.empty()) {
    t.text = given;
    // Text labels are all drawn when a line of text fits a cell, else every k-th.
    const int need = Font::line_height(kTickSize);
    while (t.stride * cell < need) ++t.stride;
    return t;
  }
  for (int64_t i = 0; i < n; ++i) t.text.push_back(std::to_string(first + i));
  const int widest = font.measure(std::to_string(first + n - 1), kTickSize).width;
  const int need = horizontal ? widest + 6 : Font::line_height(kTickSize);
  static const int kSteps[] = {1, 2, 5, 10, 20, 25, 50, 100, 200, 250, 500, 1000, 2000, 5000};
  for (int s : kSteps) {
    t.stride = s;
    if (s * cell >= need) break;
  }
  return t;
}

bool shown(const Ticks& t, int64_t i) {
  return i % t.stride == 0;
}

}  // namespace

cv::Mat render_heatmap(const Heatmap& h, const Font& font) {
  const Tensor& values = h.values;
  if (values.empty() || values.dtype() != DType::f32 || values.rank() != 2 || values.dim(0) < 1 ||
      values.dim(1) < 1)
    throw Error("plot: heat map values must be f32 [rows, cols], not " + shape_str(values.shape()));
  const int64_t rows = values.dim(0), cols = values.dim(1);
  if ((!h.x_ticks.empty() && static_cast<int64_t>(h.x_ticks.size()) != cols) ||
      (!h.y_ticks.empty() && static_cast<int64_t>(h.y_ticks.size()) != rows))
    throw Error("plot: " + std::to_string(h.y_ticks.size()) + " row and " +
                std::to_string(h.x_ticks.size()) + " column labels for a heat map of " +
                shape_str(values.shape()));
  if (!h.cell_text.empty() && static_cast<int64_t>(h.cell_text.size()) != rows * cols)
    throw Error("plot: cell_text needs one string per cell");

  const bool text_labels = !h.x_ticks.empty() || !h.y_ticks.empty();
  int cell = h.cell;
  if (cell <= 0) {
    cell = std::clamp(static_cast<int>(560 / std::max(rows, cols)), 1, 48);
    if (text_labels) cell = std::max(cell, Font::line_height(kTickSize) + 2);
  }
  ColourBar bar = h.bar;
  if (!(bar.vmax > bar.vmin)) std::tie(bar.vmin, bar.vmax) = value_range(values);

  const Ticks xt = make_ticks(cols, h.x_ticks, h.first_index, cell, true, font);
  const Ticks yt = make_ticks(rows, h.y_ticks, h.first_index, cell, false, font);
  int x_label_w = 0, y_label_w = 0;
  for (int64_t i = 0; i < cols; ++i)
    if (shown(xt, i)) x_label_w = std::max(x_label_w, font.measure(xt.text[i], kTickSize).width);
  for (int64_t i = 0; i < rows; ++i)
    if (shown(yt, i)) y_label_w = std::max(y_label_w, font.measure(yt.text[i], kTickSize).width);
  // Column labels wider than their stride's room are drawn upright.
  const bool upright = x_label_w + 4 > cell * xt.stride;
  const int tick = 4, lh = Font::line_height(kTickSize), title_h = Font::line_height(kLabelSize);
  const int left = 10 + (h.y_label.empty() ? 0 : title_h + 6) + y_label_w + 4 + tick;
  const int top = colour_bar_margin() + 2;  // room for the colour bar's top label
  const int plot_w = static_cast<int>(cols) * cell, plot_h = static_cast<int>(rows) * cell;
  const int x_labels_h = upright ? x_label_w + 2 : lh;
  const int bottom = tick + 3 + x_labels_h + (h.x_label.empty() ? 0 : 6 + title_h) + 10;

  cv::Mat image(top + plot_h + bottom, left + plot_w + 4, CV_8UC3, kWhite);
  colour_cells(values, bar.vmin, bar.vmax, cell, cell)
      .copyTo(image(cv::Rect(left, top, plot_w, plot_h)));
  cv::rectangle(image, {left - 1, top - 1}, {left + plot_w, top + plot_h}, cv::Scalar::all(90));

  if (h.annotate && cell >= 14) {
    const int size = std::min(kTickSize, cell / 2 + 2);
    const float* v = values.f32();
    const double span = static_cast<double>(bar.vmax) - bar.vmin;
    char buf[32];
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) {
        const float x = v[r * cols + c];
        std::string text = h.cell_text.empty() ? std::string() : h.cell_text[r * cols + c];
        if (h.cell_text.empty()) {
          std::snprintf(buf, sizeof buf, h.cell_format, x);
          text = buf;
        }
        const cv::Size s = font.measure(text, size);
        if (s.width > cell - 2) continue;
        const double t = span > 0 ? (x - bar.vmin) / span : 0.5;
        const cv::Scalar ink = t < 0.55 ? kWhite : kBlack;  // dark cells take light text
        font.draw(image, text,
                  {left + static_cast<int>(c) * cell + (cell - s.width) / 2,
                   top + static_cast<int>(r) * cell + (cell - s.height) / 2},
                  size, ink);
      }
  }

  for (int64_t r = 0; r < rows; ++r) {
    if (!shown(yt, r)) continue;
    const int y = top + static_cast<int>(r) * cell + cell / 2;
    cv::line(image, {left - tick - 1, y}, {left - 2, y}, kBlack);
    const int w = font.measure(yt.text[r], kTickSize).width;
    font.draw(image, yt.text[r], {left - tick - 3 - w, y - lh / 2 - 1}, kTickSize);
  }
  for (int64_t c = 0; c < cols; ++c) {
    if (!shown(xt, c)) continue;
    const int x = left + static_cast<int>(c) * cell + cell / 2;
    const int y = top + plot_h + 1;
    cv::line(image, {x, y}, {x, y + tick - 1}, kBlack);
    const int w = font.measure(xt.text[c], kTickSize).width;
    if (upright)  // reads bottom to top, its end at the axis
      font.draw_vertical(image, xt.text[c], {x - lh / 2, y + tick + 2 + x_label_w - w}, kTickSize);
    else
      font.draw(image, xt.text[c], {x - w / 2, y + tick + 1}, kTickSize);
  }
  if (!h.x_label.empty()) {
    const int w = font.measure(h.x_label, kLabelSize).width;
    font.draw(image, h.x_label, {left + (plot_w - w) / 2, top + plot_h + tick + 3 + x_labels_h + 6},
              kLabelSize);
  }
  if (!h.y_label.empty()) {
    const int w = font.measure(h.y_label, kLabelSize).width;
    font.draw_vertical(image, h.y_label, {10, top + std::max(0, (plot_h - w) / 2)}, kLabelSize);
  }

  // The colour bar's gradient level with the cells.
  cv::Mat colour_bar = render_colour_bar(bar, plot_h, font);
  const int margin = colour_bar_margin();
  cv::Mat body = hstack({image, pad(colour_bar, top - margin, 10, 0, 0)}, 12);
  std::vector<std::string> lines;
  if (!h.title.empty()) lines.push_back(h.title);
  for (const std::string& s : h.subtitle) lines.push_back(s);
  return lines.empty() ? body : with_title(body, lines, font);
}

}  // namespace vitk::plot
