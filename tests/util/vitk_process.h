#pragma once
// Running a program from a test as a user would: in a directory, with a file (or nothing) as
// standard input, standard output and error captured in files, extra environment variables, and
// a time limit. run_vitk runs the vitk executable (the end-to-end tests of subcommands);
// run_process anything else (h5dump, python3, this test binary in a child process). The one
// place the tests fork and exec.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

extern char** environ;

namespace vitk::testing {

struct ProcessResult {
  int status = -1;         // exit code, or -1 when killed by a signal (or never started)
  int signal = 0;          // the signal that ended it, 0 when it exited
  bool timed_out = false;  // killed with SIGKILL after Command::timeout_seconds
  std::string out, err;
};
using VitkResult = ProcessResult;

// What to run, where, and with what around it.
struct Command {
  std::vector<std::string> argv;  // argv[0] is the program's path (no PATH lookup)
  std::filesystem::path dir;      // the working directory, which also holds the captured streams
  std::string tag = "run";        // standard output and error go to dir/TAG.out and dir/TAG.err
  std::string stdin_file;         // a file in dir as standard input; "" for /dev/null
  std::vector<std::pair<std::string, std::string>> env;  // set (or replaced) in the environment
  double timeout_seconds = 0;                            // 0: wait as long as it takes
};

inline std::string slurp_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// Starts the command and returns its pid (for signals), or -1; see wait_process.
inline pid_t spawn_process(const Command& c) {
  const std::string out_path = (c.dir / (c.tag + ".out")).string();
  const std::string err_path = (c.dir / (c.tag + ".err")).string();
  const std::string in_path = c.stdin_file.empty() ? "/dev/null" : (c.dir / c.stdin_file).string();
  const std::string dir = c.dir.string();
  // Everything the child needs is built here: between fork and exec a child of a threaded process
  // may only make async-signal-safe calls (no malloc).
  std::vector<std::string> env_text;
  for (char** e = environ; *e; ++e) {
    const std::string entry = *e;
    bool replaced = false;
    for (const auto& [name, value] : c.env) replaced |= entry.rfind(name + "=", 0) == 0;
    if (!replaced) env_text.push_back(entry);
  }
  for (const auto& [name, value] : c.env) env_text.push_back(name + "=" + value);
  std::vector<char*> argv, envp;
  for (const std::string& a : c.argv) argv.push_back(const_cast<char*>(a.c_str()));
  for (const std::string& e : env_text) envp.push_back(const_cast<char*>(e.c_str()));
  argv.push_back(nullptr);
  envp.push_back(nullptr);
  if (c.argv.empty()) return -1;
  const pid_t pid = fork();
  if (pid == 0) {
    const int in = open(in_path.c_str(), O_RDONLY);
    const int out = open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int err = open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (in < 0 || out < 0 || err < 0 || chdir(dir.c_str()) != 0) _exit(126);
    dup2(in, 0), dup2(out, 1), dup2(err, 2);
    execve(argv[0], argv.data(), envp.data());
    _exit(127);
  }
  return pid;
}

// Waits for the command started as pid (killing it after c.timeout_seconds, if set) and reads
// what it printed.
inline ProcessResult wait_process(const Command& c, pid_t pid) {
  ProcessResult r;
  if (pid <= 0) return r;
  int status = 0;
  pid_t done = 0;
  if (c.timeout_seconds > 0) {
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::duration<double>(c.timeout_seconds);
    while ((done = waitpid(pid, &status, WNOHANG)) == 0) {
      if (std::chrono::steady_clock::now() > deadline) {
        kill(pid, SIGKILL);
        r.timed_out = true;
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  if (done == 0) done = waitpid(pid, &status, 0);
  if (done != pid) return r;
  r.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
  r.out = slurp_file(c.dir / (c.tag + ".out"));
  r.err = slurp_file(c.dir / (c.tag + ".err"));
  return r;
}

inline ProcessResult run_process(const Command& c) {
  return wait_process(c, spawn_process(c));
}

// The path of this test binary, to run one of its tests in a child process.
inline std::string self_executable() {
  std::error_code ec;
  return std::filesystem::read_symlink("/proc/self/exe", ec).string();
}

// ---- the vitk executable

inline Command vitk_command(const std::filesystem::path& dir, const std::vector<std::string>& args,
                            const std::string& tag = "run", const std::string& stdin_file = "") {
  Command c;
  c.argv.push_back(VITK_BINARY);
  c.argv.insert(c.argv.end(), args.begin(), args.end());
  c.dir = dir;
  c.tag = tag;
  c.stdin_file = stdin_file;
  return c;
}

// Starts `vitk args...` in `dir`; stdin from dir/stdin_file (or /dev/null when empty), stdout
// and stderr to dir/TAG.out and dir/TAG.err. Returns the pid (for signals); see wait_vitk.
inline pid_t spawn_vitk(const std::filesystem::path& dir, const std::vector<std::string>& args,
                        const std::string& tag, const std::string& stdin_file = "") {
  return spawn_process(vitk_command(dir, args, tag, stdin_file));
}

inline VitkResult wait_vitk(const std::filesystem::path& dir, pid_t pid, const std::string& tag) {
  return wait_process(vitk_command(dir, {}, tag), pid);
}

inline VitkResult run_vitk(const std::filesystem::path& dir, const std::vector<std::string>& args,
                           const std::string& tag = "run", const std::string& stdin_file = "") {
  return run_process(vitk_command(dir, args, tag, stdin_file));
}

// `mpirun -np RANKS vitk args...` on this machine: one OpenMP thread per rank (the test machine
// may have fewer cores than ranks), and LeakSanitizer told about the memory Open MPI keeps until
// exit (tests/lsan_mpi.supp) for sanitizer builds.
inline Command mpirun_vitk_command(const std::filesystem::path& dir, int ranks,
                                   const std::vector<std::string>& args,
                                   const std::string& tag = "run") {
  Command c = vitk_command(dir, args, tag);
  const std::vector<std::string> launcher = {VITK_MPIEXEC, "--allow-run-as-root", "--oversubscribe",
                                             "-np", std::to_string(ranks)};
  c.argv.insert(c.argv.begin(), launcher.begin(), launcher.end());
  c.env = {
      {"OMP_NUM_THREADS", "1"},
      {"LSAN_OPTIONS", std::string("suppressions=") + VITK_SOURCE_DIR +
                           "/tests/lsan_mpi.supp:fast_unwind_on_malloc=0:print_suppressions=0"}};
  return c;
}

// Runs c under a memory ceiling of 3 GB: the address space (ulimit -v), or under AddressSanitizer,
// which reserves terabytes of address space for its shadow memory, its own limits on resident
// memory and on one allocation. For runs that would take gigabytes without the check under test.
inline void under_3gb_ceiling(Command& c) {
#ifdef __SANITIZE_ADDRESS__
  c.env.emplace_back("ASAN_OPTIONS", "hard_rss_limit_mb=3000:max_allocation_size_mb=3000");
#else
  c.argv.insert(c.argv.begin(), {"/bin/sh", "-c", "ulimit -v 3000000 && exec \"$0\" \"$@\""});
#endif
}

// A usage or run-time error of vitk is exactly one line, prefixed so that it stands out in a log.
inline void expect_one_error_line(const VitkResult& r) {
  EXPECT_EQ(r.err.rfind("vitk: error: ", 0), 0u) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
}

}  // namespace vitk::testing
