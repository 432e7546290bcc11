//===- Vocabulary.cpp - the words of the compiler-runtime contract --------===//
#include "dtc/artifact/Vocabulary.h"

namespace dtc::artifact {

namespace {

// Each kind's names, indexed by the enum's value.
constexpr const char *kCollectiveNames[kNumCollectiveKinds] = {
    "all_reduce", "all_gather", "reduce_scatter", "all_slice",
    "all_to_all", "shift",      "moe_exchange"};
constexpr const char *kRoleNames[kNumRoles] = {
    "param", "optimizer_state", "input", "step", "loss", "output"};
constexpr const char *kPhaseNames[kNumPhases] = {
    "forward", "backward_input", "backward_weight", "optimizer"};
constexpr const char *kMemCategoryNames[kNumMemCategories] = {
    "param", "grad", "optimizer", "activation", "input", "constant", "scalar"};
constexpr const char *kReduceOpNames[kNumReduceOps] = {"sum", "max", "min",
                                                       "average"};
constexpr int kNumPipeOps = 6;
constexpr const char *kPipeOpNames[kNumPipeOps] = {
    "", "send", "recv", "microbatch_slice", "accumulate", "fill"};

template <class Enum, int N>
const char *nameOf(const char *const (&names)[N], Enum value) noexcept {
  const int index = int(value);
  return index >= 0 && index < N ? names[index] : "?";
}

template <class Enum, int N>
bool parseName(const char *const (&names)[N], std::string_view name,
               Enum &out) noexcept {
  for (int i = 0; i < N; ++i)
    if (*names[i] && name == names[i]) {
      out = Enum(i);
      return true;
    }
  return false;
}

template <int N> std::string nameList(const char *const (&names)[N]) {
  std::string list;
  for (int i = 0; i < N; ++i)
    list += std::string(i == 0 ? "" : i + 1 == N ? " or " : ", ") + names[i];
  return list;
}

} // namespace

const char *collectiveKindName(CollectiveKind kind) noexcept {
  return nameOf(kCollectiveNames, kind);
}
bool parseCollectiveKind(std::string_view name, CollectiveKind &out) noexcept {
  return parseName(kCollectiveNames, name, out);
}

const char *roleName(Role role) noexcept { return nameOf(kRoleNames, role); }
bool parseRole(std::string_view name, Role &out) noexcept {
  return parseName(kRoleNames, name, out);
}

const char *phaseName(Phase phase) noexcept {
  return nameOf(kPhaseNames, phase);
}
bool parsePhase(std::string_view name, Phase &out) noexcept {
  return parseName(kPhaseNames, name, out);
}

const char *memCategoryName(MemCategory category) noexcept {
  return nameOf(kMemCategoryNames, category);
}
bool parseMemCategory(std::string_view name, MemCategory &out) noexcept {
  return parseName(kMemCategoryNames, name, out);
}

const char *reduceOpName(ReduceOp op) noexcept {
  return nameOf(kReduceOpNames, op);
}
bool parseReduceOp(std::string_view name, ReduceOp &out) noexcept {
  return parseName(kReduceOpNames, name, out);
}

const char *pipeOpName(PipeOp op) noexcept { return nameOf(kPipeOpNames, op); }
bool parsePipeOp(std::string_view name, PipeOp &out) noexcept {
  return parseName(kPipeOpNames, name, out);
}

std::string roleNameList() { return nameList(kRoleNames); }
std::string memCategoryNameList() { return nameList(kMemCategoryNames); }
std::string reduceOpNameList() { return nameList(kReduceOpNames); }

} // namespace dtc::artifact
