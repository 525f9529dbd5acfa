#pragma once
// What the image commands (`vitk classify`, `vitk caption`) share: the image files they are
// given, where their pictures go, and where the bundled models are.
#include <set>
#include <string>
#include <vector>

#include "common/io/folder_lock.h"
#include "tools/cli.h"

namespace vitk::tools {

// Image files under dir, recursively, sorted (so runs and tests are repeatable). vitk::Error
// naming --dir when it is not a folder or holds no image file.
std::vector<std::string> images_under(const std::string& dir);

// The words of option `images` ('-': a list of paths on standard input, one a line), then every
// --dir folder's images; each path once, in the order first given.
std::vector<std::string> input_paths(const po::variables_map& vm, const std::string& images);

// The picture's file name for an image: its stem with ".png", "-2", "-3", ... when two inputs
// share a stem.
std::string picture_name(const std::string& image_path, std::set<std::string>& used);

// Where --attention-dir pictures go ("" when the option is not given), created if missing and
// locked for as long as `lock` lives (io::FolderLock): vitk::Error naming it when it cannot be
// created, vitk::UsageError when another vitk run is writing pictures there.
struct PicturesDir {
  std::string path;
  io::FolderLock lock;
};
PicturesDir attention_dir(const po::variables_map& vm);

// A bundled model (a path relative to the source tree, "vit/models/fmnist-vit.h5"): beside a
// build directory inside the source tree (build/vitk), beside the executable, installed under
// share/vitk/models/, or in the source tree this binary was built from. vitk::Error listing the
// places looked at when it is in none.
std::string bundled_file(const std::string& relative);

}  // namespace vitk::tools
