#pragma once
// Captioned image collections: the COCO captions format (captions_*.json with "images" and
// "annotations", several captions per image, plus an image folder) and Flickr8k/30k's caption
// files (Flickr8k.token.txt "image.jpg#k<TAB>caption", Flickr30k results.csv
// "image_name| comment_number| comment"), read into one list of images with their captions.
//
// The scenes vitk makes from Fashion-MNIST (`vitk make-scenes`, datasets/scenes.h) are COCO files
// whose image entries carry one more key, "vitk_scene": the grid and where each article is, so
// that a caption can be checked against the scene and attention against the article's cell.
//
// COCO (captions_train2017.json):
//   {"images": [{"id": 42, "file_name": "000042.png", "width": 84, "height": 84, ...}, ...],
//    "annotations": [{"id": 7, "image_id": 42, "caption": "a bag above a sandal"}, ...], ...}
//   Other top-level keys (info, licenses) and other keys of an entry are ignored. Image ids and
//   file names are unique; file names are relative and without ".." (an absolute name or one that
//   could leave the image folder is an error). An annotation of an image id no entry has is
//   skipped and counted. "vitk_scene", when an image entry has it:
//     {"grid": 2, "objects": [{"name": "sandal", "row": 0, "col": 1, "box": [49, 3, 28, 28],
//                              "cell": [42, 0, 42, 42]}, ...]}
//   grid 2 or 3; at least one object, each in its own cell (row, col < grid); boxes [x, y, width,
//   height] of non-negative integers, width and height positive; the box inside the cell.
// Flickr8k (Flickr8k.token.txt; also Flickr30k's results_20130124.token):
//   1000268201_693b08cb0e.jpg#0<TAB>A child in a pink dress is climbing up a set of stairs .
// Flickr30k (results.csv), the header optional:
//   image_name| comment_number| comment
//   1000092795.jpg| 0| Two young guys with shaggy hair look at their hands .
//   split at the first two bars (a caption may hold one); the one published line that lacks its
//   second bar ("2199200615.jpg| 4 A dog runs ...") is read as meant.
//   The format is told by the first non-blank line (the header or a tab). CRLF line ends, a UTF-8
//   byte order mark and blank lines are accepted; captions must be UTF-8. Captions of an image are
//   grouped in file order, images in order of first appearance.
// Every caption is kept trimmed of surrounding whitespace; an empty one is an error. A caption
// file over 2 GB is refused before it is read.
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "datasets/dataset.h"

namespace vitk::datasets {

// Pixel rectangle: x, y of the top-left corner, width, height.
struct Box {
  int64_t x = 0, y = 0, width = 0, height = 0;
  bool contains(double px, double py) const {
    return px >= x && px < x + width && py >= y && py < y + height;
  }
};

// One article of a generated scene.
struct SceneObject {
  std::string name;          // the caption's noun: "sandal", "ankle boot", "t-shirt"
  int64_t row = 0, col = 0;  // its grid cell
  Box box;                   // the article's pixels
  Box cell;                  // the whole grid cell it sits in
};

struct CaptionedImage {
  int64_t id = 0;  // COCO image id; Flickr: 0, 1, ... in order of first appearance in the file
  std::string file_name;              // as the caption file gives it
  std::string path;                   // image folder + file_name
  std::vector<std::string> captions;  // in file order (COCO: annotation order)
  // Generated scenes only ("vitk_scene"): grid side (2 or 3) and the articles; grid 0 and no
  // objects for every other image.
  int64_t grid = 0;
  std::vector<SceneObject> objects;
};

struct CaptionReadOptions {
  // An image entry whose file is not in the image folder (or is no regular file): skipped and
  // counted (true), or a vitk::Error naming the file (false). Only images with captions are
  // looked for.
  bool skip_missing_images = true;
  bool check_images = true;  // false: do not look at the image folder at all (tests, `vitk bleu`)
};

struct CaptionSet {
  std::string source;  // the caption file
  std::string image_dir;
  std::vector<CaptionedImage> images;  // those with at least one caption, in file order
  // Counted skips, reported by the commands that read a set.
  int64_t unknown_image_captions = 0;         // annotations whose image_id no image entry has
  int64_t missing_images = 0;                 // image entries whose file is not in the folder
  std::vector<std::string> missing_examples;  // the paths of the first few (at most 3) of them
  int64_t images_without_captions = 0;
  int64_t captions() const;  // in all images
};

// COCO captions JSON. vitk::Error naming the file and where (byte, line, column for malformed
// JSON; the JSON path such as "annotations[12].caption" for a value of the wrong kind, a missing
// key, a duplicate image id or file name, an empty caption).
CaptionSet read_coco_captions(const std::string& json_path, const std::string& image_dir,
                              const CaptionReadOptions& options = {});
// Flickr8k token file or Flickr30k results.csv (told apart by content). vitk::Error naming the
// file and line of a malformed line.
CaptionSet read_flickr_captions(const std::string& path, const std::string& image_dir,
                                const CaptionReadOptions& options = {});
// Either, by the file: a .json file is COCO, anything else Flickr.
CaptionSet read_captions(const std::string& path, const std::string& image_dir,
                         const CaptionReadOptions& options = {});

// The images of a caption set as a Dataset for the threaded loader (datasets/loader.h): sample i
// is set.images[i] and its label i, so that a batch says which images it holds (give the loader
// num_classes = the image count); no class names. The set must outlive the dataset.
std::unique_ptr<Dataset> caption_images(const CaptionSet& set);

// Lower case, punctuation other than '-' and '\'' dropped, runs of spaces made one: the form
// captions are tokenized and scored in (COCO's evaluation tokenizer does likewise).
std::string normalize_caption(const std::string& text);

// The words of a normalised caption: its text split at each (single) space; none when empty.
std::vector<std::string> caption_words(const std::string& normalised);

// A normalised caption with the words of each pair exchanged ("left" <-> "right"): what a caption
// of an image says of its mirror image. Whole words only ("leftover" stays).
std::string swap_words(const std::string& text,
                       const std::vector<std::pair<std::string, std::string>>& pairs);

}  // namespace vitk::datasets
