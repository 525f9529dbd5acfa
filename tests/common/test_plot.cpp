// The drawing module (common/plot) and the metrics.csv reader: colours, text fallback, cells,
// ticks, charts of both trainers' files, and PNG files that are written whole or not at all.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>

#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>

#include "common/error.h"
#include "common/io/atomic_file.h"
#include "common/metrics_csv.h"
#include "common/plot/metrics_chart.h"
#include "common/plot/plot.h"
#include "util/op_test_util.h"
#include "util/test_util.h"

namespace {

namespace fs = std::filesystem;
using namespace vitk;

double luminance(const cv::Vec3b& bgr) {
  return 0.114 * bgr[0] + 0.587 * bgr[1] + 0.299 * bgr[2];
}

int dark_pixels(const cv::Mat& image) {
  int n = 0;
  for (int y = 0; y < image.rows; ++y)
    for (int x = 0; x < image.cols; ++x) n += luminance(image.at<cv::Vec3b>(y, x)) < 128;
  return n;
}

std::string what_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

TEST(PlotColour, ViridisRunsFromPurpleToYellowGettingLighter) {
  // matplotlib's viridis starts at #440154 and ends at #fde725.
  EXPECT_EQ(plot::viridis(0.0), cv::Vec3b(0x54, 0x01, 0x44));
  EXPECT_EQ(plot::viridis(1.0), cv::Vec3b(0x25, 0xE7, 0xFD));
  EXPECT_EQ(plot::viridis(-3.0), plot::viridis(0.0));  // clamped
  EXPECT_EQ(plot::viridis(7.0), plot::viridis(1.0));
  // Lighter all the way: between neighbouring levels only the rounding of each channel to 8 bits
  // (at most 0.5 of luma) may go the other way, and over a sixteenth of the range it rises.
  for (int i = 1; i <= 256; ++i) {
    const double t = i / 256.0;
    EXPECT_GE(luminance(plot::viridis(t)), luminance(plot::viridis(t - 1 / 256.0)) - 0.5) << t;
    if (i >= 16) {
      EXPECT_GT(luminance(plot::viridis(t)), luminance(plot::viridis(t - 1 / 16.0))) << t;
    }
  }
  const cv::Vec3b nan = plot::viridis(NAN);
  EXPECT_EQ(nan[0], nan[1]);  // grey
  EXPECT_EQ(nan[1], nan[2]);
}

TEST(PlotColour, CellsTakeTheColourOfTheirValue) {
  const Tensor v = test::from_vector({2, 3}, {0.f, 1.f, 2.f, 3.f, 4.f, 8.f});
  const cv::Mat cells = plot::colour_cells(v, 0.f, 8.f, 4, 3);
  ASSERT_EQ(cells.cols, 12);
  ASSERT_EQ(cells.rows, 6);
  for (int r = 0; r < 2; ++r)
    for (int c = 0; c < 3; ++c)
      for (int dy = 0; dy < 3; ++dy)
        for (int dx = 0; dx < 4; ++dx)
          EXPECT_EQ(cells.at<cv::Vec3b>(r * 3 + dy, c * 4 + dx),
                    plot::viridis(v.f32()[r * 3 + c] / 8.0))
              << r << " " << c;
  // A constant map shows the middle colour rather than dividing by zero.
  const cv::Mat flat = plot::colour_cells(test::from_vector({1, 2}, {5.f, 5.f}), 5.f, 5.f, 1, 1);
  EXPECT_EQ(flat.at<cv::Vec3b>(0, 0), plot::viridis(0.5));
  const auto [lo, hi] = plot::value_range(test::from_vector({1, 4}, {3.f, NAN, -2.f, 7.f}));
  EXPECT_EQ(lo, -2.f);
  EXPECT_EQ(hi, 7.f);
}

TEST(PlotText, TransliteratesToAsciiForTheHersheyFont) {
  EXPECT_EQ(plot::to_ascii("cre\xC3\xB3"), "creo");  // creó
  EXPECT_EQ(plot::to_ascii("\xC3\xB1"
                           "and\xC3\xBA"),
            "nandu");  // ñandú
  EXPECT_EQ(plot::to_ascii("\xE2\x96\x81"
                           "Dios"),
            "_Dios");  // ▁Dios
  EXPECT_EQ(plot::to_ascii("stra\xC3\x9F"
                           "e"),
            "strasse");  // straße
  EXPECT_EQ(plot::to_ascii("\xC2\xBF"
                           "Qu\xC3\xA9?"),
            "?Que?");  // ¿Qué?
  EXPECT_EQ(plot::to_ascii("\xC5\x81\xC3\xB3"
                           "d\xC5\xBA"),
            "Lodz");                                    // Łódź
  EXPECT_EQ(plot::to_ascii("\xC5\x93uvre"), "oeuvre");  // œuvre
  EXPECT_EQ(plot::to_ascii("a\xE2\x80\x94"
                           "b"),
            "a-b");                                // em dash
  EXPECT_EQ(plot::to_ascii("\xE6\x97\xA5"), "?");  // 日
  EXPECT_EQ(plot::to_ascii("x\xFFy"), "x?y");      // invalid byte
  EXPECT_EQ(plot::to_ascii("x\xC3"), "x?");        // cut sequence
  EXPECT_EQ(plot::to_ascii("plain ASCII 123"), "plain ASCII 123");
}

TEST(PlotText, HersheyFallbackAndTrueTypeBothDraw) {
  const plot::Font hershey;
  EXPECT_FALSE(hershey.unicode());
  EXPECT_EQ(hershey.shown("a\xC3\xB1o"), "ano");
  cv::Mat a(40, 200, CV_8UC3, cv::Scalar::all(255));
  hershey.draw(a, "a\xC3\xB1o", {2, 2}, 16);
  EXPECT_GT(dark_pixels(a), 10);
  EXPECT_GT(hershey.measure("wide text", 16).width, hershey.measure("w", 16).width);

  const std::string missing = "/nonexistent/font.ttf";
  EXPECT_NE(what_of([&] { plot::Font f(missing); }).find(missing), std::string::npos);

  const plot::Font& standard = plot::Font::standard();
  if (!standard.unicode()) GTEST_SKIP() << "no freetype module or DejaVu font: ASCII only";
  EXPECT_EQ(standard.shown("\xE2\x96\x81"
                           "cre\xC3\xB3"),
            "\xE2\x96\x81"
            "cre\xC3\xB3");
  cv::Mat b(40, 200, CV_8UC3, cv::Scalar::all(255));
  standard.draw(b,
                "\xE2\x96\x81"
                "cre\xC3\xB3",
                {2, 2}, 16);
  EXPECT_GT(dark_pixels(b), 10);
  // A vertical label is as tall as the horizontal one is wide.
  cv::Mat c(200, 40, CV_8UC3, cv::Scalar::all(255));
  standard.draw_vertical(c, "vertical", {2, 2}, 16);
  cv::Mat grey;
  cv::cvtColor(c, grey, cv::COLOR_BGR2GRAY);
  const cv::Rect box = cv::boundingRect(grey < 128);
  EXPECT_GT(box.height, box.width);
  EXPECT_NEAR(box.height, standard.measure("vertical", 16).width, 4);
}

TEST(PlotTicks, NiceNumbersAndTheirLabels) {
  const std::vector<double> unit = plot::nice_ticks(0, 1, 5);
  ASSERT_EQ(unit.size(), 6u);
  for (size_t i = 0; i < unit.size(); ++i) EXPECT_NEAR(unit[i], 0.2 * i, 1e-12);
  const std::vector<double> t = plot::nice_ticks(0.0013, 0.0071, 3);
  ASSERT_EQ(t.size(), 3u);
  EXPECT_NEAR(t[0], 0.002, 1e-12);
  EXPECT_NEAR(t[2], 0.006, 1e-12);
  const std::vector<double> big = plot::nice_ticks(37, 912, 4);
  for (double v : big) EXPECT_EQ(std::fmod(v, 250), 0) << v;
  EXPECT_EQ(plot::format_tick(0.25, 0.05), "0.25");
  EXPECT_EQ(plot::format_tick(1000, 500), "1000");
  EXPECT_EQ(plot::format_tick(-0.0, 0.5), "0");
  EXPECT_EQ(plot::format_tick(0.0001, 0.0001), "1.0e-04");
}

TEST(PlotHeatmap, LaysOutLabelsAroundTheCells) {
  plot::Heatmap h;
  h.values = test::from_vector({2, 3}, {0.1f, 0.2f, 0.7f, 0.5f, 0.25f, 0.25f});
  h.x_ticks = {
      "\xE2\x96\x81"
      "En",
      "\xE2\x96\x81"
      "el",
      "</s>"};
  h.y_ticks = {
      "\xE2\x96\x81"
      "In",
      "</s>"};
  h.title = "title";
  h.cell = 30;
  h.annotate = true;
  const cv::Mat image = plot::render_heatmap(h);
  EXPECT_GT(image.cols, 3 * 30 + 40);  // cells, labels and a colour bar
  EXPECT_GT(image.rows, 2 * 30 + 30);
  // Labels must match the cells: a wrong count is an error, not a shifted picture.
  h.x_ticks.pop_back();
  EXPECT_THROW(plot::render_heatmap(h), Error);
}

TEST(PlotChart, StackedPanelsShareTheWidth) {
  plot::Chart chart;
  chart.title = "curves";
  chart.x_label = "step";
  plot::Panel loss{"loss", {{"train", {1, 2, 3}, {3, 2, 1.5}}, {"valid", {1, 3}, {3.2, NAN}}}};
  plot::Panel lr{"lr", {{"lr", {1, 2, 3}, {1e-4, 2e-4, 1e-4}}}};
  chart.panels = {loss, lr};
  const cv::Mat image = plot::render_chart(chart);
  EXPECT_EQ(image.cols, chart.width);
  EXPECT_GT(image.rows, 2 * chart.panel_height);
  chart.panels[0].series[0].y.pop_back();
  EXPECT_THROW(plot::render_chart(chart), Error);  // x and y of different lengths
}

TEST(PlotPng, WrittenWholeOrNotAtAll) {
  test::TempDir dir("vitk_plot_png");
  cv::Mat image(17, 23, CV_8UC3);
  cv::randu(image, 0, 255);
  const std::string path = (dir / "p.png").string();
  plot::write_png(path, image);
  const cv::Mat back = cv::imread(path, cv::IMREAD_COLOR);
  ASSERT_EQ(back.size(), image.size());
  EXPECT_EQ(cv::norm(back, image, cv::NORM_INF), 0);  // PNG is lossless
  for (const auto& e : fs::directory_iterator(dir.path()))
    EXPECT_EQ(e.path().filename(), "p.png");  // no temporary file left behind
  // Failures name the file and leave nothing.
  const std::string nowhere = (dir / "missing/p.png").string();
  EXPECT_NE(what_of([&] { plot::write_png(nowhere, image); }).find(nowhere), std::string::npos);
  EXPECT_FALSE(fs::exists(nowhere));
  EXPECT_NE(what_of([&] { plot::write_png(dir.path().string(), image); }).find("directory"),
            std::string::npos);
  EXPECT_THROW(plot::write_png((dir / "e.png").string(), cv::Mat()), Error);
  EXPECT_FALSE(fs::exists(dir / "e.png"));
}

TEST(PlotPng, ADeviceIsWrittenInPlaceNotReplaced) {
  // --out /dev/null must discard the picture, not rename a regular file over the device.
  cv::Mat image(5, 7, CV_8UC3, cv::Scalar(1, 2, 3));
  struct stat before {};
  ASSERT_EQ(::stat("/dev/null", &before), 0);
  ASSERT_TRUE(S_ISCHR(before.st_mode));
  plot::write_png("/dev/null", image);
  struct stat after {};
  ASSERT_EQ(::stat("/dev/null", &after), 0);
  EXPECT_TRUE(S_ISCHR(after.st_mode));
  EXPECT_EQ(after.st_rdev, before.st_rdev);
  EXPECT_TRUE(io::is_special_output("/dev/null"));
  test::TempDir dir("vitk_plot_special");
  EXPECT_FALSE(io::is_special_output((dir / "new.png").string()));
  plot::write_png((dir / "new.png").string(), image);
  EXPECT_FALSE(io::is_special_output((dir / "new.png").string()));
  EXPECT_TRUE(io::is_special_output(dir.path().string()));
}

// ---- metrics.csv ----

// The headers as vit/trainer.cpp and common/seq2seq/trainer.cpp write them.
const char* kVitCsv =
    "epoch,step,lr,train_loss,train_acc,val_loss,val_top1,val_top5,images_per_s,seconds\n"
    "1,469,0.0015,1.2,55.5,0.9,69.1,97.0,250.1,270.2\n"
    "2,938,0.0014,0.8,70.25,0.7,76.4,98.5,251.0,268.9\n";
const char* kMtCsv =
    "step,epoch,lr,train_loss,target_tokens_per_s,valid_loss,valid_bleu\n"
    "1000,0.500,0.0007,5.5,9000.0,5.1,3.25\n"
    "2000,1.000,0.0005,4.5,9100.0,,7.5\n";

TEST(PlotMetrics, ViTRunGetsLossAccuracyAndLearningRate) {
  test::TempDir dir("vitk_plot_metrics");
  const std::string path = dir.write("metrics.csv", kVitCsv);
  const MetricsTable t = read_metrics_csv(path);
  ASSERT_EQ(t.rows, 2);
  ASSERT_EQ(t.columns.size(), 10u);
  EXPECT_EQ(t.values[t.column("val_top1")][1], 76.4);
  const plot::Chart c = plot::metrics_chart(t, path);
  ASSERT_EQ(c.panels.size(), 3u);
  EXPECT_EQ(c.panels[0].y_label, "loss");
  ASSERT_EQ(c.panels[0].series.size(), 2u);
  EXPECT_EQ(c.panels[0].series[1].name, "val_loss");
  EXPECT_EQ(c.panels[0].series[1].x, (std::vector<double>{469, 938}));
  EXPECT_EQ(c.panels[0].series[1].y, (std::vector<double>{0.9, 0.7}));
  EXPECT_EQ(c.panels[1].y_label, "accuracy (%)");
  ASSERT_EQ(c.panels[1].series.size(), 3u);  // train_acc, val_top1, val_top5
  EXPECT_EQ(c.panels[1].series[0].y, (std::vector<double>{55.5, 70.25}));
  EXPECT_EQ(c.panels[2].y_label, "learning rate");
  EXPECT_EQ(c.panels[2].series[0].y, (std::vector<double>{0.0015, 0.0014}));
}

TEST(PlotMetrics, TranslationRunGetsLossBleuAndLearningRate) {
  test::TempDir dir("vitk_plot_metrics");
  const std::string path = dir.write("metrics.csv", kMtCsv);
  const plot::Chart c = plot::metrics_chart(read_metrics_csv(path), path);
  ASSERT_EQ(c.panels.size(), 3u);
  EXPECT_EQ(c.panels[0].series.size(), 2u);             // train_loss, valid_loss
  EXPECT_TRUE(std::isnan(c.panels[0].series[1].y[1]));  // an empty field is a gap
  EXPECT_EQ(c.panels[1].y_label, "BLEU");
  EXPECT_EQ(c.panels[1].series[0].y, (std::vector<double>{3.25, 7.5}));
  EXPECT_EQ(c.panels[1].series[0].x, (std::vector<double>{1000, 2000}));
  EXPECT_EQ(c.panels[2].y_label, "learning rate");
}

TEST(PlotMetrics, BadFilesAreErrorsNamingThem) {
  test::TempDir dir("vitk_plot_metrics");
  const std::string missing = (dir / "none.csv").string();
  EXPECT_NE(what_of([&] { read_metrics_csv(missing); }).find(missing), std::string::npos);
  const std::string empty = dir.write("empty.csv", "");
  EXPECT_NE(what_of([&] { read_metrics_csv(empty); }).find(empty), std::string::npos);
  const std::string wide = dir.write("wide.csv", "step,lr\n1,0.1\n2,0.1,9\n");
  EXPECT_NE(what_of([&] { read_metrics_csv(wide); }).find(wide + ":3:"), std::string::npos);
  const std::string no_step = dir.write("nostep.csv", "epoch,lr\n1,0.1\n");
  EXPECT_NE(what_of([&] {
              plot::metrics_chart(read_metrics_csv(no_step), no_step);
            }).find("no 'step' column"),
            std::string::npos);
  const std::string header_only = dir.write("header.csv", "step,epoch,lr,train_loss\n");
  EXPECT_NE(what_of([&] {
              plot::metrics_chart(read_metrics_csv(header_only), header_only);
            }).find("no rows"),
            std::string::npos);
}

}  // namespace
