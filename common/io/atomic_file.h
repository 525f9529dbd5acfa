#pragma once
// Every file vitk writes (checkpoints, PNGs, metrics.csv, translations, tokenizer models) is
// written whole or not at all, here: the bytes go to a temporary file beside the target, which is
// written, fsync'ed and renamed over the target (rename is atomic within a file system), and then
// the directory is fsync'ed so that the rename itself survives a power cut. A crash, a kill -9 or
// a full disk leaves the previous file (or no file) and at worst a stray temporary
// (TARGET.tmp-PID-N), never half a file; on an error the temporary is removed, and a training run
// removes those a killed save left in its directory (remove_stale_temporaries).
//
// A target that exists and is not a regular file (/dev/null, a named pipe) is written in place
// instead, unless the caller refuses that: renaming over it would replace the device or the pipe
// with a plain file.
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace vitk::io {

// True when `path` names something that exists (after following symbolic links) and is not a
// regular file: a character or block device, a FIFO, a socket or a directory.
bool is_special_output(const std::string& path);

enum class SpecialTarget {
  write_in_place,  // --out /dev/null discards a picture; a pipe receives it
  refuse,          // e.g. a checkpoint: a pipe without a reader would block a training run
};

// Replaces `path` with `size` bytes as described above. Throws vitk::Error naming `path` (and the
// temporary file, when the failure is about it) when `path` is a directory, a refused special
// target, or cannot be written.
void write_file_atomic(const std::string& path, const void* data, size_t size,
                       SpecialTarget special = SpecialTarget::write_in_place);
inline void write_file_atomic(const std::string& path, std::string_view bytes,
                              SpecialTarget special = SpecialTarget::write_in_place) {
  write_file_atomic(path, bytes.data(), bytes.size(), special);
}

// Removes the temporaries (NAME.tmp-PID-N) that a killed writer left in `dir`: those whose PID is
// not a live process, or is this process's own when `own_are_stale` (a run starting, before it has
// written anything). A temporary of another live process is kept: it may be writing it now.
// Returns the names removed. Quiet about files it cannot remove (they are only clutter).
std::vector<std::string> remove_stale_temporaries(const std::string& dir, bool own_are_stale);

}  // namespace vitk::io
