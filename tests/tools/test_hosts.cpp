// Data-parallel training across hosts: each "host" a network namespace of this machine
// (tools/netns_cluster.sh), joined by a bridge, its ranks started by the ordinary `mpirun
// --hostfile` through tools/netns_rsh.sh, gradients over TCP (--mca btl tcp,self: no two hosts
// share memory). Two hosts of one rank end a run with the same weights as two ranks on one host,
// also on a slow and lossy link; a lost link ends both ranks within --collective-timeout, naming
// the other's host, with a whole checkpoint that resumes on one host; a host whose processes are
// all killed ends the job, named. Skipped, with the reason, where namespaces cannot be made (not
// root, no veth or bridge). Each test makes its own hosts under a prefix of its own and removes
// them however it ends.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/types.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "common/io/checkpoint.h"
#include "util/parallel_runs.h"
#include "util/test_util.h"
#include "util/vitk_process.h"

namespace {

namespace fs = std::filesystem;
using vitk::test::contains;
using vitk::test::TempDir;
using vitk::testing::Command;
using vitk::testing::expect_same_weights;
using vitk::testing::out_of;
using vitk::testing::ProcessResult;
using vitk::testing::run_on;
using vitk::testing::slurp_file;
using vitk::testing::vit_args;
using vitk::testing::wait_until;
using vitk::testing::with;

const fs::path kTools = fs::path(VITK_SOURCE_DIR) / "tools";

ProcessResult cluster_script(const fs::path& dir, std::vector<std::string> args,
                             const std::string& tag) {
  Command c;
  c.argv = {"/bin/bash", (kTools / "netns_cluster.sh").string()};
  c.argv.insert(c.argv.end(), args.begin(), args.end());
  c.dir = dir;
  c.tag = tag;
  c.timeout_seconds = 120;
  return vitk::testing::run_process(c);
}

// N hosts named PREFIX1..PREFIXN (up in the constructor, down in the destructor). skip() is the
// reason they cannot be made here, or empty.
class Hosts {
 public:
  Hosts(const fs::path& dir, std::string prefix, int n, std::vector<std::string> shaping = {})
      : dir_(dir), prefix_(std::move(prefix)) {
    std::vector<std::string> check = {"check", "--prefix", prefix_};
    check.insert(check.end(), shaping.begin(), shaping.end());
    const ProcessResult probe = cluster_script(dir_, check, "check");
    if (probe.status == 77) {
      skip_ = probe.out.empty() ? "netns_cluster.sh check: status 77" : probe.out;
      return;
    }
    if (probe.status != 0) {
      ADD_FAILURE() << "netns_cluster.sh check: " << probe.out << probe.err;
      return;
    }
    // Hosts left by an earlier run that was killed (a destructor that never ran).
    cluster_script(dir_, {"down", "--prefix", prefix_}, "down-before");
    std::vector<std::string> up = {"up",    std::to_string(n), "--prefix",
                                   prefix_, "--dir",           dir_.string()};
    up.insert(up.end(), shaping.begin(), shaping.end());
    const ProcessResult r = cluster_script(dir_, up, "up");
    if (r.status != 0) {
      ADD_FAILURE() << "netns_cluster.sh up: " << r.out << r.err;
      return;
    }
    hostfile_ = r.out.substr(0, r.out.find('\n'));
    made_ = true;
  }
  ~Hosts() {
    if (made_) cluster_script(dir_, {"down", "--prefix", prefix_}, "down");
  }
  Hosts(const Hosts&) = delete;
  Hosts& operator=(const Hosts&) = delete;

  const std::string& skip() const { return skip_; }
  bool made() const { return made_; }
  std::string host(int i) const { return prefix_ + std::to_string(i); }

  // `mpirun ... vitk args` started on host 1, one rank of one thread on each host, every rank's
  // standard output and error also in dir/TAG.ranks/1/rank.R/ (written on the rank's own host).
  Command mpirun(const std::vector<std::string>& vitk_args, const std::string& tag,
                 int ranks) const {
    Command c;
    c.argv = {"/bin/bash",
              (kTools / "netns_cluster.sh").string(),
              "exec",
              host(1),
              "/usr/bin/env",
              "OMP_NUM_THREADS=1",
              VITK_MPIEXEC,
              "--allow-run-as-root",
              "--hostfile",
              hostfile_,
              "-np",
              std::to_string(ranks),
              "--map-by",
              "node",
              "--mca",
              "plm_rsh_agent",
              (kTools / "netns_rsh.sh").string(),
              "--mca",
              "btl",
              "tcp,self",
              "--mca",
              "btl_tcp_if_include",
              "192.0.2.0/24",
              "--mca",
              "oob_tcp_if_include",
              "192.0.2.0/24",
              "-x",
              "OMP_NUM_THREADS",
              "--output-filename",
              (dir_ / (tag + ".ranks")).string(),
              VITK_BINARY};
    c.argv.insert(c.argv.end(), vitk_args.begin(), vitk_args.end());
    c.argv.insert(c.argv.end(), {"--threads", "1"});
    c.dir = dir_;
    c.tag = tag;
    c.timeout_seconds = 300;
    return c;
  }

  // Rank r's standard error, as its host's daemon wrote it.
  std::string rank_err(const std::string& tag, int r) const {
    return slurp_file(dir_ / (tag + ".ranks") / "1" / ("rank." + std::to_string(r)) / "stderr");
  }

  // The pids of the vitk processes running on host i.
  std::vector<pid_t> vitk_pids(int i) const {
    const ProcessResult r = cluster_script(dir_, {"pids", host(i)}, "pids");
    std::vector<pid_t> out;
    std::istringstream in(r.out);
    for (pid_t pid; in >> pid;) {
      std::ifstream comm("/proc/" + std::to_string(pid) + "/comm");
      std::string name;
      if (std::getline(comm, name) && name == "vitk") out.push_back(pid);
    }
    return out;
  }

 private:
  fs::path dir_;
  std::string prefix_;
  fs::path hostfile_;
  std::string skip_;
  bool made_ = false;
};

#define MAKE_HOSTS(name, ...)                                                   \
  Hosts name(__VA_ARGS__);                                                      \
  if (!name.skip().empty()) GTEST_SKIP() << name.skip();                        \
  if (!fs::exists(VITK_MPIEXEC)) GTEST_SKIP() << VITK_MPIEXEC << " is missing"; \
  ASSERT_TRUE(name.made())

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// The run args(out) on one host of two ranks (shared memory) and on two hosts of one rank (TCP,
// the link shaped as given): the same weights, bit for bit (with two ranks every gradient element
// is a + b whatever carries it).
void expect_two_hosts_train_as_one(
    const fs::path& d, const std::string& prefix, const std::vector<std::string>& shaping,
    const std::function<std::vector<std::string>(const std::string&)>& args) {
  MAKE_HOSTS(hosts, d, prefix, 2, shaping);
  const ProcessResult one = run_on(d, 2, 1, args("one-host"), "one-host");
  ASSERT_EQ(one.status, 0) << out_of(d, "one-host");
  const Command job = hosts.mpirun(args("two-hosts"), "two-hosts", 2);
  const ProcessResult two = vitk::testing::run_process(job);
  const std::string log = out_of(d, "two-hosts");
  ASSERT_EQ(two.status, 0) << log << (two.timed_out ? " (timed out)" : "");
  // Rank 0 on host 1, rank 1 on host 2: the header names the world.
  EXPECT_TRUE(contains(log, "rank 0 of 2 on host " + hosts.host(1))) << log;
  expect_same_weights(d / "two-hosts/last.h5", d / "one-host/last.h5", 0);
}

TEST(Hosts, TwoHostsOverTcpTrainTheViTAsTwoRanksOnOneHost) {
  TempDir tmp;
  expect_two_hosts_train_as_one(tmp.path(), "vitkva", {}, vit_args);
}

TEST(Hosts, TwoHostsOverTcpTrainTheTranslationModelAsTwoRanksOnOneHost) {
  TempDir tmp;
  const fs::path d = tmp.path();
  expect_two_hosts_train_as_one(
      d, "vitkmt", {}, [&](const std::string& out) { return vitk::testing::mt_args(d, out); });
}

// 2 ms each way, 1000 Mbit/s, 1% of the packets lost in each direction: TCP resends, the sums
// are the same.
TEST(Hosts, ASlowLossyLinkEndsWithTheSameWeights) {
  TempDir tmp;
  expect_two_hosts_train_as_one(tmp.path(), "vitksl",
                                {"--delay", "2", "--rate", "1000", "--loss", "1"}, vit_args);
}

// A ViT run of two hosts that goes on until stopped, past its first checkpoint, with
// --collective-timeout `timeout`.
Command start_long_run(const Hosts& hosts, const std::string& timeout, pid_t* job) {
  Command c = hosts.mpirun(
      with(with(vit_args("run"), "--epochs", "100000"), "--collective-timeout", timeout), "run", 2);
  *job = vitk::testing::spawn_process(c);
  return c;
}

TEST(Hosts, ALostLinkEndsBothRanksWithinTheTimeoutNamingTheOtherHost) {
  TempDir tmp;
  const fs::path d = tmp.path();
  MAKE_HOSTS(hosts, d, "vitkld", 2);
  pid_t job = -1;
  const Command c = start_long_run(hosts, "10", &job);
  ASSERT_GT(job, 0);
  ASSERT_TRUE(wait_until(120, [&] { return fs::exists(d / "run/last.h5"); })) << out_of(d, "run");
  ASSERT_EQ(hosts.vitk_pids(1).size(), 1u);
  ASSERT_EQ(hosts.vitk_pids(2).size(), 1u);

  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_EQ(cluster_script(d, {"link", hosts.host(2), "down"}, "link").status, 0);
  // Both ranks end on their own: mpirun would notice the lost host only minutes later.
  EXPECT_TRUE(wait_until(10 + 30, [&] {
    return hosts.vitk_pids(1).empty() && hosts.vitk_pids(2).empty();
  })) << out_of(d, "run");
  const double seconds = seconds_since(t0);
  EXPECT_GE(seconds, 10);
  // Each names the other and its host.
  const std::regex names0(
      "vitk: error: rank 0: no (gradients|answer in MPI_[A-Za-z]+) from rank 1 "
      "\\(host " +
      hosts.host(2) + "\\) for 10 s");
  const std::regex names1(
      "vitk: error: rank 1: no (gradients|answer in MPI_[A-Za-z]+) from rank 0 "
      "\\(host " +
      hosts.host(1) + "\\) for 10 s");
  EXPECT_TRUE(std::regex_search(hosts.rank_err("run", 0), names0)) << hosts.rank_err("run", 0);
  EXPECT_TRUE(std::regex_search(hosts.rank_err("run", 1), names1)) << hosts.rank_err("run", 1);
  // mpirun itself waits for the lost host's daemon; the test ends it.
  kill(job, SIGKILL);
  vitk::testing::wait_process(c, job);

  // The checkpoint is whole and the run goes on on the host that is left.
  vitk::testing::expect_vit_run_resumes_for_two_steps(d);
}

TEST(Hosts, AHostWhoseProcessesAreKilledEndsTheJobNamingIt) {
  TempDir tmp;
  const fs::path d = tmp.path();
  MAKE_HOSTS(hosts, d, "vitkkh", 2);
  pid_t job = -1;
  const Command c = start_long_run(hosts, "60", &job);
  ASSERT_GT(job, 0);
  ASSERT_TRUE(wait_until(120, [&] { return fs::exists(d / "run/last.h5"); })) << out_of(d, "run");

  // Power off host 2: every process in it, its Open MPI daemon and its rank.
  const auto t0 = std::chrono::steady_clock::now();
  const ProcessResult pids = cluster_script(d, {"pids", hosts.host(2)}, "pids");
  std::istringstream in(pids.out);
  int killed = 0;
  for (pid_t pid; in >> pid; ++killed) kill(pid, SIGKILL);
  ASSERT_GE(killed, 2) << pids.out;
  const ProcessResult r = vitk::testing::wait_process(c, job);
  const std::string log = out_of(d, "run");
  EXPECT_FALSE(r.timed_out) << log;
  EXPECT_NE(r.status, 0) << log;
  EXPECT_LT(seconds_since(t0), 60) << log;
  EXPECT_TRUE(contains(log, hosts.host(2))) << log;
  EXPECT_TRUE(hosts.vitk_pids(1).empty());
  // Whatever was written is whole.
  EXPECT_NO_THROW(vitk::io::read_checkpoint_meta((d / "run/last.h5").string()));
  EXPECT_NO_THROW(vitk::testing::weights_of(d / "run/last.h5"));
}

}  // namespace
