#pragma once
// --guided-attention and --article-loss read the nouns of the training captions: which token of a
// caption names which article of its scene.
#include <cstdint>
#include <vector>

namespace vitk::caption {
class CaptionTask;
}

namespace vitk::caption::scenes {

// The token of a training caption that names a scene article, and the article (its index in the
// image's objects).
struct GuidePoint {
  int32_t token = 0, object = 0;
};
// [image][caption] -> the nouns of that caption, as CaptionTask::caption_ids holds the ids.
using GuidePoints = std::vector<std::vector<std::vector<GuidePoint>>>;

// The nouns of every training caption of `task` that name an article of its scene, at a token the
// model reads (caption::named_cells); `mirrored`: of the captions with their words swapped that
// mirrored images train on (--hflip).
GuidePoints find_guide_points(const CaptionTask& task, bool mirrored);

}  // namespace vitk::caption::scenes
