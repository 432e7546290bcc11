//===- TokenData.h - token files for --data (spec/cli.md) --------*- C++
//-*-===//
//
// A token file is raw little-endian uint16 or uint32 tokens. With B, S the
// shape of the ids input, step k fills global row r from the window starting
// at ((k*B + r)*S) mod (n - S - 1): ids = tokens[start, start+S), labels =
// tokens[start+1, start+S+1]. Each rank fills only the elements of its local
// pieces of ids and labels.
//
// The file is read with pread, a window at a time, never mapped: a file
// truncated or rewritten during a run is an error naming it (a window that
// is no longer there, a token no longer below the inputs' max), not a
// signal.
//
// Internal to the runtime: throws dtc::rt::Error("FILE: ...").
//
//===----------------------------------------------------------------------===//
#ifndef DTC_RUNTIME_TOKENDATA_H
#define DTC_RUNTIME_TOKENDATA_H

#include "dtc/runtime/Artifact.h"

#include <string>

namespace dtc::rt {

enum class TokenDType { U16, U32 };
bool parseTokenDType(const std::string &s, TokenDType &out);

/// Which inputs receive ids and labels: the first and second integer inputs
/// of rank 2 (they must have the same shape [B, S]).
struct TokenBinding {
  int ids = -1, labels = -1; ///< tensor indices
  int64_t B = 0, S = 0;
  int64_t bound = 0;      ///< min of the two inputs' max
  std::string boundInput; ///< name of the input whose max is `bound`
};
TokenBinding bindTokenInputs(const Artifact &a);

/// An open token file (a regular file; its size is taken when it opens).
class TokenFile {
public:
  TokenFile(const std::string &path, TokenDType dtype);
  ~TokenFile();
  TokenFile(const TokenFile &) = delete;
  TokenFile &operator=(const TokenFile &) = delete;

  const std::string &path() const { return path_; }
  int64_t size() const { return n_; } ///< tokens, as of opening
  /// Tokens [first, first + count) into `out`. Throws naming the file if
  /// they are no longer there.
  void read(int64_t first, int64_t count, uint32_t *out) const;
  /// Throws unless the file holds at least one window (n >= S + 2) and every
  /// token is below `b.bound`.
  void validate(const TokenBinding &b) const;
  /// The two checks apart: the size, and tokens [first, first + count)
  /// (for callers that pace a long file).
  void checkSize(const TokenBinding &b) const;
  void checkTokens(const TokenBinding &b, int64_t first, int64_t count) const;

private:
  std::string path_;
  TokenDType dtype_;
  int fd_ = -1;
  int64_t n_ = 0;
};

/// Start of the window of global row r at step k.
int64_t windowStart(int64_t step, int64_t row, int64_t B, int64_t S,
                    int64_t nTokens);

/// The order windows are taken in: the file's (windowStart), or with
/// `shuffle` each pass over the file in a random order drawn from `seed`
/// (shuffledWindowStart).
struct WindowOrder {
  bool shuffle = false;
  uint64_t seed = 0;
};

/// Start of the window of global row r at step k under --shuffle: window
/// w = k*B + r is position w mod P of pass w / P over the P = (n-S-1)/S + 1
/// windows that start at multiples of S, and each pass visits all P once,
/// in the order of a permutation drawn from `seed` and the pass (a keyed
/// Feistel bijection, so any step's window is computed without the steps
/// before it and a resumed run continues the same order).
int64_t shuffledWindowStart(int64_t step, int64_t row, int64_t B, int64_t S,
                            int64_t nTokens, uint64_t seed);

/// Fills the local piece (at `piece`) of the ids (`labels` = false) or labels
/// input of global shape [B, S] for step `step`.
void fillTokens(const TokenFile &f, const TokenBinding &b, int64_t step,
                bool labels, void *out, DType dtype, const Piece &piece,
                const WindowOrder &order = {});

} // namespace dtc::rt

#endif // DTC_RUNTIME_TOKENDATA_H
