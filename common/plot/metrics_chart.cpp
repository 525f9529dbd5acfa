// Training curves from a metrics.csv: columns grouped into panels by their names.
#include "common/plot/metrics_chart.h"

#include <cmath>

#include "common/error.h"

namespace vitk::plot {
namespace {

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}
bool has(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

}  // namespace

Chart metrics_chart(const MetricsTable& table, const std::string& source) {
  const int step = table.column("step");
  if (step < 0)
    throw Error(source + ": no 'step' column (not a metrics.csv of vitk train or vitk mt-train?)");
  struct Group {
    std::string label;
    bool (*match)(const std::string&);
  };
  const Group groups[] = {
      {"loss", [](const std::string& n) { return ends_with(n, "loss"); }},
      {"accuracy (%)",
       [](const std::string& n) { return has(n, "acc") || has(n, "top1") || has(n, "top5"); }},
      {"BLEU", [](const std::string& n) { return has(n, "bleu"); }},
      {"learning rate", [](const std::string& n) { return n == "lr"; }},
  };
  Chart chart;
  chart.x_label = "optimizer step";
  int64_t points = 0;
  for (const Group& g : groups) {
    Panel panel;
    panel.y_label = g.label;
    for (size_t c = 0; c < table.columns.size(); ++c) {
      if (!g.match(table.columns[c])) continue;
      Series s;
      s.name = table.columns[c];
      s.x = table.values[static_cast<size_t>(step)];
      s.y = table.values[c];
      for (size_t i = 0; i < s.y.size(); ++i)
        points += std::isfinite(s.y[i]) && std::isfinite(s.x[i]) ? 1 : 0;
      panel.series.push_back(std::move(s));
    }
    if (!panel.series.empty()) chart.panels.push_back(std::move(panel));
  }
  if (chart.panels.empty())
    throw Error(source + ": no loss, accuracy, BLEU or lr column to draw (columns: " + [&] {
      std::string all;
      for (const auto& c : table.columns) all += (all.empty() ? "" : ", ") + c;
      return all;
    }() + ")");
  if (points == 0)
    throw Error(source +
                ": no rows with numbers yet (a row is written after each epoch or validation)");
  chart.title = "Training curves: " + source;
  chart.subtitle.push_back(std::to_string(table.rows) + (table.rows == 1 ? " row" : " rows") +
                           ", against the optimizer step");
  return chart;
}

}  // namespace vitk::plot
