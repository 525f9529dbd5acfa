// The image files a command reads, its pictures' names and folder, the bundled models.
#include "tools/image_inputs.h"

#include <dlfcn.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <iostream>

#include "common/error.h"

namespace vitk::tools {
namespace fs = std::filesystem;

namespace {

bool has_image_extension(const fs::path& p) {
  static const std::set<std::string> kExtensions = {".png", ".jpg", ".jpeg", ".jpe",  ".bmp",
                                                    ".dib", ".tif", ".tiff", ".webp", ".pbm",
                                                    ".pgm", ".ppm", ".pnm",  ".pam"};
  std::string ext = p.extension().string();
  for (char& c : ext) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return kExtensions.count(ext) > 0;
}

}  // namespace

std::vector<std::string> images_under(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) throw Error("--dir " + dir + ": not a directory");
  std::vector<std::string> out;
  fs::recursive_directory_iterator it(dir, fs::directory_options::skip_permission_denied, ec), end;
  if (ec) throw Error("--dir " + dir + ": " + ec.message());
  for (; it != end; it.increment(ec)) {
    if (ec) throw Error("--dir " + dir + ": " + ec.message());
    std::error_code type_ec;
    if (it->is_regular_file(type_ec) && has_image_extension(it->path()))
      out.push_back(it->path().string());
  }
  std::sort(out.begin(), out.end());
  if (out.empty())
    throw Error("--dir " + dir +
                ": no image files in it (.png .jpg .jpeg .bmp .tif .tiff .webp .pgm .ppm ...)");
  return out;
}

std::vector<std::string> input_paths(const po::variables_map& vm, const std::string& images) {
  std::vector<std::string> all;
  if (vm.count(images)) {
    for (const std::string& word : vm[images].as<std::vector<std::string>>()) {
      if (word != "-") {
        all.push_back(word);
        continue;
      }
      for (std::string line; std::getline(std::cin, line);) {
        if (!line.empty() && line.back() == '\r') line.pop_back();
        if (!line.empty()) all.push_back(line);
      }
    }
  }
  if (vm.count("dir"))
    for (const std::string& dir : vm["dir"].as<std::vector<std::string>>())
      for (std::string& p : images_under(dir)) all.push_back(std::move(p));
  std::vector<std::string> unique;
  std::set<std::string> seen;
  for (std::string& p : all)
    if (seen.insert(p).second) unique.push_back(std::move(p));
  return unique;
}

std::string picture_name(const std::string& image_path, std::set<std::string>& used) {
  std::string stem = fs::path(image_path).stem().string();
  if (stem.empty()) stem = "image";
  std::string name = stem + ".png";
  for (int k = 2; !used.insert(name).second; ++k) name = stem + "-" + std::to_string(k) + ".png";
  return name;
}

PicturesDir attention_dir(const po::variables_map& vm) {
  if (!vm.count("attention-dir")) return {};
  const std::string dir = vm["attention-dir"].as<std::string>();
  if (dir.empty()) throw UsageError("--attention-dir: empty path");
  return {dir, io::FolderLock(dir, "--attention-dir")};
}

std::string bundled_file(const std::string& relative) {
  std::vector<std::string> candidates;
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    const fs::path dir = exe.parent_path();
    candidates.push_back((dir.parent_path() / relative).string());
    candidates.push_back((dir / relative).string());
    candidates.push_back(
        (dir.parent_path() / "share/vitk/models" / fs::path(relative).filename()).string());
  }
  // Installed beside the library that holds this code (P/lib/libvitk.so: P/share/vitk/models),
  // for a program that links it or Python that imports it.
  Dl_info library;
  if (dladdr(reinterpret_cast<void*>(&bundled_file), &library) && library.dli_fname) {
    const fs::path dir = fs::absolute(library.dli_fname, ec).parent_path();
    if (!ec)
      candidates.push_back(
          (dir.parent_path() / "share/vitk/models" / fs::path(relative).filename()).string());
  }
#ifdef VITK_SOURCE_DIR
  candidates.push_back((fs::path(VITK_SOURCE_DIR) / relative).string());
#endif
  for (const std::string& c : candidates)
    if (fs::is_regular_file(c, ec)) return fs::path(c).lexically_normal().string();
  std::string looked;
  for (const std::string& c : candidates) looked += (looked.empty() ? "" : ", ") + c;
  throw Error("no --model given, and the bundled model (" + relative +
              ") is not there (looked in: " + looked + "); pass --model CHECKPOINT");
}

}  // namespace vitk::tools
