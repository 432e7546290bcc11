//===- TokenDataTest.cpp - --data windows, validation, sharded fill -------===//
#include "TestArtifacts.h"

#include "dtc/artifact/ArtifactFormat.h"
#include "dtc/runtime/TokenData.h"

#include <gtest/gtest.h>

#include <algorithm>

#include <unistd.h>

using namespace dtc::rt;

namespace {

std::string tempDir() { return dtc::test::scratchDir("dtc-tok-test"); }

template <class T>
std::string writeTokens(const std::string &name, const std::vector<T> &t) {
  const std::string p = tempDir() + "/" + name;
  std::string err;
  EXPECT_TRUE(
      writeOutputFile(p,
                      std::string(reinterpret_cast<const char *>(t.data()),
                                  t.size() * sizeof(T)),
                      err));
  return p;
}

Artifact lm(std::vector<int64_t> mesh) {
  dtc::test::LmConfig c;
  c.mesh = mesh;
  return parseArtifact(dtc::test::lmArtifact(c), "lm.dtc");
}

TEST(TokenData, Binding) {
  Artifact a = lm({1});
  TokenBinding b = bindTokenInputs(a);
  EXPECT_EQ(a.tensors[size_t(b.ids)].name, "ids");
  EXPECT_EQ(a.tensors[size_t(b.labels)].name, "labels");
  EXPECT_EQ(b.B, 4);
  EXPECT_EQ(b.S, 8);
  EXPECT_EQ(b.bound, 50);
  Artifact mlp = parseArtifact(dtc::test::mlpArtifact({}), "mlp.dtc");
  try {
    bindTokenInputs(mlp);
    FAIL();
  } catch (const Error &e) {
    EXPECT_NE(std::string(e.what()).find(
                  "mlp.dtc: token data (--data, --eval-data) needs two integer "
                  "inputs of shape [B, S]"),
              std::string::npos)
        << e.what();
  }
}

TEST(TokenData, ShuffledPassesVisitEveryWindowOnce) {
  // n = 100 tokens, S = 8: P = (100 - 9) / 8 + 1 = 12 windows per pass,
  // starting at 0, 8, ..., 88; B = 4 rows, so 3 steps per pass.
  const int64_t B = 4, S = 8, n = 100, P = 12;
  std::vector<std::vector<int64_t>> passes(5);
  for (int64_t k = 0; k < 15; ++k)
    for (int64_t r = 0; r < B; ++r) {
      const int64_t start = shuffledWindowStart(k, r, B, S, n, 7);
      EXPECT_EQ(start, shuffledWindowStart(k, r, B, S, n, 7));
      passes[size_t((k * B + r) / P)].push_back(start);
    }
  std::vector<int64_t> every;
  for (int64_t j = 0; j < P; ++j)
    every.push_back(j * S);
  for (std::vector<int64_t> pass : passes) {
    std::sort(pass.begin(), pass.end());
    EXPECT_EQ(pass, every);
  }
  // The order differs between passes and between seeds, and is not the
  // file's.
  std::vector<int64_t> first, second, otherSeed, inOrder;
  for (int64_t w = 0; w < P; ++w) {
    first.push_back(shuffledWindowStart(w / B, w % B, B, S, n, 7));
    second.push_back(shuffledWindowStart((w + P) / B, (w + P) % B, B, S, n, 7));
    otherSeed.push_back(shuffledWindowStart(w / B, w % B, B, S, n, 8));
    inOrder.push_back(w * S);
  }
  EXPECT_NE(first, second);
  EXPECT_NE(first, otherSeed);
  EXPECT_NE(first, inOrder);
  // A file of exactly one window, and a step far out (no overflow).
  EXPECT_EQ(shuffledWindowStart(5, 3, B, S, S + 2, 1), 0);
  const int64_t far = shuffledWindowStart(int64_t(1) << 60, 3, B, S, n, 7);
  EXPECT_EQ(far % S, 0);
  EXPECT_LT(far, n - S);
}

TEST(TokenData, WindowsFollowTheSpec) {
  std::vector<uint16_t> toks(100);
  for (size_t i = 0; i < toks.size(); ++i)
    toks[i] = uint16_t((i * 7) % 50);
  const std::string p = writeTokens("w.bin", toks);
  Artifact a = lm({1});
  TokenBinding b = bindTokenInputs(a);
  TokenFile f(p, TokenDType::U16);
  ASSERT_EQ(f.size(), 100);
  f.validate(b);
  for (int64_t k : {0, 1, 5, 1000003}) {
    std::vector<int32_t> ids(32), labels(32);
    Piece whole{{4, 8}, {0, 0}, {4, 8}};
    fillTokens(f, b, k, false, ids.data(), DType::I32, whole);
    fillTokens(f, b, k, true, labels.data(), DType::I32, whole);
    for (int64_t r = 0; r < 4; ++r) {
      const int64_t start = ((k * 4 + r) * 8) % (100 - 8 - 1);
      EXPECT_EQ(windowStart(k, r, 4, 8, 100), start);
      for (int64_t s = 0; s < 8; ++s) {
        EXPECT_EQ(ids[size_t(r * 8 + s)], toks[size_t(start + s)]);
        EXPECT_EQ(labels[size_t(r * 8 + s)], toks[size_t(start + s + 1)]);
      }
    }
  }
}

TEST(TokenData, ShardedPiecesAreSlicesOfTheGlobalBatch) {
  std::vector<uint32_t> toks(300);
  for (size_t i = 0; i < toks.size(); ++i)
    toks[i] = uint32_t((i * 13) % 50);
  const std::string p = writeTokens("s.bin", toks);
  Artifact a = lm({2, 2});
  TokenBinding b = bindTokenInputs(a);
  TokenFile f(p, TokenDType::U32);
  std::vector<int32_t> whole(32);
  fillTokens(f, b, 3, false, whole.data(), DType::I32,
             Piece{{4, 8}, {0, 0}, {4, 8}});
  const Sharding shardings[] = {{{0, 1}, {}}, {{0}, {1}}, {{}, {1, 0}}};
  for (const Sharding &s : shardings)
    for (int64_t r = 0; r < 4; ++r) {
      Piece piece = pieceOf(a.mesh, s, {4, 8}, a.mesh.coords(r));
      std::vector<int64_t> local(static_cast<size_t>(numel(piece.local)));
      fillTokens(f, b, 3, false, local.data(), DType::I64, piece);
      for (int64_t i = 0; i < piece.local[0]; ++i)
        for (int64_t j = 0; j < piece.local[1]; ++j)
          EXPECT_EQ(
              local[size_t(i * piece.local[1] + j)],
              whole[size_t((piece.offset[0] + i) * 8 + piece.offset[1] + j)]);
    }
}

// Ring attention's striped layout: the program's index r * c + j of the
// sequence is position j * n + r, so rank r of the sp axis (the second
// here) reads positions r, r + 2, r + 4, ... of every window, and the
// whole tensor read in program order is the natural one permuted.
TEST(TokenData, StripedPiecesHoldEveryNthPosition) {
  std::vector<uint32_t> toks(300);
  for (size_t i = 0; i < toks.size(); ++i)
    toks[i] = uint32_t((i * 7) % 50);
  const std::string p = writeTokens("striped.bin", toks);
  Artifact a = lm({2, 2});
  TokenBinding b = bindTokenInputs(a);
  TokenFile f(p, TokenDType::U32);
  std::vector<int32_t> natural(32);
  fillTokens(f, b, 2, true, natural.data(), DType::I32,
             Piece{{4, 8}, {0, 0}, {4, 8}});
  for (int64_t r = 0; r < 4; ++r) {
    Piece piece = pieceOf(a.mesh, Sharding{{0}, {1}}, {4, 8}, a.mesh.coords(r));
    piece.orderedDim = 1;
    piece.orderedWays = 2;
    piece.order = SequenceOrder::Striped;
    std::vector<int32_t> local(static_cast<size_t>(numel(piece.local)));
    fillTokens(f, b, 2, true, local.data(), DType::I32, piece);
    const int64_t rank = a.mesh.coords(r)[1];
    for (int64_t i = 0; i < piece.local[0]; ++i)
      for (int64_t j = 0; j < piece.local[1]; ++j)
        EXPECT_EQ(local[size_t(i * 4 + j)],
                  natural[size_t((piece.offset[0] + i) * 8 + j * 2 + rank)])
            << "rank " << r << " row " << i << " column " << j;
  }
  // The whole tensor in program order, against the formula's inverse.
  Piece whole{{4, 8}, {0, 0}, {4, 8}};
  whole.orderedDim = 1;
  whole.orderedWays = 2;
  whole.order = SequenceOrder::Striped;
  std::vector<int32_t> program(32);
  fillTokens(f, b, 2, true, program.data(), DType::I32, whole);
  for (int64_t i = 0; i < 4; ++i)
    for (int64_t pos = 0; pos < 8; ++pos)
      EXPECT_EQ(program[size_t(i * 8 + stripedIndex(pos, 8, 2))],
                natural[size_t(i * 8 + pos)]);
  EXPECT_EQ(stripedPosition(stripedIndex(5, 12, 3), 12, 3), 5);
  EXPECT_EQ(stripedPosition(6, 12, 3), 7); // rank 1's row 2: 2 * 3 + 1
}

// Zigzag: a sequence of 8 over 2 ranks is 4 chunks of 2; rank 0 holds
// positions 0, 1, 6, 7 and rank 1 holds 2, 3, 4, 5 (written out, not
// derived from the formula under test).
TEST(TokenData, ZigzagPiecesHoldAChunkFromEachEnd) {
  std::vector<uint32_t> toks(300);
  for (size_t i = 0; i < toks.size(); ++i)
    toks[i] = uint32_t((i * 7) % 50);
  const std::string p = writeTokens("zigzag.bin", toks);
  Artifact a = lm({2, 2});
  TokenBinding b = bindTokenInputs(a);
  TokenFile f(p, TokenDType::U32);
  std::vector<int32_t> natural(32);
  fillTokens(f, b, 2, true, natural.data(), DType::I32,
             Piece{{4, 8}, {0, 0}, {4, 8}});
  const int64_t positions[2][4] = {{0, 1, 6, 7}, {2, 3, 4, 5}};
  for (int64_t r = 0; r < 4; ++r) {
    Piece piece = pieceOf(a.mesh, Sharding{{0}, {1}}, {4, 8}, a.mesh.coords(r));
    piece.orderedDim = 1;
    piece.orderedWays = 2;
    piece.order = SequenceOrder::Zigzag;
    std::vector<int32_t> local(static_cast<size_t>(numel(piece.local)));
    fillTokens(f, b, 2, true, local.data(), DType::I32, piece);
    const int64_t rank = a.mesh.coords(r)[1];
    for (int64_t i = 0; i < piece.local[0]; ++i)
      for (int64_t j = 0; j < piece.local[1]; ++j)
        EXPECT_EQ(
            local[size_t(i * 4 + j)],
            natural[size_t((piece.offset[0] + i) * 8 + positions[rank][j])])
            << "rank " << r << " row " << i << " column " << j;
  }
  for (int64_t length : {8, 12, 24})
    for (int64_t ways : {1, 2, 3})
      if (length % (2 * ways) == 0)
        for (int64_t pos = 0; pos < length; ++pos) {
          const int64_t index = zigzagIndex(pos, length, ways);
          EXPECT_EQ(zigzagPosition(index, length, ways), pos);
          EXPECT_EQ(orderedIndex(SequenceOrder::Zigzag, pos, length, ways),
                    index);
        }
  // 3 ranks over 12: chunks of 2; rank 1 holds 2, 3 and 8, 9.
  EXPECT_EQ(zigzagPosition(4, 12, 3), 2);
  EXPECT_EQ(zigzagPosition(6, 12, 3), 8);
  EXPECT_EQ(zigzagIndex(11, 12, 3), 3);
}

TEST(TokenData, ValidationErrors) {
  Artifact a = lm({1});
  TokenBinding b = bindTokenInputs(a);
  std::vector<uint16_t> toks(40, 3);
  toks[17] = 50; // == max: not below it
  {
    TokenFile f(writeTokens("bad.bin", toks), TokenDType::U16);
    try {
      f.validate(b);
      FAIL();
    } catch (const Error &e) {
      EXPECT_NE(
          std::string(e.what()).find(
              "bad.bin: token 50 at byte offset 34 (token 17) is not below 50"),
          std::string::npos)
          << e.what();
    }
  }
  {
    TokenFile f(writeTokens("small.bin", std::vector<uint16_t>(9, 1)),
                TokenDType::U16);
    try {
      f.validate(b);
      FAIL();
    } catch (const Error &e) {
      EXPECT_NE(std::string(e.what()).find(
                    "small.bin: 9 tokens is too few for one window"),
                std::string::npos)
          << e.what();
    }
    TokenFile ok(writeTokens("ten.bin", std::vector<uint16_t>(10, 1)),
                 TokenDType::U16);
    ok.validate(b); // exactly S + 2
  }
  try {
    TokenFile f(writeTokens("odd.bin", std::vector<uint16_t>(11, 1)),
                TokenDType::U32);
    FAIL();
  } catch (const Error &e) {
    EXPECT_NE(std::string(e.what()).find(
                  "odd.bin: size 22 bytes is not a multiple of 4"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(TokenFile(tempDir() + "/none.bin", TokenDType::U16), Error);
  TokenDType t;
  EXPECT_TRUE(parseTokenDType("uint32", t));
  EXPECT_FALSE(parseTokenDType("int16", t));
}

// A token file cut short during a run: an error naming the file at the next
// batch that needs the lost tokens (the file is read, not mapped: no SIGBUS).
TEST(TokenData, ATruncatedFileIsAnErrorNotASignal) {
  std::vector<uint16_t> toks(400);
  for (size_t i = 0; i < toks.size(); ++i)
    toks[i] = uint16_t(i % 50);
  const std::string p = writeTokens("cut.bin", toks);
  Artifact a = lm({1});
  TokenBinding b = bindTokenInputs(a);
  TokenFile f(p, TokenDType::U16);
  f.validate(b);
  std::vector<int32_t> ids(32);
  const Piece whole{{4, 8}, {0, 0}, {4, 8}};
  fillTokens(f, b, 0, false, ids.data(), DType::I32, whole);
  ASSERT_EQ(truncate(p.c_str(), 100), 0); // 50 tokens left
  try {
    for (int64_t step = 1; step < 20; ++step)
      fillTokens(f, b, step, false, ids.data(), DType::I32, whole);
    FAIL() << "windows past the new end were read";
  } catch (const Error &e) {
    EXPECT_NE(std::string(e.what()).find(
                  "cut.bin: the token file shrank during the run"),
              std::string::npos)
        << e.what();
  }
  // Rewritten in place with tokens the model cannot take: named too.
  std::vector<uint16_t> big(400, 49);
  big[1] = 60;
  std::string err;
  const std::string q = tempDir() + "/changed.bin";
  ASSERT_TRUE(writeOutputFile(
      q, std::string(reinterpret_cast<const char *>(toks.data()), 800), err));
  TokenFile g(q, TokenDType::U16);
  g.validate(b);
  {
    FILE *fp = std::fopen(q.c_str(), "r+b");
    std::fwrite(big.data(), 2, big.size(), fp);
    std::fclose(fp);
  }
  try {
    fillTokens(g, b, 0, true, ids.data(), DType::I32, whole);
    FAIL();
  } catch (const Error &e) {
    EXPECT_NE(std::string(e.what()).find(
                  "changed.bin: token 60 (token 1) is not below 50, the "
                  "max of input 'ids': the file changed during the run"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(TokenFile("/dev/zero", TokenDType::U16), Error);
}

} // namespace
