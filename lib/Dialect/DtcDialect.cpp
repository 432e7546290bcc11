//===- DtcDialect.cpp - dtc dialect registration and attributes ----------===//
#include "dtc/Dialect/DtcOps.h"
#include "dtc/Dialect/InitSpec.h"
#include "dtc/Dialect/Plan.h"
#include "dtc/Dialect/Utils.h"
#include "dtc/runtime/Suggest.h"

#include "mlir/Dialect/Shard/IR/ShardOps.h"
#include "mlir/IR/DialectImplementation.h"
#include "mlir/Interfaces/FunctionInterfaces.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallSet.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace mlir::dtc;

#include "dtc/Dialect/DtcDialect.cpp.inc"
#include "dtc/Dialect/DtcEnums.cpp.inc"
#include "dtc/Dialect/DtcInterfaces.cpp.inc"

#define GET_ATTRDEF_CLASSES
#include "dtc/Dialect/DtcAttrs.cpp.inc"

void DtcDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "dtc/Dialect/DtcOps.cpp.inc"
      >();
  addAttributes<
#define GET_ATTRDEF_LIST
#include "dtc/Dialect/DtcAttrs.cpp.inc"
      >();
}

//===----------------------------------------------------------------------===//
// Known attributes: the model format's and the passes' own
//===----------------------------------------------------------------------===//

namespace {
/// dtc.* attributes passes attach to ops of any dialect (collectives and
/// constants carry a phase too).
constexpr StringLiteral kPassOpAttrs[] = {
    DtcDialect::kPhaseAttr, DtcDialect::kGradientOfAttr,
    DtcDialect::kFactorAxesAttr, DtcDialect::kFactorPiecesAttr,
    DtcDialect::kPinAttr, DtcDialect::kPinPriorityAttr,
    // Layers and the B/W split (training step), virtual stages (pipeline
    // split).
    DtcDialect::kLayerAttr, DtcDialect::kIdAttr, DtcDialect::kForwardAttr,
    DtcDialect::kStageAttr,
    // Forward ops recomputed in the backward (dtc-rematerialize), and
    // those whose gathered results the backward gathers again (sequence
    // parallelism).
    DtcDialect::kRecomputeAttr, DtcDialect::kRegatherAttr,
    // Ops computed over the whole batch under micro-batches; attention run
    // as a ring over a split sequence.
    DtcDialect::kWholeBatchAttr, DtcDialect::kRingAttr,
    DtcDialect::kStripedAttr, DtcDialect::kZigzagAttr};
/// dtc.* attributes passes attach to functions: a training step, and the
/// pipeline stage a split step runs on.
constexpr StringLiteral kFunctionAttrs[] = {DtcDialect::kTrainStepAttr,
                                            DtcDialect::kPipelineStageAttr};
/// Messages between pipeline stages (dtc-split-pipeline): on the arguments
/// (receives) and results (sends) of a stage's step.
constexpr StringLiteral kMessageAttrs[] = {
    DtcDialect::kMessageAttr, DtcDialect::kPeerAttr, DtcDialect::kStageAttr,
    DtcDialect::kScopeAttr, DtcDialect::kPhaseAttr};
/// Argument attributes of the model format, then the training step's.
constexpr StringLiteral kModelArgAttrs[] = {
    DtcDialect::kParamAttr, DtcDialect::kNameAttr, DtcDialect::kInitAttr,
    DtcDialect::kMaxAttr};
constexpr StringLiteral kStepArgAttrs[] = {
    DtcDialect::kRoleAttr,        DtcDialect::kOfAttr,
    DtcDialect::kGlobalTypeAttr,  DtcDialect::kShardingAttr,
    DtcDialect::kPinPriorityAttr, DtcDialect::kStripedInputAttr,
    DtcDialect::kZigzagInputAttr};
constexpr StringLiteral kStepResultAttrs[] = {
    DtcDialect::kRoleAttr,       DtcDialect::kNameAttr,
    DtcDialect::kUpdatesAttr,    DtcDialect::kOfAttr,
    DtcDialect::kGlobalTypeAttr, DtcDialect::kShardingAttr};

template <typename... Lists>
std::vector<std::string> names(const Lists &...lists) {
  std::vector<std::string> out;
  (..., [&] {
    for (StringRef name : lists)
      out.push_back(name.str());
  }());
  return out;
}
} // namespace

LogicalResult mlir::dtc::verifyKnownAttributes(Operation *op) {
  for (NamedAttribute attr : op->getDiscardableAttrs()) {
    StringRef name = attr.getName().strref();
    if (llvm::is_contained(kPassOpAttrs, name))
      continue;
    std::vector<std::string> own;
    if (std::optional<RegisteredOperationName> info = op->getRegisteredInfo())
      for (StringAttr known : info->getAttributeNames())
        own.push_back(known.str());
    std::vector<std::string> candidates = own;
    for (StringRef pass : kPassOpAttrs)
      candidates.push_back(pass.str());
    InFlightDiagnostic diag = op->emitError()
                              << "unknown attribute '" << name << "' on '"
                              << op->getName() << "'";
    if (std::string hint = ::dtc::didYouMean(name, candidates); !hint.empty())
      return diag << hint;
    if (own.empty())
      return diag << " (it takes no attributes)";
    diag << " (it takes ";
    llvm::interleaveComma(own, diag);
    return diag << ")";
  }
  return success();
}

LogicalResult DtcDialect::verifyOperationAttribute(Operation *op,
                                                   NamedAttribute attr) {
  StringRef name = attr.getName().strref();
  if (name == kPlanAttr && isa<ModuleOp>(op)) {
    if (!isa<PlanAttr>(attr.getValue()))
      return op->emitError() << "'dtc.plan' must be a #dtc.plan attribute";
    return success();
  }
  if (name == kBucketAttr) {
    auto value = dyn_cast<IntegerAttr>(attr.getValue());
    if (!isa<shard::AllReduceOp, shard::ReduceScatterOp, shard::AllGatherOp>(
            op))
      return op->emitError() << "'dtc.bucket' is for shard.all_reduce, "
                                "shard.reduce_scatter and shard.all_gather, "
                                "not '"
                             << op->getName() << "'";
    if (!value || value.getInt() < 0)
      return op->emitError() << "'dtc.bucket' must be a non-negative integer";
    return success();
  }
  if (llvm::is_contained(kPassOpAttrs, name) ||
      (llvm::is_contained(kFunctionAttrs, name) &&
       isa<FunctionOpInterface>(op)))
    return success();
  return op->emitError() << "unknown attribute '" << name << "' on '"
                         << op->getName() << "'"
                         << ::dtc::didYouMean(
                                name, names(kPassOpAttrs, kFunctionAttrs,
                                            ArrayRef<StringRef>{kPlanAttr}));
}

LogicalResult DtcDialect::verifyRegionResultAttribute(Operation *op,
                                                      unsigned regionIndex,
                                                      unsigned resultIndex,
                                                      NamedAttribute attr) {
  StringRef name = attr.getName().strref();
  if (llvm::is_contained(kStepResultAttrs, name) ||
      llvm::is_contained(kMessageAttrs, name))
    return success();
  return op->emitError() << "result " << resultIndex << ": unknown attribute '"
                         << name << "'"
                         << ::dtc::didYouMean(
                                name, names(kStepResultAttrs, kMessageAttrs));
}

//===----------------------------------------------------------------------===//
// Argument attributes of the model format
//===----------------------------------------------------------------------===//

LogicalResult DtcDialect::verifyRegionArgAttribute(Operation *op,
                                                   unsigned regionIndex,
                                                   unsigned argIndex,
                                                   NamedAttribute attr) {
  StringRef name = attr.getName().strref();
  BlockArgument arg;
  if (regionIndex < op->getNumRegions() &&
      !op->getRegion(regionIndex).empty() &&
      argIndex < op->getRegion(regionIndex).getNumArguments())
    arg = op->getRegion(regionIndex).getArgument(argIndex);
  // Point at the argument itself when the function has a body.
  auto fail = [&]() {
    return (arg ? emitError(arg.getLoc()) : op->emitOpError())
           << "argument " << argIndex << ": ";
  };
  if (name == kParamAttr) {
    if (!isa<UnitAttr>(attr.getValue()))
      return fail() << "'dtc.param' must be a unit attribute";
    return success();
  }
  if (name == kNameAttr) {
    auto str = dyn_cast<StringAttr>(attr.getValue());
    if (!str || str.getValue().empty())
      return fail() << "'dtc.name' must be a non-empty string";
    return success();
  }
  if (name == kInitAttr) {
    auto str = dyn_cast<StringAttr>(attr.getValue());
    if (!str)
      return fail() << "'dtc.init' must be a string";
    std::string error;
    if (!parseInitSpec(str.getValue(), error))
      return fail() << "invalid 'dtc.init' \"" << str.getValue()
                    << "\": " << error;
    return success();
  }
  if (name == kMaxAttr) {
    auto value = dyn_cast<IntegerAttr>(attr.getValue());
    if (!value || !value.getType().isInteger(64))
      return fail()
             << "'dtc.max' must be an i64 integer (e.g. dtc.max = 50257 : i64)";
    if (value.getInt() <= 0)
      return fail() << "'dtc.max' must be positive, got " << value.getInt();
    if (arg) {
      auto tensor = dyn_cast<RankedTensorType>(arg.getType());
      auto intType =
          tensor ? dyn_cast<IntegerType>(tensor.getElementType()) : nullptr;
      if (!intType)
        return fail()
               << "'dtc.max' only applies to integer inputs (ids, labels), "
                  "not to "
               << arg.getType();
      if (intType.getWidth() < 64 &&
          value.getInt() > (int64_t(1) << (intType.getWidth() - 1)))
        return fail() << "'dtc.max' = " << value.getInt() << " does not fit "
                      << intType << " values";
    }
    return success();
  }
  if (name == kShardingAttr) {
    if (!isa<ShardingAttr>(attr.getValue()))
      return fail() << "'dtc.sharding' must be a #dtc.sharding attribute";
    return success();
  }
  if (name == kPinPriorityAttr) {
    if (!enumOf<PinPriority>(attr.getValue()))
      return fail() << "'dtc.pin_priority' must be " << pinPriorityNames();
    return success();
  }
  if (name == kRegatherAttr) {
    if (!isa<UnitAttr>(attr.getValue()))
      return fail() << "'dtc.regather' is a unit attribute";
    return success();
  }
  if (name == kStripedInputAttr || name == kZigzagInputAttr) {
    // Zigzag cuts the sequence into two chunks per rank.
    const int64_t chunksPerRank = name == kZigzagInputAttr ? 2 : 1;
    auto value = dyn_cast<DenseI64ArrayAttr>(attr.getValue());
    auto tensor = arg ? dyn_cast<RankedTensorType>(arg.getType()) : nullptr;
    // A partitioned step's argument is its piece; the layout is over the
    // whole sequence.
    if (auto function = dyn_cast<FunctionOpInterface>(op))
      if (auto global =
              function.getArgAttrOfType<TypeAttr>(argIndex, kGlobalTypeAttr))
        tensor = dyn_cast<RankedTensorType>(global.getValue());
    if (!value || value.size() != 2 || !tensor || value[0] < 0 ||
        value[0] >= tensor.getRank() || value[1] < 1 ||
        tensor.getDimSize(value[0]) % (chunksPerRank * value[1]) != 0)
      return fail() << "'" << name
                    << "' is [dim, ways]: a dimension of the argument and a "
                       "count of ranks dividing it"
                    << (chunksPerRank == 2 ? " into two chunks each" : "");
    return success();
  }
  if (name == kRoleAttr || name == kOfAttr || name == kStateKindAttr ||
      name == kGlobalTypeAttr)
    return success();
  // Messages between pipeline stages (dtc-split-pipeline).
  if (name == kMessageAttr || name == kPeerAttr || name == kStageAttr) {
    auto value = dyn_cast<IntegerAttr>(attr.getValue());
    if (!value || value.getInt() < 0)
      return fail() << "'" << name << "' must be a non-negative integer";
    return success();
  }
  if (name == kScopeAttr || name == kPhaseAttr) {
    if (!isa<StringAttr>(attr.getValue()))
      return fail() << "'" << name << "' must be a string";
    return success();
  }
  if (std::string hint = ::dtc::didYouMean(
          name, names(kModelArgAttrs, kStepArgAttrs, kMessageAttrs));
      !hint.empty())
    return fail() << "unknown attribute '" << name << "'" << hint;
  return fail() << "unknown attribute '" << name
                << "' (the model format knows dtc.param, dtc.name, dtc.init, "
                   "dtc.max)";
}

//===----------------------------------------------------------------------===//
// #dtc.sharding
//===----------------------------------------------------------------------===//

bool ShardingAttr::isReplicated() const {
  return !isPartial() && llvm::all_of(getDims(), [](DenseI64ArrayAttr axes) {
    return axes.empty();
  });
}

LogicalResult ShardingAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                                   FlatSymbolRefAttr grid,
                                   ArrayRef<DenseI64ArrayAttr> dims,
                                   ArrayRef<int64_t> partial,
                                   PartialKind partialKind,
                                   ArrayRef<int64_t> pieces) {
  if (pieces.size() > dims.size())
    return emitError() << "sharding lists " << pieces.size()
                       << " piece sizes for " << dims.size() << " dimensions";
  for (int64_t piece : pieces)
    if (piece < 0)
      return emitError() << "piece sizes must be non-negative, got " << piece;
  if (!grid)
    return emitError() << "sharding needs a grid";
  llvm::SmallSet<int64_t, 8> seen;
  auto use = [&](int64_t axis) -> LogicalResult {
    if (axis < 0)
      return emitError() << "grid axis must be non-negative, got " << axis;
    if (!seen.insert(axis).second)
      return emitError() << "grid axis " << axis
                         << " used twice in one sharding";
    return success();
  };
  for (DenseI64ArrayAttr axes : dims) {
    if (!axes)
      return emitError() << "null dimension entry in sharding";
    for (int64_t axis : axes.asArrayRef())
      if (failed(use(axis)))
        return failure();
  }
  for (int64_t axis : partial)
    if (failed(use(axis)))
      return failure();
  return success();
}

static ParseResult parseIntList(AsmParser &parser,
                                SmallVectorImpl<int64_t> &values) {
  return parser.parseCommaSeparatedList(AsmParser::Delimiter::Square,
                                        [&]() -> ParseResult {
                                          int64_t value;
                                          if (parser.parseInteger(value))
                                            return failure();
                                          values.push_back(value);
                                          return success();
                                        });
}

Attribute ShardingAttr::parse(AsmParser &parser, Type) {
  FlatSymbolRefAttr grid;
  SmallVector<DenseI64ArrayAttr> dims;
  SmallVector<int64_t> partial;
  PartialKind kind = PartialKind::Sum;
  if (parser.parseLess() || parser.parseAttribute(grid) || parser.parseComma())
    return {};
  if (parser.parseCommaSeparatedList(
          AsmParser::Delimiter::Square, [&]() -> ParseResult {
            SmallVector<int64_t> axes;
            if (parseIntList(parser, axes))
              return failure();
            dims.push_back(DenseI64ArrayAttr::get(parser.getContext(), axes));
            return success();
          }))
    return {};
  SmallVector<int64_t> pieces;
  while (succeeded(parser.parseOptionalComma())) {
    if (succeeded(parser.parseOptionalKeyword("pieces"))) {
      if (parser.parseEqual() || parseIntList(parser, pieces))
        return {};
      continue;
    }
    if (parser.parseKeyword("partial") || parser.parseEqual() ||
        parseIntList(parser, partial))
      return {};
    if (succeeded(parser.parseOptionalKeyword("max")))
      kind = PartialKind::Max;
    else
      (void)parser.parseOptionalKeyword("sum");
  }
  if (parser.parseGreater())
    return {};
  return parser.getChecked<ShardingAttr>(parser.getContext(), grid, dims,
                                         partial, kind, pieces);
}

void ShardingAttr::print(AsmPrinter &printer) const {
  printer << "<" << getGrid() << ", [";
  llvm::interleaveComma(getDims(), printer, [&](DenseI64ArrayAttr axes) {
    printer << "[";
    llvm::interleaveComma(axes.asArrayRef(), printer);
    printer << "]";
  });
  printer << "]";
  if (!getPieces().empty()) {
    printer << ", pieces = [";
    llvm::interleaveComma(getPieces(), printer);
    printer << "]";
  }
  if (isPartial()) {
    printer << ", partial = [";
    llvm::interleaveComma(getPartial(), printer);
    printer << "]";
    if (getPartialKind() == PartialKind::Max)
      printer << " max";
  }
  printer << ">";
}
