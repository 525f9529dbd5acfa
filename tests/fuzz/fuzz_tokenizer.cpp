// Fuzzes the tokenizer bytes a translation checkpoint stores (datasets/tokenizer.cpp:
// Tokenizer::from_bytes, SentencePiece's ModelProto plus vitk's special-id checks), then uses the
// model as `vitk translate` does: encode, decode, pieces.
#include <exception>
#include <string>
#include <vector>

#include "datasets/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const vitk::datasets::Tokenizer t = vitk::datasets::Tokenizer::from_bytes(
        std::string(reinterpret_cast<const char*>(data), size));
    const int n = t.size();
    if (!t.usable() || n <= 0) __builtin_trap();
    std::vector<int> ids = t.encode("En el principio cre\xC3\xB3 Dios los cielos y la tierra.");
    for (int id : ids)
      if (id < 0 || id >= n) __builtin_trap();
    ids.push_back(n - 1);
    (void)t.decode(ids);
    (void)t.pieces(ids);
    ids.push_back(n);  // outside the vocabulary: an error, never a read past the table
    try {
      (void)t.decode(ids);
      __builtin_trap();
    } catch (const std::exception&) {
    }
  } catch (const std::exception&) {
  }
  return 0;
}
