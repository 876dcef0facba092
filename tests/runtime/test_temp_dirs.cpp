// The tests' temp folders (tests/test_util.h process_temp_path): removed when the process that
// made them exits, never by a forked child's exit.
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "tests/test_util.h"

namespace sqlrl::testing {
namespace {

namespace fs = std::filesystem;

// Runs `body` in a forked child that then exits through exit() (static destructors run, as at
// the end of a test process); returns the child's exit status.
template <class F>
int in_child(F body) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    body();
    std::exit(0);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

TEST(TempDirs, ProcessTempPathIsRemovedWhenItsProcessExits) {
  if (const char* keep = std::getenv("SQLRL_KEEP_TEST_DIRS"); keep && std::string(keep) == "1")
    GTEST_SKIP() << "SQLRL_KEEP_TEST_DIRS=1 keeps the folders";
  const fs::path marker = process_temp_path("sqlrl_temp_dirs_marker");  // the parent's: to pass the child's path
  fs::create_directories(marker);
  ASSERT_EQ(in_child([&] {
              fs::path mine = process_temp_path("sqlrl_temp_dirs_child");
              fs::create_directories(mine / "sub");
              std::ofstream(mine / "sub" / "file") << "x";
              std::ofstream(marker / "child") << mine.string();
            }),
            0);
  std::string child_dir;
  std::ifstream(marker / "child") >> child_dir;
  ASSERT_FALSE(child_dir.empty());
  EXPECT_FALSE(fs::exists(child_dir)) << child_dir << " outlived its process";
}

TEST(TempDirs, AForkedChildLeavesItsParentsFolders) {
  const fs::path mine = process_temp_path("sqlrl_temp_dirs_parent");
  fs::create_directories(mine);
  std::ofstream(mine / "file") << "x";
  ASSERT_EQ(in_child([] {}), 0);  // inherits the registration, exits
  EXPECT_TRUE(fs::exists(mine / "file"));
}

}  // namespace
}  // namespace sqlrl::testing
