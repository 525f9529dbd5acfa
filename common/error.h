#pragma once
// Errors the vitk command turns into exit codes: Error -> 1 (bad file, bad data), UsageError -> 2.
// Both are a vitk::Exception, the one type the public API (<vitk/vitk.h>) throws; this header is
// installed with it as <vitk/error.h>, so it includes nothing of vitk's.
#include <stdexcept>
#include <string>

namespace vitk {

// Every error vitk reports; what() is the message the command prints after "vitk: error: ".
class __attribute__((visibility("default"))) Exception : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A run-time failure: a file that cannot be read, data that is wrong, a shape that does not fit.
// The message names the file, tensor or option at fault.
class __attribute__((visibility("default"))) Error : public Exception {
 public:
  using Exception::Exception;
};

// A mistake in how the tool was called: unknown option, bad value, typo in a config file.
class __attribute__((visibility("default"))) UsageError : public Exception {
 public:
  using Exception::Exception;
};

}  // namespace vitk
