//===- SafetensorsTest.cpp - read/write, atomicity, corrupt files ---------===//
#include "TestArtifacts.h"

#include "dtc/artifact/ArtifactFormat.h"
#include "dtc/runtime/Safetensors.h"

#include <gtest/gtest.h>

#include <csignal>
#include <cstring>
#include <dirent.h>
#include <fstream>
#include <sstream>
#include <sys/resource.h>
#include <sys/stat.h>
#include <thread>
#include <unistd.h>

using namespace dtc::rt;

namespace {

std::string tempDir() { return dtc::test::scratchDir("dtc-st-test"); }

std::string readAll(const std::string &p) {
  std::string s, err;
  EXPECT_TRUE(readFileBytes(p, s, err)) << err;
  return s;
}
void writeRaw(const std::string &p, const std::string &bytes) {
  std::string err;
  ASSERT_TRUE(writeOutputFile(p, bytes, err)) << err;
}

// A file built by hand: header length, header, data.
std::string rawFile(const std::string &header, const std::string &data) {
  std::string s(8, '\0');
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i)
    s[size_t(i)] = char((n >> (8 * i)) & 0xff);
  return s + header + data;
}

TEST(Safetensors, RoundTrip) {
  const std::string p = tempDir() + "/rt.safetensors";
  std::vector<float> a = {1, 2, 3, 4, 5, 6};
  std::vector<int64_t> b = {-1, 1LL << 40};
  std::vector<int32_t> c = {7};
  writeSafetensors(
      p,
      {{"layer.a", DType::F32, {2, 3}, a.data()},
       {"b", DType::I64, {2}, b.data()},
       {"c", DType::I32, {}, c.data()}},
      {{"dtc.step", "12"}, {"note", "quote \" and unicode \xc3\xa9"}});
  const std::string bytes = readAll(p);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i)
    n = (n << 8) | uint8_t(bytes[size_t(i)]);
  EXPECT_EQ((8 + n) % 8, 0u) << "header padded to 8 bytes";
  SafetensorsReader r(p);
  EXPECT_EQ(r.metadata().at("dtc.step"), "12");
  EXPECT_EQ(r.metadata().at("note"), "quote \" and unicode \xc3\xa9");
  ASSERT_EQ(r.entries().size(), 3u);
  const SafetensorsEntry *ea = r.find("layer.a");
  ASSERT_NE(ea, nullptr);
  EXPECT_EQ(ea->dtypeName, "F32");
  EXPECT_EQ(ea->shape, (Shape{2, 3}));
  std::vector<float> ga(6);
  r.read(*ea, 0, ga.data(), 24);
  EXPECT_EQ(ga, a);
  const SafetensorsEntry *eb = r.find("b");
  EXPECT_EQ(eb->dtype, DType::I64);
  int64_t b1 = 0;
  r.read(*eb, 8, &b1, 8);
  EXPECT_EQ(b1, b[1]);
  EXPECT_THROW(r.read(*eb, 8, &b1, 16), Error)
      << "reads stay inside the tensor";
  EXPECT_TRUE(r.verifyChecksum()) << "dtc writes a checksum of the data";
  EXPECT_EQ(r.find("c")->shape, Shape{});
  EXPECT_EQ(r.find("zz"), nullptr);
}

TEST(Safetensors, ReadsFilesOfOtherWriters) {
  // Unpadded header, keys in any order, a BF16 and an I16 tensor (both
  // recognised, I16 flagged unsupported), no metadata.
  const std::string p = tempDir() + "/other.safetensors";
  std::string data(4 + 4, '\0');
  float one = 1.0f;
  std::memcpy(data.data() + 4, &one, 4);
  writeRaw(
      p,
      rawFile(
          R"({"w":{"data_offsets":[4,8],"shape":[1],"dtype":"F32"},"h":{"dtype":"BF16","shape":[2],"data_offsets":[0,4]},"s":{"dtype":"I16","shape":[0],"data_offsets":[8,8]}})",
          data));
  SafetensorsReader r(p);
  EXPECT_TRUE(r.metadata().empty());
  EXPECT_TRUE(r.find("w")->supported);
  EXPECT_TRUE(r.find("h")->supported);
  EXPECT_EQ(r.find("h")->dtype, DType::BF16);
  EXPECT_FALSE(r.find("s")->supported);
  float got;
  r.read(*r.find("w"), 0, &got, 4);
  EXPECT_EQ(got, 1.0f);
  EXPECT_FALSE(r.verifyChecksum()) << "no checksum, nothing to verify";
}

std::string openError(const std::string &bytes) {
  const std::string p = tempDir() + "/bad.safetensors";
  writeRaw(p, bytes);
  try {
    SafetensorsReader r(p);
  } catch (const Error &e) {
    std::string m = e.what();
    EXPECT_EQ(m.rfind(p + ": ", 0), 0u) << m;
    return m;
  }
  return "";
}

TEST(Safetensors, CorruptFilesAreRejected) {
  const std::string d4(4, '\0');
  EXPECT_NE(openError("abc").find("shorter than its 8-byte header"),
            std::string::npos);
  EXPECT_NE(
      openError(rawFile("{}", "").substr(0, 9)).find("exceeds the file size"),
      std::string::npos);
  EXPECT_NE(openError(rawFile("{\"a\":", "")).find("bad safetensors header"),
            std::string::npos);
  EXPECT_NE(openError(rawFile("[]", "")).find("not a JSON object"),
            std::string::npos);
  EXPECT_NE(
      openError(
          rawFile(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,8]}})",
                  d4))
          .find("out of range"),
      std::string::npos);
  EXPECT_NE(
      openError(
          rawFile(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})",
                  d4))
          .find("needs 8"),
      std::string::npos);
  EXPECT_NE(
      openError(
          rawFile(R"({"a":{"dtype":"Q4","shape":[1],"data_offsets":[0,4]}})",
                  d4))
          .find("unknown dtype \"Q4\""),
      std::string::npos);
  EXPECT_NE(
      openError(
          rawFile(R"({"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})",
                  d4))
          .find("shape"),
      std::string::npos);
  EXPECT_NE(openError(rawFile(R"({"a":{"dtype":"F32","shape":[1]}})", d4))
                .find("data_offsets"),
            std::string::npos);
  EXPECT_NE(
      openError(
          rawFile(
              R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})",
              d4))
          .find("overlaps"),
      std::string::npos);
  EXPECT_NE(
      openError(
          rawFile(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                  d4 + d4))
          .find("gap"),
      std::string::npos);
  EXPECT_NE(
      openError(
          rawFile(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})",
                  d4 + "xx"))
          .find("unexpected bytes"),
      std::string::npos);
  EXPECT_NE(openError(rawFile(R"({"__metadata__":{"k":1}})", ""))
                .find("not a string"),
            std::string::npos);
  try {
    SafetensorsReader r(tempDir() + "/nope.safetensors");
    FAIL();
  } catch (const Error &e) {
    EXPECT_NE(std::string(e.what()).find("cannot open"), std::string::npos);
  }
}

std::vector<std::string> listDir(const std::string &d) {
  std::vector<std::string> names;
  DIR *dir = opendir(d.c_str());
  while (dirent *e = readdir(dir))
    if (e->d_name[0] != '.' || std::strstr(e->d_name, ".tmp."))
      names.push_back(e->d_name);
  closedir(dir);
  return names;
}

// A write that fails half way (file size limit) leaves the old file intact
// and no temporary behind.
TEST(Safetensors, FailedWriteLeavesTheOldFile) {
  const std::string dir = dtc::test::scratchDir("dtc-st-atomic");
  const std::string p = dir + "/ckpt.safetensors";
  std::vector<float> small = {1, 2, 3};
  writeSafetensors(p, {{"w", DType::F32, {3}, small.data()}},
                   {{"dtc.step", "1"}});
  const std::string before = readAll(p);
  auto failingWrite = [&p]() {
    std::signal(SIGXFSZ, SIG_IGN);
    struct rlimit rl = {4096, 4096};
    setrlimit(RLIMIT_FSIZE, &rl);
    std::vector<float> big(100000, 1.0f);
    try {
      writeSafetensors(p, {{"w", DType::F32, {100000}, big.data()}},
                       {{"dtc.step", "2"}});
    } catch (const Error &e) {
      std::exit(std::string(e.what()).find("cannot write") != std::string::npos
                    ? 3
                    : 4);
    }
    std::exit(5);
  };
  EXPECT_EXIT(failingWrite(), ::testing::ExitedWithCode(3), "");
  EXPECT_EQ(readAll(p), before);
  EXPECT_EQ(listDir(dir), std::vector<std::string>{"ckpt.safetensors"});
  // A directory that does not exist: error names the path.
  try {
    writeSafetensors(dir + "/missing/x.safetensors", {}, {});
    FAIL();
  } catch (const Error &e) {
    EXPECT_NE(std::string(e.what()).find("missing/x.safetensors: cannot write"),
              std::string::npos);
  }
}

TEST(Safetensors, Crc32cKnownAnswers) {
  EXPECT_EQ(crc32c(0, "123456789", 9), 0xe3069283u);
  EXPECT_EQ(crc32c(0, "", 0), 0u);
  // Streaming in pieces (and at any alignment) gives the same value.
  std::string s(1000, '\0');
  for (size_t i = 0; i < s.size(); ++i)
    s[i] = char(i * 31 + 7);
  const uint32_t whole = crc32c(0, s.data(), s.size());
  EXPECT_EQ(crc32c(crc32c(0, s.data(), 333), s.data() + 333, s.size() - 333),
            whole);
  EXPECT_EQ(crc32c(0, s.data() + 1, 9),
            crc32c(crc32c(0, s.data() + 1, 4), s.data() + 5, 5));
}

// Every byte of the data section is covered by the checksum.
TEST(Safetensors, FlippedBytesAreCaught) {
  const std::string p = tempDir() + "/flip.safetensors";
  std::vector<float> w(64);
  for (size_t i = 0; i < w.size(); ++i)
    w[i] = float(i) * 0.5f;
  writeSafetensors(p, {{"w", DType::F32, {64}, w.data()}}, {{"dtc.step", "3"}});
  const std::string good = readAll(p);
  {
    SafetensorsReader r(p);
    EXPECT_EQ(r.metadata().at(kDataChecksumKey).size(), 8u);
    EXPECT_TRUE(r.verifyChecksum());
  }
  for (size_t at : {good.size() - 256, good.size() - 1}) {
    std::string bad = good;
    bad[at] = char(bad[at] ^ 0x10);
    writeRaw(p, bad);
    SafetensorsReader r(p); // the header is intact
    try {
      r.verifyChecksum();
      FAIL() << "flip at " << at;
    } catch (const Error &e) {
      EXPECT_NE(std::string(e.what()).find(
                    "flip.safetensors: data checksum mismatch"),
                std::string::npos)
          << e.what();
    }
  }
  std::string bad = good;
  const size_t digits =
      bad.find(kDataChecksumKey) + std::strlen(kDataChecksumKey) + 3;
  bad[digits] = 'x';
  writeRaw(p, bad);
  try {
    SafetensorsReader r(p);
    FAIL();
  } catch (const Error &e) {
    EXPECT_NE(std::string(e.what()).find("is not 8 lowercase hex digits"),
              std::string::npos)
        << e.what();
  }
}

// Data read after the file shrank: an error naming it, never SIGBUS.
TEST(Safetensors, AFileThatShrinksIsAnError) {
  const std::string p = tempDir() + "/shrink.safetensors";
  std::vector<float> w(1024, 2.0f);
  writeSafetensors(p, {{"w", DType::F32, {1024}, w.data()}}, {});
  SafetensorsReader r(p);
  ASSERT_EQ(truncate(p.c_str(), 1000), 0);
  std::vector<float> got(1024);
  try {
    r.read(*r.find("w"), 0, got.data(), got.size() * 4);
    FAIL();
  } catch (const Error &e) {
    EXPECT_NE(std::string(e.what()).find(
                  "shrink.safetensors: the file shrank while it was read"),
              std::string::npos)
        << e.what();
  }
}

// An output that cannot seek (a FIFO) gets the file without a checksum.
TEST(Safetensors, StreamsToAFifo) {
  const std::string fifo = tempDir() + "/ckpt.fifo",
                    copy = tempDir() + "/copy.safetensors";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  std::string bytes;
  std::thread reader([&] {
    std::ifstream in(fifo, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    bytes = ss.str();
  });
  std::vector<float> w = {1, 2, 3};
  writeSafetensors(fifo, {{"w", DType::F32, {3}, w.data()}},
                   {{"dtc.step", "1"}});
  reader.join();
  writeRaw(copy, bytes);
  SafetensorsReader r(copy);
  EXPECT_EQ(r.metadata().count(kDataChecksumKey), 0u);
  EXPECT_EQ(r.metadata().at("dtc.step"), "1");
  std::vector<float> got(3);
  r.read(*r.find("w"), 0, got.data(), 12);
  EXPECT_EQ(got, w);
  struct stat st;
  ASSERT_EQ(lstat(fifo.c_str(), &st), 0);
  EXPECT_TRUE(S_ISFIFO(st.st_mode));
}

} // namespace
