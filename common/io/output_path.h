#pragma once
// Output files written whole or not at all: the bytes go to a temporary file beside the target,
// are flushed to disk, and the file is renamed over the target (rename is atomic within a file
// system), so a failure never leaves half a file. A target that exists and is not a regular file
// (/dev/null, a named pipe) is written in place instead: renaming over it would replace the
// device or the pipe with a plain file.
#include <cstddef>
#include <string>

namespace vitk::io {

// True when `path` names something that exists (after following symbolic links) and is not a
// regular file: a character or block device, a FIFO, a socket or a directory.
bool is_special_output(const std::string& path);

// Writes `size` bytes to `path` as described above. Throws vitk::Error naming `path` (and the
// temporary file) when it is a directory or cannot be written; the temporary file is removed.
void write_file_whole(const std::string& path, const void* data, size_t size);

}  // namespace vitk::io
