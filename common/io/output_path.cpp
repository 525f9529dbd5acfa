#include "common/io/output_path.h"

#include <sys/stat.h>

namespace vitk::io {

bool is_special_output(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return false;  // absent (or unreachable): a new file
  return !S_ISREG(st.st_mode);
}

}  // namespace vitk::io
