//===- ArtifactTest.cpp - the container and the validator -----------------===//
#include "TestArtifacts.h"

#include "dtc/artifact/ArtifactFormat.h"
#include "dtc/runtime/Artifact.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <sys/stat.h>
#include <unistd.h>

using namespace dtc::rt;
using dtc::test::json;

namespace {

std::string tempDir() { return dtc::test::scratchDir("dtc-rt-test"); }

json validBody() {
  dtc::test::MlpConfig c;
  c.mesh = {2, 2};
  c.dpAxes = {0};
  c.tpAxis = 1;
  return dtc::test::mlpArtifact(c);
}

// ---- container
// -------------------------------------------------------------------

TEST(Container, RoundTrip) {
  json body = validBody();
  std::string file = encodeArtifact(body);
  ASSERT_EQ(file.rfind("dtc-artifact 1 ", 0), 0u);
  const std::string text = body.dump();
  EXPECT_EQ(file, "dtc-artifact 1 " + std::to_string(text.size()) + " " +
                      hex64(fnv1a64(text)) + "\n" + text);
  std::string out, err;
  ASSERT_TRUE(decodeArtifact(file, out, err)) << err;
  EXPECT_EQ(out, text);
  json parsed;
  ASSERT_TRUE(decodeArtifactJson(file, parsed, err)) << err;
  EXPECT_EQ(parsed, body);
}

std::string decodeError(const std::string &file) {
  std::string out, err;
  EXPECT_FALSE(decodeArtifact(file, out, err));
  EXPECT_TRUE(out.empty());
  return err;
}

TEST(Container, CorruptFilesAreRejected) {
  const std::string good = encodeArtifact(validBody());
  EXPECT_NE(decodeError(good.substr(0, good.size() - 1)).find("truncated"),
            std::string::npos);
  EXPECT_NE(decodeError(good.substr(0, 20)).find("bad artifact header"),
            std::string::npos);
  EXPECT_NE(decodeError(good + "\n").find("unexpected data after"),
            std::string::npos);
  std::string edited = good;
  edited[edited.size() - 5] ^= 1;
  EXPECT_NE(decodeError(edited).find("hash mismatch"), std::string::npos);
  std::string v2 = good;
  v2[13] = '2';
  EXPECT_NE(decodeError(v2).find("unsupported artifact version 2"),
            std::string::npos);
  EXPECT_NE(decodeError("PK\x03\x04 zip").find("not a dtc artifact"),
            std::string::npos);
  EXPECT_NE(decodeError("").find("not a dtc artifact"), std::string::npos);
  EXPECT_NE(decodeError("dtc-artifact 1 3 xyz\n{}x").find("hash"),
            std::string::npos);
  EXPECT_NE(decodeError("dtc-artifact 1 -3 0000000000000000\n").find("length"),
            std::string::npos);
  EXPECT_NE(decodeError("dtc-artifact 1 2 0000000000000000 extra\n{}")
                .find("bad artifact header"),
            std::string::npos);
  // Valid container, invalid JSON body.
  std::string bad = encodeArtifactBody("{\"format\": ");
  json j;
  std::string err;
  EXPECT_FALSE(decodeArtifactJson(bad, j, err));
  EXPECT_NE(err.find("not valid JSON"), std::string::npos) << err;
  EXPECT_FALSE(decodeArtifactJson(encodeArtifactBody("[1]"), j, err));
  EXPECT_NE(err.find("not a JSON object"), std::string::npos);
}

TEST(Container, AtomicWriteAndRead) {
  const std::string path = tempDir() + "/a.dtc";
  std::string err;
  ASSERT_TRUE(writeArtifactFile(path, validBody(), err)) << err;
  std::string bytes;
  ASSERT_TRUE(readFileBytes(path, bytes, err));
  Artifact a = loadArtifactBytes(bytes, path);
  EXPECT_EQ(a.devices, 4);
  Artifact b = loadArtifactFile(path);
  EXPECT_EQ(b.label, path);
  EXPECT_FALSE(
      writeArtifactFile(tempDir() + "/no/such/dir/a.dtc", validBody(), err));
  EXPECT_NE(err.find("no/such/dir/a.dtc"), std::string::npos) << err;
  EXPECT_FALSE(readFileBytes(tempDir(), bytes, err));
  EXPECT_NE(err.find("directory"), std::string::npos);
  try {
    loadArtifactFile(tempDir() + "/missing.dtc");
    FAIL();
  } catch (const Error &e) {
    EXPECT_NE(std::string(e.what()).find("missing.dtc: cannot open"),
              std::string::npos);
  }
}

TEST(Container, Base64) {
  const std::pair<std::string, std::string> vectors[] = {
      {"", ""},
      {"f", "Zg=="},
      {"fo", "Zm8="},
      {"foo", "Zm9v"},
      {"foob", "Zm9vYg=="},
      {"fooba", "Zm9vYmE="},
      {"foobar", "Zm9vYmFy"},
      {std::string("\0\xff\x10", 3), "AP8Q"}};
  for (const auto &[raw, enc] : vectors) {
    EXPECT_EQ(base64Encode(raw), enc);
    std::string back;
    ASSERT_TRUE(base64Decode(enc, back)) << enc;
    EXPECT_EQ(back, raw);
  }
  std::string out;
  EXPECT_TRUE(base64Decode("Zm8", out)); // padding may be omitted
  EXPECT_EQ(out, "fo");
  EXPECT_FALSE(base64Decode("Zm9v!", out));
  EXPECT_FALSE(base64Decode("Z", out));
  EXPECT_FALSE(base64Decode("Zm8===", out));
}

// ---- validator
// ----------------------------------------------------------------------

std::string validationError(const json &body, int64_t ranks = 4) {
  std::string err;
  if (checkArtifact(body, "m.dtc", ranks, err))
    return "";
  EXPECT_EQ(err.rfind("m.dtc: ", 0), 0u) << err;
  return err;
}

json &instr(json &b, const std::string &op, int nth = 0) {
  for (json &i : b["programs"][0]["instructions"])
    if (i["op"] == op && nth-- == 0)
      return i;
  throw Error("no such instruction " + op);
}
int bufferOf(const json &b, const std::string &tensor) {
  const json &bufs = b["programs"][0]["buffers"];
  for (size_t i = 0; i < bufs.size(); ++i)
    if (bufs[i].contains("tensor") && bufs[i]["tensor"] == tensor)
      return int(i);
  throw Error("no buffer for " + tensor);
}

TEST(Validator, AcceptsValidArtifacts) {
  EXPECT_EQ(validationError(validBody()), "");
  EXPECT_EQ(validationError(dtc::test::collectivesArtifact()), "");
  {
    // The three gradients' all-reduces as one bucket, laid out in order.
    json b = validBody();
    for (int k : {2, 3, 4})
      instr(b, "all_reduce", k)["attrs"]["bucket"] = 7;
    EXPECT_EQ(validationError(b), "");
    const Artifact a = parseArtifact(b, "m.dtc");
    ASSERT_EQ(a.programs[0].buckets.size(), 1u);
    const BucketDecl &bucket = a.programs[0].buckets[0];
    ASSERT_EQ(bucket.members.size(), 3u);
    EXPECT_EQ(bucket.offsets[0], 0u);
    uint64_t bytes = 0;
    for (size_t m = 0; m < 3; ++m) {
      const InstrDecl &ins =
          a.programs[0].instructions[size_t(bucket.members[m])];
      EXPECT_EQ(ins.bucket, 0);
      EXPECT_EQ(bucket.offsets[m], bytes);
      bytes += a.programs[0].buffers[size_t(ins.in[0])].bytes();
    }
    EXPECT_EQ(bucket.bytes, bytes);
    EXPECT_EQ(bucket.bufferBytes(), bytes);
  }
  {
    // Gathers and reduce-scatters: a block holds each member's smaller
    // side (the gather's operand, the reduce-scatter's result), and the
    // buffer one block per member of the group and one more.
    const Artifact a = parseArtifact(dtc::test::bucketsArtifact(true), "b.dtc");
    ASSERT_EQ(a.programs[0].buckets.size(), 2u);
    for (const BucketDecl &bucket : a.programs[0].buckets) {
      EXPECT_EQ(bucket.groupSize, 2);
      ASSERT_EQ(bucket.offsets.size(), 2u);
      EXPECT_EQ(bucket.offsets[1], 24u); // a [2, 3] f32 piece
      EXPECT_EQ(bucket.bytes, 48u);
      EXPECT_EQ(bucket.elements, 12);
      EXPECT_EQ(bucket.bufferBytes(), 3 * 48u);
      EXPECT_EQ(bucket.dataBytes(), 2 * 48u);
    }
    EXPECT_EQ(a.programs[0].buckets[0].coll, CollectiveKind::AllGather);
    EXPECT_EQ(a.programs[0].buckets[1].coll, CollectiveKind::ReduceScatter);
  }
  EXPECT_EQ(validationError(dtc::test::lmArtifact({}), 1), "");
  dtc::test::LmConfig lm;
  lm.mesh = {2, 2};
  EXPECT_EQ(validationError(dtc::test::lmArtifact(lm)), "");
  for (const char *opt : {"sgd", "adamw"}) {
    dtc::test::MlpConfig c;
    c.optimizer = opt;
    EXPECT_EQ(validationError(dtc::test::mlpArtifact(c), 1), "");
  }
  Artifact a = parseArtifact(validBody(), "m.dtc");
  EXPECT_EQ(a.mesh.str(), "2x2");
  EXPECT_EQ(a.programOf(3), 0);
  EXPECT_EQ(a.tensors[size_t(a.findTensor("w1"))].sharding,
            (Sharding{{}, {1}}));
}

struct Case {
  const char *name;
  std::function<void(json &)> edit;
  const char *expect; // substring of the message
};

TEST(Validator, RejectsBrokenArtifactsWithOneClearMessage) {
  const std::vector<Case> cases = {
      {"not an object", [](json &b) { b = json::array(); },
       "must be an object"},
      {"format", [](json &b) { b["format"] = "onnx"; },
       "format: expected \"dtc-artifact\""},
      {"version", [](json &b) { b["version"] = 1; },
       "unsupported body version 1"},
      {"missing mesh", [](json &b) { b.erase("mesh"); },
       "missing required key \"mesh\""},
      {"mesh type", [](json &b) { b["mesh"] = "2x2"; },
       "mesh: must be an array"},
      {"devices", [](json &b) { b["devices"] = 8; },
       "devices: 8 does not match the mesh 2x2"},
      {"plan type", [](json &b) { b["plan"] = 3; }, "plan: must be an object"},
      {"comm axis", [](json &b) { b["communicators"][0]["mesh_axes"] = {2}; },
       "mesh axis 2 does not exist"},
      {"comm dup", [](json &b) { b["communicators"][1]["name"] = "dp"; },
       "declared twice"},
      {"tensor role", [](json &b) { b["tensors"][0]["role"] = "weight"; },
       "unknown role \"weight\""},
      {"tensor dtype", [](json &b) { b["tensors"][0]["dtype"] = "f64"; },
       "unknown dtype \"f64\""},
      {"tensor shape", [](json &b) { b["tensors"][0]["shape"] = {8, 0}; },
       "dimension sizes must be >= 1"},
      {"sharding rank",
       [](json &b) {
         b["tensors"][0]["sharding"] = json::array({json::array()});
       },
       "sharding has 1 entries for a rank-2 tensor"},
      // 9 rows over 2 ranks are padded pieces of 5, not the buffer's 4.
      {"sharding pieces", [](json &b) { b["tensors"][0]["shape"] = {9, 16}; },
       "does not match its global shape [9, 16] divided by its sharding, [5, "
       "16]"},
      {"sharding axis twice",
       [](json &b) {
         b["tensors"][0]["sharding"] =
             json::array({json::array({0}), json::array({0})});
       },
       "uses mesh axis 0 twice"},
      // Pieces of 1 row cannot cover 8 rows over 2 ranks.
      {"pieces too small", [](json &b) { b["tensors"][0]["pieces"] = {1, 0}; },
       "dimension 0 of size 8 cannot be split into 2 pieces of 1"},
      {"pieces rank", [](json &b) { b["tensors"][0]["pieces"] = {0}; },
       "pieces has 1 entries for a rank-2 tensor"},
      {"shard_offset axis",
       [](json &b) {
         b["programs"][0]["slots"].push_back(
             {{"bytes", 8}, {"category", "activation"}});
         int slot = int(b["programs"][0]["slots"].size()) - 1;
         b["programs"][0]["buffers"].push_back(
             {{"slot", slot}, {"dtype", "i64"}, {"shape", json::array()}});
         int id = int(b["programs"][0]["buffers"].size()) - 1;
         b["programs"][0]["instructions"].push_back(
             {{"op", "shard_offset"},
              {"in", json::array()},
              {"out", {id}},
              {"attrs", {{"grid_axes", {5}}, {"piece_size", 4}}}});
       },
       "attribute 'grid_axes' names mesh axis 5 beyond the mesh 2x2"},
      {"shard_offset axis twice",
       [](json &b) {
         b["programs"][0]["slots"].push_back(
             {{"bytes", 8}, {"category", "activation"}});
         int slot = int(b["programs"][0]["slots"].size()) - 1;
         b["programs"][0]["buffers"].push_back(
             {{"slot", slot}, {"dtype", "i64"}, {"shape", json::array()}});
         int id = int(b["programs"][0]["buffers"].size()) - 1;
         b["programs"][0]["instructions"].push_back(
             {{"op", "shard_offset"},
              {"in", json::array()},
              {"out", {id}},
              {"attrs", {{"grid_axes", {1, 1}}, {"piece_size", 4}}}});
       },
       "mesh axis 1 appears twice in 'grid_axes'"},
      {"int input max", [](json &b) { b["tensors"][1].erase("max"); },
       "needs \"max\""},
      {"striped not an input",
       [](json &b) { b["tensors"][2]["striped"] = {{"dim", 0}, {"ways", 2}}; },
       "\"striped\" is only allowed on inputs"},
      {"striped dimension",
       [](json &b) { b["tensors"][1]["striped"] = {{"dim", 5}, {"ways", 2}}; },
       "striped dimension 5 is not a dimension"},
      {"striped ways",
       [](json &b) { b["tensors"][1]["striped"] = {{"dim", 0}, {"ways", 3}}; },
       "must divide evenly"},
      {"zigzag chunks",
       [](json &b) {
         // Two chunks per rank: a dimension of n never holds 2n.
         b["tensors"][1]["zigzag"] = {{"dim", 0},
                                      {"ways", b["tensors"][1]["shape"][0]}};
       },
       "must divide evenly into"},
      {"zigzag not an input",
       [](json &b) { b["tensors"][2]["zigzag"] = {{"dim", 0}, {"ways", 1}}; },
       "\"zigzag\" is only allowed on inputs"},
      {"striped and zigzag",
       [](json &b) {
         b["tensors"][1]["striped"] = {{"dim", 0}, {"ways", 1}};
         b["tensors"][1]["zigzag"] = {{"dim", 0}, {"ways", 1}};
       },
       "exclude each other"},
      {"param init", [](json &b) { b["tensors"][2]["init"] = "xavier"; },
       "bad init \"xavier\""},
      {"param dtype", [](json &b) { b["tensors"][2]["dtype"] = "i32"; },
       "a param tensor must be f32"},
      {"no loss",
       [](json &b) {
         for (json &t : b["tensors"])
           if (t["role"] == "loss")
             t["role"] = "input";
       },
       "exactly one tensor with role \"loss\""},
      {"optimizer_state of",
       [](json &b) {
         for (json &t : b["tensors"])
           if (t["role"] == "optimizer_state") {
             t["of"] = "nope";
             break;
           }
       },
       "\"of\" names 'nope'"},
      {"rank out of range",
       [](json &b) { b["programs"][0]["ranks"] = {0, 1, 2, 4}; },
       "rank 4 is out of range"},
      {"rank not covered",
       [](json &b) { b["programs"][0]["ranks"] = {0, 1, 2}; },
       "rank 3 is not run by any program"},
      {"rank twice",
       [](json &b) {
         json p = b["programs"][0];
         p["name"] = "other";
         p["ranks"] = {3};
         b["programs"].push_back(p);
       },
       "rank 3 is already run by program 'spmd'"},
      {"slot id", [](json &b) { b["programs"][0]["buffers"][0]["slot"] = 999; },
       "slot 999 does not exist"},
      {"slot too small",
       [](json &b) { b["programs"][0]["slots"][0]["bytes"] = 4; },
       "needs 256 bytes but slot 0 has 4"},
      {"category",
       [](json &b) { b["programs"][0]["slots"][0]["category"] = "heap"; },
       "unknown memory category \"heap\""},
      {"unknown tensor",
       [](json &b) { b["programs"][0]["buffers"][0]["tensor"] = "zz"; },
       "tensor 'zz' is not declared"},
      {"local shape",
       [](json &b) {
         int i = bufferOf(b, "w1");
         b["programs"][0]["buffers"][size_t(i)]["shape"] = {16, 32};
         b["programs"][0]["slots"]
          [size_t(b["programs"][0]["buffers"][size_t(i)]["slot"].get<int>())]
          ["bytes"] = 4096;
       },
       "local shape [16, 32] of tensor 'w1' does not match its global shape "
       "[16, 32] divided by its sharding, [16, 16]"},
      {"buffer dtype vs tensor",
       [](json &b) {
         b["programs"][0]["buffers"][size_t(bufferOf(b, "y"))]["dtype"] = "f32";
       },
       "differs from tensor 'y'"},
      {"unknown kernel", [](json &b) { instr(b, "gelu")["op"] = "swish"; },
       "unknown kernel \"swish\""},
      {"kernel arity", [](json &b) { instr(b, "gelu")["in"].push_back(0); },
       "expects 1 input(s) and 1 output(s)"},
      {"buffer id", [](json &b) { instr(b, "gelu")["in"] = {12345}; },
       "names buffer 12345, which does not exist"},
      {"kernel shapes",
       [](json &b) {
         instr(b, "matmul")["in"] = json::array(
             {instr(b, "matmul")["in"][1], instr(b, "matmul")["in"][0]});
       },
       "instruction 0 (matmul): contraction sizes differ"},
      {"kernel attrs",
       [](json &b) { instr(b, "transpose")["attrs"]["permutation"] = {0, 0}; },
       "(transpose): 'permutation' is not a permutation"},
      {"missing attr",
       [](json &b) { instr(b, "adam_update")["attrs"].erase("beta2"); },
       "missing attribute 'beta2'"},
      {"attrs type", [](json &b) { instr(b, "gelu")["attrs"] = json::array(); },
       "attrs: must be an object"},
      {"unknown comm",
       [](json &b) { instr(b, "all_reduce")["attrs"]["comm"] = "pp"; },
       "communicator 'pp' is not declared"},
      {"bad reduction",
       [](json &b) { instr(b, "all_reduce")["attrs"]["reduction"] = "prod"; },
       "unknown reduction \"prod\""},
      {"bucket id",
       [](json &b) { instr(b, "all_reduce")["attrs"]["bucket"] = -1; },
       "attribute 'bucket' = -1 is not a bucket id"},
      {"bucket interleaved",
       [](json &b) {
         instr(b, "all_reduce", 0)["attrs"]["bucket"] = 0;
         instr(b, "all_reduce", 1)["attrs"]["bucket"] = 1;
         instr(b, "all_reduce", 2)["attrs"]["bucket"] = 0;
       },
       "(all_reduce in bucket 0): the bucket's members are interleaved"},
      {"bucket mixes communicators",
       [](json &b) {
         instr(b, "all_reduce", 0)["attrs"]["bucket"] = 0; // on tp
         instr(b, "all_reduce", 1)["attrs"]["bucket"] = 0; // on dp
       },
       "its collective, communicator, reduction or dtype differs from the "
       "bucket's first member"},
      {"bucket result read before the bucket is reduced",
       [](json &b) {
         // The gradients dw1 and dw2 in one bucket; between them another
         // all-reduce writes dw1's slot, which the bucket writes later.
         instr(b, "all_reduce", 2)["attrs"]["bucket"] = 0;
         instr(b, "all_reduce", 4)["attrs"]["bucket"] = 0;
         json &between = instr(b, "all_reduce", 3);
         between["in"] = instr(b, "all_reduce", 2)["in"];
         between["out"] = between["in"];
       },
       "'s result before its bucket's collective runs"},
      {"bucket mixes collectives",
       [](json &b) {
         b = dtc::test::bucketsArtifact(true);
         instr(b, "reduce_scatter", 0)["attrs"]["bucket"] = 0;
       },
       "(reduce_scatter in bucket 0): its collective, communicator, "
       "reduction or dtype differs"},
      {"evaluation runs part of a bucket",
       [](json &b) {
         b = dtc::test::bucketsArtifact(true);
         // The first gather and the loss, not the gather sharing its bucket.
         b["programs"][0]["evaluation"] = {{"instructions", {0, 4}}};
       },
       "evaluation: instruction 0 (all_gather): is in a bucket with "
       "instruction 1, which the evaluation does not run"},
      {"bucket of another collective",
       [](json &b) {
         b = dtc::test::collectivesArtifact();
         instr(b, "shift")["attrs"]["bucket"] = 0;
       },
       "attribute 'bucket' is for all_reduce, reduce_scatter and all_gather"},
      {"in place not allowed",
       [](json &b) { instr(b, "gelu")["out"] = instr(b, "gelu")["in"]; },
       "cannot run in place"},
      {"foreign buffer in an input slot",
       [](json &b) {
         b["programs"][0]["buffers"].push_back(
             {{"slot", 0}, {"dtype", "i32"}, {"shape", {1}}});
       },
       "shares slot 0"},
      {"constant on tensor",
       [](json &b) {
         b["programs"][0]["constants"].push_back(
             {{"buffer", bufferOf(b, "w1")}, {"splat", 1.0}});
       },
       "holds tensor 'w1' and cannot be a constant"},
      {"constant data size",
       [](json &b) {
         b["programs"][0]["constants"][0] = {
             {"buffer", b["programs"][0]["constants"][0]["buffer"]},
             {"data", "AAAA"}};
       },
       "\"data\" has 3 bytes but buffer"},
      {"constant base64",
       [](json &b) {
         b["programs"][0]["constants"][0] = {
             {"buffer", b["programs"][0]["constants"][0]["buffer"]},
             {"data", "A*=="}};
       },
       "not valid base64"},
      {"unbound param",
       [](json &b) {
         b["programs"][0]["buffers"][size_t(bufferOf(b, "b1"))].erase("tensor");
       },
       "no program binds this param tensor"},
  };
  for (const Case &c : cases) {
    json b = validBody();
    c.edit(b);
    const std::string err = validationError(b);
    EXPECT_NE(err.find(c.expect), std::string::npos)
        << c.name << ": got \"" << err << "\"";
  }
}

TEST(Validator, RankCount) {
  std::string err = validationError(validBody(), 3);
  EXPECT_NE(
      err.find("compiled for 4 devices (mesh 2x2) but 3 ranks are running"),
      std::string::npos)
      << err;
}

TEST(Validator, SplatsAndDataConstants) {
  json b = dtc::test::mlpArtifact({});
  json &p = b["programs"][0];
  // A data constant for an f32[2] buffer: 1.0f, -2.0f little-endian.
  p["slots"].push_back({{"bytes", 8}, {"category", "constant"}});
  p["buffers"].push_back(
      {{"slot", p["slots"].size() - 1}, {"dtype", "f32"}, {"shape", {2}}});
  p["constants"].push_back(
      {{"buffer", p["buffers"].size() - 1}, {"data", "AACAPwAAAMA="}});
  p["slots"].push_back({{"bytes", 8}, {"category", "constant"}});
  p["buffers"].push_back({{"slot", p["slots"].size() - 1},
                          {"dtype", "i64"},
                          {"shape", json::array()}});
  p["constants"].push_back(
      {{"buffer", p["buffers"].size() - 1}, {"splat", 1.5}});
  std::string err = validationError(b, 1);
  EXPECT_NE(err.find("splat value is not a valid i64"), std::string::npos)
      << err;
  p["constants"].back()["splat"] = -7;
  EXPECT_EQ(validationError(b, 1), "");
  Artifact a = parseArtifact(b, "m.dtc");
  const ConstantDecl &c = a.programs[0].constants[1];
  ASSERT_EQ(c.data.size(), 8u);
  float f[2];
  std::memcpy(f, c.data.data(), 8);
  EXPECT_EQ(f[0], 1.0f);
  EXPECT_EQ(f[1], -2.0f);
}

TEST(Validator, ViewsOfPersistentSlotsAndInPlaceRules) {
  // A reshape view of a param's slot is fine; a foreign buffer there is not.
  json b = dtc::test::mlpArtifact({});
  json &p = b["programs"][0];
  const int w1 = bufferOf(b, "w1");
  p["buffers"].push_back({{"slot", p["buffers"][size_t(w1)]["slot"]},
                          {"dtype", "f32"},
                          {"shape", {512}}});
  EXPECT_EQ(validationError(b, 1), "");
  p["buffers"].back()["shape"] = {256};
  EXPECT_NE(validationError(b, 1).find("a param slot holds nothing else"),
            std::string::npos);
  // reshape may run in place; adam_update on (p, m, v) too (the builder does).
  json c = dtc::test::mlpArtifact({});
  json &q = c["programs"][0];
  q["slots"].push_back({{"bytes", 64}, {"category", "activation"}});
  q["buffers"].push_back(
      {{"slot", q["slots"].size() - 1}, {"dtype", "f32"}, {"shape", {4, 4}}});
  q["buffers"].push_back(
      {{"slot", q["slots"].size() - 1}, {"dtype", "f32"}, {"shape", {16}}});
  const int v1 = int(q["buffers"].size()) - 2, v2 = v1 + 1;
  q["instructions"].push_back({{"op", "reshape"}, {"in", {v1}}, {"out", {v2}}});
  EXPECT_EQ(validationError(c, 1), "");
  q["instructions"].push_back({{"op", "neg"}, {"in", {v1}}, {"out", {v1}}});
  EXPECT_NE(validationError(c, 1).find("cannot run in place"),
            std::string::npos);
  q["buffers"].push_back(
      {{"slot", q["slots"].size() - 1}, {"dtype", "f32"}, {"shape", {4, 4}}});
  const int v3 = int(q["buffers"].size()) - 1;
  q["slots"].push_back({{"bytes", 64}, {"category", "activation"}});
  q["buffers"].push_back(
      {{"slot", q["slots"].size() - 1}, {"dtype", "f32"}, {"shape", {4, 4}}});
  const int u = int(q["buffers"].size()) - 1;
  q["instructions"].back() = {
      {"op", "max_grad"}, {"in", {u, u, u}}, {"out", {v1, v3}}};
  EXPECT_NE(validationError(c, 1).find("outputs 0 and 1 share memory"),
            std::string::npos)
      << validationError(c, 1);
}

// ---- the programs against each other
// ---------------------------------------------

TEST(Validator, ProgramsMustAgreeOnTheirCollectives) {
  using dtc::test::CollectiveSpec;
  using dtc::test::programsArtifact;
  const CollectiveSpec sum8{"all_reduce", 8, "sum", "a"};
  const std::vector<CollectiveSpec> agreed = {sum8,
                                              {"all_gather", 4, "", "b"},
                                              {"reduce_scatter", 8, "max", "a"},
                                              {"all_to_all", 6, "", "a"}};
  EXPECT_EQ(validationError(programsArtifact(agreed, agreed), 2), "");
  struct Mismatch {
    std::vector<CollectiveSpec> p1;
    const char *expect;
  };
  const Mismatch cases[] = {
      {{{"all_reduce", 4, "sum", "a"}},
       "programs 'p0' (rank 0) and 'p1' (rank 1) disagree on communicator 'a' "
       "(the group of "
       "ranks 0, 1): its collective #1 is all_reduce (sum) of 8 f32 on 'a' "
       "('p0' instruction "
       "1) in one and all_reduce (sum) of 4 f32 on 'a' ('p1' instruction 1) in "
       "the other"},
      {{{"all_reduce", 8, "max", "a"}}, "all_reduce (max) of 8 f32"},
      {{{"all_gather", 8, "", "a"}}, "all_gather of 8 f32 into 16"},
      {{{"all_reduce", 8, "sum", "a", DType::I32}},
       "all_reduce (sum) of 8 i32"},
      {{},
       "'p0' makes 1 collective on it and 'p1' 0; the first without a partner "
       "is "
       "all_reduce (sum) of 8 f32 on 'a' ('p0' instruction 1)"},
      {{sum8, sum8}, "'p0' makes 1 collective on it and 'p1' 2"},
  };
  for (const Mismatch &m : cases) {
    const std::string err = validationError(programsArtifact({sum8}, m.p1), 2);
    EXPECT_NE(err.find(m.expect), std::string::npos) << err;
  }
  // Each communicator agrees, but the order waits forever: rank 0 is in
  // 'a' while rank 1 is in 'b'.
  const std::string err =
      validationError(programsArtifact({sum8, {"all_reduce", 8, "sum", "b"}},
                                       {{"all_reduce", 8, "sum", "b"}, sum8}),
                      2);
  EXPECT_NE(
      err.find(
          "the programs' collectives wait for each other forever: rank 0 waits "
          "in "
          "all_reduce (sum) of 8 f32 on 'a' ('p0' instruction 1) for rank 1, "
          "which "
          "waits in all_reduce (sum) of 8 f32 on 'b' ('p1' instruction 1)"),
      std::string::npos)
      << err;
}

TEST(Container, HostileInputIsRefusedBeforeParsing) {
  // Deep nesting: an error, not a stack overflow when printed or freed.
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  json j;
  std::string err;
  EXPECT_FALSE(parseJsonText(deep, j, err));
  EXPECT_NE(err.find("nesting deeper than 100 levels at byte 100"),
            std::string::npos)
      << err;
  EXPECT_FALSE(
      decodeArtifactJson(encodeArtifactBody("{\"a\":" + deep + "}"), j, err));
  EXPECT_NE(err.find("nesting deeper"), std::string::npos) << err;
  // Brackets inside strings do not count.
  EXPECT_TRUE(
      parseJsonText("{\"s\": \"" + std::string(500, '[') + "\\\"[\"}", j, err))
      << err;
  // Devices, FIFOs and oversize files are not read at all.
  std::string bytes;
  EXPECT_FALSE(readFileBytes("/dev/zero", bytes, err));
  EXPECT_NE(err.find("not a regular file"), std::string::npos) << err;
  const std::string fifo = tempDir() + "/fifo.dtc";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_FALSE(readFileBytes(fifo, bytes, err))
      << "must not block waiting for a writer";
  const std::string big = tempDir() + "/big.dtc";
  ASSERT_TRUE(writeOutputFile(big, std::string(1000, 'x'), err));
  EXPECT_FALSE(readFileBytes(big, bytes, err, 999));
  EXPECT_NE(err.find("the file has 1000 bytes, more than the 999 allowed"),
            std::string::npos)
      << err;
}

} // namespace
