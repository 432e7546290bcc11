//===- OutputFileTest.cpp - safe outputs: atomic files, devices, links
//------===//
//
// Every kind of path an output can name, made in a temporary directory
// (mkfifo, mknod, symlink), and the same-file refusals.
//
//===----------------------------------------------------------------------===//
#include "dtc/artifact/OutputFile.h"
#include "dtc/artifact/ArtifactFormat.h"

#include <gtest/gtest.h>

#include <csignal>
#include <cstring>
#include <dirent.h>
#include <fcntl.h>
#include <fstream>
#include <sstream>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

using namespace dtc::rt;

namespace {

/// A fresh directory per test, removed with everything in it.
class TempDir {
public:
  TempDir() {
    char tmpl[] = "/tmp/dtc-out-test-XXXXXX";
    path_ = mkdtemp(tmpl);
  }
  ~TempDir() { std::system(("rm -rf '" + path_ + "'").c_str()); }
  std::string operator/(const std::string &name) const {
    return path_ + "/" + name;
  }
  const std::string &path() const { return path_; }
  /// Every entry but . and .. (hidden temporaries included).
  std::vector<std::string> entries() const {
    std::vector<std::string> names;
    DIR *d = opendir(path_.c_str());
    while (dirent *e = readdir(d))
      if (std::strcmp(e->d_name, ".") && std::strcmp(e->d_name, ".."))
        names.push_back(e->d_name);
    closedir(d);
    std::sort(names.begin(), names.end());
    return names;
  }

private:
  std::string path_;
};

std::string slurp(const std::string &p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

mode_t kindOf(const std::string &p) {
  struct stat st;
  EXPECT_EQ(lstat(p.c_str(), &st), 0) << p;
  return st.st_mode & S_IFMT;
}

TEST(OutputFile, RegularFilesAreReplacedAtomicallyAndKeepTheirMode) {
  TempDir d;
  std::string err;
  ASSERT_TRUE(writeOutputFile(d / "a", "first", err)) << err;
  EXPECT_EQ(slurp(d / "a"), "first");
  chmod((d / "a").c_str(), 0600);
  struct stat before;
  stat((d / "a").c_str(), &before);
  ASSERT_TRUE(writeOutputFile(d / "a", "second", err)) << err;
  struct stat after;
  stat((d / "a").c_str(), &after);
  EXPECT_EQ(slurp(d / "a"), "second");
  EXPECT_NE(before.st_ino, after.st_ino)
      << "replaced by rename, not rewritten in place";
  EXPECT_EQ(after.st_mode & 07777, 0600u);
  // An abandoned write leaves the old file and no temporary.
  {
    OutputFile f;
    ASSERT_TRUE(f.open(d / "a", err)) << err;
    ASSERT_TRUE(f.write("third", 5, err));
  }
  EXPECT_EQ(slurp(d / "a"), "second");
  EXPECT_EQ(d.entries(), std::vector<std::string>{"a"});
  // A missing directory: an error, nothing created.
  EXPECT_FALSE(writeOutputFile(d / "no/such/file", "x", err));
  EXPECT_NE(err.find("cannot create a temporary file"), std::string::npos)
      << err;
}

TEST(OutputFile, FifoIsWrittenInPlace) {
  TempDir d;
  ASSERT_EQ(mkfifo((d / "fifo").c_str(), 0600), 0);
  std::string got;
  std::thread reader([&] { got = slurp(d / "fifo"); });
  std::string err;
  EXPECT_TRUE(writeOutputFile(d / "fifo", "through the pipe", err)) << err;
  reader.join();
  EXPECT_EQ(got, "through the pipe");
  EXPECT_EQ(kindOf(d / "fifo"), mode_t(S_IFIFO)) << "still a FIFO";
  EXPECT_EQ(d.entries(), std::vector<std::string>{"fifo"});
}

TEST(OutputFile, DeviceNodesAreWrittenInPlace) {
  TempDir d;
  // A node of the null device (major 1, minor 3), as root can make one.
  if (mknod((d / "null").c_str(), S_IFCHR | 0666, makedev(1, 3)) != 0)
    GTEST_SKIP() << "mknod needs root: " << std::strerror(errno);
  std::string err;
  EXPECT_TRUE(writeOutputFile(d / "null", "discarded", err)) << err;
  EXPECT_EQ(kindOf(d / "null"), mode_t(S_IFCHR)) << "still a device";
  EXPECT_EQ(d.entries(), std::vector<std::string>{"null"});
  // Appending (a log) to it too.
  OutputFile log;
  ASSERT_TRUE(log.openAppend(d / "null", /*startEmpty=*/true, err)) << err;
  ASSERT_TRUE(log.write("line\n", 5, err));
  ASSERT_TRUE(log.commit(err)) << err;
  EXPECT_EQ(kindOf(d / "null"), mode_t(S_IFCHR));
  // A block device is refused (writing one in place could destroy a disk).
  ASSERT_EQ(mknod((d / "block").c_str(), S_IFBLK | 0600, makedev(7, 200)), 0);
  EXPECT_FALSE(writeOutputFile(d / "block", "x", err));
  EXPECT_NE(err.find("block device"), std::string::npos) << err;
}

TEST(OutputFile, SymlinksAreFollowedAndKept) {
  TempDir d;
  std::string err;
  ASSERT_TRUE(writeOutputFile(d / "target", "old", err));
  ASSERT_EQ(symlink("target", (d / "link").c_str()), 0);
  ASSERT_EQ(symlink("link", (d / "link2").c_str()), 0);
  ASSERT_TRUE(writeOutputFile(d / "link2", "new", err)) << err;
  EXPECT_EQ(kindOf(d / "link"), mode_t(S_IFLNK));
  EXPECT_EQ(kindOf(d / "link2"), mode_t(S_IFLNK));
  EXPECT_EQ(slurp(d / "target"), "new");
  // A dangling link: its target is created.
  ASSERT_EQ(symlink("later", (d / "dangling").c_str()), 0);
  ASSERT_TRUE(writeOutputFile(d / "dangling", "made", err)) << err;
  EXPECT_EQ(kindOf(d / "dangling"), mode_t(S_IFLNK));
  EXPECT_EQ(slurp(d / "later"), "made");
  EXPECT_EQ(d.entries(), (std::vector<std::string>{"dangling", "later", "link",
                                                   "link2", "target"}));
  // A loop is an error, not a hang.
  ASSERT_EQ(symlink("loop", (d / "loop").c_str()), 0);
  EXPECT_FALSE(writeOutputFile(d / "loop", "x", err));
  EXPECT_NE(err.find("symbolic links"), std::string::npos) << err;
}

TEST(OutputFile, DescriptorPathsWriteToTheDescriptor) {
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  std::string err;
  EXPECT_TRUE(
      writeOutputFile("/proc/self/fd/" + std::to_string(fds[1]), "via fd", err))
      << err;
  EXPECT_TRUE(writeOutputFile("/dev/fd/" + std::to_string(fds[1]), "!", err))
      << err;
  close(fds[1]);
  char buf[32] = {};
  EXPECT_EQ(read(fds[0], buf, sizeof buf), 7);
  EXPECT_STREQ(buf, "via fd!");
  close(fds[0]);
  EXPECT_FALSE(writeOutputFile("/tmp", "x", err));
  EXPECT_NE(err.find("directory"), std::string::npos) << err;
}

TEST(OutputFile, AppendKeepsOrStartsTheFile) {
  TempDir d;
  std::string err;
  ASSERT_TRUE(writeOutputFile(d / "log", "line 1\n", err));
  {
    OutputFile f;
    ASSERT_TRUE(f.openAppend(d / "log", /*startEmpty=*/false, err)) << err;
    ASSERT_TRUE(f.write("line 2\n", 7, err));
    ASSERT_TRUE(f.commit(err)) << err;
  }
  EXPECT_EQ(slurp(d / "log"), "line 1\nline 2\n");
  {
    OutputFile f;
    ASSERT_TRUE(f.openAppend(d / "log", /*startEmpty=*/true, err)) << err;
    ASSERT_TRUE(f.write("fresh\n", 6, err));
  } // not committed: what was appended stays (a log is written as it goes)
  EXPECT_EQ(slurp(d / "log"), "fresh\n");
  EXPECT_EQ(d.entries(), std::vector<std::string>{"log"});
}

TEST(OutputFile, SameFileOutputsAreRefused) {
  TempDir d;
  std::string err;
  ASSERT_TRUE(writeOutputFile(d / "model.mlir", "model", err));
  ASSERT_EQ(symlink("model.mlir", (d / "alias").c_str()), 0);
  ASSERT_EQ(link((d / "model.mlir").c_str(), (d / "hard").c_str()), 0);
  const std::vector<NamedPath> in = {{"the model", d / "model.mlir"}};
  EXPECT_FALSE(checkOutputsDistinct(in, {{"-o", d / "model.mlir"}}, err));
  EXPECT_NE(
      err.find("-o " + (d / "model.mlir") + " is the same file as the model"),
      std::string::npos)
      << err;
  EXPECT_FALSE(checkOutputsDistinct(in, {{"-o", d / "alias"}}, err))
      << "through a link";
  EXPECT_FALSE(checkOutputsDistinct(in, {{"-o", d / "hard"}}, err))
      << "a hard link";
  EXPECT_FALSE(
      checkOutputsDistinct(in, {{"-o", d.path() + "/./model.mlir"}}, err));
  // Two outputs that do not exist yet, named differently.
  EXPECT_FALSE(checkOutputsDistinct(
      in, {{"-o", d / "x.dtc"}, {"--report", d.path() + "//x.dtc"}}, err));
  EXPECT_NE(err.find("are the same file"), std::string::npos) << err;
  EXPECT_TRUE(checkOutputsDistinct(
      in, {{"-o", d / "x.dtc"}, {"--report", d / "x.json"}}, err))
      << err;
  // FIFOs and devices never clash; inputs that do not exist cannot be
  // overwritten.
  ASSERT_EQ(mkfifo((d / "fifo").c_str(), 0600), 0);
  EXPECT_TRUE(
      checkOutputsDistinct({{"the model", d / "fifo"}},
                           {{"-o", d / "fifo"}, {"--report", d / "fifo"}}, err))
      << err;
  EXPECT_TRUE(
      checkOutputsDistinct({{"--hw", d / "cpu"}}, {{"-o", d / "cpu"}}, err))
      << err;
  EXPECT_EQ(d.entries(),
            (std::vector<std::string>{"alias", "fifo", "hard", "model.mlir"}))
      << "nothing written";
}

// A signal in the middle of a write removes the temporary file.
TEST(OutputFile, SignalsRemoveTemporaryFiles) {
  TempDir d;
  std::string err;
  ASSERT_TRUE(writeOutputFile(d / "ckpt", "old", err));
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    removeTemporaryFilesOnSignals();
    OutputFile f;
    std::string e;
    if (!f.open(d / "ckpt", e) || !f.write("half of the new", 15, e))
      _exit(2);
    raise(SIGTERM);
    _exit(3); // not reached: the default action ends the process
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(status)) << status;
  EXPECT_EQ(WTERMSIG(status), SIGTERM);
  EXPECT_EQ(slurp(d / "ckpt"), "old");
  EXPECT_EQ(d.entries(), std::vector<std::string>{"ckpt"})
      << "no .ckpt.tmp.* left";
}

} // namespace
