// Fuzzes the COCO captions reader (datasets/captions.cpp: read_coco_captions), with vitk's
// "vitk_scene" key, without looking at an image folder; then normalize_caption on every caption.
#include <exception>
#include <string>

#include "datasets/captions.h"
#include "fuzz_util.h"

namespace {

bool inside(const vitk::datasets::Box& in, const vitk::datasets::Box& out) {
  return in.x >= out.x && in.y >= out.y && in.x + in.width <= out.x + out.width &&
         in.y + in.height <= out.y + out.height;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static vitk::fuzz::ScratchFile file("captions", ".json");
  try {
    vitk::datasets::CaptionReadOptions options;
    options.check_images = false;
    const vitk::datasets::CaptionSet set =
        vitk::datasets::read_coco_captions(file.write(data, size), "images", options);
    if (set.missing_images != 0 || set.unknown_image_captions < 0) __builtin_trap();
    for (const auto& image : set.images) {
      // Kept images have captions, none empty; file names stay inside the folder.
      if (image.captions.empty() || image.file_name.empty()) __builtin_trap();
      if (image.file_name[0] == '/' || image.path != "images/" + image.file_name) __builtin_trap();
      for (const std::string& caption : image.captions) {
        if (caption.empty() || caption.front() == ' ' || caption.back() == ' ') __builtin_trap();
        const std::string n = vitk::datasets::normalize_caption(caption);
        if (n.size() > caption.size() || n.find("  ") != std::string::npos) __builtin_trap();
        if (!n.empty() && (n.front() == ' ' || n.back() == ' ')) __builtin_trap();
      }
      // A scene only with a 2×2 or 3×3 grid, every article in its grid and its box in its cell.
      if (image.grid == 0 ? !image.objects.empty()
                          : (image.grid != 2 && image.grid != 3) || image.objects.empty())
        __builtin_trap();
      for (const auto& o : image.objects) {
        if (o.row < 0 || o.row >= image.grid || o.col < 0 || o.col >= image.grid) __builtin_trap();
        if (o.box.width <= 0 || o.box.height <= 0 || !inside(o.box, o.cell)) __builtin_trap();
      }
    }
  } catch (const std::exception&) {
  }
  return 0;
}
