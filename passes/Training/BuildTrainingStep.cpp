//===- BuildTrainingStep.cpp - forward + loss -> training step -----------===//
//
// Builds @train_step from @main: the forward ops, reverse-mode autodiff over
// them (each op's GradientOpInterface), optional global-norm clipping and the
// optimizer update, all as dtc ops on global shapes. Later passes shard the
// whole step at once, so gradient all-reduces, ZeRO reduce-scatters and
// Megatron's collectives all come out of one partitioner.
//
//===----------------------------------------------------------------------===//
#include "dtc/Dialect/InitSpec.h"
#include "dtc/Dialect/Utils.h"
#include "dtc/Passes/Passes.h"
#include "dtc/kernels/LearningRate.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/ADT/StringMap.h"
#include <cmath>
#include <limits>
#include <optional>

namespace mlir::dtc {
#define GEN_PASS_DEF_BUILDTRAININGSTEP
#include "dtc/Passes/Passes.h.inc"

namespace {

enum class Optimizer { None, Sgd, Adam, AdamW };

struct ParamInfo {
  unsigned mainIndex;
  std::string name;
  std::string init;
};

struct InputInfo {
  unsigned mainIndex;
  std::string name;
  IntegerAttr max;
};

RankedTensorType typeOf(Value v) { return tensorTypeOf(v); }

struct BuildTrainingStepPass
    : impl::BuildTrainingStepBase<BuildTrainingStepPass> {
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto main = module.lookupSymbol<func::FuncOp>("main");
    if (!main) {
      module.emitError() << "the model has no func.func @main";
      return signalPassFailure();
    }
    if (module.lookupSymbol("train_step")) {
      module.emitError() << "the module already has a @train_step";
      return signalPassFailure();
    }
    FailureOr<Optimizer> kind = checkOptions(main.getLoc());
    if (failed(kind) || failed(build(main, *kind)))
      return signalPassFailure();
    if (!keepForward)
      main.erase();
  }

  FailureOr<Optimizer> checkOptions(Location loc) {
    BuildTrainingStepOptions options;
    options.optimizer = optimizer;
    options.lr = lr;
    options.lrSchedule = lrSchedule;
    options.warmupSteps = warmupSteps;
    options.decaySteps = decaySteps;
    options.minLr = minLr;
    options.weightDecay = weightDecay;
    options.beta1 = beta1;
    options.beta2 = beta2;
    options.eps = eps;
    options.gradClip = gradClip;
    options.precision = precision;
    options.lossScale = lossScale;
    options.lossScaleWindow = lossScaleWindow;
    std::string option, message;
    if (!checkTrainingStepOptions(options, option, message))
      return emitError(loc) << "option " << option << ": " << message;
    if (optimizer == "sgd")
      return Optimizer::Sgd;
    if (optimizer == "adam")
      return Optimizer::Adam;
    if (optimizer == "adamw")
      return Optimizer::AdamW;
    return Optimizer::None;
  }

  /// Builds @train_step from @main, one part per member function; what the
  /// parts share (the signature's layout, the body, the gradients, the
  /// results) lives here.
  struct StepBuilder {
    StepBuilder(BuildTrainingStepPass &pass, func::FuncOp main, Optimizer kind)
        : pass(pass), main(main), kind(kind), ctx(main.getContext()),
          loc(main.getLoc()), attrs(ctx), b(ctx),
          scalarF32(RankedTensorType::get({}, Float32Type::get(ctx))),
          scalarI64(RankedTensorType::get({}, IntegerType::get(ctx, 64))) {
      adam = kind == Optimizer::Adam || kind == Optimizer::AdamW;
      // SGD reads the step only for a rate that changes with it.
      ::dtc::kernels::LearningRateSchedule schedule;
      ::dtc::kernels::parseLrScheduleKind(pass.lrSchedule, schedule.kind);
      schedule.warmupSteps = pass.warmupSteps;
      stepped = adam || (kind == Optimizer::Sgd && schedule.varies());
      // Mixed precision: the low-precision float type of parameters and
      // activations (null in f32). Master weights only matter to an update.
      lowType =
          pass.precision == "bf16-mixed"   ? FloatType(BFloat16Type::get(ctx))
          : pass.precision == "fp16-mixed" ? FloatType(Float16Type::get(ctx))
                                           : FloatType();
      scaling = pass.precision == "fp16-mixed";
    }

    LogicalResult build() {
      if (failed(collectArguments()))
        return failure();
      declareSignature();
      createStep();
      cloneForward();
      if (failed(backward()))
        return failure();
      // Everything from here on is the optimizer's.
      Operation *lastBefore = body->empty() ? nullptr : &body->back();
      optLoc =
          NameLoc::get(b.getStringAttr(stringifyPhase(Phase::Optimizer)), loc);
      markGradients();
      if (lossScaleArg)
        probeOverflow();
      if (pass.gradClip > 0) {
        pass.clipByGlobalNorm(b, optLoc, grads, invScale);
        markGradients();
      }
      results = {loss};
      resultAttrs = {dict({role(Role::Loss), named(DtcDialect::kNameAttr,
                                                   DtcDialect::kLossName)})};
      if (kind == Optimizer::None)
        returnGradients();
      else
        emitUpdates();
      Operation *optimizerStart =
          lastBefore ? lastBefore->getNextNode() : &body->front();
      for (Operation *op = optimizerStart; op; op = op->getNextNode())
        setPhase(op, Phase::Optimizer);
      finish();
      return success();
    }

  private:
    DictionaryAttr dict(ArrayRef<NamedAttribute> entries) {
      return DictionaryAttr::get(ctx, entries);
    }
    NamedAttribute role(Role r) { return roleAttr(ctx, r); }
    NamedAttribute named(StringRef key, StringRef value) {
      return attrs.getNamedAttr(key, attrs.getStringAttr(value));
    }
    NamedAttribute updates(unsigned argIndex) {
      return attrs.getNamedAttr(DtcDialect::kUpdatesAttr,
                                attrs.getI64IntegerAttr(argIndex));
    }
    static std::string derived(StringRef base, StringRef suffix) {
      return (base + Twine(DtcDialect::kDerivedNameSeparator) + suffix).str();
    }
    Type lowOf(Type t) {
      auto ranked = dyn_cast<RankedTensorType>(t);
      if (!lowType || !ranked || !ranked.getElementType().isF32())
        return t;
      return ranked.clone(lowType);
    }
    /// Optimizer state is f32 whatever the parameter's type.
    RankedTensorType stateType(const ParamInfo &p) {
      return cast<RankedTensorType>(main.getArgument(p.mainIndex).getType())
          .clone(Float32Type::get(ctx));
    }

    /// @main's parameters (with their initializers) and data inputs.
    LogicalResult collectArguments() {
      for (unsigned i = 0; i < main.getNumArguments(); ++i) {
        std::string argName = argumentName(main, i);
        if (main.getArgAttr(i, DtcDialect::kParamAttr)) {
          InitSpec init = defaultInitSpec();
          if (auto text =
                  main.getArgAttrOfType<StringAttr>(i, DtcDialect::kInitAttr)) {
            std::string error;
            auto parsed = parseInitSpec(text.getValue(), error);
            if (!parsed)
              return main.emitError() << "argument " << i << ": " << error;
            init = *parsed;
          }
          params.push_back({i, argName, init.str()});
        } else {
          inputs.push_back(
              {i, argName,
               main.getArgAttrOfType<IntegerAttr>(i, DtcDialect::kMaxAttr)});
        }
      }
      if (params.empty())
        return main.emitError()
               << "@main has no trainable parameter (dtc.param)";
      if (main.getFunctionType().getNumResults() != 1)
        return main.emitError() << "@main must return exactly the loss";
      return success();
    }

    /// The step's arguments: params, optimizer state, step, inputs.
    void declareSignature() {
      for (const ParamInfo &p : params) {
        argTypes.push_back(lowOf(main.getArgument(p.mainIndex).getType()));
        argAttrs.push_back(
            dict({role(Role::Param), named(DtcDialect::kNameAttr, p.name),
                  named(DtcDialect::kInitAttr, p.init)}));
      }
      // A bf16/f16 parameter (mixed precision, or one the model declares
      // so) trains from f32 master weights: the update reads and writes the
      // master, and the parameter becomes the new master rounded. Masters
      // first, then Adam's moments.
      masterIndex.assign(params.size(), -1);
      for (auto [idx, p] : llvm::enumerate(params)) {
        if (kind == Optimizer::None)
          break;
        auto type = cast<RankedTensorType>(argTypes[idx]);
        if (type.getElementType().isF32())
          continue;
        masterIndex[idx] = argTypes.size();
        argTypes.push_back(stateType(p));
        argAttrs.push_back(
            dict({role(Role::OptimizerState),
                  named(DtcDialect::kNameAttr, derived(p.name, "master")),
                  named(DtcDialect::kOfAttr, p.name),
                  named(DtcDialect::kInitAttr, p.init),
                  named(DtcDialect::kStateKindAttr, "master")}));
      }
      momentBase = argTypes.size();
      if (adam)
        for (StringRef state : {"adam_m", "adam_v"})
          for (const ParamInfo &p : params) {
            argTypes.push_back(stateType(p));
            argAttrs.push_back(
                dict({role(Role::OptimizerState),
                      named(DtcDialect::kNameAttr, derived(p.name, state)),
                      named(DtcDialect::kOfAttr, p.name),
                      named(DtcDialect::kInitAttr, "zeros")}));
          }
      if (stepped) {
        stepIndex = argTypes.size();
        argTypes.push_back(scalarI64);
        argAttrs.push_back(
            dict({role(Role::Step),
                  named(DtcDialect::kNameAttr, DtcDialect::kStepName)}));
      }
      // Dynamic loss scaling's state: the scale, the run of good steps and
      // the count of skipped steps (replicated scalars, saved with the
      // optimizer).
      if (scaling && kind != Optimizer::None) {
        scaleIndex = argTypes.size();
        auto state = [&](StringRef name, StringRef stateKind, Type type,
                         std::string init) {
          argTypes.push_back(type);
          argAttrs.push_back(dict(
              {role(Role::OptimizerState), named(DtcDialect::kNameAttr, name),
               named(DtcDialect::kInitAttr, init),
               named(DtcDialect::kStateKindAttr, stateKind)}));
        };
        state("loss_scale", "loss_scale", scalarF32,
              "fill(" + formatNumber(pass.lossScale) + ")");
        state(derived("loss_scale", "good_steps"), "loss_scale_good_steps",
              scalarI64, "zeros");
        state("skipped_steps", "skipped_steps", scalarI64, "zeros");
      }
      inputBase = argTypes.size();
      for (const InputInfo &in : inputs) {
        argTypes.push_back(main.getArgument(in.mainIndex).getType());
        SmallVector<NamedAttribute> entries = {
            role(Role::Input), named(DtcDialect::kNameAttr, in.name)};
        if (in.max)
          entries.push_back(attrs.getNamedAttr(DtcDialect::kMaxAttr, in.max));
        argAttrs.push_back(dict(entries));
      }
    }

    /// The function after @main, its entry block and its arguments.
    void createStep() {
      b.setInsertionPointAfter(main);
      step = func::FuncOp::create(b, loc, "train_step",
                                  FunctionType::get(ctx, argTypes, {}));
      step.setAllArgAttrs(argAttrs);
      // Arguments keep their source locations, so later errors (e.g. a
      // batch that does not divide over the mesh) point at the declaration.
      SmallVector<Location> argLocs(argTypes.size(), loc);
      for (auto [idx, p] : llvm::enumerate(params))
        argLocs[idx] = main.getArgument(p.mainIndex).getLoc();
      for (auto [idx, in] : llvm::enumerate(inputs))
        argLocs[inputBase + idx] = main.getArgument(in.mainIndex).getLoc();
      body = b.createBlock(&step.getBody(), {}, argTypes, argLocs);
      b.setInsertionPointToStart(body);
      for (unsigned i = 0; i < params.size(); ++i)
        paramArgs.push_back(body->getArgument(i));
      if (scaleIndex >= 0)
        lossScaleArg = body->getArgument(scaleIndex);
    }

    /// @main's ops (in mixed precision, with the casts it needs), each with
    /// its phase and an id its backward ops refer to (dtc.forward).
    void cloneForward() {
      IRMapping mapping;
      for (auto [idx, p] : llvm::enumerate(params))
        mapping.map(main.getArgument(p.mainIndex), body->getArgument(idx));
      for (auto [idx, in] : llvm::enumerate(inputs))
        mapping.map(main.getArgument(in.mainIndex),
                    body->getArgument(inputBase + idx));
      if (lowType) {
        for (auto [idx, in] : llvm::enumerate(inputs)) {
          Value arg = body->getArgument(inputBase + idx);
          if (lowOf(arg.getType()) != arg.getType())
            mapping.map(
                main.getArgument(in.mainIndex),
                CastOp::create(b, arg.getLoc(), lowOf(arg.getType()), arg)
                    .getResult());
        }
        loss = pass.cloneInPrecision(b, main, mapping, lowType);
      } else {
        for (Operation &op : main.getBody().front()) {
          if (auto ret = dyn_cast<func::ReturnOp>(op)) {
            loss = mapping.lookup(ret.getOperand(0));
            continue;
          }
          b.clone(op, mapping);
        }
      }
      for (Operation &op : *body) {
        setPhase(&op, Phase::Forward);
        op.setAttr(DtcDialect::kIdAttr, b.getI64IntegerAttr(forwardOps.size()));
        forwardOps.push_back(&op);
      }
    }

    /// fp16: the backward starts from the loss scale instead of 1, so small
    /// gradients stay representable; the updates unscale them in f32.
    LogicalResult backward() {
      FailureOr<SmallVector<Value>> result =
          pass.differentiate(b, loss, paramArgs, forwardOps, lossScaleArg);
      if (failed(result))
        return failure();
      grads = std::move(*result);
      return success();
    }

    /// dtc.gradient_of on the op producing each parameter's gradient.
    void markGradients() {
      for (auto [idx, g] : llvm::enumerate(grads)) {
        auto result = dyn_cast<OpResult>(g);
        if (!result || isa<arith::ConstantOp>(result.getOwner()))
          continue;
        Operation *def = result.getOwner();
        SmallVector<Attribute> names(def->getNumResults(), b.getStringAttr(""));
        if (auto old =
                def->getAttrOfType<ArrayAttr>(DtcDialect::kGradientOfAttr))
          names.assign(old.begin(), old.end());
        names[result.getResultNumber()] = b.getStringAttr(params[idx].name);
        def->setAttr(DtcDialect::kGradientOfAttr, b.getArrayAttr(names));
      }
    }

    /// Loss scaling: found_inf is the sum of every gradient times 0 (0 when
    /// all are finite, NaN otherwise; summing the gradients themselves could
    /// overflow f16), in f32; inv_scale unscales in the updates.
    void probeOverflow() {
      for (Value g : grads) {
        RankedTensorType type = typeOf(g);
        Value zero = createSplatConstant(
            b, optLoc, RankedTensorType::get({}, type.getElementType()), 0.0);
        // max(g, g) = g, but max is not linear: the probe reads the whole
        // gradient the update reads (reduced over data parallelism, summed
        // over micro-batches), not partial sums whose total could still
        // overflow.
        Value whole = MaxOp::create(b, optLoc, g, g);
        Value probe = MulOp::create(b, optLoc, whole, zero);
        SmallVector<int64_t> axes =
            llvm::to_vector(llvm::seq<int64_t>(0, type.getRank()));
        if (!axes.empty())
          probe =
              ReduceSumOp::create(b, optLoc, probe, axes, false).getResult();
        if (!typeOf(probe).getElementType().isF32())
          probe = CastOp::create(b, optLoc, scalarF32, probe);
        foundInf = foundInf
                       ? AddOp::create(b, optLoc, foundInf, probe).getResult()
                       : probe;
      }
      invScale = DivOp::create(b, optLoc,
                               createSplatConstant(b, optLoc, scalarF32, 1.0),
                               lossScaleArg);
    }

    /// --optimizer none: the step returns the (clipped) gradients.
    void returnGradients() {
      for (auto [idx, p] : llvm::enumerate(params)) {
        results.push_back(grads[idx]);
        resultAttrs.push_back(
            dict({role(Role::Grad),
                  named(DtcDialect::kNameAttr,
                        p.name + DtcDialect::kDerivedNameSeparator + "grad"),
                  named(DtcDialect::kOfAttr, p.name)}));
      }
    }

    /// The updates and what they return: each parameter's new value, the
    /// new masters, Adam's new moments, the loss scale's new state.
    void emitUpdates() {
      // The tensor each update reads and writes: the f32 master weights in
      // mixed precision (the parameter then becomes the new master
      // rounded), else the parameter itself.
      auto updated = [&](unsigned idx) {
        return masterIndex[idx] >= 0
                   ? Value(body->getArgument(masterIndex[idx]))
                   : paramArgs[idx];
      };
      SmallVector<std::pair<unsigned, Value>> newMasters;
      SmallVector<Value> newM, newV;
      // The schedule, on every update alike.
      StringAttr scheduleKind = b.getStringAttr(pass.lrSchedule);
      IntegerAttr warmupSteps = b.getI64IntegerAttr(pass.warmupSteps),
                  decaySteps = b.getI64IntegerAttr(pass.decaySteps);
      FloatAttr minLr = b.getF64FloatAttr(pass.minLr);
      for (unsigned idx = 0; idx < params.size(); ++idx) {
        Value next;
        if (kind == Optimizer::Sgd) {
          next = SgdUpdateOp::create(
              b, optLoc, updated(idx), grads[idx],
              stepIndex >= 0 ? Value(body->getArgument(stepIndex)) : Value(),
              invScale, foundInf, b.getF64FloatAttr(pass.lr),
              b.getF64FloatAttr(pass.weightDecay), scheduleKind, warmupSteps,
              decaySteps, minLr);
        } else {
          auto update = AdamUpdateOp::create(
              b, optLoc, updated(idx), grads[idx],
              body->getArgument(momentBase + idx),
              body->getArgument(momentBase + params.size() + idx),
              body->getArgument(stepIndex), invScale, foundInf,
              b.getF64FloatAttr(pass.lr), b.getF64FloatAttr(pass.beta1),
              b.getF64FloatAttr(pass.beta2), b.getF64FloatAttr(pass.eps),
              b.getF64FloatAttr(pass.weightDecay),
              b.getBoolAttr(kind == Optimizer::AdamW), scheduleKind,
              warmupSteps, decaySteps, minLr);
          next = update.getNewParam();
          newM.push_back(update.getNewM());
          newV.push_back(update.getNewV());
        }
        if (masterIndex[idx] >= 0) {
          newMasters.push_back({unsigned(masterIndex[idx]), next});
          next = CastOp::create(b, optLoc, paramArgs[idx].getType(), next);
        }
        results.push_back(next);
        resultAttrs.push_back(dict({role(Role::Update), updates(idx)}));
      }
      for (auto [arg, v] : newMasters) {
        results.push_back(v);
        resultAttrs.push_back(dict({role(Role::Update), updates(arg)}));
      }
      for (auto [k, values] : llvm::enumerate(std::array{&newM, &newV}))
        for (auto [idx, v] : llvm::enumerate(*values)) {
          results.push_back(v);
          resultAttrs.push_back(
              dict({role(Role::Update),
                    updates(momentBase + k * params.size() + idx)}));
        }
      if (lossScaleArg) {
        auto next = LossScaleUpdateOp::create(
            b, optLoc, scalarF32, scalarI64, scalarI64, lossScaleArg,
            body->getArgument(scaleIndex + 1),
            body->getArgument(scaleIndex + 2), foundInf, b.getF64FloatAttr(2.0),
            b.getF64FloatAttr(0.5), b.getI64IntegerAttr(pass.lossScaleWindow));
        for (unsigned k = 0; k < 3; ++k) {
          results.push_back(next->getResult(k));
          resultAttrs.push_back(
              dict({role(Role::Update), updates(scaleIndex + k)}));
        }
      }
    }

    /// The return, the dead ops' removal and the step's final signature.
    void finish() {
      func::ReturnOp::create(b, loc, results);
      // Rules build every operand's gradient; drop the ones nothing uses
      // (data inputs' gradients) and forward values that do not reach the
      // loss.
      for (Operation &op : llvm::make_early_inc_range(llvm::reverse(*body)))
        if (isOpTriviallyDead(&op))
          op.erase();
      SmallVector<Type> resultTypes;
      for (Value v : results)
        resultTypes.push_back(v.getType());
      step.setFunctionType(FunctionType::get(ctx, argTypes, resultTypes));
      step.setAllResultAttrs(resultAttrs);
      step->setAttr(DtcDialect::kTrainStepAttr, b.getUnitAttr());
    }

    BuildTrainingStepPass &pass;
    func::FuncOp main;
    Optimizer kind;
    MLIRContext *ctx;
    Location loc;
    Builder attrs;
    OpBuilder b;
    RankedTensorType scalarF32, scalarI64;
    // stepped: the step has the optimizer step (Adam's bias corrections, a
    // scheduled rate).
    bool adam = false, stepped = false, scaling = false;
    FloatType lowType;
    SmallVector<ParamInfo> params;
    SmallVector<InputInfo> inputs;
    // The signature: params, masters, Adam's moments, step, loss-scale
    // state, inputs; where each group starts (-1: absent).
    SmallVector<Type> argTypes;
    SmallVector<DictionaryAttr> argAttrs;
    SmallVector<int> masterIndex;
    unsigned momentBase = 0, inputBase = 0;
    int stepIndex = -1, scaleIndex = -1;
    func::FuncOp step;
    Block *body = nullptr;
    SmallVector<Value> paramArgs;
    Value loss, lossScaleArg;
    SmallVector<Operation *> forwardOps;
    SmallVector<Value> grads;
    Location optLoc = loc;
    Value foundInf, invScale;
    SmallVector<Value> results;
    SmallVector<DictionaryAttr> resultAttrs;
  };

  LogicalResult build(func::FuncOp main, Optimizer kind) {
    return StepBuilder(*this, main, kind).build();
  }

  /// Clones @main's forward at `b` in mixed precision and returns the loss
  /// (f32). Float values become `lowType`, except what an op computes from
  /// an f32 operand (autocast's widest-type rule: what follows the f32
  /// loss) and the results of F32Results ops (a loss, a token fraction).
  /// Constants adapt to the type their user computes in.
  Value cloneInPrecision(OpBuilder &b, func::FuncOp main, IRMapping &mapping,
                         FloatType lowType) {
    llvm::DenseMap<Value, arith::ConstantOp> constants; // clone -> @main's
    llvm::DenseMap<std::pair<Value, Type>, Value> converted;
    auto as = [&](Value v, Type element) -> Value {
      RankedTensorType type = typeOf(v);
      if (!isa<FloatType>(type.getElementType()) ||
          type.getElementType() == element)
        return v;
      Value &slot = converted[{v, element}];
      if (slot)
        return slot;
      auto constant = constants.find(v);
      if (constant != constants.end()) {
        auto dense = cast<DenseElementsAttr>(constant->second.getValue());
        auto &semantics = cast<FloatType>(element).getFloatSemantics();
        auto values = dense.mapValues(element, [&](const APFloat &x) {
          APFloat y = x;
          bool lost;
          y.convert(semantics, APFloat::rmNearestTiesToEven, &lost);
          return y.bitcastToAPInt();
        });
        slot = arith::ConstantOp::create(b, v.getLoc(), values);
      } else {
        slot = CastOp::create(b, v.getLoc(), type.clone(element), v);
      }
      return slot;
    };
    Value loss;
    for (Operation &op : main.getBody().front()) {
      if (auto ret = dyn_cast<func::ReturnOp>(op)) {
        loss = mapping.lookup(ret.getOperand(0));
        break;
      }
      if (auto constant = dyn_cast<arith::ConstantOp>(op)) {
        Operation *clone = b.clone(op, mapping);
        if (isa<DenseElementsAttr>(constant.getValue()))
          constants[clone->getResult(0)] = constant;
        continue;
      }
      // Constants do not decide the precision; any other f32 operand does.
      bool wide = false;
      for (Value operand : op.getOperands()) {
        Value v = mapping.lookupOrDefault(operand);
        wide |= !constants.count(v) && typeOf(v).getElementType().isF32();
      }
      Type compute = wide ? Type(b.getF32Type()) : Type(lowType);
      // Conversions go before the op that reads them.
      SmallVector<Value> operands;
      for (Value operand : op.getOperands())
        operands.push_back(as(mapping.lookupOrDefault(operand), compute));
      Operation *clone = b.clone(op, mapping);
      clone->setOperands(operands);
      if (!clone->hasTrait<F32Results>())
        for (Value r : clone->getResults())
          if (auto type = dyn_cast<RankedTensorType>(r.getType());
              type && type.getElementType().isF32())
            r.setType(type.clone(compute));
    }
    if (!typeOf(loss).getElementType().isF32())
      loss = CastOp::create(b, loss.getLoc(),
                            typeOf(loss).clone(b.getF32Type()), loss);
    return loss;
  }

  /// Reverse-mode autodiff of `loss` with respect to `params` over
  /// `forwardOps` (in program order). Appends the backward ops at `b` and
  /// returns one gradient per parameter (zeros when it does not reach the
  /// loss). Tags each backward op backward_input or backward_weight.
  FailureOr<SmallVector<Value>> differentiate(OpBuilder &b, Value loss,
                                              ArrayRef<Value> params,
                                              ArrayRef<Operation *> forwardOps,
                                              Value lossScale) {
    // Only values that depend on a parameter need a gradient.
    llvm::DenseSet<Value> needsGrad(params.begin(), params.end());
    for (Operation *op : forwardOps)
      if (llvm::any_of(op->getOperands(),
                       [&](Value v) { return needsGrad.contains(v); }))
        for (Value r : op->getResults())
          if (isa<FloatType>(typeOf(r).getElementType()))
            needsGrad.insert(r);

    // Values computed from data inputs: their gradients are the activation
    // gradients; values computed from parameters alone only feed weight
    // gradients.
    llvm::DenseSet<Value> fromData;
    llvm::DenseSet<Value> isParam(params.begin(), params.end());
    if (!forwardOps.empty())
      for (BlockArgument arg : forwardOps.front()->getBlock()->getArguments())
        if (!isParam.contains(arg))
          fromData.insert(arg);
    for (Operation *op : forwardOps)
      if (llvm::any_of(op->getOperands(),
                       [&](Value v) { return fromData.contains(v); }))
        fromData.insert(op->result_begin(), op->result_end());

    llvm::DenseMap<Value, Value> grads;
    Operation *firstBackward = nullptr;
    auto remember = [&](Operation *op) {
      if (!firstBackward)
        firstBackward = op;
    };
    // d(scale * loss) / d loss under loss scaling (the loss is f32, as the
    // scale), else 1.
    Value seed = lossScale
                     ? lossScale
                     : createSplatConstant(b, loss.getLoc(), typeOf(loss), 1.0);
    if (Operation *def = seed.getDefiningOp()) {
      remember(def);
      if (Operation *lossOp = loss.getDefiningOp())
        if (Attribute id = lossOp->getAttr(DtcDialect::kIdAttr))
          def->setAttr(DtcDialect::kForwardAttr, id);
    }
    grads[loss] = seed;
    // Gradients flowing into forward ops: the activation-gradient frontier.
    llvm::SetVector<Value> activationGrads;

    for (Operation *op : llvm::reverse(forwardOps)) {
      SmallVector<Value> resultGrads;
      bool anyResultGrad = false;
      for (Value r : op->getResults()) {
        resultGrads.push_back(grads.lookup(r));
        anyResultGrad |= static_cast<bool>(resultGrads.back());
      }
      if (!anyResultGrad || llvm::none_of(op->getOperands(), [&](Value v) {
            return needsGrad.contains(v);
          }))
        continue;
      auto rule = dyn_cast<GradientOpInterface>(op);
      if (!rule)
        return op->emitError() << "cannot differentiate through '"
                               << op->getName() << "': it has no gradient rule";
      Operation *before = b.getInsertionBlock()->empty()
                              ? nullptr
                              : &b.getInsertionBlock()->back();
      // Materialize missing result gradients as zeros so rules see every one.
      for (auto [r, g] : llvm::zip(op->getResults(), resultGrads))
        if (!g && isa<FloatType>(typeOf(r).getElementType())) {
          g = createSplatConstant(b, op->getLoc(), typeOf(r), 0.0);
          remember(g.getDefiningOp());
        }
      for (auto [r, g] : llvm::zip(op->getResults(), resultGrads))
        if (g && fromData.contains(r))
          activationGrads.insert(g);
      // Activation operands' gradients (B) and parameter operands'
      // gradients (W) are asked for separately, so that no weight gradient
      // is computed by an op on the activation-gradient path (a fused norm
      // gradient splits in two).
      SmallVector<bool> activation, weight;
      for (Value operand : op->getOperands()) {
        bool needed = needsGrad.contains(operand);
        activation.push_back(needed && fromData.contains(operand));
        weight.push_back(needed && !fromData.contains(operand));
      }
      SmallVector<SmallVector<bool>, 2> requests;
      if (llvm::is_contained(activation, true) &&
          llvm::is_contained(weight, true))
        requests = {activation, weight};
      else
        requests = {SmallVector<bool>(op->getNumOperands(), true)};
      SmallVector<Value> operandGrads(op->getNumOperands());
      for (ArrayRef<bool> wanted : requests) {
        SmallVector<Value> built;
        if (failed(rule.buildGradientFor(b, resultGrads, wanted, built)))
          return op->emitError()
                 << "gradient rule of '" << op->getName() << "' failed";
        if (built.size() != op->getNumOperands())
          return op->emitError()
                 << "gradient rule of '" << op->getName() << "' returned "
                 << built.size() << " gradients for " << op->getNumOperands()
                 << " operands";
        for (auto [idx, g] : llvm::enumerate(built))
          if (wanted[idx])
            operandGrads[idx] = g;
      }
      remember(before ? before->getNextNode()
                      : &b.getInsertionBlock()->front());
      for (auto [operand, g] : llvm::zip(op->getOperands(), operandGrads)) {
        if (!g || !needsGrad.contains(operand))
          continue;
        if (g.getType() != operand.getType())
          return op->emitError()
                 << "gradient rule of '" << op->getName() << "' produced "
                 << g.getType() << " for an operand of type "
                 << operand.getType();
        Value &slot = grads[operand];
        slot = slot ? AddOp::create(b, op->getLoc(), slot, g).getResult() : g;
      }
      // Everything built for `op` (its rule's ops, zeros it needed, the
      // accumulation of its operands' gradients) links back to it.
      Attribute id = op->getAttr(DtcDialect::kIdAttr);
      for (Operation *built = before ? before->getNextNode()
                                     : &b.getInsertionBlock()->front();
           built; built = built->getNextNode())
        built->setAttr(DtcDialect::kForwardAttr, id);
    }

    SmallVector<Value> paramGrads;
    for (Value p : params) {
      Value g = grads.lookup(p);
      if (!g) {
        // The parameter does not reach the loss.
        g = createSplatConstant(b, p.getLoc(), typeOf(p), 0.0);
        remember(g.getDefiningOp());
      }
      paramGrads.push_back(g);
    }

    if (firstBackward)
      tagBackwardPhases(firstBackward, activationGrads.getArrayRef());
    return paramGrads;
  }

  /// Phases of the backward ops from `firstBackward` on: what the
  /// activation gradients need is backward_input (B in zero-bubble
  /// schedules); the rest only feeds parameter gradients (W).
  static void tagBackwardPhases(Operation *firstBackward,
                                ArrayRef<Value> activationGrads) {
    llvm::DenseSet<Operation *> inputPath;
    SmallVector<Value> worklist(activationGrads.begin(), activationGrads.end());
    while (!worklist.empty()) {
      Value v = worklist.pop_back_val();
      Operation *def = v.getDefiningOp();
      if (!def || def->hasAttr(DtcDialect::kPhaseAttr) ||
          !inputPath.insert(def).second)
        continue;
      worklist.append(def->operand_begin(), def->operand_end());
    }
    for (Operation *op = firstBackward; op; op = op->getNextNode())
      setPhase(op, inputPath.contains(op) ? Phase::BackwardInput
                                          : Phase::BackwardWeight);
  }

  /// g *= clip / max(||g||_2 + 1e-6, clip) over all gradients together
  /// (PyTorch's clip_grad_norm_).
  /// Low-precision gradients are squared and summed in f32 (squares of
  /// scaled f16 gradients overflow); `invScale` (loss scaling) unscales the
  /// norm.
  void clipByGlobalNorm(OpBuilder &b, Location loc,
                        SmallVectorImpl<Value> &grads, Value invScale) {
    Value total;
    for (Value g : grads) {
      SmallVector<int64_t> axes =
          llvm::to_vector(llvm::seq<int64_t>(0, typeOf(g).getRank()));
      Value wide = g;
      if (!typeOf(g).getElementType().isF32())
        wide = CastOp::create(b, loc, typeOf(g).clone(b.getF32Type()), g);
      Value squares = MulOp::create(b, loc, wide, wide);
      Value sum =
          axes.empty()
              ? squares
              : ReduceSumOp::create(b, loc, squares, axes, false).getResult();
      if (typeOf(sum).getElementType() != b.getF32Type())
        sum = CastOp::create(b, loc, RankedTensorType::get({}, b.getF32Type()),
                             sum);
      total = total ? AddOp::create(b, loc, total, sum).getResult() : sum;
    }
    auto scalar = RankedTensorType::get({}, b.getF32Type());
    Value norm = SqrtOp::create(b, loc, total);
    if (invScale)
      norm = MulOp::create(b, loc, norm, invScale);
    Value limit = createSplatConstant(b, loc, scalar, gradClip);
    Value denom = MaxOp::create(
        b, loc,
        AddOp::create(b, loc, norm, createSplatConstant(b, loc, scalar, 1e-6)),
        limit);
    Value coef = DivOp::create(b, loc, limit, denom);
    for (Value &g : grads) {
      Value c = coef;
      if (typeOf(g).getElementType() != b.getF32Type())
        c = CastOp::create(
            b, loc, RankedTensorType::get({}, typeOf(g).getElementType()),
            coef);
      g = MulOp::create(b, loc, g, c);
    }
  }
};

} // namespace

bool checkTrainingStepOptions(const BuildTrainingStepOptions &o,
                              std::string &option, std::string &message) {
  auto fail = [&](const char *name, std::string text) {
    option = name;
    message = std::move(text);
    return false;
  };
  if (o.optimizer != "sgd" && o.optimizer != "adam" && o.optimizer != "adamw" &&
      o.optimizer != "none")
    return fail("optimizer", "unknown optimizer '" + o.optimizer +
                                 "' (expected sgd, adam, adamw or none)");
  // Judged as f32 numbers, the precision of the tensors they act on (the
  // clip limit is an f32 constant of the step; the update ops keep f64).
  auto f32 = [](double v) {
    return static_cast<double>(static_cast<float>(v));
  };
  auto text = [](double v) { return formatNumber(v); };
  double lr = f32(o.lr), wd = f32(o.weightDecay), b1 = f32(o.beta1),
         b2 = f32(o.beta2), eps = f32(o.eps), clip = f32(o.gradClip);
  if (!std::isfinite(lr) || lr <= 0)
    return fail("lr", "the learning rate must be a positive f32 number, got " +
                          text(o.lr));
  if (!std::isfinite(wd) || wd < 0)
    return fail("weight-decay",
                "must be a finite f32 number >= 0, got " + text(o.weightDecay));
  if (!std::isfinite(b1) || b1 < 0 || b1 >= 1)
    return fail("beta1",
                "must be in [0, 1) as an f32 number, got " + text(o.beta1));
  if (!std::isfinite(b2) || b2 < 0 || b2 >= 1)
    return fail("beta2",
                "must be in [0, 1) as an f32 number, got " + text(o.beta2));
  if (!std::isfinite(eps) || eps <= 0)
    return fail("eps", "must be a positive f32 number, got " + text(o.eps));
  if (!std::isfinite(clip) || clip < 0)
    return fail("grad-clip",
                "must be a finite f32 number >= 0 (0 = off), got " +
                    text(o.gradClip));
  ::dtc::kernels::LrScheduleKind schedule;
  if (!::dtc::kernels::parseLrScheduleKind(o.lrSchedule, schedule))
    return fail("lr-schedule", "unknown schedule '" + o.lrSchedule +
                                   "' (expected constant, cosine or linear)");
  if (o.warmupSteps < 0)
    return fail("warmup-steps",
                "must be >= 0, got " + std::to_string(o.warmupSteps));
  const bool decays = schedule != ::dtc::kernels::LrScheduleKind::Constant;
  if (decays && o.decaySteps <= o.warmupSteps)
    return fail("decay-steps",
                "must be above warmup-steps (" + std::to_string(o.warmupSteps) +
                    "): the " + o.lrSchedule +
                    " rate decays from the end of the warmup to min-lr at "
                    "this update, got " +
                    std::to_string(o.decaySteps));
  if (!decays && o.decaySteps != 0)
    return fail("decay-steps", "a constant rate does not decay (add "
                               "lr-schedule cosine or linear)");
  if (!decays && o.minLr != 0)
    return fail("min-lr", "a constant rate does not decay (add lr-schedule "
                          "cosine or linear)");
  if (!std::isfinite(o.minLr) || o.minLr < 0 || o.minLr > o.lr)
    return fail("min-lr", "must be in [0, lr] = [0, " + text(o.lr) + "], got " +
                              text(o.minLr));
  if (o.precision != "f32" && o.precision != "bf16-mixed" &&
      o.precision != "fp16-mixed")
    return fail("precision", "unknown precision '" + o.precision +
                                 "' (expected f32, bf16-mixed or fp16-mixed)");
  double scale = f32(o.lossScale);
  if (!std::isfinite(scale) || scale <= 0)
    return fail("loss-scale",
                "must be a positive f32 number, got " + text(o.lossScale));
  if (o.lossScaleWindow < 1)
    return fail("loss-scale-window",
                "must be >= 1, got " + std::to_string(o.lossScaleWindow));
  return true;
}

} // namespace mlir::dtc
