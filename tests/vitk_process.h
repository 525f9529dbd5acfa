#pragma once
// Running the vitk executable from a test as a user would: in a directory, with a file (or
// nothing) as standard input, standard output and error captured in files. For the end-to-end
// tests of subcommands.
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace vitk::testing {

struct VitkResult {
  int status = -1;  // exit code, or -1 when killed by a signal
  std::string out, err;
};

inline std::string slurp_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// Starts `vitk args...` in `dir`; stdin from dir/stdin_file (or /dev/null when empty), stdout
// and stderr to dir/TAG.out and dir/TAG.err. Returns the pid (for signals); see wait_vitk.
inline pid_t spawn_vitk(const std::filesystem::path& dir, const std::vector<std::string>& args,
                        const std::string& tag, const std::string& stdin_file = "") {
  const std::filesystem::path out_path = dir / (tag + ".out"), err_path = dir / (tag + ".err");
  const std::string in_path = stdin_file.empty() ? "/dev/null" : (dir / stdin_file).string();
  pid_t pid = fork();
  if (pid == 0) {
    int in = open(in_path.c_str(), O_RDONLY);
    int out = open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int err = open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (in < 0 || out < 0 || err < 0 || chdir(dir.c_str()) != 0) _exit(126);
    dup2(in, 0), dup2(out, 1), dup2(err, 2);
    std::vector<char*> argv{const_cast<char*>(VITK_BINARY)};
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv(VITK_BINARY, argv.data());
    _exit(127);
  }
  return pid;
}

inline VitkResult wait_vitk(const std::filesystem::path& dir, pid_t pid, const std::string& tag) {
  int status = 0;
  VitkResult r;
  if (pid <= 0 || waitpid(pid, &status, 0) != pid) return r;
  r.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = slurp_file(dir / (tag + ".out"));
  r.err = slurp_file(dir / (tag + ".err"));
  return r;
}

inline VitkResult run_vitk(const std::filesystem::path& dir, const std::vector<std::string>& args,
                           const std::string& tag = "run", const std::string& stdin_file = "") {
  return wait_vitk(dir, spawn_vitk(dir, args, tag, stdin_file), tag);
}

}  // namespace vitk::testing
