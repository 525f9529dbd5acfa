// Image headers read by hand, so that a file's size is known before any codec allocates for it
// (a 100000x100000 PNG of a few kilobytes must be refused, not decoded), and so that truncated
// PNG and JPEG files, which their codecs sometimes accept silently, are caught with a reason.
#include <zlib.h>

#include <cctype>
#include <cstring>
#include <string_view>

#include "datasets/image_io.h"

namespace vitk::datasets {
namespace {

using namespace std::string_view_literals;

uint32_t be16(const uint8_t* p) {
  return uint32_t(p[0]) << 8 | p[1];
}
uint32_t be32(const uint8_t* p) {
  return be16(p) << 16 | be16(p + 2);
}
uint32_t le16(const uint8_t* p) {
  return uint32_t(p[1]) << 8 | p[0];
}
uint32_t le32(const uint8_t* p) {
  return le16(p + 2) << 16 | le16(p);
}
uint64_t le64(const uint8_t* p) {
  return uint64_t(le32(p + 4)) << 32 | le32(p);
}
uint64_t be64(const uint8_t* p) {
  return uint64_t(be32(p)) << 32 | be32(p + 4);
}

// magic is a string_view so that signatures may hold NUL bytes ("\0\0\0\x0CjP  "sv).
bool starts_with(const uint8_t* data, size_t size, std::string_view magic, size_t offset = 0) {
  return size >= offset + magic.size() &&
         std::memcmp(data + offset, magic.data(), magic.size()) == 0;
}

// Sets error and returns false, so that every check is one line.
bool fail(std::string& error, std::string reason) {
  error = std::move(reason);
  return false;
}

// ---- EXIF (a TIFF structure inside JPEG APP1 or PNG eXIf) -------------------------------------

// The Orientation tag (0x0112) of IFD0, or 1 when it is absent or the block is malformed: a bad
// EXIF block never makes a good image fail.
int exif_orientation(const uint8_t* p, size_t n) {
  if (n < 8) return 1;
  bool little = p[0] == 'I' && p[1] == 'I';
  if (!little && !(p[0] == 'M' && p[1] == 'M')) return 1;
  auto u16 = [&](size_t at) { return little ? le16(p + at) : be16(p + at); };
  auto u32 = [&](size_t at) { return little ? le32(p + at) : be32(p + at); };
  if (u16(2) != 42) return 1;
  size_t ifd = u32(4);
  if (ifd > n || n - ifd < 2) return 1;
  size_t entries = u16(ifd);
  for (size_t i = 0; i < entries; ++i) {
    size_t e = ifd + 2 + 12 * i;
    if (e > n || n - e < 12) return 1;
    if (u16(e) == 0x0112 && u16(e + 2) == 3) {  // SHORT
      int v = static_cast<int>(u16(e + 8));
      return v >= 1 && v <= 8 ? v : 1;
    }
  }
  return 1;
}

// ---- PNG ----------------------------------------------------------------------------------------

bool png_header(const uint8_t* d, size_t n, ImageHeader& h, std::string& error) {
  size_t pos = 8;
  bool seen_idat = false;
  for (int index = 0;; ++index) {
    if (n - pos < 12) {
      return fail(error,
                  index == 0 ? "truncated PNG (no IHDR chunk)" : "truncated PNG (no IEND chunk)");
    }
    const uint32_t length = be32(d + pos);
    const uint8_t* type = d + pos + 4;
    const std::string name(reinterpret_cast<const char*>(type), 4);
    for (int i = 0; i < 4; ++i)
      if (!std::isalpha(type[i])) return fail(error, "corrupt PNG (invalid chunk type)");
    if (length > 0x7fffffffu) return fail(error, "corrupt PNG (chunk length out of range)");
    if (n - pos - 12 < length) return fail(error, "truncated PNG (ends inside chunk " + name + ")");
    const uint8_t* data = type + 4;
    if (index == 0) {
      if (name != "IHDR" || length != 13) return fail(error, "corrupt PNG (no IHDR chunk first)");
      h.width = be32(data);
      h.height = be32(data + 4);
      // The PNG specification's range, which libpng enforces too.
      if (h.width == 0 || h.height == 0 || h.width > 0x7fffffff || h.height > 0x7fffffff)
        return fail(error, "corrupt PNG (image size out of range)");
    }
    // libpng rejects a critical chunk with a bad CRC and drops an ancillary one with a warning.
    const bool critical = std::isupper(type[0]);
    if (critical) {
      uLong crc = crc32(0L, type, static_cast<uInt>(length + 4));
      if (crc != be32(data + length))
        return fail(error, "corrupt PNG (CRC error in chunk " + name + ")");
    }
    if (name == "IDAT") seen_idat = true;
    if (name == "eXIf") h.orientation = exif_orientation(data, length);
    pos += 12 + length;
    if (name == "IEND") break;
  }
  if (!seen_idat) return fail(error, "corrupt PNG (no image data)");
  return true;
}

// ---- JPEG ---------------------------------------------------------------------------------------

bool is_sof(uint8_t m) {
  return m >= 0xC0 && m <= 0xCF && m != 0xC4 && m != 0xC8 && m != 0xCC;
}

constexpr int kMaxJpegScans = 1000;

bool jpeg_header(const uint8_t* d, size_t n, ImageHeader& h, std::string& error) {
  size_t pos = 2;
  bool frame = false, orientation_read = false;
  int scans = 0;
  for (;;) {
    // libjpeg skips stray bytes before a marker (with a warning); so do we.
    while (pos < n && d[pos] != 0xFF) ++pos;
    while (pos < n && d[pos] == 0xFF) ++pos;
    if (pos >= n) {
      return fail(error, scans ? "truncated JPEG (no end-of-image marker)"
                               : "truncated JPEG (no image data)");
    }
    const uint8_t m = d[pos++];
    if (m == 0xD9) break;  // EOI; anything after it is ignored, as decoders do
    if (m == 0x01 || (m >= 0xD0 && m <= 0xD7)) continue;  // markers without a length
    if (m == 0xD8 || m == 0x00) return fail(error, "corrupt JPEG (unexpected marker)");
    if (n - pos < 2) return fail(error, "truncated JPEG (ends inside a header)");
    const size_t length = be16(d + pos);
    if (length < 2) return fail(error, "corrupt JPEG (segment length out of range)");
    if (n - pos < length) return fail(error, "truncated JPEG (ends inside a header)");
    const uint8_t* seg = d + pos + 2;
    const size_t seg_size = length - 2;
    if (is_sof(m) && !frame) {
      if (seg_size < 6) return fail(error, "corrupt JPEG (short frame header)");
      h.height = be16(seg + 1);
      h.width = be16(seg + 3);
      const int components = seg[5];
      if (h.height == 0)
        return fail(error, "unsupported JPEG (height given after the image data, in a DNL marker)");
      if (h.width == 0) return fail(error, "corrupt JPEG (image width 0)");
      if (components != 1 && components != 3 && components != 4)
        return fail(error, "unsupported JPEG (" + std::to_string(components) + " components)");
      frame = true;
    } else if (m == 0xE1 && !orientation_read && seg_size > 6 &&
               std::memcmp(seg, "Exif\0\0", 6) == 0) {
      h.orientation = exif_orientation(seg + 6, seg_size - 6);
      orientation_read = true;
    }
    pos += length;
    if (m == 0xDA) {
      if (!frame) return fail(error, "corrupt JPEG (image data before the frame header)");
      // A progressive image has about ten scans; thousands of tiny ones make libjpeg spend
      // minutes on a small file (libjpeg-turbo's djpeg has -maxscans for this).
      if (++scans > kMaxJpegScans)
        return fail(error, "corrupt JPEG (more than " + std::to_string(kMaxJpegScans) + " scans)");
      // Entropy-coded data: it ends at the first 0xFF that is neither a stuffed 0xFF00 nor a
      // restart marker.
      for (;;) {
        const void* ff = pos < n ? std::memchr(d + pos, 0xFF, n - pos) : nullptr;
        if (!ff) return fail(error, "truncated JPEG (ends inside the image data)");
        pos = static_cast<size_t>(static_cast<const uint8_t*>(ff) - d);
        size_t next = pos + 1;
        while (next < n && d[next] == 0xFF) ++next;
        if (next >= n) return fail(error, "truncated JPEG (ends inside the image data)");
        if (d[next] == 0x00 || (d[next] >= 0xD0 && d[next] <= 0xD7)) {
          pos = next + 1;
          continue;
        }
        break;  // pos is at the next marker
      }
    }
  }
  if (!frame || scans == 0) return fail(error, "corrupt JPEG (no image data)");
  return true;
}

// ---- BMP, TIFF, WebP, PNM -------------------------------------------------------------------

bool bmp_header(const uint8_t* d, size_t n, ImageHeader& h, std::string& error) {
  if (n < 26) return fail(error, "truncated BMP (ends inside the header)");
  const uint32_t data_offset = le32(d + 10);
  const uint32_t dib = le32(d + 14);
  uint32_t bpp = 0, compression = 0;
  if (dib == 12) {  // OS/2 BITMAPCOREHEADER
    h.width = le16(d + 18);
    h.height = le16(d + 20);
    bpp = le16(d + 24);
  } else if (dib >= 16) {
    if (n < 34) return fail(error, "truncated BMP (ends inside the header)");
    h.width = static_cast<int32_t>(le32(d + 18));
    h.height = static_cast<int32_t>(le32(d + 22));
    if (h.height < 0) h.height = -h.height;  // top-down rows
    bpp = le16(d + 28);
    compression = dib >= 20 ? le32(d + 30) : 0;
  } else {
    return fail(error, "corrupt BMP (unknown header size " + std::to_string(dib) + ")");
  }
  if (h.width <= 0 || h.height <= 0) return fail(error, "corrupt BMP (image size 0 or negative)");
  // Uncompressed rows (BI_RGB, BI_BITFIELDS) have a known size.
  if ((compression == 0 || compression == 3) && bpp > 0 && bpp <= 32) {
    const uint64_t row = (uint64_t(bpp) * uint64_t(h.width) + 31) / 32 * 4;
    if (uint64_t(data_offset) + row * uint64_t(h.height) > n)
      return fail(error, "truncated BMP (shorter than its pixel rows)");
  }
  return true;
}

bool tiff_header(const uint8_t* d, size_t n, ImageHeader& h, std::string& error) {
  const bool little = d[0] == 'I';
  const bool big = (little ? le16(d + 2) : be16(d + 2)) == 43;  // BigTIFF
  auto u16 = [&](size_t at) { return little ? le16(d + at) : be16(d + at); };
  auto u32 = [&](size_t at) { return little ? le32(d + at) : be32(d + at); };
  auto u64 = [&](size_t at) { return little ? le64(d + at) : be64(d + at); };
  const size_t header = big ? 16 : 8;
  if (n < header) return fail(error, "truncated TIFF (ends inside the header)");
  const uint64_t ifd = big ? u64(8) : u32(4);
  const size_t count_size = big ? 8 : 2, entry_size = big ? 20 : 12;
  if (ifd >= n || n - ifd < count_size) return fail(error, "truncated TIFF (no image directory)");
  const uint64_t entries = big ? u64(ifd) : u16(ifd);
  for (uint64_t i = 0; i < entries; ++i) {
    const uint64_t e = ifd + count_size + entry_size * i;
    if (e >= n || n - e < entry_size) return fail(error, "truncated TIFF (in the image directory)");
    const uint32_t tag = u16(e), type = u16(e + 2);
    if (tag != 256 && tag != 257) continue;
    const size_t value = e + (big ? 12 : 8);
    // LONG8 (16) is BigTIFF's: a classic entry's value field holds 4 bytes, not its 8.
    uint64_t v = type == 3             ? u16(value)
                 : type == 4           ? u32(value)
                 : (type == 16 && big) ? u64(value)
                                       : 0;
    if (v == 0 || v > (uint64_t(1) << 31)) return fail(error, "corrupt TIFF (image size)");
    (tag == 256 ? h.width : h.height) = static_cast<int64_t>(v);
  }
  if (h.width <= 0 || h.height <= 0) return fail(error, "corrupt TIFF (no image size)");
  return true;
}

bool webp_header(const uint8_t* d, size_t n, ImageHeader& h, std::string& error) {
  if (n < 30) return fail(error, "truncated WebP (ends inside the header)");
  if (uint64_t(le32(d + 4)) + 8 > n)
    return fail(error, "truncated WebP (shorter than its RIFF size)");
  const uint8_t* chunk = d + 12;
  const uint8_t* p = chunk + 8;
  if (std::memcmp(chunk, "VP8 ", 4) == 0) {
    if (p[3] != 0x9d || p[4] != 0x01 || p[5] != 0x2a)
      return fail(error, "corrupt WebP (VP8 header)");
    h.width = le16(p + 6) & 0x3fff;
    h.height = le16(p + 8) & 0x3fff;
  } else if (std::memcmp(chunk, "VP8L", 4) == 0) {
    if (p[0] != 0x2f) return fail(error, "corrupt WebP (VP8L header)");
    const uint32_t bits = le32(p + 1);
    h.width = (bits & 0x3fff) + 1;
    h.height = ((bits >> 14) & 0x3fff) + 1;
  } else if (std::memcmp(chunk, "VP8X", 4) == 0) {
    h.width = (p[4] | p[5] << 8 | p[6] << 16) + 1;
    h.height = (p[7] | p[8] << 8 | p[9] << 16) + 1;
  } else {
    return fail(error, "corrupt WebP (unknown first chunk)");
  }
  if (h.width <= 0 || h.height <= 0) return fail(error, "corrupt WebP (image size 0)");
  return true;
}

// Netpbm: P1-P6 ("P6 640 480 255" with '#' comments), PAM P7 ("WIDTH 640" ... "ENDHDR").
bool pnm_header(const uint8_t* d, size_t n, ImageHeader& h, std::string& error) {
  const char kind = static_cast<char>(d[1]);
  size_t pos = 2;
  auto token = [&](std::string& out) {
    out.clear();
    for (;;) {
      while (pos < n && std::isspace(d[pos])) ++pos;
      if (pos < n && d[pos] == '#') {
        while (pos < n && d[pos] != '\n') ++pos;
        continue;
      }
      break;
    }
    while (pos < n && !std::isspace(d[pos]) && out.size() < 16) out += static_cast<char>(d[pos++]);
    return !out.empty();
  };
  auto number = [](const std::string& s, int64_t& v) {
    if (s.empty() || s.size() > 9 || s.find_first_not_of("0123456789") != std::string::npos)
      return false;
    v = std::stoll(s);
    return true;
  };
  int64_t maxval = 1, depth = 1;
  std::string t;
  if (kind == '7') {
    for (;;) {
      if (!token(t)) return fail(error, "truncated PAM (no ENDHDR)");
      if (t == "ENDHDR") break;
      std::string v;
      if (t == "TUPLTYPE") {
        token(v);
        continue;
      }
      int64_t* slot = t == "WIDTH"    ? &h.width
                      : t == "HEIGHT" ? &h.height
                      : t == "DEPTH"  ? &depth
                      : t == "MAXVAL" ? &maxval
                                      : nullptr;
      if (!slot || !token(v) || !number(v, *slot)) return fail(error, "corrupt PAM header");
    }
  } else {
    if (!token(t) || !number(t, h.width) || !token(t) || !number(t, h.height))
      return fail(error, "corrupt or truncated PNM header");
    if (kind != '1' && kind != '4' && (!token(t) || !number(t, maxval)))
      return fail(error, "corrupt or truncated PNM header");
  }
  if (h.width <= 0 || h.height <= 0 || maxval <= 0 || maxval > 65535 || depth <= 0 || depth > 4)
    return fail(error, "corrupt PNM header (size, depth or maximum value)");
  // Binary formats: one whitespace byte, then exactly this much data.
  if (kind >= '4' && kind <= '7') {
    const uint64_t bytes = maxval > 255 ? 2 : 1;
    const uint64_t w = uint64_t(h.width), rows = uint64_t(h.height);
    const uint64_t need = kind == '4'   ? (w + 7) / 8 * rows
                          : kind == '5' ? w * rows * bytes
                          : kind == '6' ? w * rows * 3 * bytes
                                        : w * rows * uint64_t(depth) * bytes;
    if (pos + 1 > n || n - pos - 1 < need)
      return fail(error, "truncated PNM (shorter than its pixel data)");
  }
  return true;
}

// Formats recognised only to be named in the error.
const char* unsupported_format(const uint8_t* d, size_t n) {
  if (starts_with(d, n, "GIF87a"sv) || starts_with(d, n, "GIF89a"sv)) return "GIF";
  if (starts_with(d, n, "\xFF\x4F\xFF\x51"sv) || starts_with(d, n, "\0\0\0\x0CjP  "sv))
    return "JPEG 2000";
  if (starts_with(d, n, "\x76\x2F\x31\x01"sv)) return "OpenEXR";
  if (starts_with(d, n, "#?RADIANCE"sv) || starts_with(d, n, "#?RGBE"sv)) return "Radiance HDR";
  if (starts_with(d, n, "PF\n"sv) || starts_with(d, n, "Pf\n"sv)) return "PFM";
  if (starts_with(d, n, "\x59\xA6\x6A\x95"sv)) return "Sun raster";
  if (starts_with(d, n, "8BPS"sv)) return "Photoshop PSD";
  if (starts_with(d, n, "DICM"sv, 128)) return "DICOM";
  if (starts_with(d, n, "ftyp"sv, 4)) {
    if (starts_with(d, n, "avif"sv, 8) || starts_with(d, n, "avis"sv, 8)) return "AVIF";
    if (starts_with(d, n, "heic"sv, 8) || starts_with(d, n, "heix"sv, 8) ||
        starts_with(d, n, "mif1"sv, 8) || starts_with(d, n, "msf1"sv, 8))
      return "HEIF";
  }
  if (starts_with(d, n, "RIFF"sv) && !starts_with(d, n, "WEBP"sv, 8)) return "RIFF (not WebP)";
  if (starts_with(d, n, "%PDF"sv)) return "PDF";
  return nullptr;
}

}  // namespace

bool read_image_header(const uint8_t* d, size_t n, ImageHeader& h, std::string& error) {
  h = ImageHeader{};
  bool ok = false;
  if (starts_with(d, n, "\x89PNG\r\n\x1a\n"sv)) {
    h.format = "PNG";
    ok = png_header(d, n, h, error);
  } else if (n >= 3 && d[0] == 0xFF && d[1] == 0xD8 && d[2] == 0xFF) {
    h.format = "JPEG";
    ok = jpeg_header(d, n, h, error);
  } else if (starts_with(d, n, "BM"sv)) {
    h.format = "BMP";
    ok = bmp_header(d, n, h, error);
  } else if (starts_with(d, n, "II*\0"sv) || starts_with(d, n, "MM\0*"sv) ||
             starts_with(d, n, "II+\0"sv) || starts_with(d, n, "MM\0+"sv)) {
    h.format = "TIFF";
    ok = tiff_header(d, n, h, error);
  } else if (starts_with(d, n, "RIFF"sv) && starts_with(d, n, "WEBP"sv, 8)) {
    h.format = "WebP";
    ok = webp_header(d, n, h, error);
  } else if (n >= 3 && d[0] == 'P' && d[1] >= '1' && d[1] <= '7' && std::isspace(d[2])) {
    h.format = "PNM";
    ok = pnm_header(d, n, h, error);
  } else if (const char* name = unsupported_format(d, n)) {
    return fail(error, std::string("unsupported image format (") + name +
                           "); vitk reads PNG, JPEG, BMP, TIFF, WebP and PNM");
  } else {
    return fail(error, "not an image (unrecognised format)");
  }
  return ok;
}

}  // namespace vitk::datasets
