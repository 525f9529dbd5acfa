#include "tools/cli.h"

#include <sched.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <set>
#include <sstream>
#include <stdexcept>
#include <thread>
#include <type_traits>
#include <utility>

#include <boost/make_shared.hpp>

#include "common/dist/world.h"
#include "common/error.h"
#include "common/io/atomic_file.h"
#include "common/io/checkpoint.h"
#include "common/ops/ops.h"
#include "tools/api/internal.h"

namespace vitk::tools {

namespace {

// The options the running command was given on its command line (not from --config), per thread
// as the library may run commands on several.
std::set<std::string>& given_on_command_line_names() {
  thread_local std::set<std::string> names;
  return names;
}

// The message of a Boost.Program_options error. Boost fills its template's placeholders
// (%value%, %option%, ...) by replacing each until none is left, so a value or option name that
// itself holds the placeholder ("--top-k x%value%", found by fuzzing the INI reader) makes what()
// loop forever. A copy with every '%' in the substituted words written as \x25 cannot.
class PoMessage : public po::error_with_option_name {
 public:
  explicit PoMessage(const po::error_with_option_name& e) : po::error_with_option_name(e) {
    for (auto& entry : m_substitutions) {
      std::string& word = entry.second;
      for (size_t at = 0; (at = word.find('%', at)) != std::string::npos; at += 4)
        word.replace(at, 1, "\\x25");
    }
  }
};

std::string po_message(const po::error& e) {
  if (const auto* named = dynamic_cast<const po::error_with_option_name*>(&e))
    return PoMessage(*named).what();
  return e.what();
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string trim(const std::string& s) {
  const char* ws = " \t\r\n";
  size_t begin = s.find_first_not_of(ws);
  if (begin == std::string::npos) return "";
  size_t end = s.find_last_not_of(ws);
  return s.substr(begin, end - begin + 1);
}

// The value semantic of switch_value: a bool that Boost reads from one token, which the dispatcher
// always supplies with '=' (expand_switches), so Boost never reaches for the next word.
class SwitchValue : public po::typed_value<bool> {
 public:
  explicit SwitchValue(std::optional<bool> by_default)
      : po::typed_value<bool>(nullptr), by_default_(by_default) {
    if (by_default) default_value(*by_default, *by_default ? "true" : "false");
  }
  // The help shows `--json` for a switch that is off by default, `--x [=BOOL] (=true)` otherwise.
  std::string name() const override {
    if (by_default_ == false) return "";
    return by_default_ ? "[=BOOL] (=true)" : "[=BOOL]";
  }

 private:
  std::optional<bool> by_default_;
};

bool is_bool_word(const std::string& word) {
  for (const char* w : {"true", "false", "yes", "no", "on", "off"})
    if (lower(word) == w) return true;
  return false;
}

// A bare `--NAME` of a switch becomes `--NAME=true`, and `--NAME=VALUE` stays, so that every
// switch reaches Boost with its value attached (after `--` every word is positional).
std::vector<std::string> expand_switches(const std::vector<std::string>& args,
                                         const po::options_description& options) {
  std::vector<std::string> out;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--") {
      out.insert(out.end(), args.begin() + static_cast<std::ptrdiff_t>(i), args.end());
      break;
    }
    const po::option_description* d = a.size() > 2 && a.compare(0, 2, "--") == 0
                                          ? options.find_nothrow(a.substr(2), false)
                                          : nullptr;
    if (!d || !is_switch(*d)) {
      out.push_back(a);
      continue;
    }
    if (i + 1 < args.size() && is_bool_word(args[i + 1]))
      throw UsageError(a + " is a switch and takes its value only with '=': " + a + "=" +
                       args[i + 1]);
    out.push_back(a + "=true");
  }
  return out;
}

// The cores this process may run on (its CPU affinity), else the machine's.
int available_cores() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

// Optimal string alignment distance: Levenshtein plus adjacent transpositions, because swapped
// letters ("trian") are the most common typo of a subcommand name.
size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  }
  return d[a.size()][b.size()];
}

const char* build_type() {
#if defined(VITK_BUILD_TYPE)
  return VITK_BUILD_TYPE;
#elif defined(NDEBUG) && defined(__OPTIMIZE__)
  return "release build";
#elif defined(__OPTIMIZE__)
  return "optimized build with assertions";
#else
  return "debug build";
#endif
}

// ---- Help -------------------------------------------------------------------------------------

void print_tool_help(const Registry& registry, std::ostream& os) {
  size_t width = 0;
  for (const Subcommand& c : registry.all()) width = std::max(width, c.name.size());
  os << "vitk " << VITK_VERSION
     << ": train Vision Transformers and translation Transformers on CPUs.\n\n"
     << "Usage: vitk <subcommand> [options]\n"
     << "       vitk <subcommand> --help    options and an example for one subcommand\n\n"
     << "Subcommands:\n";
  for (const Subcommand& c : registry.all())
    os << "  " << c.name << std::string(width - c.name.size() + 3, ' ') << c.summary << "\n";
  os << "\nOptions:\n"
     << "  -h [ --help ]   show this help and exit\n"
     << "  --version       print the version and exit\n\n"
     << "Every subcommand also takes --threads N and --config FILE (INI; options given on the\n"
     << "command line override the file).\n"
     << "Exit codes: 0 success, 1 run-time failure, 2 usage error.\n";
}

void print_command_help(const Subcommand& cmd, const po::options_description& own,
                        const po::options_description& common, std::ostream& os) {
  os << "Usage: vitk " << cmd.name << " " << cmd.usage << "\n" << cmd.summary << "\n\n";
  os << "Example:\n";
  std::istringstream lines(cmd.example);
  for (std::string line; std::getline(lines, line);) os << "  " << line << "\n";
  os << "\n";
  if (!own.options().empty()) os << own << "\n";
  os << common;
}

// ---- Config files -----------------------------------------------------------------------------

struct ConfigKey {
  int line;
  std::string key;    // the option it sets: "model.d_model", or "epochs" under [train]
  std::string value;  // as written
};

// Sections: "[model]" keys describe the network and are options named "model.KEY" (they travel
// in checkpoints); every other section ("[train]", "[data]", "[augment]", ...) is only a
// heading, and its keys are plain options ("epochs"). Boost's own parser neither knows this nor
// reports line numbers, so we read the file here (comments from '#', "key = value" lines) and
// hand Boost a flat file of the same keys.
std::vector<ConfigKey> scan_config(const std::string& path, const std::string& text) {
  std::vector<ConfigKey> keys;
  std::istringstream in(text);
  std::string raw;
  std::string prefix;
  for (int line = 1; std::getline(in, raw); ++line) {
    std::string where = path + ":" + std::to_string(line) + ": ";
    // A NUL would cut every later message off, and other control characters would hide in it.
    for (char c : raw)
      if ((static_cast<unsigned char>(c) < 0x20 && c != '\t' && c != '\r') || c == '\x7f')
        throw UsageError(where + "control character " + printable(std::string(1, c)) +
                         " in the line '" + printable(trim(raw)) + "'");
    std::string s = trim(raw.substr(0, raw.find('#')));
    if (s.empty()) continue;
    if (s.front() == '[' && s.back() == ']') {
      std::string section = trim(s.substr(1, s.size() - 2));
      if (section.empty()) throw UsageError(where + "empty section name '[]'");
      prefix = section == "model" ? "model." : "";
      continue;
    }
    size_t eq = s.find('=');
    if (eq == std::string::npos)
      throw UsageError(where + "expected 'key = value' or '[section]', got '" + printable(s) + "'");
    std::string key = trim(s.substr(0, eq));
    if (key.empty()) throw UsageError(where + "missing option name before '='");
    keys.push_back({line, prefix + key, trim(s.substr(eq + 1))});
  }
  return keys;
}

// "path:line" of the nth (1-based) occurrence of key, or just the path if there is none.
std::string config_location(const std::string& path, const std::vector<ConfigKey>& keys,
                            const std::string& key, int nth = 1) {
  for (const ConfigKey& k : keys)
    if (k.key == key && --nth == 0) return path + ":" + std::to_string(k.line);
  return path;
}

std::string read_config(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw UsageError("cannot read config file '" + path + "': it is a directory");
  // A FIFO would block the read below until a writer came.
  if (std::filesystem::exists(path, ec) && !std::filesystem::is_regular_file(path, ec))
    throw UsageError("cannot read config file '" + path + "': not a regular file");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw UsageError("cannot open config file '" + path + "': " + std::strerror(errno));
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) throw UsageError("cannot read config file '" + path + "'");
  // A UTF-8 byte-order mark (Windows editors write one) is not part of the first key.
  std::string s = text.str();
  if (s.compare(0, 3, "\xEF\xBB\xBF") == 0) s.erase(0, 3);
  return s;
}

// Stores the config file's values into vm after the command line's: program_options keeps the
// first value stored for an option, so the command line wins, while a value from the file still
// replaces a default.
void store_config(const std::string& path, const po::options_description& file_options,
                  const std::set<std::string>& other_commands_options, po::variables_map& vm) {
  std::string text = read_config(path);
  std::vector<ConfigKey> keys = scan_config(path, text);
  // One preset serves several subcommands (train reads [train], info only [model]): a key that
  // another subcommand takes is skipped; a key no subcommand takes is a typo.
  // Options that give one thing in different units: one of them on the command line replaces the
  // file's value of the others too (`--steps 500` over a preset's epochs).
  static const std::vector<std::set<std::string>> alternatives = {{"epochs", "steps"}};
  auto replaced = [&](const std::string& key) {
    for (const std::set<std::string>& group : alternatives)
      if (group.count(key))
        for (const std::string& other : group)
          if (other != key && option_given(vm, other)) return true;
    return false;
  };
  std::ostringstream flat;
  for (const ConfigKey& k : keys) {
    if (replaced(k.key)) continue;
    if (file_options.find_nothrow(k.key, false)) {
      flat << k.key << " = " << k.value << "\n";
    } else if (!other_commands_options.count(k.key)) {
      throw UsageError(path + ":" + std::to_string(k.line) + ": unknown option '" +
                       printable(k.key) + "'");
    }
  }
  std::istringstream in(flat.str());
  po::parsed_options parsed = po::parse_config_file(in, file_options, false);
  try {
    po::store(parsed, vm);
  } catch (const po::multiple_occurrences& e) {
    // The line at fault is the repeat, not the first assignment.
    throw UsageError(config_location(path, keys, e.get_option_name(), 2) + ": " + po_message(e));
  } catch (const po::error_with_option_name& e) {
    throw UsageError(config_location(path, keys, e.get_option_name()) + ": " + po_message(e));
  } catch (const po::error& e) {
    throw UsageError(path + ": " + po_message(e));
  }
}

// ---- Dispatch ---------------------------------------------------------------------------------

// Every option name any subcommand declares (what a shared config file may hold).
std::set<std::string> all_option_names(const Registry& registry) {
  std::set<std::string> names{"threads"};
  for (const Subcommand& c : registry.all()) {
    po::options_description d;
    if (c.add_options) c.add_options(d);
    for (const auto& o : d.options()) names.insert(o->long_name());
  }
  return names;
}

int run_command(const Registry& registry, const Subcommand& cmd,
                const std::vector<std::string>& args) {
  po::options_description own("Options for '" + cmd.name + "'");
  if (cmd.add_options) cmd.add_options(own);

  // --threads is shared between the command line and the config file; --help and --config only
  // make sense on the command line.
  auto threads = boost::make_shared<po::option_description>(
      "threads", po::value<int>()->value_name("N"),
      "number of OpenMP threads (default: OMP_NUM_THREADS, else one per core)");
  po::options_description common("Common options");
  common.add_options()("help,h", "show this help and exit");
  common.add(threads);
  common.add_options()("config", po::value<std::string>()->value_name("FILE"),
                       "read options from this INI file; options given on the command line "
                       "override it");

  po::options_description cmdline_options;
  cmdline_options.add(own).add(common);
  po::options_description file_options;
  file_options.add(own);
  file_options.add(threads);
  po::positional_options_description positional;
  if (cmd.add_positional) cmd.add_positional(positional);

  const std::string see_help = " (see 'vitk " + cmd.name + " --help')";
  po::variables_map vm;
  try {
    const po::parsed_options parsed = parse_command_line(args, cmdline_options, positional);
    given_on_command_line_names().clear();
    for (const po::option& o : parsed.options)
      if (o.position_key < 0) given_on_command_line_names().insert(o.string_key);
    po::store(parsed, vm);
  } catch (const po::unknown_option& e) {
    throw UsageError("unknown option '" + e.get_option_name() + "'" + see_help);
  } catch (const po::too_many_positional_options_error&) {
    // Boost's message does not say which word was extra, nor that none is accepted at all.
    throw UsageError(positional.max_total_count() == 0
                         ? "'vitk " + cmd.name + "' takes no arguments, only options" + see_help
                         : "too many arguments" + see_help);
  } catch (const po::error& e) {
    throw UsageError(po_message(e) + see_help);
  }

  // Help needs neither the config file nor the required options, so it is answered first.
  if (vm.count("help")) {
    print_command_help(cmd, own, common, std::cout);
    return kExitOk;
  }
  if (vm.count("config"))
    store_config(vm["config"].as<std::string>(), file_options, all_option_names(registry), vm);
  try {
    po::notify(vm);
  } catch (const po::error& e) {
    throw UsageError(po_message(e) + see_help);
  }

  if (vm.count("threads")) {
    int n = vm["threads"].as<int>();
    if (n < 1) throw UsageError("--threads must be at least 1, got " + std::to_string(n));
    // More threads than cores only makes them wait for each other.
    const int cores = available_cores();
    if (n > cores) {
      if (dist::world().root())
        std::cerr << "vitk: warning: --threads " << n << " is more than the " << cores << " core"
                  << (cores == 1 ? "" : "s") << " this process can use; using " << cores
                  << std::endl;
      n = cores;
    }
    ops::set_num_threads(n);
  }
  ops::apply_isa_cap();  // a wrong VITK_MAX_ISA is reported before the command starts
  return cmd.run(vm);
}

int dispatch(const Registry& registry, const std::vector<std::string>& args) {
  if (args.empty()) {
    print_tool_help(registry, std::cerr);
    return kExitUsage;
  }
  const std::string& first = args[0];
  if (first == "-h" || first == "--help") {
    print_tool_help(registry, std::cout);
    return kExitOk;
  }
  if (first == "--version") {
    std::cout << version_line() << "\n";
    return kExitOk;
  }
  if (!first.empty() && first[0] == '-')
    throw UsageError("unknown option '" + first +
                     "'; options go after the subcommand: vitk <subcommand> [options] (see "
                     "'vitk --help')");
  const Subcommand* cmd = registry.find(first);
  if (!cmd) {
    std::string suggestion = registry.closest(first);
    throw UsageError("unknown subcommand '" + first + "'" +
                     (suggestion.empty() ? "" : "; did you mean '" + suggestion + "'?") +
                     " (see 'vitk --help')");
  }
  return run_command(registry, *cmd, std::vector<std::string>(args.begin() + 1, args.end()));
}

// Under MPI every rank that fails says so, naming itself: a job's log interleaves the ranks.
void report_error(const char* what) {
  const dist::World& world = dist::world();
  std::cerr << "vitk: error: "
            << (world.size() > 1 ? "rank " + std::to_string(world.rank()) + ": " : std::string())
            << printable(what) << std::endl;
}

template <typename T>
bool print_if(std::ostream& os, const boost::any& v) {
  const T* p = boost::any_cast<T>(&v);
  if (!p) return false;
  if constexpr (std::is_same_v<T, bool>) {
    os << (*p ? "true" : "false");
  } else if constexpr (std::is_same_v<T, std::string>) {
    os << *p;
  } else if constexpr (std::is_arithmetic_v<T>) {
    os << *p;
  } else {
    for (size_t i = 0; i < p->size(); ++i) os << (i ? " " : "") << (*p)[i];
  }
  return true;
}

// Tries each type in turn; true when the value held one of them.
template <typename... Ts>
bool print_as(std::ostream& os, const boost::any& v) {
  return (print_if<Ts>(os, v) || ...);
}

// ---- vitk env ---------------------------------------------------------------------------------

// How the process was started and, under MPI, every rank's host and OpenMP threads (gathered by
// every rank, printed by rank 0).
std::string world_line() {
  const dist::World& world = dist::world();
  std::string line = world.launch();
  if (!world.mpi()) return line;
  const std::vector<std::string> ranks =
      world.allgather(std::to_string(ops::num_threads()) + " " + world.host());
  line += "; ranks:";
  for (size_t r = 0; r < ranks.size(); ++r) {
    const size_t space = ranks[r].find(' ');
    const std::string threads = ranks[r].substr(0, space);
    line += std::string(r ? "," : "") + " " + std::to_string(r) + " on " +
            ranks[r].substr(space + 1) + " with " + threads +
            (threads == "1" ? " thread" : " threads");
  }
  return line;
}

int run_env(const po::variables_map& vm) {
  const std::string world = world_line();
  // Under MPI only rank 0 prints, so `mpirun -np N vitk env` reports the world once.
  if (!dist::world().root()) return kExitOk;
  std::cout << version_line() << "\n"
            << "threads: " << ops::num_threads() << "\n"
            << "cpu isa: " << ops::cpu_isa() << "\n"
            << "kernels: " << ops::kernel_isa_name(ops::kernel_isa())
            << " (built for baseline, avx2 and avx512)\n"
            << "VITK_MAX_ISA: "
            << (ops::max_isa_setting().empty() ? "unset" : ops::max_isa_setting()) << "\n"
            << "bf16: " << (ops::bf16_supported() ? "yes" : "no") << "\n"
            << "int8: "
            << (ops::vnni_supported() ? "VNNI (8-bit activations)" : "no VNNI (7-bit activations)")
            << "\n"
            << "world: " << world << "\n"
            << "options:\n";
  for (const auto& [key, value] : vm)
    std::cout << "  " << key << " = " << format_value(value)
              << (value.defaulted() ? " (default)" : "") << "\n";
  return kExitOk;
}

}  // namespace

// ---- Registry ---------------------------------------------------------------------------------

void Registry::add(Subcommand cmd) {
  if (cmd.name.empty() || cmd.name[0] == '-')
    throw std::logic_error("vitk: invalid subcommand name '" + cmd.name + "'");
  if (find(cmd.name))
    throw std::logic_error("vitk: subcommand '" + cmd.name + "' registered twice");
  if (!cmd.run) throw std::logic_error("vitk: subcommand '" + cmd.name + "' has no run function");
  commands_.push_back(std::move(cmd));
}

const Subcommand* Registry::find(const std::string& name) const {
  for (const Subcommand& c : commands_)
    if (c.name == name) return &c;
  return nullptr;
}

std::string Registry::closest(const std::string& name) const {
  std::string best;
  size_t best_distance = SIZE_MAX;
  for (const Subcommand& c : commands_) {
    size_t d = edit_distance(lower(name), lower(c.name));
    if (d < best_distance) best = c.name, best_distance = d;
  }
  // Beyond this the "suggestion" is just the only command there is, which misleads more than it
  // helps.
  size_t limit = std::max<size_t>(2, name.size() / 3);
  return best_distance <= limit ? best : "";
}

// ---- Public helpers ---------------------------------------------------------------------------

std::string version_line() {
  std::string line = std::string("vitk ") + VITK_VERSION + " (" + build_type();
#if defined(__SANITIZE_ADDRESS__)
  line += ", AddressSanitizer";
#endif
#if defined(__clang__)
  line += ", clang " __clang_version__;
#elif defined(__GNUC__)
  line += ", gcc " __VERSION__;
#endif
  return line + ")";
}

std::string format_value(const po::variable_value& value) {
  if (value.empty()) return "";
  std::ostringstream os;
  if (!print_as<std::string, bool, int, unsigned, long, unsigned long, long long,
                unsigned long long, float, double, std::vector<std::string>, std::vector<int>,
                std::vector<double>>(os, value.value()))
    os << "<" << value.value().type().name() << ">";
  return os.str();
}

po::typed_value<bool>* switch_value(std::optional<bool> by_default) {
  return new SwitchValue(by_default);
}

bool is_switch(const po::option_description& option) {
  return dynamic_cast<const SwitchValue*>(option.semantic().get()) != nullptr;
}

po::parsed_options parse_command_line(const std::vector<std::string>& args,
                                      const po::options_description& options,
                                      const po::positional_options_description& positional) {
  // Guessing is off so that `--thread` does not silently mean `--threads`, and so that adding
  // an option later cannot make an abbreviation in someone's script ambiguous.
  const int style = po::command_line_style::default_style & ~po::command_line_style::allow_guessing;
  return po::command_line_parser(expand_switches(args, options))
      .options(options)
      .positional(positional)
      .style(style)
      .run();
}

namespace detail {
std::string range_message(long long lo, long long hi, const std::string& value) {
  return "%canonical_option% must be in " + std::to_string(lo) + ".." + std::to_string(hi) +
         ", got " + value;
}
}  // namespace detail

void check_in_range(const std::string& option, long long value, long long lo, long long hi) {
  if (value < lo || value > hi)
    throw UsageError(option + " must be in " + std::to_string(lo) + ".." + std::to_string(hi) +
                     ", got " + std::to_string(value));
}

bool option_given(const po::variables_map& vm, const std::string& name) {
  return vm.count(name) && !vm[name].defaulted();
}

bool given_on_command_line(const po::variables_map& vm, const std::string& name) {
  return option_given(vm, name) && given_on_command_line_names().count(name);
}

void check_input_file(const std::string& option, const std::string& path) {
  std::error_code ec;
  if (path != "-" && std::filesystem::is_directory(path, ec))
    throw Error(option + " " + path + ": is a directory, expected a file");
}

void write_output_text(const std::string& path, const std::string& text) {
  if (path == "-") {
    std::cout << text << std::flush;
    if (!std::cout) throw Error("cannot write to standard output");
    return;
  }
  io::write_file_atomic(path, text);
}

void refuse_output_over_input(const std::string& out, const std::vector<std::string>& inputs,
                              const std::string& what) {
  for (const std::string& input : inputs) {
    std::error_code ec;
    if (std::filesystem::equivalent(input, out, ec))
      throw UsageError("--out " + out + " is " + what +
                       (inputs.size() > 1 ? " (" + input + ")" : std::string()) +
                       "; name a new file");
  }
}

std::string printable(const std::string& text) {
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (text.compare(i, 3, "\xEF\xBB\xBF") == 0) {
      out += "\\uFEFF";
      i += 2;
    } else if ((c < 0x20 && c != '\n' && c != '\t') || c == 0x7f) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "\\x%02X", c);
      out += hex;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

void add_precision_option(po::options_description& o, bool training) {
  std::string help =
      "type of the matrix products: f32, or bf16 (weights and activations rounded to bf16 for the "
      "products, f32 accumulation; layer norms, softmax, GELU and losses in f32; needs a CPU with "
      "AVX512_BF16)";
  help += training ? "; bf16 training keeps f32 master weights, gradients and optimizer state, so "
                     "checkpoints are the same"
                   : ", or int8 (the linear layers on int8 weights, one scale per output "
                     "channel, and activations quantised per row; the rest as bf16 where the CPU "
                     "has it, else f32)";
  o.add_options()("precision",
                  po::value<std::string>()->default_value("f32")->value_name(
                      training ? "f32|bf16" : "f32|bf16|int8"),
                  help.c_str());
}

ops::Precision precision_from(const po::variables_map& vm, bool training) {
  const ops::Precision p = ops::parse_precision(vm["precision"].as<std::string>());
  if (training && p == ops::Precision::int8)
    throw UsageError(
        "--precision int8 is for inference (classify, eval, translate); train in f32 or bf16");
  ops::require_precision(p, "--precision");
  return p;
}

ops::Precision precision_from(const po::variables_map& vm, const std::string& checkpoint) {
  precision_from(vm);
  return api::resolve_precision(
      vm["precision"].defaulted() ? "" : vm["precision"].as<std::string>(), checkpoint);
}

int run_cli(const Registry& registry, int argc, const char* const* argv) {
  int code = kExitFailure;
  try {
    code = dispatch(registry, std::vector<std::string>(argv + std::min(argc, 1), argv + argc));
  } catch (const UsageError& e) {
    report_error(e.what());
    return kExitUsage;
  } catch (const po::error& e) {
    // A subcommand that parses more options itself fails the same way as the dispatcher.
    report_error(po_message(e).c_str());
    return kExitUsage;
  } catch (const std::exception& e) {
    // vitk::Error and everything else: the run started and something in the data or files failed.
    report_error(e.what());
    return kExitFailure;
  } catch (...) {
    report_error("unknown exception");
    return kExitFailure;
  }
  // Output lost to a full disk or a closed pipe must not look like success.
  std::cout.flush();
  if (!std::cout) {
    report_error("cannot write to standard output");
    return kExitFailure;
  }
  return code;
}

void register_env_commands(Registry& registry) {
  Subcommand env;
  env.name = "env";
  env.summary =
      "print the version, thread count, CPU ISA, bf16 support, the MPI world and the options given";
  env.example =
      "vitk env --threads 4\n"
      "vitk env --config configs/run.ini --seed 7   # --seed overrides the file\n"
      "mpirun -np 2 vitk env                        # the world: every rank's host and threads";
  env.add_options = [](po::options_description& o) {
    o.add_options()("seed", po::value<int>()->value_name("INT")->default_value(0),
                    "a random seed, echoed back (to check config files)")(
        "name", po::value<std::string>()->value_name("STR"),
        "a name, echoed back (to check config files)");
  };
  env.run = run_env;
  registry.add(std::move(env));
}

}  // namespace vitk::tools
