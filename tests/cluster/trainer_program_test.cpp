// Where a worker finds omnilearn-trainer: beside its own program (the build tree), else in the
// prefix it was installed into (libexec/omnilearn, then lib/omnilearn); $OMNILEARN_TRAINER alone
// when set; and an error that names every place it looked.

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>

#include "cluster/trainer_program.hpp"

namespace omnilearn::actors {
namespace {

namespace fs = std::filesystem;

class TrainerProgramTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (fs::temp_directory_path() / "omnilearn-trainer-program-XXXXXX").string();
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    prefix = pattern;
    fs::create_directories(prefix / "bin");
    self = prefix / "bin" / "omnilearn";
  }
  void TearDown() override { fs::remove_all(prefix); }

  static void make_file(const fs::path& path, bool executable) {
    fs::create_directories(path.parent_path());
    std::ofstream(path) << "#!/bin/sh\n";
    fs::permissions(path, executable ? fs::perms::owner_all : fs::perms::owner_read);
  }

  fs::path prefix;
  fs::path self;
};

TEST_F(TrainerProgramTest, BesideTheProgramComesFirst) {
  make_file(prefix / "bin" / "omnilearn-trainer", true);
  make_file(prefix / "libexec" / "omnilearn" / "omnilearn-trainer", true);
  EXPECT_EQ(find_trainer_program(self, std::nullopt).found,
            (prefix / "bin" / "omnilearn-trainer").string());
}

TEST_F(TrainerProgramTest, InstalledPrefixLibexecThenLib) {
  make_file(prefix / "lib" / "omnilearn" / "omnilearn-trainer", true);
  EXPECT_EQ(find_trainer_program(self, std::nullopt).found,
            (prefix / "lib" / "omnilearn" / "omnilearn-trainer").string());
  make_file(prefix / "libexec" / "omnilearn" / "omnilearn-trainer", true);
  EXPECT_EQ(find_trainer_program(self, std::nullopt).found,
            (prefix / "libexec" / "omnilearn" / "omnilearn-trainer").string());
}

TEST_F(TrainerProgramTest, FileThatCannotRunIsPassedOver) {
  make_file(prefix / "bin" / "omnilearn-trainer", false);
  make_file(prefix / "libexec" / "omnilearn" / "omnilearn-trainer", true);
  EXPECT_EQ(find_trainer_program(self, std::nullopt).found,
            (prefix / "libexec" / "omnilearn" / "omnilearn-trainer").string());
  // A folder of that name is not a program either.
  fs::remove(prefix / "libexec" / "omnilearn" / "omnilearn-trainer");
  fs::create_directories(prefix / "libexec" / "omnilearn" / "omnilearn-trainer");
  EXPECT_EQ(find_trainer_program(self, std::nullopt).found, "");
}

TEST_F(TrainerProgramTest, NothingFoundNamesEveryPlace) {
  auto search = find_trainer_program(self, std::nullopt);
  EXPECT_EQ(search.found, "");
  ASSERT_EQ(search.tried.size(), 3u);
  auto message = trainer_program_not_found(search, false);
  for (const auto& path : search.tried) {
    EXPECT_NE(message.find(path), std::string::npos) << message;
  }
  EXPECT_NE(message.find("OMNILEARN_TRAINER"), std::string::npos) << message;
}

TEST_F(TrainerProgramTest, OverrideIsTheOnlyPlaceLooked) {
  make_file(prefix / "bin" / "omnilearn-trainer", true);
  auto custom = prefix / "elsewhere" / "my-trainer";
  auto search = find_trainer_program(self, custom.string());
  EXPECT_EQ(search.found, "");
  ASSERT_EQ(search.tried.size(), 1u);
  auto message = trainer_program_not_found(search, true);
  EXPECT_NE(message.find("OMNILEARN_TRAINER=" + custom.string()), std::string::npos) << message;
  make_file(custom, true);
  EXPECT_EQ(find_trainer_program(self, custom.string()).found, custom.string());
}

}  // namespace
}  // namespace omnilearn::actors
