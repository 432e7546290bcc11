//===- ShardedCheckpoint.h - --save DIR / --load DIR -------------*- C++
//-*-===//
//
// A sharded checkpoint is a directory (docs/runtime.md "Sharded
// checkpoints"):
//   DIR/index.json          names, dtypes, global shapes and, for every
//                           stored piece, its file and slice; written last
//   DIR/rank-R.safetensors  the pieces rank R owns (the lowest rank holding
//                           each distinct piece), under the global names,
//                           with block checksums
// Every rank writes its own file in parallel; nothing is gathered. The
// directory is replaced as a whole: the files go to a temporary sibling,
// which is renamed over DIR only after every rank's file is on disk and the
// index is written. Loading reads, on each rank, only the blocks of the
// stored pieces that overlap its own pieces, whatever mesh and plan wrote
// them.
//
// Collective over the World; failures throw AgreedError on every rank.
//
//===----------------------------------------------------------------------===//
#ifndef DTC_RUNTIME_SHARDEDCHECKPOINT_H
#define DTC_RUNTIME_SHARDEDCHECKPOINT_H

#include "dtc/runtime/Checkpoint.h"

#include <optional>
#include <string>

namespace dtc::rt {

constexpr const char *kShardedIndexName = "index.json";
constexpr const char *kShardedFormat = "dtc-sharded-checkpoint";
constexpr int kShardedVersion = 1;

/// Whether `path` names a sharded checkpoint: it ends in '/' or is an
/// existing directory (symbolic links followed).
bool isShardedCheckpointPath(const std::string &path);
/// The step of the sharded checkpoint in `dir` (its index.json), of any
/// model; nothing when `dir` holds none or its index does not read.
std::optional<int64_t> shardedCheckpointStep(const std::string &dir);

/// `path` without trailing slashes ("/" stays "/").
std::string stripTrailingSlashes(const std::string &path);

/// Refuses (throws Error) a --save DIR that cannot be written: its parent
/// must be a writable directory, and DIR, if it exists, an empty directory
/// or a sharded checkpoint (dtc never replaces a directory of other files).
void checkShardedSavePath(const std::string &flag, const std::string &path);

/// Validates DIR's index against the artifact (and that its files exist
/// with the sizes the index gives) without an executor. Throws Error.
LoadedCheckpoint inspectShardedCheckpoint(const Artifact &a,
                                          const std::string &dir);

/// Collective: see the file comment.
LoadedCheckpoint loadShardedCheckpoint(RankExecutor &exec, World &world,
                                       const std::string &dir);

/// Collective: see the file comment. Test hook: DTC_TEST_CHECKPOINT_FAULT =
/// "ACTION:RANK:WHEN" makes rank RANK, at WHEN (`saving`: any checkpoint,
/// as its save begins; `sidecar`: a one-file checkpoint's optimizer state
/// is written, not yet moved into place; `written`: its file of a sharded
/// checkpoint is on disk; `indexed`: rank 0 only, the index is written but
/// not yet moved into place), either `fail` (an ordinary error), `kill`
/// (SIGKILL itself) or `pause` (sleep kFaultPauseSeconds, so that a test can
/// signal a save in progress). DTC_CHECKPOINT_CRC_BLOCK_BYTES sets the
/// checksum block size (default 1 MiB).
void saveShardedCheckpoint(RankExecutor &exec, World &world,
                           const std::string &dir, int64_t step,
                           int64_t optimizerStep);

/// The test hook above, at point `when` of rank `rank`.
void injectCheckpointFault(int rank, const char *when);
constexpr int kFaultPauseSeconds = 3;

} // namespace dtc::rt

#endif // DTC_RUNTIME_SHARDEDCHECKPOINT_H
