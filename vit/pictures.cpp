// Pictures of a ViT: attention over the input image and position-embedding similarity.
#include "vit/pictures.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <tuple>

#include <opencv2/imgproc.hpp>

#include "common/error.h"
#include "common/plot/plot.h"

namespace vitk::vit {
namespace {

const cv::Scalar kWhite(255, 255, 255);

// A line of text centred above an image.
cv::Mat captioned(const cv::Mat& image, const std::string& text, const plot::Font& font) {
  const cv::Size s = font.measure(text, plot::kTickSize);
  const int width = std::max(image.cols, s.width + 4);
  cv::Mat out(s.height + 4 + image.rows, width, CV_8UC3, kWhite);
  font.draw(out, text, {(width - s.width) / 2, 0}, plot::kTickSize);
  image.copyTo(out(cv::Rect((width - image.cols) / 2, s.height + 4, image.cols, image.rows)));
  return out;
}

// The smallest and largest value over several maps, for one colour scale.
std::pair<float, float> joint_range(const std::vector<Tensor>& maps) {
  float lo = INFINITY, hi = -INFINITY;
  for (const Tensor& m : maps) {
    const auto [a, b] = plot::value_range(m);
    lo = std::min(lo, a), hi = std::max(hi, b);
  }
  return {lo, hi};
}

}  // namespace

cv::Mat input_image(const float* input, const VitConfig& config, int min_side) {
  const int C = static_cast<int>(config.channels), H = static_cast<int>(config.image_height),
            W = static_cast<int>(config.image_width);
  const auto& mean = config.preprocess.mean;
  const auto& stdev = config.preprocess.std;
  cv::Mat rgb(H, W, CV_8UC3);
  for (int y = 0; y < H; ++y)
    for (int x = 0; x < W; ++x) {
      cv::Vec3b& px = rgb.at<cv::Vec3b>(y, x);
      for (int k = 0; k < 3; ++k) {
        const int c = C == 1 ? 0 : k;  // grey repeats its one channel
        const size_t ci = static_cast<size_t>(c);
        const double m = ci < mean.size() ? mean[ci] : 0.0, s = ci < stdev.size() ? stdev[ci] : 1.0;
        const double v = (input[(static_cast<size_t>(c) * H + y) * W + x] * s + m) * 255.0;
        px[2 - k] = static_cast<unsigned char>(std::clamp(std::lround(v), 0L, 255L));  // BGR
      }
    }
  const int factor = std::max(1, (min_side + std::max(H, W) - 1) / std::max(H, W));
  if (factor == 1) return rgb;
  cv::Mat big;
  cv::resize(rgb, big, cv::Size(W * factor, H * factor), 0, 0, cv::INTER_NEAREST);
  return big;
}

cv::Mat attention_picture(const ImageAttention& a, const float* input, const VitConfig& config,
                          HeadFusion fusion, const std::vector<std::string>& title) {
  const plot::Font& font = plot::Font::standard();
  const cv::Mat image = input_image(input, config);
  const auto [lo, hi] = plot::value_range(a.rollout);
  plot::ColourBar bar;
  bar.vmin = lo, bar.vmax = hi > lo ? hi : lo + 1e-6f;
  bar.label = "rollout weight";
  const cv::Mat left = captioned(image, "input, as the model sees it", font);
  const cv::Mat right = captioned(plot::overlay(image, a.rollout, bar.vmin, bar.vmax, 0.6),
                                  "attention rollout", font);
  const int caption_h = left.rows - image.rows;
  const cv::Mat colour_bar = plot::render_colour_bar(bar, image.rows, font);
  const cv::Mat top = plot::hstack(
      {left, right,
       plot::pad(colour_bar, std::max(0, caption_h - plot::colour_bar_margin()), 0, 0, 0)},
      16);

  char share[96];
  std::snprintf(share, sizeof share, "; %.0f%% of the row rests on the class token itself",
                100.0 * a.rollout_class_share);
  const std::string heads = fusion == HeadFusion::max ? "maximum over heads" : "heads averaged";
  const std::string rollout_line = "Attention rollout over " + std::to_string(a.layers) +
                                   " layers (" + heads + ", 0.5 A + 0.5 I), from " +
                                   pooled_from(config) + share;

  plot::PanelGrid grid;
  const int side = std::max(96, std::min(image.cols, image.rows) / 2);
  cv::Mat small;
  cv::resize(image, small,
             cv::Size(image.cols * side / std::max(image.cols, image.rows),
                      image.rows * side / std::max(image.cols, image.rows)),
             0, 0, cv::INTER_AREA);
  std::tie(grid.bar.vmin, grid.bar.vmax) = joint_range(a.last_heads);
  if (!(grid.bar.vmax > grid.bar.vmin)) grid.bar.vmax = grid.bar.vmin + 1e-6f;
  grid.bar.label = "attention weight";
  for (size_t h = 0; h < a.last_heads.size(); ++h) {
    grid.panels.push_back(plot::overlay(small, a.last_heads[h], grid.bar.vmin, grid.bar.vmax, 0.7));
    grid.captions.push_back("head " + std::to_string(h));
  }
  grid.columns = static_cast<int>(std::min<size_t>(6, a.last_heads.size()));
  const std::string heads_line = "Last block (" + std::to_string(a.layers - 1) +
                                 "), each head's attention from " + pooled_from(config) +
                                 " to the patches";
  const cv::Mat bottom = plot::render_panel_grid(grid, font);

  auto heading = [&](const std::string& text) {
    const cv::Size s = font.measure(text, plot::kTickSize);
    cv::Mat line(s.height + 2, s.width + 2, CV_8UC3, kWhite);
    font.draw(line, text, {1, 0}, plot::kTickSize, cv::Scalar(60, 60, 60));
    return line;
  };
  cv::Mat body = plot::vstack({heading(rollout_line), top, heading(heads_line), bottom}, 8);
  return plot::with_title(plot::pad(body, 4, 12, 12, 12), title, font);
}

cv::Mat position_similarity_picture(const Tensor& similarity, const VitConfig& config,
                                    const std::vector<std::string>& title) {
  const int gh = static_cast<int>(config.grid_height()), gw = static_cast<int>(config.grid_width());
  const int64_t N = config.patches();
  if (similarity.dtype() != DType::f32 || similarity.shape() != Shape{N, N})
    throw Error("vit: similarity " + shape_str(similarity.shape()) + " should be [" +
                std::to_string(N) + ", " + std::to_string(N) + "]");
  const plot::Font& font = plot::Font::standard();
  const int cell = std::clamp(640 / (std::max(gh, gw) * std::max(gh, gw)), 1, 12), gap = 2;
  const int tile_w = gw * cell, tile_h = gh * cell;
  const int lh = plot::Font::line_height(plot::kTickSize);
  const int label_h = plot::Font::line_height(plot::kLabelSize);
  const int num_w = font.measure(std::to_string(std::max(gh, gw)), plot::kTickSize).width;
  const int left = 8 + label_h + 6 + num_w + 6, top = plot::colour_bar_margin() + 2;
  const int grid_w = gw * tile_w + (gw - 1) * gap, grid_h = gh * tile_h + (gh - 1) * gap;
  cv::Mat image(top + grid_h + 6 + lh + 4 + label_h + 8, left + grid_w + 4, CV_8UC3, kWhite);
  for (int p = 0; p < gh * gw; ++p) {
    const Tensor row = similarity.rows(p, p + 1).reshaped({gh, gw});
    const int r = p / gw, c = p % gw;
    plot::colour_cells(row, -1.f, 1.f, cell, cell)
        .copyTo(
            image(cv::Rect(left + c * (tile_w + gap), top + r * (tile_h + gap), tile_w, tile_h)));
  }
  // Rows and columns numbered from 1, as in the paper's figure.
  const int stride = std::max(1, (lh + 2 + tile_h) / (tile_h + gap));
  for (int r = 0; r < gh; r += stride) {
    const std::string t = std::to_string(r + 1);
    const int w = font.measure(t, plot::kTickSize).width;
    font.draw(image, t, {left - 6 - w, top + r * (tile_h + gap) + tile_h / 2 - lh / 2},
              plot::kTickSize);
  }
  for (int c = 0; c < gw; c += stride) {
    const std::string t = std::to_string(c + 1);
    const int w = font.measure(t, plot::kTickSize).width;
    font.draw(image, t, {left + c * (tile_w + gap) + tile_w / 2 - w / 2, top + grid_h + 4},
              plot::kTickSize);
  }
  const std::string x_label = "input patch column", y_label = "input patch row";
  font.draw(
      image, x_label,
      {left + (grid_w - font.measure(x_label, plot::kLabelSize).width) / 2, top + grid_h + 6 + lh},
      plot::kLabelSize);
  font.draw_vertical(
      image, y_label,
      {8, top + std::max(0, (grid_h - font.measure(y_label, plot::kLabelSize).width) / 2)},
      plot::kLabelSize);
  plot::ColourBar bar;
  bar.vmin = -1, bar.vmax = 1;
  bar.label = "cosine similarity";
  const cv::Mat colour_bar = plot::render_colour_bar(bar, grid_h, font);
  cv::Mat body = plot::hstack(
      {image, plot::pad(colour_bar, std::max(0, top - plot::colour_bar_margin()), 10, 0, 0)}, 12);
  return plot::with_title(body, title, font);
}

cv::Mat caption_attention_picture(const float* input, const VitConfig& config,
                                  const Tensor& attention, bool class_token,
                                  const std::vector<std::string>& pieces,
                                  const std::vector<std::string>& title) {
  const int64_t gh = config.grid_height(), gw = config.grid_width();
  const int64_t first = class_token ? 1 : 0, rows = static_cast<int64_t>(pieces.size());
  if (attention.dtype() != DType::f32 || attention.rank() != 2 || attention.dim(0) != rows ||
      attention.dim(1) != first + gh * gw)
    throw Error("caption picture: attention " + shape_str(attention.shape()) + " should be [" +
                std::to_string(rows) + ", " + std::to_string(first + gh * gw) + "]");
  const plot::Font& font = plot::Font::standard();
  const cv::Mat image = input_image(input, config, 160);
  plot::PanelGrid grid;
  std::vector<Tensor> maps;
  for (int64_t t = 0; t < rows; ++t) {
    Tensor map({gh, gw});  // the row's weights on the patches
    std::copy_n(attention.f32() + t * attention.dim(1) + first, gh * gw, map.f32());
    maps.push_back(map);
  }
  std::tie(grid.bar.vmin, grid.bar.vmax) = joint_range(maps);
  if (!(grid.bar.vmax > grid.bar.vmin)) grid.bar.vmax = grid.bar.vmin + 1e-6f;
  grid.bar.label = "attention weight";
  grid.panels.push_back(image);
  grid.captions.push_back("input");
  for (int64_t t = 0; t < rows; ++t) {
    grid.panels.push_back(
        plot::overlay(image, maps[static_cast<size_t>(t)], grid.bar.vmin, grid.bar.vmax, 0.6));
    grid.captions.push_back(pieces[static_cast<size_t>(t)]);
  }
  grid.columns = static_cast<int>(std::min<int64_t>(6, rows + 1));
  return plot::with_title(plot::pad(plot::render_panel_grid(grid, font), 4, 12, 12, 12), title,
                          font);
}

}  // namespace vitk::vit
