// Fuzzes the labelled-sentence reader of `vitk text-train` and `vitk text-eval`
// (datasets/labelled_text.cpp: read_labelled): text<TAB>label and __label__LABEL text lines. Every
// sentence it returns has a non-empty text and label, and a line number inside the file.
#include <algorithm>
#include <exception>

#include "datasets/labelled_text.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static vitk::fuzz::ScratchFile file("labelled", ".tsv");
  file.write(data, size);
  try {
    const vitk::datasets::LabelledLines l = vitk::datasets::read_labelled(file.path());
    if (l.text.size() != l.labels.size() || l.lines.size() != l.text.size()) __builtin_trap();
    const auto lines = static_cast<int64_t>(std::count(data, data + size, '\n')) + 1;
    for (size_t i = 0; i < l.text.size(); ++i) {
      if (l.text[i].empty() || l.labels[i].empty()) __builtin_trap();
      if (l.lines[i] < 1 || l.lines[i] > lines || (i && l.lines[i] <= l.lines[i - 1]))
        __builtin_trap();
    }
  } catch (const std::exception&) {
  }
  return 0;
}
