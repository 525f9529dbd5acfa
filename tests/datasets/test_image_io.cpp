// decode_image_file: every kind of image decodes as it should, and every kind of bad file gives
// its own one-line reason without crashing, hanging or allocating for a decompression bomb.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <opencv2/imgcodecs.hpp>

#include "datasets/image_io.h"
#include "util/test_util.h"

namespace {

namespace fs = std::filesystem;
using vitk::datasets::decode_image_file;
using vitk::datasets::DecodeOptions;
using vitk::test::contains;

const std::string kFixtures = std::string(VITK_SOURCE_DIR) + "/tests/fixtures/images/";

using Bytes = std::vector<uint8_t>;

Bytes encode(const std::string& ext, const cv::Mat& image, const std::vector<int>& params = {}) {
  Bytes b;
  EXPECT_TRUE(cv::imencode(ext, image, b, params)) << ext;
  return b;
}

uint32_t crc32_of(const uint8_t* p, size_t n) {
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; ++i) {
    c ^= p[i];
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1u)));
  }
  return ~c;
}

void put_be32(uint8_t* p, uint32_t v) {
  p[0] = uint8_t(v >> 24), p[1] = uint8_t(v >> 16), p[2] = uint8_t(v >> 8), p[3] = uint8_t(v);
}

// A test image with some structure (so codecs cannot shrink it to nothing).
cv::Mat pattern(int rows, int cols, int type) {
  cv::Mat m(rows, cols, type);
  cv::randu(m, 0, CV_MAT_DEPTH(type) == CV_16U ? 65535 : 255);
  return m;
}

class ImageIo : public ::testing::Test {
 protected:
  std::string write(const std::string& name, const Bytes& bytes) {
    std::string p = (dir_ / name).string();
    std::ofstream(p, std::ios::binary)
        .write(reinterpret_cast<const char*>(bytes.data()),
               static_cast<std::streamsize>(bytes.size()));
    return p;
  }
  // Decodes and returns the reason ("" on success).
  std::string reason(const std::string& path, const DecodeOptions& options = {}) {
    std::string error;
    cv::Mat image;
    bool ok = decode_image_file(path, image, error, options);
    EXPECT_EQ(ok, error.empty()) << path;
    if (ok) {
      EXPECT_FALSE(image.empty());
    }
    return ok ? "" : error;
  }
  cv::Mat decode(const std::string& path) {
    std::string error;
    cv::Mat image;
    EXPECT_TRUE(decode_image_file(path, image, error)) << path << ": " << error;
    return image;
  }
  vitk::test::TempDir temp_{"vitk_image_io"};
  fs::path dir_ = temp_.path();
};

// ---- Good images ------------------------------------------------------------------------------

TEST_F(ImageIo, FormatsOpenCvWrites) {
  struct Case {
    const char* name;
    int type;
    int channels, depth;
    std::vector<int> params;
  };
  const std::vector<Case> cases = {
      {"rgb.png", CV_8UC3, 3, CV_8U, {}},
      {"rgba.png", CV_8UC4, 4, CV_8U, {}},
      {"gray.png", CV_8UC1, 1, CV_8U, {}},
      {"gray16.png", CV_16UC1, 1, CV_16U, {}},
      {"rgb16.png", CV_16UC3, 3, CV_16U, {}},
      {"rgba16.png", CV_16UC4, 4, CV_16U, {}},
      {"rgb.jpg", CV_8UC3, 3, CV_8U, {}},
      {"gray.jpg", CV_8UC1, 1, CV_8U, {}},
      {"progressive.jpg", CV_8UC3, 3, CV_8U, {cv::IMWRITE_JPEG_PROGRESSIVE, 1}},
      {"rgb.bmp", CV_8UC3, 3, CV_8U, {}},
      {"rgb.tif", CV_8UC3, 3, CV_8U, {}},
      {"rgb.webp", CV_8UC3, 3, CV_8U, {}},
      {"rgb.ppm", CV_8UC3, 3, CV_8U, {}},
      {"gray.pgm", CV_8UC1, 1, CV_8U, {}},
  };
  for (const Case& c : cases) {
    const std::string ext = fs::path(c.name).extension().string();
    const std::string path = write(c.name, encode(ext, pattern(13, 21, c.type), c.params));
    cv::Mat m = decode(path);
    EXPECT_EQ(m.cols, 21) << c.name;
    EXPECT_EQ(m.rows, 13) << c.name;
    EXPECT_EQ(m.channels(), c.channels) << c.name;
    EXPECT_EQ(m.depth(), c.depth) << c.name;
  }
}

TEST_F(ImageIo, CmykJpegIsConvertedToColour) {
  cv::Mat m = decode(kFixtures + "cmyk.jpg");  // 16 × 12, red left, blue right
  ASSERT_EQ(m.type(), CV_8UC3);
  cv::Vec3b left = m.at<cv::Vec3b>(6, 2), right = m.at<cv::Vec3b>(6, 13);  // BGR
  EXPECT_GT(left[2], 240);
  EXPECT_LT(left[0], 15);
  EXPECT_GT(right[0], 240);
  EXPECT_LT(right[2], 15);
}

TEST_F(ImageIo, PaletteGreyAlphaAndBilevelPngs) {
  cv::Mat pal = decode(kFixtures + "palette.png");
  ASSERT_EQ(pal.type(), CV_8UC3);
  EXPECT_EQ(pal.at<cv::Vec3b>(0, 0), cv::Vec3b(0, 0, 255));
  EXPECT_EQ(pal.at<cv::Vec3b>(0, 15), cv::Vec3b(255, 0, 0));

  cv::Mat alpha = decode(kFixtures + "palette_alpha.png");  // tRNS: red is transparent
  ASSERT_EQ(alpha.type(), CV_8UC4);
  EXPECT_EQ(alpha.at<cv::Vec4b>(0, 0)[3], 0);
  EXPECT_EQ(alpha.at<cv::Vec4b>(0, 15)[3], 255);

  cv::Mat la = decode(kFixtures + "gray_alpha.png");  // grey 100 at alpha 128
  ASSERT_EQ(la.channels(), 4);
  EXPECT_EQ(la.at<cv::Vec4b>(3, 3), cv::Vec4b(100, 100, 100, 128));

  cv::Mat bits = decode(kFixtures + "bilevel.png");  // top three rows white
  ASSERT_EQ(bits.type(), CV_8UC1);
  EXPECT_EQ(bits.at<uint8_t>(0, 0), 255);
  EXPECT_EQ(bits.at<uint8_t>(6, 8), 0);
}

TEST_F(ImageIo, ExifOrientationIsApplied) {
  // Stored 16 wide, 8 tall, red left; orientation 6 turns it to 8 wide, 16 tall, red on top.
  cv::Mat m = decode(kFixtures + "exif_rotate90.jpg");
  EXPECT_EQ(m.cols, 8);
  EXPECT_EQ(m.rows, 16);
  EXPECT_GT(m.at<cv::Vec3b>(2, 4)[2], 200);   // top: red
  EXPECT_GT(m.at<cv::Vec3b>(13, 4)[0], 200);  // bottom: blue
}

// ---- Bad files: one reason each
// --------------------------------------------------------------------

TEST_F(ImageIo, MissingDirectoryEmptyAndSpecialFiles) {
  EXPECT_EQ(reason((dir_ / "nope.png").string()), "file not found");
  EXPECT_EQ(reason((dir_ / "nope" / "deeper.png").string()), "file not found");
  EXPECT_EQ(reason(dir_.string()), "is a directory, not an image");
  EXPECT_EQ(reason(write("empty.png", {})), "empty file");
  EXPECT_TRUE(contains(reason("/dev/null"), "not a regular file")) << reason("/dev/null");
  // A FIFO with no writer: opening it must neither block nor wait for data.
  const std::string fifo = (dir_ / "pipe.jpg").string();
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_TRUE(contains(reason(fifo), "not a regular file"));
}

TEST_F(ImageIo, TextAndUnsupportedFormats) {
  const std::string text = "hello, this is not a picture\n";
  EXPECT_EQ(reason(write("text.jpg", Bytes(text.begin(), text.end()))),
            "not an image (unrecognised format)");
  EXPECT_TRUE(contains(reason(kFixtures + "unsupported.gif"), "unsupported image format (GIF)"));
  const std::string heic = std::string(
                               "\0\0\0\x18"
                               "ftypheic",
                               12) +
                           std::string(40, '\0');
  EXPECT_TRUE(contains(reason(write("photo.heic", Bytes(heic.begin(), heic.end()))), "(HEIF)"));
}

TEST_F(ImageIo, TruncatedJpegs) {
  const Bytes jpg = encode(".jpg", pattern(40, 50, CV_8UC3));
  const Bytes prog = encode(".jpg", pattern(40, 50, CV_8UC3), {cv::IMWRITE_JPEG_PROGRESSIVE, 1});
  // libjpeg decodes the first two silently (grey rows for the missing data) or not at all; both
  // are truncated files.
  EXPECT_EQ(reason(write("noeoi.jpg", Bytes(jpg.begin(), jpg.end() - 2))),
            "truncated JPEG (ends inside the image data)");
  EXPECT_EQ(reason(write("cut.jpg", Bytes(jpg.begin(), jpg.end() - 40))),
            "truncated JPEG (ends inside the image data)");
  EXPECT_EQ(reason(write("half.jpg", Bytes(jpg.begin(), jpg.begin() + jpg.size() / 2))),
            "truncated JPEG (ends inside the image data)");
  EXPECT_TRUE(
      contains(reason(write("prog.jpg", Bytes(prog.begin(), prog.begin() + prog.size() * 2 / 3))),
               "truncated JPEG"));
  EXPECT_TRUE(
      contains(reason(write("head.jpg", Bytes(jpg.begin(), jpg.begin() + 100))), "truncated JPEG"));
  EXPECT_TRUE(
      contains(reason(write("soi.jpg", Bytes(jpg.begin(), jpg.begin() + 3))), "truncated JPEG"));
}

TEST_F(ImageIo, JpegWithThousandsOfScansIsRefused) {
  // Thousands of tiny progressive scans make libjpeg spend minutes on a few kilobytes.
  Bytes j = {0xFF, 0xD8, 0xFF, 0xC0, 0, 11, 8, 0, 16, 0, 16, 1, 1, 0x11, 0};
  for (int i = 0; i < 1001; ++i) j.insert(j.end(), {0xFF, 0xDA, 0, 8, 1, 1, 0, 0, 0x3F, 0, 0x00});
  j.insert(j.end(), {0xFF, 0xD9});
  EXPECT_EQ(reason(write("scans.jpg", j)), "corrupt JPEG (more than 1000 scans)");
}

TEST_F(ImageIo, TruncatedAndCorruptPngs) {
  const Bytes png = encode(".png", pattern(40, 50, CV_8UC3));
  EXPECT_EQ(reason(write("noiend.png", Bytes(png.begin(), png.end() - 12))),
            "truncated PNG (no IEND chunk)");
  EXPECT_EQ(reason(write("cut.png", Bytes(png.begin(), png.begin() + png.size() / 2))),
            "truncated PNG (ends inside chunk IDAT)");
  EXPECT_EQ(reason(write("sig.png", Bytes(png.begin(), png.begin() + 8))),
            "truncated PNG (no IHDR chunk)");
  Bytes bad = png;
  bad[bad.size() / 2] ^= 0x55;  // inside IDAT
  EXPECT_EQ(reason(write("crc.png", bad)), "corrupt PNG (CRC error in chunk IDAT)");
}

TEST_F(ImageIo, OtherTruncatedFormats) {
  const cv::Mat img = pattern(40, 50, CV_8UC3);
  for (const char* ext : {".bmp", ".tif", ".webp", ".ppm"}) {
    const Bytes full = encode(ext, img);
    const std::string r = reason(
        write(std::string("cut") + ext, Bytes(full.begin(), full.begin() + full.size() / 2)));
    EXPECT_TRUE(contains(r, "truncated")) << ext << ": " << r;
  }
}

TEST_F(ImageIo, BombsAreRefusedFromTheHeader) {
  // A valid 50 × 40 PNG whose IHDR claims 100000 × 100000 (CRC fixed up): refused before any
  // codec sees it.
  Bytes png = encode(".png", pattern(40, 50, CV_8UC3));
  put_be32(&png[16], 100000);
  put_be32(&png[20], 100000);
  put_be32(&png[29], crc32_of(&png[12], 17));
  EXPECT_EQ(reason(write("bomb.png", png)),
            "image of 100000x100000 pixels exceeds the limit of 178956970 pixels");

  // JPEG: the frame header says 65535 × 65535.
  Bytes jpg = encode(".jpg", pattern(40, 50, CV_8UC3));
  size_t sof = 2;
  while (!(jpg[sof] == 0xFF && jpg[sof + 1] == 0xC0)) sof += 2 + (jpg[sof + 2] << 8 | jpg[sof + 3]);
  jpg[sof + 5] = jpg[sof + 6] = jpg[sof + 7] = jpg[sof + 8] = 0xFF;
  EXPECT_EQ(reason(write("bomb.jpg", jpg)),
            "image of 65535x65535 pixels exceeds the limit of 178956970 pixels");

  // Any image over a small limit (named by the option of a command that has one), and one over
  // OpenCV's own side limit.
  DecodeOptions small;
  small.max_pixels = 1000;
  EXPECT_EQ(reason(write("ok.png", encode(".png", pattern(40, 50, CV_8UC1))), small),
            "image of 50x40 pixels exceeds the limit of 1000 pixels");
  small.max_pixels_option = "--max-pixels";
  EXPECT_EQ(reason(write("ok.png", encode(".png", pattern(40, 50, CV_8UC1))), small),
            "image of 50x40 pixels exceeds --max-pixels 1000");
  DecodeOptions huge;
  huge.max_pixels = int64_t(1) << 40;
  put_be32(&png[16], 3'000'000);
  put_be32(&png[20], 1);
  put_be32(&png[29], crc32_of(&png[12], 17));
  EXPECT_TRUE(contains(reason(write("wide.png", png), huge), "beyond OpenCV's limits"));
}

TEST_F(ImageIo, MutatedFilesNeverCrash) {
  // Cut short, bits flipped, header bytes replaced: thousands of broken files of every format.
  // Each must come back as an image or a reason; the test fails by crashing or hanging.
  std::mt19937 rng(12345);
  DecodeOptions quiet;
  quiet.quiet = true;
  const cv::Mat img = pattern(37, 45, CV_8UC3);
  int failed = 0, total = 0;
  for (const char* ext : {".png", ".jpg", ".bmp", ".tif", ".webp", ".ppm"}) {
    const Bytes good =
        encode(ext, img,
               std::string(ext) == ".jpg" ? std::vector<int>{cv::IMWRITE_JPEG_PROGRESSIVE, 1}
                                          : std::vector<int>{});
    for (int i = 0; i < 300; ++i) {
      Bytes b = good;
      switch (rng() % 3) {
        case 0:
          b.resize(rng() % b.size());
          break;
        case 1:
          for (unsigned f = 0, n = 1 + rng() % 8; f < n; ++f)
            b[rng() % b.size()] ^= 1u << (rng() % 8);
          break;
        default:
          b[rng() % std::min<size_t>(b.size(), 64)] = static_cast<uint8_t>(rng());
      }
      cv::Mat out;
      std::string error;
      const bool ok = vitk::datasets::decode_image(b, out, error, quiet);
      EXPECT_EQ(ok, error.empty());
      EXPECT_EQ(ok, !out.empty());
      EXPECT_EQ(error.find('\n'), std::string::npos) << error;
      failed += !ok;
      ++total;
    }
  }
  EXPECT_GT(failed, total / 4);  // the mutations did break files
}

TEST_F(ImageIo, QuietDecodingKeepsCodecChatterOffStderr) {
  // Garbage inside the entropy-coded data: libjpeg decodes it with a "Corrupt JPEG data"
  // warning on stderr. Quiet, nothing reaches our stderr.
  Bytes jpg = encode(".jpg", pattern(40, 50, CV_8UC3));
  for (size_t i = jpg.size() / 2; i < jpg.size() / 2 + 30; ++i) jpg[i] = 0x55;
  const std::string path = write("noisy.jpg", jpg);
  const std::string err_path = (dir_ / "stderr.txt").string();
  std::fflush(stderr);
  int saved = dup(2);
  FILE* sink = std::fopen(err_path.c_str(), "w");
  ASSERT_NE(sink, nullptr);
  dup2(fileno(sink), 2);
  DecodeOptions quiet;
  quiet.quiet = true;
  std::string r1 = reason(path, quiet);
  std::string r2 = reason(write("ghost.bmp", Bytes{'B', 'M', 0, 0}), quiet);
  std::fflush(stderr);
  dup2(saved, 2);
  close(saved);
  std::fclose(sink);
  std::ifstream in(err_path);
  std::string said((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(said, "");
  EXPECT_EQ(r1, "");
  EXPECT_TRUE(contains(r2, "BMP")) << r2;
}

}  // namespace
