#pragma once
// Attention benchmarks:
// - `vitk bench attention`: one MultiHeadAttention layer, forward and forward + backward, with the
//   materialized and the blocked kernel interleaved, for the shapes the models use and a few long
//   ones; the measurements behind the automatic choice (nn::AttentionKernel::automatic).
// - `vitk bench attention-memory`: the peak memory and time of one ViT-B/16-width encoder layer
//   (batch 1) at long sequence lengths, each case in a child process of its own so that its peak
//   resident set (getrusage's ru_maxrss) is its own.
#include <cstddef>
#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

#include "common/nn/nn.h"

namespace vitk::bench {

// ---- Speed: materialized against blocked ----
struct AttentionShape {
  std::string name;  // "vit-b16", "mt-small self", ...
  int64_t batch = 1, tq = 1, tk = 1, d_model = 64, heads = 1;
  bool cross = false, causal = false, padded = false;  // padded: sequence b has tk − b·tk/(2B) keys
};
std::vector<AttentionShape> default_attention_shapes();

struct AttentionSpeedRow {
  AttentionShape shape;
  // Median seconds per call of the layer, [0] materialized, [1] blocked: wall-clock, and the
  // CPU time of the process (all threads) per call.
  double forward[2] = {0, 0}, train[2] = {0, 0};
  double forward_cpu[2] = {0, 0}, train_cpu[2] = {0, 0};
};
// Rounds alternate the kernels so that both see the same machine load. On a loaded machine the
// CPU time (with OMP_WAIT_POLICY=passive, so that waiting threads do not spin) is the steadier
// measure of the work; on an idle one the wall-clock is what a user sees.
std::vector<AttentionSpeedRow> run_attention_speed(const std::vector<AttentionShape>& shapes,
                                                   int repeats, double min_seconds, bool cpu_clock,
                                                   std::ostream* progress);
void print_attention_speed(std::ostream& out, const std::vector<AttentionSpeedRow>& rows,
                           bool cpu_clock);

// ---- Peak memory at long sequence lengths ----
struct AttentionMemoryCase {
  int64_t length = 1024;
  bool training = false;  // forward + backward; otherwise an inference forward
  nn::AttentionKernel kernel = nn::AttentionKernel::blocked;
  int repeats = 3;  // timed calls after one untimed call
};
struct AttentionMemoryResult {
  AttentionMemoryCase c;
  bool ran = false;
  std::string note;        // why a case did not run
  double seconds = 0;      // median wall-clock per call
  double cpu_seconds = 0;  // median CPU time of the process per call (all threads)
  size_t arena_bytes = 0;  // the activation arena's high-water mark
  long setup_rss_kb = 0;   // peak resident set before the first call (weights, inputs, libraries)
  long peak_rss_kb = 0;    // peak resident set of the whole run
};

// Runs one case in this process: what the child does.
AttentionMemoryResult run_attention_memory_case(const AttentionMemoryCase& c);
// One line that the parent reads back.
std::string format_memory_result(const AttentionMemoryResult& r);
// The arguments after the executable that make a child run case c (hidden options of
// `vitk bench attention-memory`).
std::vector<std::string> attention_memory_child_args(const AttentionMemoryCase& c, int threads);

// Runs every length × pass × kernel in a child process `exe` (usually /proc/self/exe). The
// materialized kernel is skipped where its [B, H, T, T] tensors would not fit in available memory.
std::vector<AttentionMemoryResult> run_attention_memory_table(
    const std::string& exe, const std::vector<int64_t>& lengths,
    const std::vector<nn::AttentionKernel>& kernels, int repeats, int threads,
    std::ostream* progress);
void print_attention_memory_table(std::ostream& out,
                                  const std::vector<AttentionMemoryResult>& rows);

}  // namespace vitk::bench
