#pragma once
// Captioning scenes made from Fashion-MNIST (`vitk make-scenes`): 2 to 4 articles placed on a 2×2
// or 3×3 grid of an 84×84 grey canvas, each image with several captions from a small grammar,
// written as COCO captions files with PNG images (datasets/captions.h reads them back).
//
// The canvas is 3·28 pixels. On a 3×3 grid each cell is 28×28 and holds one article at its own
// size; on a 2×2 grid each cell is 42×42 and the 28×28 article sits at a seeded offset inside
// it. Articles are never scaled, so an article looks the same in every scene.
//
// Grammar. The articles of a scene, in some order o1..on, give the caption
//   "a <o1> <rel(o1,o2)> a <o2>" + for k = 3..n: " and a <ok> <rel(ok,o(k-1))> it"
// where rel(a, b) is "above" / "below" when a's row is smaller / larger than b's, else "to the
// left of" / "to the right of" by column: always true of the scene. The captions of an image are
// distinct orders (up to captions_per_image). The nouns are the Fashion-MNIST classes as words:
// t-shirt, trouser, pullover, dress, coat, sandal, shirt, sneaker, bag, ankle boot; the articles
// of a scene are of distinct classes, so a noun names one article.
//
// Splits. train and val scenes take their articles from Fashion-MNIST's training split (disjoint
// article indices: the first 50,000 for train, the last 10,000 for val), test scenes from its
// test split, so no test article was seen in training.
#include <cstdint>
#include <string>
#include <vector>

#include "datasets/captions.h"

namespace vitk::datasets {

struct SceneOptions {
  std::string fashion_mnist;  // the IDX directory (/usr/share/datasets/fashion-mnist)
  std::string output;         // the folder to write (created; an existing non-empty one refused)
  int64_t train = 20000, val = 1000, test = 2000;  // scenes per split
  int64_t captions_per_image = 5;
  int64_t min_objects = 2, max_objects = 4;
  uint64_t seed = 1;
};

// Writes output/captions_{train,val,test}.json and output/images/{train,val,test}/NNNNNN.png,
// each file atomically; the same options give the same bytes. The set is made in OUTPUT.tmp-PID
// beside the folder and renamed onto it when whole, so an interrupted run leaves no half-made set
// (the next run removes a dead run's temporary folder), and the folder is locked meanwhile
// (io::FolderLock: another run into it is a vitk::UsageError naming its pid). Each object of an
// image's "vitk_scene" also gives "article", its index in the Fashion-MNIST file the split draws
// from. vitk::UsageError for bad options, vitk::Error for unreadable Fashion-MNIST files.
void make_scenes(const SceneOptions& options);

// Throws vitk::Error naming the article and its box when a box of `objects` is not inside a
// height × width image.
void check_boxes_inside(const std::vector<SceneObject>& objects, int64_t height, int64_t width);

// Training augmentation that leaves a scene's captions true (caption-train --article-flip): on a
// normalised chw [C, H, W] image of a scene, mirrors each article left-right inside its box, in
// place, with probability p per article, the draw keyed by (key, the article's index). An article
// keeps its name and cell, so every caption of the scene still holds. `mirrored`: the image was
// mirrored as a whole (the boxes are then at x' = W - x - width). Returns how many it mirrored;
// throws check_boxes_inside's error when a box does not fit in H × W.
int64_t flip_articles(float* chw, int64_t channels, int64_t height, int64_t width,
                      const std::vector<SceneObject>& objects, bool mirrored, float p,
                      uint64_t key);

// Training augmentation that also leaves the captions true (caption-train --article-erase):
// random erasing as the classifier's (timm's --reprob, mode "pixel", datasets/augment.h) applied
// to each article's box on its own, with probability p per article: one rectangle of 2% to 1/3
// of the box, inside it, filled with N(0, 1) noise. The draws are keyed by (key, the article's
// index); `mirrored` as flip_articles. Returns how many articles it erased; throws
// check_boxes_inside's error when a box does not fit in H × W.
int64_t erase_articles(float* chw, int64_t channels, int64_t height, int64_t width,
                       const std::vector<SceneObject>& objects, bool mirrored, float p,
                       uint64_t key);

// The caption nouns of the ten Fashion-MNIST classes, in class order.
const std::vector<std::string>& scene_nouns();

// Does `caption` describe the scene exactly: parsed by the grammar above (after
// normalize_caption), it names every article of `objects` once and no other, and every relation
// it states is true of the scene? false for anything the grammar does not produce.
bool caption_matches_scene(const std::string& caption, const std::vector<SceneObject>& objects);

// What a caption says right and wrong of a scene: caption-eval's breakdown of exact scene match.
// A caption the grammar does not produce is not grammatical and gets nothing else. The relations
// counted are those the caption states between two different articles of the scene, by the kind
// the scene calls for: horizontal ("to the left of", "to the right of") when the two share a row,
// vertical ("above", "below") when not; true when the stated relation is the scene's.
struct SceneCaptionCheck {
  bool grammatical = false;
  bool articles = false;  // grammatical, and names every article of the scene once and no other
  int64_t horizontal = 0, horizontal_true = 0;
  int64_t vertical = 0, vertical_true = 0;
  // caption_matches_scene: the right articles, every relation true.
  bool exact() const {
    return articles && horizontal == horizontal_true && vertical == vertical_true;
  }
};
SceneCaptionCheck check_scene_caption(const std::string& caption,
                                      const std::vector<SceneObject>& objects);

// The article nouns a caption names, in order, each with the index of its last word in the
// caption's words (split on spaces after normalize_caption): for attention-in-cell, which looks
// at the word that names an article (the noun's last word, "boot" of "ankle boot").
struct NamedArticle {
  std::string name;
  int64_t word = 0;  // index of the noun's last word
};
std::vector<NamedArticle> named_articles(const std::string& caption);

}  // namespace vitk::datasets
