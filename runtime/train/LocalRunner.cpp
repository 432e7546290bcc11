//===- LocalRunner.cpp - the non-throwing in-process facade
//-----------------===//
#include "dtc/runtime/LocalRunner.h"
#include "dtc/artifact/ArtifactFormat.h"
#include "dtc/runtime/Checkpoint.h"
#include "dtc/runtime/Executor.h"

#include <cstring>
#include <thread>

namespace dtc::rt {

struct LocalRunner::Impl {
  std::unique_ptr<Artifact> artifact;
  std::unique_ptr<World> single;
  std::unique_ptr<ThreadWorld> threads;
  std::vector<std::unique_ptr<RankExecutor>> execs;
  int64_t steps = 0;
  uint64_t seed = 0;

  int ranks() const { return int(artifact->devices); }
  World &world(int r) { return threads ? threads->rankView(r) : *single; }

  /// Runs fn(r) for every rank (threads when more than one); returns the
  /// lowest rank's error message, "" if none.
  template <class F> std::string forRanks(F &&fn) {
    const int n = ranks();
    std::vector<std::string> errs(static_cast<size_t>(n));
    auto body = [&](int r) {
      try {
        fn(r);
      } catch (const std::exception &e) {
        errs[size_t(r)] = e.what();
        if (errs[size_t(r)].empty())
          errs[size_t(r)] = "unknown error";
        if (threads)
          threads->abort("another rank failed: " + errs[size_t(r)]);
      } catch (...) {
        errs[size_t(r)] = "unknown error";
        if (threads)
          threads->abort("another rank failed");
      }
    };
    if (n == 1) {
      body(0);
    } else {
      std::vector<std::thread> ts;
      for (int r = 0; r < n; ++r)
        ts.emplace_back(body, r);
      for (auto &t : ts)
        t.join();
    }
    // Prefer a root cause over the "another rank failed" echoes.
    for (const std::string &e : errs)
      if (!e.empty() && e.rfind("another rank failed", 0) != 0)
        return e;
    for (const std::string &e : errs)
      if (!e.empty())
        return e;
    return std::string();
  }

  /// Runs one of the executor's programs (run, runEvaluation) on every
  /// rank; throws the first rank's error, prefixed by the artifact.
  void runPrograms(std::string (RankExecutor::*program)()) {
    std::vector<std::string> errs(static_cast<size_t>(ranks()));
    std::string err = forRanks(
        [&](int r) { errs[size_t(r)] = (execs[size_t(r)].get()->*program)(); });
    if (err.empty())
      for (const std::string &e : errs)
        if (!e.empty()) {
          err = e;
          break;
        }
    if (!err.empty())
      throw Error(artifact->label + ": " + err);
  }

  int tensorIndex(const std::string &name) const {
    int t = artifact->findTensor(name);
    if (t < 0)
      throw Error(artifact->label + ": no tensor named '" + name + "'");
    return t;
  }
};

LocalRunner::LocalRunner(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
LocalRunner::~LocalRunner() = default;

namespace {
std::unique_ptr<LocalRunner::Impl> build(std::unique_ptr<Artifact> a,
                                         const LocalRunnerOptions &opts) {
  auto impl = std::make_unique<LocalRunner::Impl>();
  impl->artifact = std::move(a);
  const int n = impl->ranks();
  if (n == 1)
    impl->single = makeLocalWorld();
  else
    impl->threads = std::make_unique<ThreadWorld>(n, opts.timeoutSeconds);
  impl->execs.resize(size_t(n));
  std::string err = impl->forRanks([&](int r) {
    BackendOptions bo;
    bo.threads = opts.threads;
    bo.rank = r;
    bo.ranksOnNode = n;
    bo.collectives = opts.collectives;
    bo.timeoutSeconds = opts.timeoutSeconds;
    impl->execs[size_t(r)] = std::make_unique<RankExecutor>(
        *impl->artifact, impl->world(r), makeBackend(opts.backend, bo));
    impl->execs[size_t(r)]->setThreads(opts.threads);
  });
  if (!err.empty())
    throw Error(err);
  return impl;
}
} // namespace

#define DTC_GUARD_BEGIN try {
#define DTC_GUARD_END                                                          \
  }                                                                            \
  catch (const std::exception &e) {                                            \
    error = e.what();                                                          \
    return false;                                                              \
  }                                                                            \
  catch (...) {                                                                \
    error = "unknown error";                                                   \
    return false;                                                              \
  }

// Builds a runner from the artifact `parse` returns; any exception becomes
// `error` (the API is noexcept).
template <class Parse>
std::unique_ptr<LocalRunner>
LocalRunner::loadWith(Parse &&parse, const std::string &label,
                      std::string &error,
                      const LocalRunnerOptions &opts) noexcept {
  try {
    auto a = std::make_unique<Artifact>(parse());
    return std::unique_ptr<LocalRunner>(
        new LocalRunner(build(std::move(a), opts)));
  } catch (const std::exception &e) {
    error = e.what();
  } catch (...) {
    error = label + ": unknown error";
  }
  return nullptr;
}

std::unique_ptr<LocalRunner>
LocalRunner::loadBytes(std::string_view bytes, const std::string &label,
                       std::string &error,
                       const LocalRunnerOptions &opts) noexcept {
  return loadWith([&] { return loadArtifactBytes(bytes, label); }, label, error,
                  opts);
}

std::unique_ptr<LocalRunner>
LocalRunner::loadFile(const std::string &path, std::string &error,
                      const LocalRunnerOptions &opts) noexcept {
  std::string bytes;
  if (!readFileBytes(path, bytes, error)) {
    error = path + ": " + error;
    return nullptr;
  }
  return loadBytes(bytes, path, error, opts);
}

std::unique_ptr<LocalRunner>
LocalRunner::loadJson(const nlohmann::json &body, const std::string &label,
                      std::string &error,
                      const LocalRunnerOptions &opts) noexcept {
  return loadWith([&] { return parseArtifact(body, label); }, label, error,
                  opts);
}

int LocalRunner::ranks() const noexcept { return impl_->ranks(); }

std::vector<std::string>
LocalRunner::tensorNames(const std::string &role) const noexcept {
  std::vector<std::string> out;
  try {
    for (const TensorDecl &t : impl_->artifact->tensors)
      if (role == roleName(t.role))
        out.push_back(t.name);
  } catch (...) {
  }
  return out;
}

bool LocalRunner::initialize(uint64_t seed, std::string &error) noexcept {
  DTC_GUARD_BEGIN
  impl_->seed = seed;
  impl_->steps = 0;
  for (auto &e : impl_->execs)
    e->initPersistent(seed);
  return true;
  DTC_GUARD_END
}

bool LocalRunner::fillSyntheticInputs(int64_t step,
                                      std::string &error) noexcept {
  DTC_GUARD_BEGIN
  for (auto &e : impl_->execs)
    e->fillSyntheticInputs(impl_->seed, step);
  return true;
  DTC_GUARD_END
}

bool LocalRunner::setTensor(const std::string &name, const void *data,
                            size_t bytes, std::string &error) noexcept {
  DTC_GUARD_BEGIN
  const int t = impl_->tensorIndex(name);
  const TensorDecl &d = impl_->artifact->tensors[size_t(t)];
  const size_t elem = dtypeSize(d.dtype);
  const size_t want = size_t(numel(d.shape)) * elem;
  if (bytes != want)
    throw Error("setTensor('" + name + "'): got " + std::to_string(bytes) +
                " bytes, the " + dtypeName(d.dtype) + shapeStr(d.shape) +
                " tensor needs " + std::to_string(want));
  bool any = false;
  for (auto &e : impl_->execs) {
    if (!e->holds(t))
      continue;
    any = true;
    LocalTensor lt = e->tensor(t);
    char *dst = static_cast<char *>(lt.data);
    const char *src = static_cast<const char *>(data);
    forEachPieceRun(d.shape, lt.piece, [&](int64_t l, int64_t g, int64_t n) {
      std::memcpy(dst + size_t(l) * elem, src + size_t(g) * elem,
                  size_t(n) * elem);
    });
  }
  if (!any)
    throw Error("setTensor('" + name + "'): no rank holds this tensor");
  return true;
  DTC_GUARD_END
}

namespace {
template <class T>
bool setTyped(LocalRunner &r, LocalRunner::Impl &impl, const std::string &name,
              const std::vector<T> &v, DType want, std::string &error) {
  try {
    const int t = impl.tensorIndex(name);
    const DType d = impl.artifact->tensors[size_t(t)].dtype;
    if (d != want) {
      error = "setTensor('" + name + "'): the tensor is " + dtypeName(d) +
              ", the data " + dtypeName(want);
      return false;
    }
  } catch (const std::exception &e) {
    error = e.what();
    return false;
  }
  return r.setTensor(name, v.data(), v.size() * sizeof(T), error);
}
} // namespace

bool LocalRunner::setTensor(const std::string &name,
                            const std::vector<float> &v,
                            std::string &error) noexcept {
  // bf16/f16 tensors take f32 values, rounded to nearest even.
  try {
    const DType d =
        impl_->artifact->tensors[size_t(impl_->tensorIndex(name))].dtype;
    if (isLowPrecision(d)) {
      std::vector<uint16_t> low(v.size());
      for (size_t i = 0; i < v.size(); ++i)
        low[i] = f32ToLow(d, v[i]);
      return setTensor(name, low.data(), low.size() * 2, error);
    }
  } catch (const std::exception &e) {
    error = e.what();
    return false;
  }
  return setTyped(*this, *impl_, name, v, DType::F32, error);
}
bool LocalRunner::setTensor(const std::string &name,
                            const std::vector<int32_t> &v,
                            std::string &error) noexcept {
  return setTyped(*this, *impl_, name, v, DType::I32, error);
}
bool LocalRunner::setTensor(const std::string &name,
                            const std::vector<int64_t> &v,
                            std::string &error) noexcept {
  return setTyped(*this, *impl_, name, v, DType::I64, error);
}

bool LocalRunner::getTensorBytes(const std::string &name,
                                 std::vector<char> &out,
                                 std::string &error) noexcept {
  DTC_GUARD_BEGIN
  const int t = impl_->tensorIndex(name);
  const TensorDecl &d = impl_->artifact->tensors[size_t(t)];
  const size_t elem = dtypeSize(d.dtype);
  out.assign(size_t(numel(d.shape)) * elem, 0);
  const std::vector<int> from = contributorRanks(*impl_->artifact, t);
  if (from.empty())
    throw Error("getTensor('" + name + "'): no rank holds this tensor");
  for (int r : from) {
    LocalTensor lt = impl_->execs[size_t(r)]->tensor(t, Access::Read);
    const char *src = static_cast<const char *>(lt.data);
    forEachPieceRun(d.shape, lt.piece, [&](int64_t l, int64_t g, int64_t n) {
      std::memcpy(out.data() + size_t(g) * elem, src + size_t(l) * elem,
                  size_t(n) * elem);
    });
  }
  return true;
  DTC_GUARD_END
}

bool LocalRunner::getTensor(const std::string &name, std::vector<float> &out,
                            std::string &error) noexcept {
  DTC_GUARD_BEGIN
  const int t = impl_->tensorIndex(name);
  const DType d = impl_->artifact->tensors[size_t(t)].dtype;
  if (!isFloat(d))
    throw Error("getTensor('" + name + "'): not a float tensor");
  std::vector<char> bytes;
  if (!getTensorBytes(name, bytes, error))
    return false;
  out.resize(bytes.size() / dtypeSize(d));
  if (isLowPrecision(d)) {
    for (size_t i = 0; i < out.size(); ++i) {
      uint16_t h;
      std::memcpy(&h, bytes.data() + 2 * i, 2);
      out[i] = lowToF32(d, h);
    }
  } else {
    std::memcpy(out.data(), bytes.data(), bytes.size());
  }
  return true;
  DTC_GUARD_END
}

bool LocalRunner::getTensor(const std::string &name, std::vector<int64_t> &out,
                            std::string &error) noexcept {
  DTC_GUARD_BEGIN
  const int t = impl_->tensorIndex(name);
  const DType d = impl_->artifact->tensors[size_t(t)].dtype;
  if (!isInt(d))
    throw Error("getTensor('" + name + "'): not an integer tensor");
  std::vector<char> bytes;
  if (!getTensorBytes(name, bytes, error))
    return false;
  const size_t n = bytes.size() / dtypeSize(d);
  out.resize(n);
  for (size_t i = 0; i < n; ++i) {
    if (d == DType::I32) {
      int32_t v;
      std::memcpy(&v, bytes.data() + 4 * i, 4);
      out[i] = v;
    } else {
      std::memcpy(&out[i], bytes.data() + 8 * i, 8);
    }
  }
  return true;
  DTC_GUARD_END
}

bool LocalRunner::getLocalTensor(int rank, const std::string &name,
                                 std::vector<float> &out,
                                 std::string &error) noexcept {
  DTC_GUARD_BEGIN
  if (rank < 0 || rank >= ranks())
    throw Error("getLocalTensor: no rank " + std::to_string(rank));
  LocalTensor lt = impl_->execs[size_t(rank)]->tensor(name, Access::Read);
  if (lt.decl->dtype != DType::F32)
    throw Error("getLocalTensor('" + name + "'): not f32");
  out.resize(size_t(numel(lt.piece.local)));
  std::memcpy(out.data(), lt.data, lt.bytes());
  return true;
  DTC_GUARD_END
}

bool LocalRunner::setOptimizerStep(int64_t value, std::string &error) noexcept {
  DTC_GUARD_BEGIN
  for (auto &e : impl_->execs)
    e->setOptimizerStep(value);
  return true;
  DTC_GUARD_END
}

bool LocalRunner::runStep(std::string &error) noexcept {
  DTC_GUARD_BEGIN
  impl_->runPrograms(&RankExecutor::run);
  return true;
  DTC_GUARD_END
}

bool LocalRunner::runEvaluation(std::string &error) noexcept {
  DTC_GUARD_BEGIN
  impl_->runPrograms(&RankExecutor::runEvaluation);
  return true;
  DTC_GUARD_END
}

bool LocalRunner::loss(float &out, std::string &error) noexcept {
  DTC_GUARD_BEGIN
  const int t = impl_->artifact->tensorsWithRole(Role::Loss).at(0);
  const std::vector<int> from = contributorRanks(*impl_->artifact, t);
  out = impl_->execs[size_t(from.at(0))]->loss();
  return true;
  DTC_GUARD_END
}

bool LocalRunner::train(int64_t steps, std::vector<float> &losses,
                        std::string &error) noexcept {
  DTC_GUARD_BEGIN
  for (int64_t i = 0; i < steps; ++i) {
    const int64_t k = impl_->steps;
    if (!fillSyntheticInputs(k, error) || !setOptimizerStep(k, error) ||
        !runStep(error))
      return false;
    float l = 0;
    if (!loss(l, error))
      return false;
    losses.push_back(l);
    ++impl_->steps;
  }
  return true;
  DTC_GUARD_END
}

int64_t LocalRunner::stepsDone() const noexcept { return impl_->steps; }

LocalRunStats LocalRunner::stats() const noexcept {
  LocalRunStats s;
  try {
    for (auto &e : impl_->execs) {
      const ExecStats &es = e->stats();
      for (int c = 0; c < kNumMemCategories; ++c) {
        uint64_t &v = s.memoryBytes[memCategoryName(MemCategory(c))];
        v = std::max(v, es.memoryBytes[c]);
      }
      uint64_t &staging = s.memoryBytes["staging"];
      staging = std::max(staging, es.stagingBytes);
      uint64_t &workspace = s.memoryBytes["workspace"];
      workspace = std::max(workspace, es.workspaceBytes);
      uint64_t &tot = s.memoryBytes["total"];
      tot = std::max(tot, es.totalMemoryBytes);
      for (int k = 0; k < kNumCollKinds; ++k) {
        const char *n = collKindName(CollKind(k));
        uint64_t &c = s.collectiveCallsPerStep[n];
        c = std::max(c, es.perStep[k].calls);
        uint64_t &b = s.collectiveBytesPerStep[n];
        b = std::max(b, es.perStep[k].bytes);
        uint64_t &sent = s.collectiveSentBytesPerStep[n];
        sent = std::max(sent, es.perStep[k].sentBytes);
      }
      uint64_t &sc = s.collectiveCallsPerStep["send_recv"];
      sc = std::max(sc, es.sendRecvPerStep.calls);
      uint64_t &sb = s.collectiveBytesPerStep["send_recv"];
      sb = std::max(sb, es.sendRecvPerStep.bytes);
      uint64_t &ss = s.collectiveSentBytesPerStep["send_recv"];
      ss = std::max(ss, es.sendRecvPerStep.sentBytes);
      s.stageOfRank.push_back(e->program().stage);
      s.activationPeakBytes.push_back(es.activationPeakBytes);
      s.microbatchesPeak.push_back(es.microbatchesPeak);
    }
  } catch (...) {
  }
  return s;
}

} // namespace dtc::rt
