// The nouns of the training captions (vit/caption/scenes/guides.h).
#include "vit/caption/scenes/guides.h"

#include <string>

#include "datasets/captions.h"
#include "vit/caption/captioner.h"
#include "vit/caption/task.h"

namespace vitk::caption::scenes {

GuidePoints find_guide_points(const CaptionTask& task, bool mirrored) {
  const datasets::CaptionSet& set = task.train_set();
  GuidePoints points(set.images.size());
  for (size_t i = 0; i < set.images.size(); ++i) {
    const auto& objects = set.images[i].objects;
    const auto& ids = task.caption_ids(i, mirrored);
    for (size_t c = 0; c < set.images[i].captions.size(); ++c) {
      std::string text = datasets::normalize_caption(set.images[i].captions[c]);
      if (mirrored) text = datasets::swap_words(text, task.options().hflip_swap);
      std::vector<GuidePoint> found;
      for (const NamedCell& n : named_cells(task.tokenizer(), ids.at(c), text, objects))
        if (n.object && n.token >= 0)
          found.push_back(
              {static_cast<int32_t>(n.token), static_cast<int32_t>(n.object - objects.data())});
      points[i].push_back(std::move(found));
    }
  }
  return points;
}

}  // namespace vitk::caption::scenes
