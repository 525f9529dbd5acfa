// Line charts: panels stacked on one x axis (e.g. loss, accuracy and learning rate against the
// step), each with its own y axis, grid lines and a legend to the right.
#include <algorithm>
#include <cmath>

#include <opencv2/imgproc.hpp>

#include "common/error.h"
#include "common/plot/plot.h"

namespace vitk::plot {
namespace {

const cv::Scalar kWhite(255, 255, 255), kBlack(0, 0, 0), kGrid(225, 225, 225);

struct Range {
  double lo = INFINITY, hi = -INFINITY;
  void add(double v) {
    if (std::isfinite(v)) lo = std::min(lo, v), hi = std::max(hi, v);
  }
  bool empty() const { return lo > hi; }
  // A little room around the data, and some width for a single value.
  void widen(double fraction) {
    if (empty()) lo = 0, hi = 1;
    if (hi == lo) {
      const double d = lo == 0 ? 1 : std::fabs(lo) * 0.1;
      lo -= d, hi += d;
      return;
    }
    const double d = (hi - lo) * fraction;
    lo -= d, hi += d;
  }
};

}  // namespace

std::vector<double> nice_ticks(double lo, double hi, int count) {
  std::vector<double> ticks;
  if (!(hi > lo) || !std::isfinite(lo) || !std::isfinite(hi) || count < 1) return {lo};
  const double raw = (hi - lo) / count, mag = std::pow(10.0, std::floor(std::log10(raw)));
  double step = 10 * mag;
  for (double m : {1.0, 2.0, 2.5, 5.0})
    if (m * mag >= raw * (1 - 1e-9)) {
      step = m * mag;
      break;
    }
  const double first = std::ceil(lo / step - 1e-9);
  for (double k = first; k * step <= hi + step * 1e-9; k += 1)
    ticks.push_back(k == 0 ? 0.0 : k * step);
  return ticks;
}

cv::Mat render_chart(const Chart& chart, const Font& font) {
  if (chart.panels.empty()) throw Error("plot: a chart needs at least one panel");
  Range xr;
  int legend_w = 0;
  for (const Panel& p : chart.panels)
    for (const Series& s : p.series) {
      if (s.x.size() != s.y.size())
        throw Error("plot: series '" + s.name + "' has " + std::to_string(s.x.size()) + " x and " +
                    std::to_string(s.y.size()) + " y values");
      for (size_t i = 0; i < s.x.size(); ++i)
        if (std::isfinite(s.y[i])) xr.add(s.x[i]);
      legend_w = std::max(legend_w, font.measure(s.name, kTickSize).width);
    }
  xr.widen(0.02);
  const std::vector<double> xticks = nice_ticks(xr.lo, xr.hi, 8);
  const double xstep = xticks.size() > 1 ? xticks[1] - xticks[0] : 1;

  const int lh = Font::line_height(kTickSize), title_h = Font::line_height(kLabelSize);
  // Every panel gets the same left margin, so that their x axes line up.
  std::vector<Range> yr(chart.panels.size());
  std::vector<std::vector<double>> yticks(chart.panels.size());
  int ytick_w = 0;
  for (size_t k = 0; k < chart.panels.size(); ++k) {
    for (const Series& s : chart.panels[k].series)
      for (size_t i = 0; i < s.y.size(); ++i)
        if (std::isfinite(s.x[i])) yr[k].add(s.y[i]);
    yr[k].widen(0.06);
    yticks[k] = nice_ticks(yr[k].lo, yr[k].hi, 4);
    const double step = yticks[k].size() > 1 ? yticks[k][1] - yticks[k][0] : 1;
    for (double v : yticks[k])
      ytick_w = std::max(ytick_w, font.measure(format_tick(v, step), kTickSize).width);
  }
  const int left = 10 + title_h + 8 + ytick_w + 8, right = legend_w + 48;
  const int plot_w = std::max(200, chart.width - left - right), plot_h = chart.panel_height;

  std::vector<cv::Mat> panels;
  for (size_t k = 0; k < chart.panels.size(); ++k) {
    const Panel& p = chart.panels[k];
    const bool last = k + 1 == chart.panels.size();
    const int top = 8;
    const int bottom = last ? 4 + lh + 6 + (chart.x_label.empty() ? 0 : title_h) + 6 : 8;
    cv::Mat image(top + plot_h + bottom, left + plot_w + right, CV_8UC3, kWhite);
    auto px = [&](double x) {
      return left + static_cast<int>(std::lround((x - xr.lo) / (xr.hi - xr.lo) * (plot_w - 1)));
    };
    auto py = [&](double y) {
      return top + static_cast<int>(
                       std::lround((1 - (y - yr[k].lo) / (yr[k].hi - yr[k].lo)) * (plot_h - 1)));
    };
    const double ystep = yticks[k].size() > 1 ? yticks[k][1] - yticks[k][0] : 1;
    for (double v : yticks[k]) {
      const int y = py(v);
      if (y < top || y >= top + plot_h) continue;
      cv::line(image, {left, y}, {left + plot_w - 1, y}, kGrid);
      const std::string text = format_tick(v, ystep);
      const int w = font.measure(text, kTickSize).width;
      cv::line(image, {left - 4, y}, {left - 1, y}, kBlack);
      font.draw(image, text, {left - 7 - w, y - lh / 2 - 1}, kTickSize);
    }
    for (double v : xticks) {
      const int x = px(v);
      if (x < left || x >= left + plot_w) continue;
      cv::line(image, {x, top}, {x, top + plot_h - 1}, kGrid);
      if (!last) continue;
      const std::string text = format_tick(v, xstep);
      const int w = font.measure(text, kTickSize).width;
      cv::line(image, {x, top + plot_h}, {x, top + plot_h + 3}, kBlack);
      font.draw(image, text, {x - w / 2, top + plot_h + 5}, kTickSize);
    }
    cv::rectangle(image, {left - 1, top - 1}, {left + plot_w, top + plot_h}, cv::Scalar::all(90));
    for (size_t si = 0; si < p.series.size(); ++si) {
      const Series& s = p.series[si];
      const cv::Scalar colour = series_colour(static_cast<int>(si));
      std::vector<cv::Point> run;
      int points = 0;
      for (size_t i = 0; i < s.x.size(); ++i) points += std::isfinite(s.y[i]) ? 1 : 0;
      for (size_t i = 0; i < s.x.size(); ++i) {
        // A row without this value (an epoch that was not validated) is skipped: the line
        // joins the rows that have it.
        if (!std::isfinite(s.y[i]) || !std::isfinite(s.x[i])) continue;
        const cv::Point q(px(s.x[i]), py(s.y[i]));
        run.push_back(q);
        if (points <= 60) cv::circle(image, q, 3, colour, cv::FILLED, cv::LINE_AA);
      }
      if (run.size() > 1) cv::polylines(image, run, false, colour, 2, cv::LINE_AA);
      // Legend entry beside the plot.
      const int ly = top + 4 + static_cast<int>(si) * (lh + 2);
      cv::line(image, {left + plot_w + 12, ly + lh / 2}, {left + plot_w + 32, ly + lh / 2}, colour,
               2, cv::LINE_AA);
      font.draw(image, s.name, {left + plot_w + 38, ly}, kTickSize);
    }
    if (!p.y_label.empty()) {
      const int w = font.measure(p.y_label, kLabelSize).width;
      font.draw_vertical(image, p.y_label, {10, top + std::max(0, (plot_h - w) / 2)}, kLabelSize);
    }
    if (last && !chart.x_label.empty()) {
      const int w = font.measure(chart.x_label, kLabelSize).width;
      font.draw(image, chart.x_label, {left + (plot_w - w) / 2, top + plot_h + 5 + lh + 4},
                kLabelSize);
    }
    panels.push_back(image);
  }
  cv::Mat body = vstack(panels, 0);
  std::vector<std::string> lines;
  if (!chart.title.empty()) lines.push_back(chart.title);
  for (const std::string& s : chart.subtitle) lines.push_back(s);
  return lines.empty() ? body : with_title(body, lines, font);
}

}  // namespace vitk::plot
