//===- Evaluation.h - the forward-only run of an artifact -------*- C++ -*-===//
//
// Evaluating the loss on held-out data runs the training step's own programs
// (the same plan, slots and communicators) without their backward and their
// update: each program's "evaluation" section lists, per instruction list,
// the instructions that compute the loss (docs/artifact.md "Evaluation").
//
// The compiler derives the section (markEvaluation: what the loss needs,
// followed backwards through every program and across the pipeline's
// messages); the parser checks whatever a file says (nothing persistent is
// written, the communication of the programs still matches); the runtime
// runs it (RankExecutor::runEvaluation). Sharing the training step's slots
// means an evaluation costs no memory beyond the step's.
//
//===----------------------------------------------------------------------===//
#ifndef DTC_ARTIFACT_EVALUATION_H
#define DTC_ARTIFACT_EVALUATION_H

#include "dtc/artifact/Artifact.h"

#include <nlohmann/json.hpp>

#include <string>

namespace dtc::artifact {

/// Marks InstrDecl::evaluation (and ProgramDecl::hasEvaluation) in every
/// program: the instructions of the once-per-step lists, the forward lists
/// and the list after the micro-batches whose results the loss needs, and
/// the sends whose messages a needed receive waits for. Backward lists are
/// never part of it.
void markEvaluation(Artifact &a);

/// Program `p`'s section: {"instructions": [i, ...]} and for pipelines also
/// "forward" (one index list per chunk) and "finish"; indices increase.
nlohmann::json evaluationJson(const ProgramDecl &p);

/// The compiler's entry: parses the (valid) body, marks it and adds each
/// program's "evaluation" section. False with a message on failure.
bool addEvaluation(nlohmann::json &body, const std::string &label,
                   std::string &error) noexcept;

/// The artifact as an evaluation runs it: only the marked instructions, no
/// backward lists, each pipeline schedule's forward actions only (the
/// parser checks its programs' communication against each other).
Artifact evaluationProjection(const Artifact &a);

} // namespace dtc::artifact

#endif // DTC_ARTIFACT_EVALUATION_H
