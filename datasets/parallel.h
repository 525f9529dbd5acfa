#pragma once
// Parallel text for translation: reading a corpus (a TSV file or two line-aligned files) with
// clear messages for what is wrong in it. The translation model batches its token ids itself
// (common/seq2seq/batches.h).
#include <cstdint>
#include <string>
#include <vector>

namespace vitk::datasets {

struct ParallelCorpus {
  std::vector<std::string> source, target;
  std::vector<int64_t> line;  // 1-based line of each pair in the file(s)
};

struct ParallelReport {
  int64_t read = 0;      // pairs (lines) read
  int64_t kept = 0;      // pairs returned
  int64_t empty = 0;     // skipped: a side empty or only whitespace
  int64_t too_long = 0;  // skipped: a side longer than max_bytes_per_side
};

// Reads `path_or_tsv` as source<TAB>target lines when `target_path` is empty, else the source
// from `path_or_tsv` and the target from `target_path`, line by line. CRLF line ends and a UTF-8
// byte order mark are accepted. Throws vitk::Error for a missing file, files of unequal length
// (naming both and their counts), invalid UTF-8 (file:line and byte offset in the line) and a
// TSV line without exactly one tab (file:line). Pairs with an empty side, or a side longer than
// `max_bytes_per_side` bytes (0: no limit), are skipped and counted in `report` (may be null).
ParallelCorpus read_parallel(const std::string& path_or_tsv, const std::string& target_path,
                             int64_t max_bytes_per_side, ParallelReport* report);

}  // namespace vitk::datasets
