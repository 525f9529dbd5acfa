#include "common/bench/attention_bench.h"

#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <ostream>
#include <sstream>

#include "common/error.h"
#include "common/timer.h"

extern char** environ;

namespace vitk::bench {
namespace {

void init_weights(ParamStore& store, ops::Rng& rng) {
  store.finalize();
  nn::init_defaults(store);
  for (auto& p : store.params())
    if (p.shape.size() == 2) nn::init_trunc_normal(p.value, 0.02f, rng);
}

Tensor random_input(Shape shape, ops::Rng& rng) {
  Tensor t(std::move(shape));
  nn::init_trunc_normal(t, 1.f, rng);
  return t;
}

// Wall-clock and process CPU seconds per call, repeated for at least min_seconds of the chosen
// clock, after one untimed call (primitives, arenas, scratch).
struct Timed {
  double wall = 0, cpu = 0;
};
Timed time_calls(const std::function<void()>& call, double min_seconds, bool cpu_clock) {
  call();
  int n = 0;
  Timer t;
  const double cpu0 = process_cpu_seconds();
  do {
    call();
    ++n;
  } while ((cpu_clock ? process_cpu_seconds() - cpu0 : t.seconds()) < min_seconds);
  return {t.seconds() / n, (process_cpu_seconds() - cpu0) / n};
}

const char* kernel_name(nn::AttentionKernel k) {
  switch (k) {
    case nn::AttentionKernel::automatic:
      return "automatic";
    case nn::AttentionKernel::materialized:
      return "materialized";
    case nn::AttentionKernel::blocked:
      return "blocked";
    case nn::AttentionKernel::reference:
      return "reference";
  }
  return "?";
}

long max_rss_kb() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_maxrss;  // kilobytes on Linux
}

// MemAvailable from /proc/meminfo in bytes; 0 when unknown.
double available_bytes() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  double kb = 0;
  std::string unit;
  while (in >> key >> kb >> unit)
    if (key == "MemAvailable:") return kb * 1024;
  return 0;
}

}  // namespace

// ---- Speed ----

std::vector<AttentionShape> default_attention_shapes() {
  std::vector<AttentionShape> s;
  // name, B, Tq, Tk, d, heads, cross, causal, padded
  s.push_back({"vit-fmnist", 128, 50, 50, 192, 3, false, false, false});
  s.push_back({"vit-b16", 8, 197, 197, 768, 12, false, false, false});
  s.push_back({"mt-small self", 64, 32, 32, 256, 4, false, true, true});
  s.push_back({"mt-small cross", 64, 32, 32, 256, 4, true, false, true});
  s.push_back({"mt-small encoder", 64, 32, 32, 256, 4, false, false, true});
  s.push_back({"transformer-base self", 32, 32, 32, 512, 8, false, true, true});
  s.push_back({"d_head 32, padded", 16, 128, 128, 256, 8, false, false, true});
  s.push_back({"long 512", 2, 512, 512, 768, 12, false, false, false});
  s.push_back({"long 1024", 1, 1024, 1024, 768, 12, false, false, false});
  s.push_back({"long 1024 causal", 1, 1024, 1024, 768, 12, false, true, false});
  s.push_back({"long 2048", 1, 2048, 2048, 768, 12, false, false, false});
  return s;
}

std::vector<AttentionSpeedRow> run_attention_speed(const std::vector<AttentionShape>& shapes,
                                                   int repeats, double min_seconds, bool cpu_clock,
                                                   std::ostream* progress) {
  std::vector<AttentionSpeedRow> rows;
  ops::Rng rng(1);
  Arena arena;
  for (const AttentionShape& s : shapes) {
    nn::AttentionConfig c;
    c.d_model = s.d_model, c.heads = s.heads, c.cross = s.cross;
    ParamStore store;
    nn::MultiHeadAttention attn(store, "attn", c);
    init_weights(store, rng);
    Tensor x = random_input({s.batch, s.tq, s.d_model}, rng);
    Tensor memory = s.cross ? random_input({s.batch, s.tk, s.d_model}, rng) : Tensor();
    Tensor dy = random_input({s.batch, s.tq, s.d_model}, rng);
    nn::AttentionMask mask;
    mask.causal = s.causal;
    if (s.padded) {
      mask.key_lengths = Tensor({s.batch}, DType::i32);
      for (int64_t b = 0; b < s.batch; ++b)
        mask.key_lengths.i32()[b] = static_cast<int32_t>(s.tk - b * s.tk / (2 * s.batch));
    }
    const nn::AttentionKernel kernels[2] = {nn::AttentionKernel::materialized,
                                            nn::AttentionKernel::blocked};
    std::vector<double> f[2], t[2], fc[2], tc[2];
    for (int r = 0; r < repeats; ++r)
      for (int k = 0; k < 2; ++k) {
        auto forward = [&] {
          arena.reset();
          nn::Context ctx{false, &arena, &rng};
          ctx.attention_kernel = kernels[k];
          attn.forward(ctx, x, memory, mask);
        };
        auto train = [&] {
          arena.reset();
          nn::Context ctx{true, &arena, &rng};
          ctx.attention_kernel = kernels[k];
          attn.forward(ctx, x, memory, mask);
          Tensor dmemory;
          attn.backward(ctx, dy, s.cross ? &dmemory : nullptr);
        };
        const Timed a = time_calls(forward, min_seconds, cpu_clock);
        const Timed b = time_calls(train, min_seconds, cpu_clock);
        f[k].push_back(a.wall), fc[k].push_back(a.cpu);
        t[k].push_back(b.wall), tc[k].push_back(b.cpu);
      }
    AttentionSpeedRow row;
    row.shape = s;
    for (int k = 0; k < 2; ++k) {
      row.forward[k] = median(f[k]), row.forward_cpu[k] = median(fc[k]);
      row.train[k] = median(t[k]), row.train_cpu[k] = median(tc[k]);
    }
    if (progress) print_attention_speed(*progress, {row}, cpu_clock);
    rows.push_back(row);
  }
  return rows;
}

void print_attention_speed(std::ostream& out, const std::vector<AttentionSpeedRow>& rows,
                           bool cpu_clock) {
  for (const auto& r : rows) {
    const AttentionShape& s = r.shape;
    char shape[128];
    std::snprintf(shape, sizeof shape, "B=%ld Tq=%ld Tk=%ld d=%ld h=%ld%s%s%s",
                  static_cast<long>(s.batch), static_cast<long>(s.tq), static_cast<long>(s.tk),
                  static_cast<long>(s.d_model), static_cast<long>(s.heads), s.cross ? " cross" : "",
                  s.causal ? " causal" : "", s.padded ? " padded" : "");
    const char* passes[2] = {"forward", "forward+backward"};
    for (int p = 0; p < 2; ++p) {
      const double* v = cpu_clock ? (p ? r.train_cpu : r.forward_cpu) : (p ? r.train : r.forward);
      char line[320];
      std::snprintf(line, sizeof line, "%-22s %-17s %10.3f %10.3f %6.2f  %s\n", s.name.c_str(),
                    passes[p], 1e3 * v[0], 1e3 * v[1], v[0] / v[1], shape);
      out << line;
    }
  }
  out << std::flush;
}

// ---- Memory ----

AttentionMemoryResult run_attention_memory_case(const AttentionMemoryCase& c) {
  AttentionMemoryResult r;
  r.c = c;
  nn::LayerConfig lc;  // ViT-B/16's block
  lc.d_model = 768, lc.heads = 12, lc.d_ff = 3072, lc.pre_norm = true, lc.norm_eps = 1e-6f;
  lc.activation = ops::Activation::gelu;
  ParamStore store;
  nn::EncoderLayer layer(store, "blocks.0", lc);
  ops::Rng rng(1);
  init_weights(store, rng);
  Tensor x = random_input({1, c.length, 768}, rng);
  Tensor dy = c.training ? random_input({1, c.length, 768}, rng) : Tensor();
  Arena arena;
  r.setup_rss_kb = max_rss_kb();
  nn::AttentionMask none;
  auto call = [&] {
    arena.reset();
    nn::Context ctx{c.training, &arena, &rng};
    ctx.attention_kernel = c.kernel;
    layer.forward(ctx, x, none);
    if (c.training) layer.backward(ctx, dy);
  };
  call();
  std::vector<double> seconds, cpu;
  for (int i = 0; i < c.repeats; ++i) {
    Timer t;
    const double cpu0 = process_cpu_seconds();
    call();
    seconds.push_back(t.seconds());
    cpu.push_back(process_cpu_seconds() - cpu0);
  }
  r.seconds = median(seconds);
  r.cpu_seconds = median(cpu);
  r.arena_bytes = arena.high_water();
  r.peak_rss_kb = max_rss_kb();
  r.ran = true;
  return r;
}

std::string format_memory_result(const AttentionMemoryResult& r) {
  std::ostringstream s;
  s << "attention-memory-result " << r.seconds << " " << r.cpu_seconds << " " << r.arena_bytes
    << " " << r.setup_rss_kb << " " << r.peak_rss_kb;
  return s.str();
}

std::vector<std::string> attention_memory_child_args(const AttentionMemoryCase& c, int threads) {
  return {"bench",          "attention-memory",
          "--child-length", std::to_string(c.length),
          "--child-pass",   c.training ? "forward+backward" : "forward",
          "--child-kernel", kernel_name(c.kernel),
          "--repeats",      std::to_string(c.repeats),
          "--threads",      std::to_string(threads)};
}

namespace {

// Runs `exe args...` with stdout on a pipe; returns its stdout, throws on a failed child.
std::string run_child(const std::string& exe, const std::vector<std::string>& args) {
  int fds[2];
  if (pipe(fds) != 0) throw Error(std::string("pipe: ") + std::strerror(errno));
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], 1);
  posix_spawn_file_actions_addclose(&actions, fds[0]);
  posix_spawn_file_actions_addclose(&actions, fds[1]);
  std::vector<std::string> all = {exe};
  all.insert(all.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : all) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, exe.c_str(), &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  close(fds[1]);
  if (rc != 0) {
    close(fds[0]);
    throw Error("cannot start " + exe + ": " + std::strerror(rc));
  }
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = read(fds[0], buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(n));
  close(fds[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    throw Error("benchmark child " + exe + " failed (status " + std::to_string(status) + ")");
  return out;
}

}  // namespace

std::vector<AttentionMemoryResult> run_attention_memory_table(
    const std::string& exe, const std::vector<int64_t>& lengths,
    const std::vector<nn::AttentionKernel>& kernels, int repeats, int threads,
    std::ostream* progress) {
  std::vector<AttentionMemoryResult> rows;
  for (int64_t T : lengths)
    for (bool training : {false, true})
      for (nn::AttentionKernel k : kernels) {
        AttentionMemoryCase c;
        c.length = T, c.training = training, c.kernel = k, c.repeats = repeats;
        AttentionMemoryResult r;
        r.c = c;
        // The materialized path holds the weights [12, T, T] and, in training, their gradient
        // and the fused kernel's per-thread scores: about four such tensors at once.
        const double need = 4.0 * 12 * static_cast<double>(T) * T * 4;
        const double avail = available_bytes();
        if (k != nn::AttentionKernel::blocked && avail > 0 && need > 0.8 * avail) {
          r.note = "skipped: needs about " + std::to_string(static_cast<int>(need / 1e9)) + " GB";
        } else {
          const std::string out = run_child(exe, attention_memory_child_args(c, threads));
          std::istringstream in(out.substr(out.find("attention-memory-result")));
          std::string tag;
          if (in >> tag >> r.seconds >> r.cpu_seconds >> r.arena_bytes >> r.setup_rss_kb >>
              r.peak_rss_kb)
            r.ran = true;
          else
            throw Error("benchmark child printed no result: " + out);
        }
        if (progress) print_attention_memory_table(*progress, {r});
        rows.push_back(r);
      }
  return rows;
}

void print_attention_memory_table(std::ostream& out,
                                  const std::vector<AttentionMemoryResult>& rows) {
  for (const auto& r : rows) {
    char line[256];
    const char* pass = r.c.training ? "forward+backward" : "forward";
    if (!r.ran) {
      std::snprintf(line, sizeof line, "%6ld  %-17s %-13s %s\n", static_cast<long>(r.c.length),
                    pass, kernel_name(r.c.kernel), r.note.c_str());
    } else {
      std::snprintf(line, sizeof line, "%6ld  %-17s %-13s %9.1f %9.1f %9.1f %10.1f %8.3f %8.3f\n",
                    static_cast<long>(r.c.length), pass, kernel_name(r.c.kernel),
                    r.arena_bytes / 1048576.0, r.setup_rss_kb / 1024.0, r.peak_rss_kb / 1024.0,
                    (r.peak_rss_kb - r.setup_rss_kb) / 1024.0, r.seconds, r.cpu_seconds);
    }
    out << line;
  }
  out << std::flush;
}

}  // namespace vitk::bench
