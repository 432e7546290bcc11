//===- Parser.h - the artifact parser's steps (internal) --------*- C++ -*-===//
//
// One Parser per parseArtifact() call; its steps are spread over Parse.cpp
// (the sections), ParseTensors.cpp, ParseProgram.cpp, VerifyInstruction.cpp,
// VerifyPipeline.cpp and Agreement.cpp (the programs against each other).
//
// Only non-throwing nlohmann accessors are used (every value's type is checked
// before get<>), so behaviour does not depend on how nlohmann was configured
// in other translation units of the same binary. fail() throws Error; the
// library's entry points (Parse.cpp) catch it: nothing escapes the library.
//
//===----------------------------------------------------------------------===//
#ifndef DTC_ARTIFACT_PARSER_H
#define DTC_ARTIFACT_PARSER_H

#include "dtc/artifact/Artifact.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace dtc::artifact::detail {

using json = nlohmann::json;

constexpr int64_t kMaxElements = kMaxTensorElements;

/// Where a pipeline message is sent or received: the program, the list kind
/// (0 before the micro-batches, 1 forward, 2 input gradients, 3 weight
/// gradients, 4 after the micro-batches), the virtual stage, the peer, the
/// communicator and the buffer.
struct MessageEnd {
  int program = -1, kind = 0, vstage = 0, peer = 0, comm = 0;
  const BufferDecl *buffer = nullptr;
};
/// Message id -> one end.
using MessageEnds = std::map<int64_t, MessageEnd>;

class Parser {
public:
  explicit Parser(std::string label) : label_(std::move(label)) {}
  /// Skips the replay of every rank's communication (checkProgramsAgree),
  /// for a body that passed it in this process already.
  void trustAgreement() { agreementChecked_ = true; }

  /// Throws Error: the parser's steps stop at the first problem, and the
  /// library's entry points turn it into their error message.
  [[noreturn]] void fail(const std::string &where,
                         const std::string &msg) const {
    throw Error(label_ + ": " + (where.empty() ? "" : where + ": ") + msg);
  }

  const json &req(const json &obj, const char *key,
                  const std::string &where) const {
    auto it = obj.find(key);
    if (it == obj.end())
      fail(where, std::string("missing required key \"") + key + "\"");
    return *it;
  }
  const json *opt(const json &obj, const char *key) const {
    auto it = obj.find(key);
    return it == obj.end() ? nullptr : &*it;
  }
  std::string str(const json &v, const std::string &where) const {
    if (!v.is_string())
      fail(where, "must be a string, got " + typeOf(v));
    return v.get<std::string>();
  }
  int64_t integer(const json &v, const std::string &where) const {
    if (!v.is_number_integer() ||
        (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(INT64_MAX)))
      fail(where, "must be an integer, got " + typeOf(v));
    return v.get<int64_t>();
  }
  double number(const json &v, const std::string &where) const {
    if (!v.is_number())
      fail(where, "must be a number, got " + typeOf(v));
    double d = v.get<double>();
    if (!std::isfinite(d))
      fail(where, "must be finite");
    return d;
  }
  const json &array(const json &v, const std::string &where) const {
    if (!v.is_array())
      fail(where, "must be an array, got " + typeOf(v));
    return v;
  }
  const json &object(const json &v, const std::string &where) const {
    if (!v.is_object())
      fail(where, "must be an object, got " + typeOf(v));
    return v;
  }
  std::vector<int64_t> ints(const json &v, const std::string &where) const {
    std::vector<int64_t> r;
    for (const json &e : array(v, where))
      r.push_back(integer(e, where + " entry"));
    return r;
  }
  Shape shape(const json &v, const std::string &where) const {
    Shape s = ints(v, where);
    int64_t n = 1;
    for (int64_t d : s) {
      if (d < 1)
        fail(where, "dimension sizes must be >= 1, got " + shapeStr(s));
      if (n > kMaxElements / d)
        fail(where, "shape " + shapeStr(s) + " is too large");
      n *= d;
    }
    return s;
  }
  DType dtype(const json &v, const std::string &where) const {
    std::string s = str(v, where);
    DType d;
    if (!parseDType(s, d))
      fail(where,
           "unknown dtype \"" + s + "\" (expected f32, bf16, f16, i32 or i64)");
    return d;
  }
  static std::string typeOf(const json &v) {
    if (v.is_number_integer())
      return "an integer";
    if (v.is_number())
      return "a number";
    if (v.is_string())
      return "a string";
    if (v.is_boolean())
      return "a boolean";
    if (v.is_array())
      return "an array";
    if (v.is_object())
      return "an object";
    return "null";
  }

  Artifact parse(const json &body);
  const std::string &label() const { return label_; }

  MemCategory category(const json &v, const std::string &where) const;

private:
  // Parse.cpp: the sections, in the order parse() reads them.
  void parseCommunicators(const json &comms, Artifact &a);
  void parsePipelineSection(const json &pv, Artifact &a);
  void parsePrograms(const json &progs, Artifact &a, std::vector<int> &owner);
  // ParseTensors.cpp
  void parseTensors(const json &arr, Artifact &a);
  TensorDecl parseTensor(const json &v, size_t index,
                         std::set<std::string> &names, const Artifact &a);
  void checkTensorRole(const json &v, const std::string &where, TensorDecl &t);
  void checkOptimizerState(const json &v, const std::string &where,
                           TensorDecl &t);
  void checkTensorsTogether(const Artifact &a);
  void checkTensorsBound(const Artifact &a);
  // ParseProgram.cpp
  void parseProgram(const json &v, const std::string &where, Artifact &a,
                    ProgramDecl &p);
  void parseRanks(const json &v, const std::string &where, const Artifact &a,
                  ProgramDecl &p);
  void parseSlots(const json &v, const std::string &where, const Artifact &a,
                  ProgramDecl &p);
  void parseBuffers(const json &v, const std::string &where, const Artifact &a,
                    ProgramDecl &p);
  void checkSlotOwners(const std::string &where, const Artifact &a,
                       const ProgramDecl &p);
  void parseConstants(const json &v, const std::string &where,
                      const Artifact &a, ProgramDecl &p);
  void parsePipelineLists(const json &v, const std::string &where,
                          const Artifact &a, ProgramDecl &p);
  void checkBuckets(const Artifact &a, ProgramDecl &p,
                    const std::string &where);
  // Evaluation.cpp: the "evaluation" section of a program, and the checks
  // of all of them together (after the programs' own agreement).
  void parseEvaluation(const json &v, const std::string &where, ProgramDecl &p);
  void checkEvaluation(const Artifact &a,
                       const std::vector<int> &programOfRank);
  void parseInstructions(const json &list, const std::string &where,
                         const Artifact &a, const ProgramDecl &p,
                         std::vector<InstrDecl> &out);
  // VerifyInstruction.cpp
  void checkInstruction(const Artifact &a, const ProgramDecl &p, InstrDecl &ins,
                        const std::string &where);
  void checkArity(const InstrDecl &ins, size_t nin, size_t nout,
                  size_t optional, const std::string &where) const;
  std::vector<std::pair<int, int>> checkMoeExchange(const Artifact &a,
                                                    const ProgramDecl &p,
                                                    InstrDecl &ins,
                                                    const std::string &w);
  std::vector<std::pair<int, int>> checkCollective(const Artifact &a,
                                                   const ProgramDecl &p,
                                                   InstrDecl &ins,
                                                   const std::string &where);
  std::vector<std::pair<int, int>> checkKernel(const Artifact &a,
                                               const ProgramDecl &p,
                                               const InstrDecl &ins,
                                               const std::string &where);
  void checkAliasing(const ProgramDecl &p, const InstrDecl &ins,
                     const std::vector<std::pair<int, int>> &inPlace,
                     const std::string &where);
  void checkPipelineInstruction(const Artifact &a, const ProgramDecl &p,
                                InstrDecl &ins, const std::string &where);
  // VerifyPipeline.cpp
  void checkPipeline(const Artifact &a);
  void checkStageSchedules(const Artifact &a);
  void collectMessageEnds(const Artifact &a, MessageEnds &sendOf,
                          MessageEnds &recvOf);
  void checkMessagePairs(const Artifact &a, const MessageEnds &sendOf,
                         const MessageEnds &recvOf);
  void checkOncePerStepLists(const Artifact &a, const MessageEnds &sendOf,
                             const MessageEnds &recvOf);
  // Agreement.cpp
  void checkProgramsAgree(const Artifact &a,
                          const std::vector<int> &programOfRank);

  std::string label_;
  bool agreementChecked_ = false;
};

} // namespace dtc::artifact::detail

#endif // DTC_ARTIFACT_PARSER_H
