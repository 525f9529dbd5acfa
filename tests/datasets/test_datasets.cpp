// Datasets: IDX files (raw and gzip, good and broken), the real Fashion-MNIST when installed,
// image folders, CSV lists and open_dataset's dispatch.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <zlib.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include <opencv2/imgcodecs.hpp>

#include "common/error.h"
#include "datasets/dataset.h"
#include "util/idx_data.h"
#include "util/test_util.h"

using namespace vitk;
using namespace vitk::datasets;

namespace {

namespace fs = std::filesystem;

using vitk::test::error_of;

using vitk::testing::idx_images;
using vitk::testing::idx_labels;
using vitk::testing::put_u32;

class DataDir : public ::testing::Test {
 protected:
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  std::string write(const std::string& name, const std::string& bytes) {
    fs::create_directories((dir_ / name).parent_path());
    std::ofstream(dir_ / name, std::ios::binary) << bytes;
    return path(name);
  }
  std::string write_gz(const std::string& name, const std::string& bytes) {
    fs::create_directories((dir_ / name).parent_path());
    gzFile f = gzopen(path(name).c_str(), "wb");
    EXPECT_NE(f, nullptr);
    EXPECT_EQ(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())),
              static_cast<int>(bytes.size()));
    gzclose(f);
    return path(name);
  }
  // A small PNG whose grey value is `value`.
  std::string write_png(const std::string& name, int value, int rows = 6, int cols = 5) {
    fs::create_directories((dir_ / name).parent_path());
    cv::Mat m(rows, cols, CV_8UC1, cv::Scalar(value));
    EXPECT_TRUE(cv::imwrite(path(name), m));
    return path(name);
  }
  vitk::test::TempDir temp_{"vitk_data"};
  fs::path dir_ = temp_.path();
};

using Idx = DataDir;

TEST_F(Idx, ReadsRawAndGzipFilesAlike) {
  const std::vector<uint8_t> labels{3, 0, 9, 1, 1};
  for (bool gz : {false, true}) {
    SCOPED_TRACE(gz ? "gzip" : "raw");
    const std::string images = idx_images(5, 3, 4);
    const std::string ip = gz ? write_gz("i.gz", images) : write("i", images);
    const std::string lp =
        gz ? write_gz("l.gz", idx_labels(labels)) : write("l", idx_labels(labels));
    auto data = open_idx(ip, lp, fashion_mnist_classes());
    ASSERT_EQ(data->size(), 5);
    EXPECT_EQ(data->class_names().size(), 10u);
    EXPECT_EQ(data->source(), ip);
    EXPECT_EQ(data->describe(2), ip + "[2]");
    for (int i = 0; i < 5; ++i) EXPECT_EQ(data->label(i), labels[i]);
    cv::Mat m;
    std::string why;
    ASSERT_TRUE(data->load(4, m, why)) << why;
    EXPECT_EQ(m.rows, 3);
    EXPECT_EQ(m.cols, 4);
    EXPECT_EQ(m.type(), CV_8UC1);
    EXPECT_EQ(m.at<uint8_t>(2, 3), (4 + 2 + 3) % 256);
    EXPECT_FALSE(data->load(5, m, why));
    EXPECT_NE(why.find("out of range"), std::string::npos);
  }
}

TEST_F(Idx, LoadReturnsAFreshBufferEachTime) {
  auto data = open_idx(write("i", idx_images(2, 2, 2)), write("l", idx_labels({0, 1})),
                       fashion_mnist_classes());
  cv::Mat a, b;
  std::string why;
  ASSERT_TRUE(data->load(0, a, why));
  b = a;  // shares a's buffer
  ASSERT_TRUE(data->load(1, a, why));
  EXPECT_EQ(b.at<uint8_t>(0, 0), 0);  // the old image is untouched
  EXPECT_EQ(a.at<uint8_t>(0, 0), 1);
  a.at<uint8_t>(0, 0) = 200;  // writing into a loaded image does not change the dataset
  ASSERT_TRUE(data->load(1, a, why));
  EXPECT_EQ(a.at<uint8_t>(0, 0), 1);
}

TEST_F(Idx, BadMagicNamesTheFile) {
  const std::string lp = write("l", idx_labels({0, 1}));
  const std::string ip = write("imgs", idx_images(2, 2, 2, 0x801));
  std::string e = error_of([&] { open_idx(ip, lp, fashion_mnist_classes()); });
  EXPECT_NE(e.find(ip), std::string::npos) << e;
  EXPECT_NE(e.find("magic"), std::string::npos) << e;
  // Labels and images swapped.
  const std::string good = write("good", idx_images(2, 2, 2));
  e = error_of([&] { open_idx(good, good, fashion_mnist_classes()); });
  EXPECT_NE(e.find("magic"), std::string::npos) << e;
  // A file that is not IDX at all (e.g. text).
  const std::string text = write_gz("text.gz", "hello, world, this is not IDX data\n");
  e = error_of([&] { open_idx(good, text, fashion_mnist_classes()); });
  EXPECT_NE(e.find(text), std::string::npos) << e;
}

TEST_F(Idx, TruncationIsReportedForRawAndGzip) {
  std::string images = idx_images(4, 5, 5);
  images.resize(images.size() - 7);
  const std::string lp = write("l", idx_labels({0, 1, 2, 3}));
  for (bool gz : {false, true}) {
    const std::string ip = gz ? write_gz("i.gz", images) : write("i", images);
    const std::string e = error_of([&] { open_idx(ip, lp, fashion_mnist_classes()); });
    EXPECT_NE(e.find(ip), std::string::npos) << e;
    EXPECT_NE(e.find("truncated"), std::string::npos) << e;
  }
  // A header cut short.
  const std::string ip = write("short", images.substr(0, 10));
  std::string e = error_of([&] { open_idx(ip, lp, fashion_mnist_classes()); });
  EXPECT_NE(e.find("truncated header"), std::string::npos) << e;
  // A gzip stream cut in the middle.
  const std::string whole = write_gz("whole.gz", idx_images(50, 28, 28));
  std::string bytes;
  {
    std::ifstream in(whole, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  const std::string cut = write("cut.gz", bytes.substr(0, bytes.size() / 2));
  e = error_of([&] { open_idx(cut, lp, fashion_mnist_classes()); });
  EXPECT_NE(e.find(cut), std::string::npos) << e;
  EXPECT_NE(e.find("truncated"), std::string::npos) << e;
}

TEST_F(Idx, CountsMustAgreeAndLabelsFitTheClasses) {
  const std::string ip = write("i", idx_images(3, 2, 2));
  const std::string lp = write("l", idx_labels({0, 1}));
  std::string e = error_of([&] { open_idx(ip, lp, fashion_mnist_classes()); });
  EXPECT_NE(e.find("2 labels"), std::string::npos) << e;
  EXPECT_NE(e.find("3 images"), std::string::npos) << e;
  EXPECT_NE(e.find(lp), std::string::npos) << e;

  const std::string bad = write("bad", idx_labels({0, 10, 1}));
  e = error_of([&] { open_idx(ip, bad, fashion_mnist_classes()); });
  EXPECT_NE(e.find(bad), std::string::npos) << e;
  EXPECT_NE(e.find("label 10 of sample 1"), std::string::npos) << e;

  // Extra bytes after the data mean the header is wrong.
  const std::string extra = write("extra", idx_labels({0, 1, 2}) + "x");
  e = error_of([&] { open_idx(ip, extra, fashion_mnist_classes()); });
  EXPECT_NE(e.find(extra), std::string::npos) << e;

  // Zero dimensions and absurd sizes are refused before anything is allocated.
  std::string zero;
  for (uint32_t v : {0x803u, 3u, 0u, 2u}) put_u32(zero, v);
  const std::string zp = write("zero", zero);
  e = error_of([&] { open_idx(zp, lp, fashion_mnist_classes()); });
  EXPECT_NE(e.find("is 0"), std::string::npos) << e;
  std::string huge;
  for (uint32_t v : {0x803u, 0xffffffffu, 0xffffffffu, 0xffffffffu}) put_u32(huge, v);
  const std::string hp = write("huge", huge);
  e = error_of([&] { open_idx(hp, lp, fashion_mnist_classes()); });
  EXPECT_NE(e.find(hp), std::string::npos) << e;

  e = error_of([&] { open_idx(path("missing"), lp, fashion_mnist_classes()); });
  EXPECT_NE(e.find(path("missing")), std::string::npos) << e;
  e = error_of([&] { open_idx(dir_.string(), lp, fashion_mnist_classes()); });
  EXPECT_NE(e.find("directory"), std::string::npos) << e;
}

TEST(FashionMnist, RealFilesWhenInstalled) {
  const std::string dir = "/usr/share/datasets/fashion-mnist";
  if (!fs::exists(dir + "/train-images-idx3-ubyte.gz"))
    GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  for (Split split : {Split::train, Split::val}) {
    auto data = open_dataset(dir, split);
    ASSERT_EQ(data->size(), split == Split::train ? 60000 : 10000);
    EXPECT_EQ(data->class_names(), fashion_mnist_classes());
    EXPECT_NE(data->source().find(split == Split::train ? "train-images" : "t10k-images"),
              std::string::npos);
    std::vector<int64_t> per_class(10, 0);
    for (int64_t i = 0; i < data->size(); ++i) {
      const int l = data->label(i);
      ASSERT_GE(l, 0);
      ASSERT_LT(l, 10);
      ++per_class[l];
    }
    // Fashion-MNIST is balanced: 6000 / 1000 of each class.
    for (int64_t c : per_class) EXPECT_EQ(c, data->size() / 10);
    cv::Mat m;
    std::string why;
    ASSERT_TRUE(data->load(data->size() - 1, m, why)) << why;
    EXPECT_EQ(m.rows, 28);
    EXPECT_EQ(m.cols, 28);
    EXPECT_EQ(m.type(), CV_8UC1);
    // Not all black: real pixels were read.
    EXPECT_GT(cv::countNonZero(m), 50);
  }
  EXPECT_EQ(fashion_mnist_classes().front(), "T-shirt/top");
  EXPECT_EQ(fashion_mnist_classes().back(), "Ankle boot");
}

TEST_F(Idx, OpenDatasetFindsTheSplitAndNamesTheClasses) {
  write_gz("digits/train-images-idx3-ubyte.gz", idx_images(3, 2, 2));
  write_gz("digits/train-labels-idx1-ubyte.gz", idx_labels({1, 2, 3}));
  write("digits/t10k-images-idx3-ubyte", idx_images(2, 2, 2));
  write("digits/t10k-labels-idx1-ubyte", idx_labels({4, 5}));
  auto train = open_dataset(path("digits"), Split::train);
  EXPECT_EQ(train->size(), 3);
  EXPECT_EQ(train->class_names()[3], "3");  // no "fashion" in the names: digits
  auto val = open_dataset(path("digits"), Split::val);
  EXPECT_EQ(val->size(), 2);
  EXPECT_EQ(val->label(1), 5);

  write_gz("fashion/train-images-idx3-ubyte.gz", idx_images(3, 2, 2));
  write_gz("fashion/train-labels-idx1-ubyte.gz", idx_labels({1, 2, 3}));
  EXPECT_EQ(open_dataset(path("fashion"), Split::train)->class_names()[0], "T-shirt/top");
  // The other split is missing: the error says which file.
  const std::string e = error_of([&] { open_dataset(path("fashion"), Split::val); });
  EXPECT_NE(e.find("t10k-images-idx3-ubyte"), std::string::npos) << e;
}

using Folder = DataDir;

TEST_F(Folder, ClassesAreSortedSubfoldersAndCorruptFilesFailAtLoad) {
  write_png("root/dog/a.png", 10);
  write_png("root/dog/b.PNG", 20);
  write_png("root/cat/x.png", 30);
  write_png("root/cat/nested/y.png", 40);
  write("root/cat/notes.txt", "not an image, not a sample");
  write("root/cat/.hidden.png", "hidden files are not samples");
  write("root/.ipynb_checkpoints/z.png", "hidden folders are not classes");
  write("root/dog/broken.png", "this is text, not a PNG");
  auto data = open_image_folder(path("root"));
  EXPECT_EQ(data->class_names(), (std::vector<std::string>{"cat", "dog"}));
  ASSERT_EQ(data->size(), 5);
  EXPECT_EQ(data->source(), path("root"));
  int broken = -1;
  for (int64_t i = 0; i < data->size(); ++i) {
    cv::Mat m;
    std::string why;
    const std::string where = data->describe(i);
    const bool ok = data->load(i, m, why);
    const int want_label = where.find("/dog/") != std::string::npos ? 1 : 0;
    EXPECT_EQ(data->label(i), want_label) << where;
    if (where.find("broken") != std::string::npos) {
      broken = static_cast<int>(i);
      EXPECT_FALSE(ok);
      EXPECT_FALSE(why.empty());
    } else {
      EXPECT_TRUE(ok) << where << ": " << why;
      EXPECT_EQ(m.rows, 6);
    }
  }
  EXPECT_GE(broken, 0);
  // A file deleted after opening is reported at load, not before.
  fs::remove(path("root/cat/x.png"));
  cv::Mat m;
  std::string why;
  int64_t x = -1;
  for (int64_t i = 0; i < data->size(); ++i)
    if (data->describe(i) == path("root/cat/x.png")) x = i;
  ASSERT_GE(x, 0);
  EXPECT_FALSE(data->load(x, m, why));
  EXPECT_NE(why.find("not found"), std::string::npos) << why;
}

TEST_F(Folder, MissingEmptyAndClasslessRootsAreErrorsNamingThePath) {
  std::string e = error_of([&] { open_image_folder(path("nope")); });
  EXPECT_NE(e.find(path("nope")), std::string::npos) << e;
  fs::create_directories(path("empty"));
  e = error_of([&] { open_image_folder(path("empty")); });
  EXPECT_NE(e.find(path("empty")), std::string::npos) << e;
  EXPECT_NE(e.find("empty"), std::string::npos) << e;
  write_png("flat/a.png", 1);
  e = error_of([&] { open_image_folder(path("flat")); });
  EXPECT_NE(e.find("no class folders"), std::string::npos) << e;
  // One class folder without images names that folder.
  write_png("root/cat/a.png", 1);
  fs::create_directories(path("root/dog"));
  write("root/dog/readme.txt", "no images here");
  e = error_of([&] { open_image_folder(path("root")); });
  EXPECT_NE(e.find(path("root/dog")), std::string::npos) << e;
  EXPECT_NE(e.find("no images"), std::string::npos) << e;
  // open_dataset says the same.
  e = error_of([&] { open_dataset(path("root"), Split::train); });
  EXPECT_NE(e.find(path("root/dog")), std::string::npos) << e;
  e = error_of([&] { open_dataset(path("nope"), Split::train); });
  EXPECT_NE(e.find(path("nope")), std::string::npos) << e;
  e = error_of([&] { open_dataset(write("x.bin", "data"), Split::train); });
  EXPECT_NE(e.find("x.bin"), std::string::npos) << e;
}

TEST_F(Folder, OpenDatasetPicksTheSplitFolder) {
  write_png("root/train/a/1.png", 1);
  write_png("root/train/b/2.png", 2);
  write_png("root/train/b/3.png", 3);
  write_png("root/validation/a/4.png", 4);
  write_png("root/validation/b/5.png", 5);
  EXPECT_EQ(open_dataset(path("root"), Split::train)->size(), 3);
  auto val = open_dataset(path("root"), Split::val);
  EXPECT_EQ(val->size(), 2);
  EXPECT_EQ(val->class_names(), (std::vector<std::string>{"a", "b"}));
  // Without split folders the whole root is the dataset, whatever the split.
  write_png("plain/a/1.png", 1);
  write_png("plain/b/1.png", 1);
  EXPECT_EQ(open_dataset(path("plain"), Split::val)->size(), 2);
  // train/ of class folders but no validation folder: the validation split is an error.
  write_png("only/train/a/1.png", 1);
  EXPECT_EQ(open_dataset(path("only"), Split::train)->size(), 1);
  const std::string e = error_of([&] { open_dataset(path("only"), Split::val); });
  EXPECT_NE(e.find("val/"), std::string::npos) << e;
}

using Csv = DataDir;

TEST_F(Csv, ClassNamesHeaderQuotesAndRelativePaths) {
  write_png("imgs/a.png", 1);
  write_png("imgs/b, with comma.png", 2);
  const std::string abs = write_png("elsewhere/c.png", 3);
  const std::string csv = write("list.csv",
                                "path,label\r\n"
                                "imgs/a.png,zebra\r\n"
                                "\r\n"
                                "\"imgs/b, with comma.png\" , ant\r\n" +
                                    abs + ",zebra\r\n" + "imgs/missing.png,ant\r\n");
  auto data = open_csv(csv);
  ASSERT_EQ(data->size(), 4);
  EXPECT_EQ(data->class_names(), (std::vector<std::string>{"ant", "zebra"}));
  EXPECT_EQ(data->label(0), 1);
  EXPECT_EQ(data->label(1), 0);
  EXPECT_EQ(data->label(2), 1);
  EXPECT_EQ(data->describe(2), abs);
  cv::Mat m;
  std::string why;
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(data->load(i, m, why)) << data->describe(i) << why;
  EXPECT_EQ(m.at<uint8_t>(0, 0), 3);
  // The missing file shows up only when loaded.
  EXPECT_FALSE(data->load(3, m, why));
  EXPECT_NE(why.find("not found"), std::string::npos) << why;
  EXPECT_NE(data->describe(3).find("missing.png"), std::string::npos);
  // open_dataset opens a .csv file.
  EXPECT_EQ(open_dataset(csv, Split::val)->size(), 4);
}

TEST_F(Csv, IntegerLabelsWithoutHeader) {
  write_png("a.png", 1);
  const std::string csv = write("ints.csv", "a.png,2\na.png,0\na.png,1\n");
  auto data = open_csv(csv);
  ASSERT_EQ(data->size(), 3);
  EXPECT_EQ(data->class_names(), (std::vector<std::string>{"0", "1", "2"}));
  EXPECT_EQ(data->label(0), 2);
  EXPECT_EQ(data->label(1), 0);
}

TEST_F(Csv, MalformedLinesNameFileAndLine) {
  const std::string csv = write("bad.csv", "path,label\na.png,0\nb.png\nc.png,1\n");
  std::string e = error_of([&] { open_csv(csv); });
  EXPECT_NE(e.find(csv + ":3:"), std::string::npos) << e;
  const std::string csv2 = write("bad2.csv", "a.png,0\nb.png,1,extra\n");
  e = error_of([&] { open_csv(csv2); });
  EXPECT_NE(e.find(csv2 + ":2:"), std::string::npos) << e;
  const std::string csv3 = write("bad3.csv", "a.png,0\n\n\"b.png,1\n");
  e = error_of([&] { open_csv(csv3); });
  EXPECT_NE(e.find(csv3 + ":3:"), std::string::npos) << e;
  const std::string csv4 = write("bad4.csv", "a.png,0\nb.png,-1\n");
  e = error_of([&] { open_csv(csv4); });
  EXPECT_NE(e.find(csv4 + ":2:"), std::string::npos) << e;
  const std::string csv5 = write("bad5.csv", "a.png,0\n,1\n");
  e = error_of([&] { open_csv(csv5); });
  EXPECT_NE(e.find(csv5 + ":2:"), std::string::npos) << e;
  const std::string empty = write("empty.csv", "path,label\n");
  e = error_of([&] { open_csv(empty); });
  EXPECT_NE(e.find(empty), std::string::npos) << e;
  EXPECT_NE(e.find("no samples"), std::string::npos) << e;
  e = error_of([&] { open_csv(path("none.csv")); });
  EXPECT_NE(e.find("none.csv"), std::string::npos) << e;
}

}  // namespace
