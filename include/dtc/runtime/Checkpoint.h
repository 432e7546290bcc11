//===- Checkpoint.h - --save / --load (spec/cli.md) --------------*- C++
//-*-===//
//
// A checkpoint CKPT is a safetensors file holding every `param` tensor,
// gathered to its global shape, under its name, with metadata
// {"dtc.format": "dtc-checkpoint-v1", "dtc.step": "K"} (K = global steps
// done). The optimizer state goes to the sidecar CKPT.optim (safetensors:
// every `optimizer_state` tensor under its artifact name; metadata dtc.format
// "dtc-optimizer-v1", dtc.step, dtc.optimizer_step), written BEFORE the main
// file. Loading restores the optimizer state and the step tensor only when
// the sidecar exists and its dtc.step equals the main file's.
//
// A path ending in '/' or naming a directory is a sharded checkpoint instead
// (ShardedCheckpoint.h): save, load and inspect below go there.
//
// Collective over the World; failures throw AgreedError on every rank.
//
//===----------------------------------------------------------------------===//
#ifndef DTC_RUNTIME_CHECKPOINT_H
#define DTC_RUNTIME_CHECKPOINT_H

#include "dtc/runtime/Executor.h"
#include "dtc/runtime/Safetensors.h"

#include <optional>
#include <string>
#include <vector>

namespace dtc::rt {

/// CKPT.optim; "" for a sharded checkpoint (a directory has no sidecar).
std::string optimizerSidecarPath(const std::string &ckpt);

/// The f32 master weights of param `param` (optimizer_state of kind
/// "master"), or -1.
int masterOf(const Artifact &a, int param);
/// What a checkpoint file of `role` holds: (tensor whose values are saved,
/// name in the file). Params are saved under their names from their master
/// weights when they have some (so checkpoints keep f32 values whatever the
/// compute precision); the optimizer sidecar holds the other optimizer state.
std::vector<std::pair<int, std::string>> checkpointTensors(const Artifact &a,
                                                           Role role);
/// Reads `n` elements of entry `e` from element `first` into `dst` of
/// `dtype`, converting between float dtypes (round to nearest even).
void readConverted(const SafetensorsReader &file, const SafetensorsEntry &e,
                   int64_t first, void *dst, DType dtype, int64_t n);

/// For tensor `t`: the ranks that contribute its pieces when gathering (the
/// lowest rank holding each distinct piece), in rank order.
std::vector<int> contributorRanks(const Artifact &a, int t);

/// Checks that `file` holds exactly the tensors of `role` of the artifact
/// (checkpointTensors) with global shapes and dtypes that load (float dtypes
/// convert). Throws Error naming the file.
void checkCheckpointTensors(const Artifact &a, const SafetensorsReader &file,
                            Role role);
/// Value of an integer metadata key (`fallback` if absent). Throws if
/// malformed.
int64_t metadataInt(const SafetensorsReader &file, const std::string &key,
                    int64_t fallback);

struct LoadedCheckpoint {
  int64_t step = 0; ///< global steps done (main file's dtc.step, 0 if absent)
  bool optimizerRestored = false;
  int64_t optimizerStep = 0; ///< value for the step tensor
  std::string note; ///< why the optimizer state was not restored ("" if it was)
};

/// Validates CKPT (and CKPT.optim when it applies) against the artifact
/// without an executor (for `dtc-run --launch`). Throws Error.
LoadedCheckpoint inspectCheckpoint(const Artifact &a, const std::string &path);

/// The step count (dtc.step) of the dtc checkpoint at `path`, a file or a
/// sharded directory, of any model; nothing when `path` holds none (missing,
/// or not a readable dtc checkpoint).
std::optional<int64_t> checkpointStepOnDisk(const std::string &path);

/// Collective: rank 0 verifies the files' checksums (dtc.data_crc32c), then
/// every rank reads the pieces it holds of every param (and of the
/// optimizer state + step when the sidecar matches) straight from the file.
LoadedCheckpoint loadCheckpoint(RankExecutor &exec, World &world,
                                const std::string &path);

/// Collective: writes CKPT.optim then CKPT on rank 0, each through an
/// OutputFile (atomic for regular files), tensor by tensor: rank 0 holds at
/// most one gathered tensor at a time beyond its own state.
void saveCheckpoint(RankExecutor &exec, World &world, const std::string &path,
                    int64_t step, int64_t optimizerStep);

/// Collective: gathers the `input` tensors the last step was fed and the
/// `output` tensors it produced (e.g. NAME:grad of `dtc compile --optimizer
/// none`) and writes them to `path` (rank 0, atomic) as safetensors with
/// metadata {"dtc.format": "dtc-step-v1", "dtc.step": "K"}, K that step's
/// global index. For tests and debugging: what a step saw and returned.
void saveStepTensors(RankExecutor &exec, World &world, const std::string &path,
                     int64_t step);

} // namespace dtc::rt

#endif // DTC_RUNTIME_CHECKPOINT_H
