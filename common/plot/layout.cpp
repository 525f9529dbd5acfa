// Building blocks of pictures: coloured cells, the colour bar, stacking with gaps, titles, an
// overlay of a map on an image, and grids of panels sharing one colour scale.
#include <algorithm>
#include <cmath>
#include <cstdio>

#include <opencv2/imgproc.hpp>

#include "common/error.h"
#include "common/plot/plot.h"

namespace vitk::plot {
namespace {

const cv::Scalar kWhite(255, 255, 255), kBlack(0, 0, 0), kGrey(90, 90, 90);

void check_matrix(const Tensor& values, const char* what) {
  if (values.empty() || values.dtype() != DType::f32 || values.rank() != 2 || values.dim(0) < 1 ||
      values.dim(1) < 1)
    throw Error(std::string("plot: ") + what + " must be f32 [rows, cols], not " +
                shape_str(values.shape()));
}

}  // namespace

std::pair<float, float> value_range(const Tensor& values) {
  float lo = INFINITY, hi = -INFINITY;
  const float* v = values.f32();
  for (int64_t i = 0; i < values.numel(); ++i)
    if (std::isfinite(v[i])) lo = std::min(lo, v[i]), hi = std::max(hi, v[i]);
  if (lo > hi) return {0.f, 1.f};
  return {lo, hi};
}

cv::Mat colour_cells(const Tensor& values, float vmin, float vmax, int cell_w, int cell_h) {
  check_matrix(values, "values");
  const int rows = static_cast<int>(values.dim(0)), cols = static_cast<int>(values.dim(1));
  cv::Mat small(rows, cols, CV_8UC3);
  const float* v = values.f32();
  const double span = static_cast<double>(vmax) - vmin;
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c) {
      const double x = v[r * cols + c];
      const double t = span > 0 ? (x - vmin) / span : std::isfinite(x) ? 0.5 : NAN;
      small.at<cv::Vec3b>(r, c) = viridis(t);
    }
  cv::Mat big;
  cv::resize(small, big, cv::Size(cols * cell_w, rows * cell_h), 0, 0, cv::INTER_NEAREST);
  return big;
}

std::string format_tick(double value, double step) {
  char text[32];
  const double mag = std::fabs(value);
  if (value != 0 && (mag < 1e-3 || mag >= 1e6)) {
    std::snprintf(text, sizeof text, "%.1e", value);
  } else {
    const int decimals =
        step > 0 ? std::clamp(static_cast<int>(std::ceil(-std::log10(step) - 1e-9)), 0, 6) : 2;
    std::snprintf(text, sizeof text, "%.*f", decimals, value);
  }
  std::string s = text;
  if (s == "-0" || s.find_first_not_of("-0.") == std::string::npos) s = "0";
  return s;
}

int colour_bar_margin() {
  return Font::line_height(kTickSize) / 2 + 1;
}

cv::Mat render_colour_bar(const ColourBar& bar, int height, const Font& font) {
  height = std::max(height, 40);
  const int margin = colour_bar_margin(), bar_w = 16, tick = 4;
  std::vector<std::pair<float, std::string>> ticks = bar.ticks;
  if (ticks.empty()) {
    const std::vector<double> values =
        bar.vmax > bar.vmin ? nice_ticks(bar.vmin, bar.vmax, 5) : std::vector<double>{bar.vmin};
    const double step = values.size() > 1 ? values[1] - values[0] : std::fabs(bar.vmin);
    for (double v : values)
      ticks.emplace_back(static_cast<float>(v), format_tick(v, step > 0 ? step : 1));
  }
  int label_w = 0;
  for (const auto& t : ticks) label_w = std::max(label_w, font.measure(t.second, kTickSize).width);
  const int label_h = Font::line_height(kLabelSize);
  const int width = bar_w + tick + 4 + label_w + (bar.label.empty() ? 2 : 8 + label_h);
  // A label longer than a short bar runs on below it rather than being cut.
  const int label_len = bar.label.empty() ? 0 : font.measure(bar.label, kLabelSize).width;
  cv::Mat image(std::max(height + 2 * margin, label_len + margin + 2), width, CV_8UC3, kWhite);
  // vmax at the top row of the gradient, vmin at the bottom one.
  for (int y = 0; y < height; ++y) {
    const double t = height > 1 ? 1.0 - static_cast<double>(y) / (height - 1) : 0.5;
    cv::line(image, {0, margin + y}, {bar_w - 1, margin + y},
             cv::Scalar(viridis(bar.vmax > bar.vmin ? t : 0.5)));
  }
  cv::rectangle(image, {0, margin}, {bar_w - 1, margin + height - 1}, kGrey);
  const double span = static_cast<double>(bar.vmax) - bar.vmin;
  for (const auto& [value, text] : ticks) {
    const double t = span > 0 ? (value - bar.vmin) / span : 0.5;
    if (t < -1e-6 || t > 1 + 1e-6) continue;
    const int y = margin + static_cast<int>(std::lround((1.0 - t) * (height - 1)));
    cv::line(image, {bar_w, y}, {bar_w + tick - 1, y}, kBlack);
    font.draw(image, text, {bar_w + tick + 3, y - Font::line_height(kTickSize) / 2 - 1}, kTickSize);
  }
  if (!bar.label.empty()) {
    font.draw_vertical(image, bar.label,
                       {width - label_h, margin + std::max(0, (height - label_len) / 2)},
                       kLabelSize);
  }
  return image;
}

cv::Mat hstack(const std::vector<cv::Mat>& parts, int gap) {
  int width = 0, height = 0;
  for (const cv::Mat& p : parts) width += p.cols, height = std::max(height, p.rows);
  width += gap * std::max(0, static_cast<int>(parts.size()) - 1);
  cv::Mat out(std::max(height, 1), std::max(width, 1), CV_8UC3, kWhite);
  int x = 0;
  for (const cv::Mat& p : parts) {
    p.copyTo(out(cv::Rect(x, 0, p.cols, p.rows)));
    x += p.cols + gap;
  }
  return out;
}

cv::Mat vstack(const std::vector<cv::Mat>& parts, int gap) {
  int width = 0, height = 0;
  for (const cv::Mat& p : parts) height += p.rows, width = std::max(width, p.cols);
  height += gap * std::max(0, static_cast<int>(parts.size()) - 1);
  cv::Mat out(std::max(height, 1), std::max(width, 1), CV_8UC3, kWhite);
  int y = 0;
  for (const cv::Mat& p : parts) {
    p.copyTo(out(cv::Rect(0, y, p.cols, p.rows)));
    y += p.rows + gap;
  }
  return out;
}

cv::Mat pad(const cv::Mat& image, int top, int right, int bottom, int left) {
  cv::Mat out;
  cv::copyMakeBorder(image, out, top, bottom, left, right, cv::BORDER_CONSTANT, kWhite);
  return out;
}

cv::Mat with_title(const cv::Mat& image, const std::vector<std::string>& lines, const Font& font) {
  int width = image.cols, height = 8;
  for (size_t i = 0; i < lines.size(); ++i) {
    const cv::Size s = font.measure(lines[i], i == 0 ? kTitleSize : kTickSize);
    width = std::max(width, s.width + 24);
    height += s.height + 2;
  }
  cv::Mat out(height + image.rows, width, CV_8UC3, kWhite);
  int y = 6;
  for (size_t i = 0; i < lines.size(); ++i) {
    const int size = i == 0 ? kTitleSize : kTickSize;
    const cv::Size s = font.measure(lines[i], size);
    font.draw(out, lines[i], {(width - s.width) / 2, y}, size, i == 0 ? kBlack : kGrey);
    y += s.height + 2;
  }
  image.copyTo(out(cv::Rect((width - image.cols) / 2, height, image.cols, image.rows)));
  return out;
}

cv::Mat overlay(const cv::Mat& image, const Tensor& map, float vmin, float vmax, double opacity) {
  check_matrix(map, "map");
  cv::Mat colour;
  cv::resize(colour_cells(map, vmin, vmax, 1, 1), colour, image.size(), 0, 0, cv::INTER_NEAREST);
  cv::Mat out;
  cv::addWeighted(image, 1.0 - opacity, colour, opacity, 0.0, out);
  return out;
}

cv::Mat render_panel_grid(const PanelGrid& grid, const Font& font) {
  if (grid.panels.empty()) throw Error("plot: a panel grid needs at least one panel");
  const cv::Size size = grid.panels[0].size();
  for (const cv::Mat& p : grid.panels)
    if (p.size() != size || p.type() != CV_8UC3)
      throw Error("plot: the panels of a grid must be BGR images of one size");
  const int columns =
      std::max(1, std::min<int>(grid.columns, static_cast<int>(grid.panels.size())));
  const int caption_h = grid.captions.empty() ? 0 : Font::line_height(kTickSize) + 2, gap = 8;
  std::vector<cv::Mat> rows;
  for (size_t first = 0; first < grid.panels.size(); first += static_cast<size_t>(columns)) {
    std::vector<cv::Mat> cells;
    for (size_t i = first; i < std::min(grid.panels.size(), first + columns); ++i) {
      cv::Mat cell(caption_h + size.height, size.width, CV_8UC3, kWhite);
      if (caption_h && i < grid.captions.size()) {
        const int w = font.measure(grid.captions[i], kTickSize).width;
        font.draw(cell, grid.captions[i], {std::max(0, (size.width - w) / 2), 0}, kTickSize);
      }
      grid.panels[i].copyTo(cell(cv::Rect(0, caption_h, size.width, size.height)));
      cells.push_back(cell);
    }
    rows.push_back(hstack(cells, gap));
  }
  cv::Mat panels = vstack(rows, gap);
  const int margin = colour_bar_margin();
  const int bar_h = panels.rows - caption_h;
  cv::Mat bar = render_colour_bar(grid.bar, bar_h, font);
  // The gradient starts level with the first panel, under its caption.
  cv::Mat bar_placed = pad(bar, std::max(0, caption_h - margin), 0, 0, 0);
  if (caption_h < margin) panels = pad(panels, margin - caption_h, 0, 0, 0);
  return hstack({panels, bar_placed}, 14);
}

}  // namespace vitk::plot
