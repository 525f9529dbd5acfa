#pragma once
// The one rule for every file vitk reads (checkpoints, safetensors, images, corpora, config, label
// and JSON files): only a regular file is opened. Opening a FIFO waits for a writer, forever if
// none comes, and a device may never end; both are refused before anything reads them.
#include <fstream>
#include <string>

namespace vitk::io {

// Opens path without blocking (O_NONBLOCK) and checks what it is. Returns a descriptor of a
// regular file (O_RDONLY, O_CLOEXEC; blocking reads again), or -1 with `error` saying why not:
// "file not found", "cannot open: <reason>", "is a directory, not <what>", "not a regular file
// (a device, FIFO or socket)".
int open_regular_file(const std::string& path, std::string& error, const std::string& what);

// The same check for a reader that opens the file itself: vitk::Error "PATH: <why>" unless path is
// a regular file that can be opened. what names the expected content ("a checkpoint").
void require_regular_file(const std::string& path, const std::string& what = "a file");

// The file open for binary reading, after require_regular_file.
std::ifstream open_input_file(const std::string& path, const std::string& what = "a file");

}  // namespace vitk::io
