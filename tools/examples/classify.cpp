// Classifies image files with a vitk checkpoint: the top three labels of each, or why it could not
// be read. Built against an installed vitk (CMakeLists.txt beside it, or
// `g++ -std=c++17 classify.cpp $(pkg-config --cflags --libs vitk)`).
//
//   classify MODEL.h5 IMAGE...
#include <vitk/vitk.h>

#include <cstdio>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s MODEL.h5 IMAGE...\n", argv[0]);
    return 2;
  }
  try {
    vitk::ClassifierOptions options;
    options.top_k = 3;
    const vitk::Classifier classifier(argv[1], options);
    std::printf("%s: %zu classes, %lldx%lld input, %s\n", argv[1], classifier.classes().size(),
                static_cast<long long>(classifier.image_height()),
                static_cast<long long>(classifier.image_width()), classifier.precision().c_str());
    int failed = 0;
    const std::vector<std::string> paths(argv + 2, argv + argc);
    for (const vitk::Classification& c : classifier.classify(paths)) {
      if (!c.ok()) {
        std::fprintf(stderr, "%s: %s\n", c.path.c_str(), c.error.c_str());
        ++failed;
        continue;
      }
      std::printf("%s", c.path.c_str());
      for (size_t k = 0; k < c.labels.size(); ++k)
        std::printf("\t%s %.4f", c.labels[k].c_str(), c.probabilities[k]);
      std::printf("\n");
    }
    return failed ? 1 : 0;
  } catch (const vitk::Exception& e) {  // a bad checkpoint or option: the message says which
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
