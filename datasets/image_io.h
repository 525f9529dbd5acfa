#pragma once
// Reading image files without ever crashing or hanging on bad ones: every failure is a one-line
// reason the caller prints next to the path.
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include <opencv2/core.hpp>

namespace vitk::datasets {

struct DecodeOptions {
  // Images with more pixels than this are refused before decoding (from the header's size).
  int64_t max_pixels = 178'956'970;  // Pillow's default decompression-bomb limit
  // The option that sets max_pixels, named in the refusal ("exceeds --max-pixels 1000"); empty
  // for a command without one ("exceeds the limit of 178956970 pixels").
  std::string max_pixels_option;
  // libpng, libjpeg and OpenCV print their warnings and errors straight to the process's stderr
  // ("libpng error: ...", "Corrupt JPEG data: ..."). When set, fd 2 is redirected while the codec
  // runs, its words only feed the reason of a failure, and decoding is serialised on
  // codec_output_mutex(). For tools that decode on one thread (vitk classify); the loader's
  // parallel decoding leaves it off.
  bool quiet = false;
};

// Decodes one file as OpenCV's IMREAD_UNCHANGED would (8- or 16-bit, 1-4 channels, BGR order;
// palette images expanded, CMYK JPEGs converted), then applies the EXIF orientation of JPEG and
// PNG files as a viewer shows them (OpenCV's IMREAD_UNCHANGED does not). Returns false and sets
// error ("file not found", "is a directory, not an image", "empty file", "not an image
// (unrecognised format)", "unsupported image format (GIF)", "truncated PNG (no IEND chunk)",
// "image of 30000x30000 pixels exceeds the limit of 178956970 pixels", ...) on failure; never
// throws for bad data. Only regular files are read (a FIFO or a device would block or never end).
bool decode_image_file(const std::string& path, cv::Mat& image, std::string& error,
                       const DecodeOptions& options = {});

// The same for a file's bytes already in memory.
bool decode_image(const std::vector<uint8_t>& bytes, cv::Mat& image, std::string& error,
                  const DecodeOptions& options = {});

// What a file's header says, read without decoding anything.
struct ImageHeader {
  std::string format;             // "PNG", "JPEG", "BMP", "TIFF", "WebP", "PNM"
  int64_t width = 0, height = 0;  // as stored, before the orientation
  int orientation = 1;            // EXIF orientation 1..8 (1: as stored)
};

// Identifies the format by its signature and reads the image size from the header: PNG IHDR,
// JPEG SOFn, BMP, TIFF IFD0, WebP VP8/VP8L/VP8X, PNM/PAM. PNG and JPEG files are walked to their
// end (chunk by chunk, marker by marker; critical PNG chunks' CRCs checked), because their
// codecs accept some truncated files silently; BMP, WebP and binary PNM sizes are checked
// against the header. Returns false with a reason for anything else.
bool read_image_header(const uint8_t* data, size_t size, ImageHeader& header, std::string& error);

// Held by decode_image while fd 2 is redirected (DecodeOptions::quiet). A thread that writes to
// stderr while another decodes quietly takes it too, or its line could be swallowed.
std::mutex& codec_output_mutex();

}  // namespace vitk::datasets
