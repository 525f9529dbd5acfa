#pragma once
// Errors the vitk command turns into exit codes: Error -> 1 (bad file, bad data), UsageError -> 2.
#include <stdexcept>
#include <string>

namespace vitk {

// A run-time failure: a file that cannot be read, data that is wrong, a shape that does not fit.
// The message names the file, tensor or option at fault.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A mistake in how the tool was called: unknown option, bad value, typo in a config file.
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace vitk
