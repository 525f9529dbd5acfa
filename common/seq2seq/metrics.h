#pragma once
// metrics.csv of `vitk mt-train`: a header, then one row per validation, each flushed as soon as
// it is written. A resumed run keeps the rows up to its checkpoint's step and drops later ones (a
// resume from an older checkpoint redoes them); the file is rewritten atomically.
#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

namespace vitk::seq2seq {

class MetricsCsv {
 public:
  static constexpr const char* kHeader =
      "step,epoch,lr,train_loss,target_tokens_per_s,valid_loss,valid_bleu";
  // keep_steps < 0: start a new file; else keep the existing rows whose step is <= keep_steps.
  MetricsCsv(const std::string& path, int64_t keep_steps);
  void row(const std::vector<std::string>& fields);

 private:
  std::string path_;
  std::ofstream out_;
};

}  // namespace vitk::seq2seq
