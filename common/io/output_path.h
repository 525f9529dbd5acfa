#pragma once
// Outputs are written to a temporary file beside the target and renamed over it, so a failure
// never leaves half a file. That is wrong for a target that exists and is not a regular file:
// renaming over /dev/null or a named pipe would replace the device or the pipe with a plain file.
#include <string>

namespace vitk::io {

// True when `path` names something that exists (after following symbolic links) and is not a
// regular file: a character or block device, a FIFO or a socket. Directories count as well, so
// that callers can report them instead of failing on the rename.
bool is_special_output(const std::string& path);

}  // namespace vitk::io
