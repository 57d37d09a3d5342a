// IDX parsing and validation, the real Fashion-MNIST files, and the synthetic set.
#include "training/dataset.hpp"

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <zlib.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace omnilearn::training {
namespace {

namespace fs = std::filesystem;

class IdxFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "ol_idx_XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { fs::remove_all(dir_); }

  static std::vector<uint8_t> idx(uint8_t type, const std::vector<uint32_t>& dims, size_t payload) {
    std::vector<uint8_t> out = {0, 0, type, static_cast<uint8_t>(dims.size())};
    for (uint32_t d : dims) {
      for (int shift : {24, 16, 8, 0}) out.push_back(static_cast<uint8_t>(d >> shift));
    }
    for (size_t i = 0; i < payload; ++i) out.push_back(static_cast<uint8_t>(i % 251));
    return out;
  }
  std::string write_raw(const std::string& name, const std::vector<uint8_t>& bytes) {
    const std::string path = (fs::path(dir_) / name).string();
    std::ofstream(path, std::ios::binary)
        .write(reinterpret_cast<const char*>(bytes.data()),
               static_cast<std::streamsize>(bytes.size()));
    return path;
  }
  std::string write_gz(const std::string& name, const std::vector<uint8_t>& bytes) {
    const std::string path = (fs::path(dir_) / name).string();
    gzFile out = gzopen(path.c_str(), "wb");
    gzwrite(out, bytes.data(), static_cast<unsigned>(bytes.size()));
    gzclose(out);
    return path;
  }
  static std::string error_of(const std::string& path, int rank) {
    try {
      read_idx_u8(path, rank);
    } catch (const DatasetError& e) {
      return e.what();
    }
    return "";
  }

  std::string dir_;
};

TEST_F(IdxFiles, ReadsRawAndGzippedFiles) {
  const auto bytes = idx(0x08, {3, 2, 2}, 12);
  for (const std::string& path : {write_raw("a.idx", bytes), write_gz("a.idx.gz", bytes)}) {
    const at::Tensor t = read_idx_u8(path, 3);
    EXPECT_EQ(t.sizes(), (std::vector<int64_t>{3, 2, 2}));
    EXPECT_EQ(t.flatten()[11].item<int>(), 11);
  }
}

TEST_F(IdxFiles, ErrorsNameTheFileAndTheProblem) {
  struct Case {
    std::string name;
    std::vector<uint8_t> bytes;
    std::string expected;
  };
  auto truncated = idx(0x08, {10, 4}, 40);
  truncated.resize(30);
  const Case cases[] = {
      {"magic", idx(0x0D, {10}, 10), "bad IDX magic"},
      {"rank", idx(0x08, {2, 5}, 10), "2 dimensions, expected 1"},
      {"zero", idx(0x08, {0}, 0), "dimension 0 is zero"},
      {"short_header", {0, 0, 8}, "truncated IDX header"},
      {"dims_cut", {0, 0, 8, 1, 0, 0}, "truncated IDX header"},
      {"truncated", truncated, "truncated IDX payload"},
      {"trailing", idx(0x08, {4}, 6), "unexpected bytes"},
  };
  for (const Case& c : cases) {
    const std::string path = write_gz(c.name + ".gz", c.bytes);
    const int rank = c.name == "truncated" ? 2 : 1;
    const std::string error = error_of(path, rank);
    EXPECT_NE(error.find(path), std::string::npos) << c.name << ": " << error;
    EXPECT_NE(error.find(c.expected), std::string::npos) << c.name << ": " << error;
  }
}

TEST_F(IdxFiles, CutGzipStreamIsReported) {
  const std::string path = write_gz("cut.gz", idx(0x08, {4000}, 4000));
  const auto size = fs::file_size(path);
  fs::resize_file(path, size / 2);
  const std::string error = error_of(path, 1);
  EXPECT_NE(error.find(path), std::string::npos) << error;
  EXPECT_TRUE(error.find("gzip") != std::string::npos ||
              error.find("truncated") != std::string::npos)
      << error;
}

TEST_F(IdxFiles, MissingDatasetSaysHowToInstallIt) {
  for (const std::string& where : {dir_ + "/nope", dir_}) {
    try {
      load_fashion_mnist(where);
      FAIL() << "expected a DatasetError for " << where;
    } catch (const DatasetError& e) {
      EXPECT_NE(std::string(e.what()).find("apt-get install dataset-fashion-mnist"),
                std::string::npos)
          << e.what();
    }
  }
}

TEST_F(IdxFiles, ImageAndLabelCountsMustAgree) {
  write_gz("train-images-idx3-ubyte.gz", idx(0x08, {3, 28, 28}, 3 * 784));
  write_gz("train-labels-idx1-ubyte.gz", idx(0x08, {2}, 2));
  write_gz("t10k-images-idx3-ubyte.gz", idx(0x08, {1, 28, 28}, 784));
  write_gz("t10k-labels-idx1-ubyte.gz", idx(0x08, {1}, 1));
  try {
    load_fashion_mnist(dir_);
    FAIL() << "expected a count mismatch";
  } catch (const DatasetError& e) {
    EXPECT_NE(std::string(e.what()).find("3 images but"), std::string::npos) << e.what();
  }
}

TEST(FashionMnist, LoadsTheDebianPackage) {
  const DatasetPair data = load_fashion_mnist(kDefaultFashionMnistPath);
  EXPECT_EQ(data.train->size(), 60000);
  EXPECT_EQ(data.test->size(), 10000);
  EXPECT_EQ(data.train->sample_shape(), (std::vector<int64_t>{1, 28, 28}));
  // Fashion-MNIST is balanced: 6000 training images per class.
  const at::Tensor counts = at::bincount(data.train->labels);
  EXPECT_EQ(counts.size(0), 10);
  EXPECT_EQ(counts.min().item<int64_t>(), 6000);
  EXPECT_EQ(counts.max().item<int64_t>(), 6000);
  // Normalized inputs are roughly standardized.
  auto [x, y] = data.train->range(0, 5000);
  EXPECT_NEAR(x.mean().item<double>(), 0.0, 0.05);
  EXPECT_NEAR(x.std().item<double>(), 1.0, 0.05);
  auto [gx, gy] = data.train->gather({4999, 0});
  EXPECT_TRUE(at::equal(gx[0], x[4999]));
  EXPECT_EQ(gy[1].item<int64_t>(), y[0].item<int64_t>());
}

TEST(Synthetic, SeededAndLearnableShape) {
  SyntheticSpec spec;
  spec.train_size = 300;
  spec.test_size = 100;
  spec.height = 8;
  spec.width = 8;
  const DatasetPair a = make_synthetic(spec, 1), b = make_synthetic(spec, 1),
                    c = make_synthetic(spec, 2);
  EXPECT_TRUE(at::equal(a.train->inputs, b.train->inputs));
  EXPECT_TRUE(at::equal(a.test->labels, b.test->labels));
  EXPECT_FALSE(at::equal(a.train->inputs, c.train->inputs));
  EXPECT_EQ(a.train->sample_shape(), (std::vector<int64_t>{1, 8, 8}));
  // The teacher spreads samples over (almost) every class.
  EXPECT_GE(at::bincount(a.train->labels).gt(0).sum().item<int64_t>(), 8);
}

}  // namespace
}  // namespace omnilearn::training
