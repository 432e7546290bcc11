//===- LayoutCases.cpp - CUDA kernel cases (see KernelCases.h)
//---------------===//
//
// transpose, reduce_sum / reduce_mean / reduce_max, pad, fill_padding,
// softmax and softmax_grad (kernels/cuda/Layout.cu).
//
//===----------------------------------------------------------------------===//
#include "KernelCases.h"

namespace dtc::test {
namespace {
using rt::DType;
using json = nlohmann::json;

KernelCase transposeCase(const std::string &label, DType t, rt::Shape in,
                         std::vector<int64_t> perm, double lo = -1,
                         double hi = 1) {
  rt::Shape out;
  for (int64_t p : perm)
    out.push_back(in[size_t(p)]);
  return {label,
          "transpose",
          {{t, in, lo, hi}},
          {{t, out}},
          {{"permutation", perm}}};
}

rt::Shape reduced(const rt::Shape &in, const std::vector<int64_t> &axes,
                  bool keep) {
  rt::Shape s;
  for (size_t i = 0; i < in.size(); ++i) {
    bool r = false;
    for (int64_t a : axes)
      r = r || a == int64_t(i);
    if (!r)
      s.push_back(in[i]);
    else if (keep)
      s.push_back(1);
  }
  return s;
}
KernelCase reduceCase(const std::string &label, const std::string &kernel,
                      DType t, rt::Shape in, std::vector<int64_t> axes,
                      bool keep, double lo = -1, double hi = 1) {
  rt::Shape out = reduced(in, axes, keep);
  return {label,
          kernel,
          {{t, in, lo, hi}},
          {{t, out}},
          {{"axes", axes}, {"keep_dims", keep}}};
}

KernelCase padCase(const std::string &label, DType t, rt::Shape in,
                   rt::Shape out) {
  return {label, "pad", {{t, in, -100, 100}}, {{t, out}}};
}

KernelCase fillCase(const std::string &label, DType t, rt::Shape shape,
                    int64_t axis, int64_t size, int64_t offset,
                    const char *fill, bool inPlace) {
  KernelCase c{
      label,
      "fill_padding",
      {{t, shape, -1, 1}, {DType::I64, {}, double(offset), double(offset)}},
      {{t, shape}},
      {{"axis", axis}, {"size", size}, {"fill", fill}}};
  if (inPlace)
    c.inPlace = {{0, 0}};
  return c;
}

KernelCase softmaxCase(const std::string &label, DType t, rt::Shape shape,
                       int64_t axis) {
  return {
      label, "softmax", {{t, shape, -6, 6}}, {{t, shape}}, {{"axis", axis}}};
}
KernelCase softmaxGradCase(const std::string &label, DType t, rt::Shape shape,
                           int64_t axis) {
  return {label,
          "softmax_grad",
          {{t, shape, 0, 1}, {t, shape, -1, 1}},
          {{t, shape}},
          {{"axis", axis}}};
}

std::vector<KernelCase> layoutCases() {
  std::vector<KernelCase> v = {
      // transpose: tiled (last two swapped, batched, general), gather paths.
      transposeCase("transpose 2d", DType::F32, {37, 45}, {1, 0}),
      transposeCase("transpose 2d large", DType::F32, {1024, 768}, {1, 0}),
      transposeCase("transpose batched last two", DType::F32, {2, 3, 33, 65},
                    {0, 1, 3, 2}),
      transposeCase("transpose heads", DType::F32, {4, 5, 6, 7}, {0, 2, 1, 3}),
      transposeCase("transpose mixed size1", DType::F32, {3, 1, 40, 20},
                    {2, 0, 3, 1}),
      transposeCase("transpose rank5", DType::F32, {8, 9, 10, 11, 3},
                    {4, 2, 0, 3, 1}),
      transposeCase("transpose rank5 tiled", DType::F32, {3, 17, 2, 5, 40},
                    {1, 4, 2, 3, 0}),
      transposeCase("transpose thin", DType::F32, {100, 3}, {1, 0}),
      transposeCase("transpose identity", DType::F32, {6, 7, 8}, {0, 1, 2}),
      transposeCase("transpose rank1", DType::F32, {100}, {0}),
      transposeCase("transpose scalar", DType::F32, {}, {}),
      transposeCase("transpose empty", DType::F32, {0, 5}, {1, 0}),
      transposeCase("transpose bf16", DType::BF16, {64, 48}, {1, 0}),
      transposeCase("transpose f16 rank3", DType::F16, {5, 70, 33}, {2, 1, 0}),
      transposeCase("transpose i32", DType::I32, {30, 50}, {1, 0}, -1000000,
                    1000000),
      transposeCase("transpose i64 rank3", DType::I64, {3, 40, 50}, {2, 0, 1},
                    -1e15, 1e15),

      // transpose, rows path: the innermost (merged) dim keeps its place, so
      // rows of R = inner extent x element size bytes move whole, in 16-,
      // 8-, 4- or 2-byte vectors (the widest dividing R and both pointers;
      // the harness cannot misalign the pointers, the kernel checks them).
      // The attention head split / merge at GPT size (16-byte vectors,
      // 16 lanes per 256-byte row), and smaller ones in f32 / f16.
      transposeCase("transpose heads split bf16 gpt", DType::BF16,
                    {4, 2048, 16, 128}, {0, 2, 1, 3}),
      transposeCase("transpose heads merge bf16", DType::BF16, {2, 12, 256, 64},
                    {0, 2, 1, 3}),
      transposeCase("transpose heads split f32", DType::F32, {2, 128, 12, 64},
                    {0, 2, 1, 3}),
      transposeCase("transpose heads merge f16", DType::F16, {2, 12, 128, 64},
                    {0, 2, 1, 3}),
      transposeCase("transpose heads i64", DType::I64, {2, 33, 5, 64},
                    {0, 2, 1, 3}, -1e15, 1e15),
      // Inner extent 1 (dropped: tiled / gather paths).
      transposeCase("transpose rows inner1 f32", DType::F32, {33, 20, 1},
                    {1, 0, 2}),
      transposeCase("transpose rows inner1 bf16", DType::BF16, {3, 4, 5, 1},
                    {2, 0, 1, 3}),
      // Inner extent 3: 12-byte rows (4-byte vectors), 6-byte rows (2-byte).
      transposeCase("transpose rows inner3 f32", DType::F32, {7, 9, 3},
                    {1, 0, 2}),
      transposeCase("transpose rows inner3 bf16", DType::BF16, {10, 11, 3},
                    {1, 0, 2}),
      transposeCase("transpose rows inner3 f16 rank4", DType::F16, {5, 6, 7, 3},
                    {2, 0, 1, 3}),
      transposeCase("transpose rows inner3 i32", DType::I32, {30, 40, 3},
                    {1, 0, 2}, -1000000, 1000000),
      // One-vector rows (4, 8, 16 bytes) as wider elements: tiled when both
      // outer dims are >= 8, else the rows kernel with one lane per row.
      transposeCase("transpose rows inner2 bf16 tiled", DType::BF16,
                    {33, 45, 2}, {1, 0, 2}),
      transposeCase("transpose rows inner2 f32 tiled", DType::F32, {33, 45, 2},
                    {1, 0, 2}),
      transposeCase("transpose rows inner2 i64 tiled", DType::I64, {20, 30, 2},
                    {1, 0, 2}, -1e15, 1e15),
      transposeCase("transpose rows inner8 bf16 tiled", DType::BF16,
                    {40, 50, 8}, {1, 0, 2}),
      transposeCase("transpose rows inner8 bf16 small", DType::BF16, {3, 5, 8},
                    {1, 0, 2}),
      transposeCase("transpose rows inner4 f32 batched tiled", DType::F32,
                    {3, 20, 9, 4}, {0, 2, 1, 3}),
      // Inner extent 8 / 64 in other dtypes (2 and 4+ vectors per row).
      transposeCase("transpose rows inner8 f32", DType::F32, {40, 50, 8},
                    {1, 0, 2}),
      transposeCase("transpose rows inner8 i64", DType::I64, {6, 7, 8},
                    {1, 0, 2}, -1e15, 1e15),
      transposeCase("transpose rows inner64 bf16", DType::BF16, {3, 40, 5, 64},
                    {0, 2, 1, 3}),
      transposeCase("transpose rows inner64 f32 rank4", DType::F32,
                    {2, 33, 3, 64}, {2, 0, 1, 3}),
      // Inner extent 100: 200-byte bf16 rows (8-byte vectors, 25 of 32
      // lanes), 400-byte f32 rows, 800-byte i64 rows (2 segments of 32).
      transposeCase("transpose rows inner100 bf16", DType::BF16, {3, 4, 5, 100},
                    {1, 2, 0, 3}),
      transposeCase("transpose rows inner100 f32", DType::F32, {3, 4, 5, 100},
                    {2, 0, 1, 3}),
      transposeCase("transpose rows inner100 f16", DType::F16, {7, 3, 100},
                    {1, 0, 2}),
      transposeCase("transpose rows inner100 i64", DType::I64, {3, 4, 5, 100},
                    {1, 2, 0, 3}, -1e15, 1e15),
      // Odd row sizes: 50 bytes (2-byte vectors), 100 bytes (4-byte), 40
      // bytes (8-byte).
      transposeCase("transpose rows inner25 bf16", DType::BF16, {9, 10, 25},
                    {1, 0, 2}),
      transposeCase("transpose rows inner50 f16", DType::F16, {9, 10, 50},
                    {1, 0, 2}),
      transposeCase("transpose rows inner5 i64", DType::I64, {9, 10, 5},
                    {1, 0, 2}, -1e15, 1e15),
      // Long rows split into segments of 32 vectors.
      transposeCase("transpose rows long f32", DType::F32, {4, 5, 3000},
                    {1, 0, 2}),
      transposeCase("transpose rows long bf16 odd", DType::BF16, {4, 5, 1001},
                    {1, 0, 2}),
      // Inner run of several input dims merged (5 x 6), size-1 dims around.
      transposeCase("transpose rows merged inner f32", DType::F32, {3, 4, 5, 6},
                    {1, 0, 2, 3}),
      transposeCase("transpose rows merged inner bf16", DType::BF16,
                    {3, 4, 5, 6}, {1, 0, 2, 3}),
      transposeCase("transpose rows size1 dims", DType::F32, {4, 1, 6, 1, 32},
                    {2, 3, 0, 1, 4}),
      // Rank 3 / 5 / 8 with the last dim kept.
      transposeCase("transpose rows rank3 f16", DType::F16, {17, 19, 24},
                    {1, 0, 2}),
      transposeCase("transpose rows rank5 f32", DType::F32, {2, 3, 4, 5, 16},
                    {3, 1, 0, 2, 4}),
      transposeCase("transpose rows rank5 bf16", DType::BF16, {3, 2, 5, 4, 24},
                    {2, 0, 3, 1, 4}),
      transposeCase("transpose rows rank8 f16", DType::F16,
                    {2, 3, 2, 3, 2, 3, 2, 16}, {6, 5, 4, 3, 2, 1, 0, 7}),
      // Plain copies (every dim merges into one row), split into segments.
      transposeCase("transpose identity bf16 large", DType::BF16, {512, 1024},
                    {0, 1}),
      transposeCase("transpose identity size1 f16", DType::F16, {1, 37, 1},
                    {2, 1, 0}),
      transposeCase("transpose rows empty", DType::BF16, {3, 0, 8}, {1, 0, 2}),

      // reduce_sum: every axis, several axes, keep_dims both ways.
      reduceCase("reduce_sum rows", "reduce_sum", DType::F32, {7, 33}, {1},
                 false),
      reduceCase("reduce_sum cols keep", "reduce_sum", DType::F32, {7, 33}, {0},
                 true),
      reduceCase("reduce_sum all", "reduce_sum", DType::F32, {7, 33}, {0, 1},
                 false),
      reduceCase("reduce_sum none", "reduce_sum", DType::F32, {7, 33}, {},
                 false),
      reduceCase("reduce_sum r4 axes13 keep", "reduce_sum", DType::F32,
                 {4, 5, 6, 7}, {1, 3}, true),
      reduceCase("reduce_sum r4 axes02", "reduce_sum", DType::F32, {4, 5, 6, 7},
                 {0, 2}, false),
      reduceCase("reduce_sum r4 axis2", "reduce_sum", DType::F32, {4, 5, 6, 7},
                 {2}, false),
      reduceCase("reduce_sum r4 axes30", "reduce_sum", DType::F32, {4, 5, 6, 7},
                 {3, 0}, true),
      reduceCase("reduce_sum r4 all keep", "reduce_sum", DType::F32,
                 {4, 5, 6, 7}, {0, 1, 2, 3}, true),
      reduceCase("reduce_sum size1 dims", "reduce_sum", DType::F32,
                 {1, 7, 1, 5}, {0, 2}, true),
      reduceCase("reduce_sum size1 dims axis1", "reduce_sum", DType::F32,
                 {1, 7, 1, 5}, {1}, false),
      reduceCase("reduce_sum long rows", "reduce_sum", DType::F32, {3, 5000},
                 {1}, false),
      reduceCase("reduce_sum long rows many", "reduce_sum", DType::F32,
                 {40, 4096}, {1}, true),
      reduceCase("reduce_sum bias grad", "reduce_sum", DType::F32, {2048, 768},
                 {0}, false),
      reduceCase("reduce_sum bias grad r3", "reduce_sum", DType::F32,
                 {8, 256, 96}, {0, 1}, false),
      reduceCase("reduce_sum tall thin", "reduce_sum", DType::F32, {20000, 8},
                 {0}, false),
      reduceCase("reduce_sum to scalar", "reduce_sum", DType::F32, {300000},
                 {0}, false),
      reduceCase("reduce_sum middle long", "reduce_sum", DType::F32,
                 {3, 3000, 5}, {1}, false),
      reduceCase("reduce_sum scalar", "reduce_sum", DType::F32, {}, {}, false),
      reduceCase("reduce_sum rank1 keep", "reduce_sum", DType::F32, {33}, {0},
                 true),
      reduceCase("reduce_sum empty axis", "reduce_sum", DType::F32, {0, 4}, {0},
                 false),
      reduceCase("reduce_sum i32 wrap", "reduce_sum", DType::I32, {50, 70}, {0},
                 false, -2000000000, 2000000000),
      reduceCase("reduce_sum i32 rows", "reduce_sum", DType::I32, {9, 1000},
                 {1}, false, -2000000000, 2000000000),
      reduceCase("reduce_sum i32 long", "reduce_sum", DType::I32, {2, 10000},
                 {1}, true, -100, 100),
      reduceCase("reduce_sum i64 wrap", "reduce_sum", DType::I64, {16, 33},
                 {0, 1}, false, -4e18, 4e18),
      reduceCase("reduce_sum i64 middle", "reduce_sum", DType::I64, {40, 3, 30},
                 {1}, false, -1e12, 1e12),
      reduceCase("reduce_sum i64 cols", "reduce_sum", DType::I64, {3000, 7},
                 {0}, true, -1e12, 1e12),
      reduceCase("reduce_sum bf16", "reduce_sum", DType::BF16, {16, 100}, {1},
                 false),
      reduceCase("reduce_sum bf16 cols", "reduce_sum", DType::BF16, {500, 24},
                 {0}, false),
      reduceCase("reduce_sum f16", "reduce_sum", DType::F16, {64, 10}, {0},
                 false),
      reduceCase("reduce_sum f16 long", "reduce_sum", DType::F16, {4, 5000},
                 {1}, true, -0.1, 0.1),

      // reduce_mean
      reduceCase("reduce_mean rows keep", "reduce_mean", DType::F32, {6, 130},
                 {1}, true),
      reduceCase("reduce_mean r3 axes02", "reduce_mean", DType::F32, {2, 3, 4},
                 {0, 2}, false),
      reduceCase("reduce_mean cols", "reduce_mean", DType::F32, {1000, 33}, {0},
                 false),
      reduceCase("reduce_mean all keep", "reduce_mean", DType::F32, {5000}, {0},
                 true),
      reduceCase("reduce_mean long", "reduce_mean", DType::F32, {7, 4096}, {1},
                 false),
      reduceCase("reduce_mean none", "reduce_mean", DType::F32, {3, 4}, {},
                 true),
      reduceCase("reduce_mean empty axis", "reduce_mean", DType::F32, {0, 4},
                 {0}, true),
      reduceCase("reduce_mean bf16", "reduce_mean", DType::BF16, {8, 33, 5},
                 {1}, false),
      reduceCase("reduce_mean f16", "reduce_mean", DType::F16, {33, 7}, {0, 1},
                 false),

      // reduce_max
      reduceCase("reduce_max rows", "reduce_max", DType::F32, {7, 33}, {1},
                 false),
      reduceCase("reduce_max cols", "reduce_max", DType::F32, {33, 7}, {0},
                 false),
      reduceCase("reduce_max r3 keep", "reduce_max", DType::F32, {4, 5, 6},
                 {0, 2}, true),
      reduceCase("reduce_max long", "reduce_max", DType::F32, {3, 10000}, {1},
                 false),
      reduceCase("reduce_max tall", "reduce_max", DType::F32, {20000, 3}, {0},
                 true),
      reduceCase("reduce_max all", "reduce_max", DType::F32, {3, 4, 5, 6},
                 {0, 1, 2, 3}, false),
      reduceCase("reduce_max none", "reduce_max", DType::F32, {3, 4}, {},
                 false),
      reduceCase("reduce_max empty axis", "reduce_max", DType::F32, {0, 4}, {0},
                 false),
      reduceCase("reduce_max bf16", "reduce_max", DType::BF16, {20, 30}, {0, 1},
                 true),
      reduceCase("reduce_max f16", "reduce_max", DType::F16, {9, 1000}, {1},
                 false),

      // pad: pads, crops, both, size-1 and empty dims.
      padCase("pad pad rows crop cols", DType::F32, {5, 7}, {8, 4}),
      padCase("pad middle", DType::F32, {3, 4, 5}, {3, 6, 5}),
      padCase("pad crop outer pad inner", DType::F32, {3, 4, 5}, {2, 4, 7}),
      padCase("pad same", DType::F32, {3, 4, 5}, {3, 4, 5}),
      padCase("pad rank1", DType::F32, {10}, {13}),
      padCase("pad rank1 crop", DType::F32, {10}, {4}),
      padCase("pad scalar", DType::F32, {}, {}),
      padCase("pad size1", DType::F32, {3, 1, 4}, {3, 2, 4}),
      padCase("pad to size1", DType::F32, {3, 5, 4}, {1, 1, 4}),
      padCase("pad empty in", DType::F32, {0, 3}, {2, 3}),
      padCase("pad empty out", DType::F32, {2, 3}, {2, 0}),
      padCase("pad rank4", DType::F32, {2, 3, 33, 7}, {3, 3, 30, 9}),
      padCase("pad large", DType::F32, {500, 1000}, {512, 1024}),
      padCase("pad bf16", DType::BF16, {4, 33}, {6, 33}),
      padCase("pad f16", DType::F16, {4, 33}, {3, 40}),
      padCase("pad i32", DType::I32, {5, 5}, {7, 3}),
      padCase("pad i64", DType::I64, {5, 6, 2}, {7, 3, 2}),

      // fill_padding: boundary inside the piece, none, all; both fills.
      fillCase("fill_padding zero inside", DType::F32, {4, 10}, 1, 25, 20,
               "zero", false),
      fillCase("fill_padding ninf inside", DType::F32, {4, 10}, 1, 25, 20,
               "-inf", false),
      fillCase("fill_padding axis0 ninf", DType::F32, {10, 6}, 0, 7, 0, "-inf",
               false),
      fillCase("fill_padding all filled", DType::F32, {10, 6}, 0, 7, 10, "zero",
               false),
      fillCase("fill_padding none filled", DType::F32, {10, 6}, 0, 100, 2,
               "-inf", false),
      fillCase("fill_padding middle axis", DType::F32, {3, 9, 5}, 1, 20, 15,
               "-inf", false),
      fillCase("fill_padding rank1", DType::F32, {33}, 0, 40, 8, "zero", false),
      fillCase("fill_padding large", DType::F32, {64, 8192}, 1, 50000, 45000,
               "-inf", false),
      fillCase("fill_padding inplace zero", DType::F32, {4, 10}, 1, 25, 20,
               "zero", true),
      fillCase("fill_padding inplace ninf", DType::F32, {3, 9, 5}, 1, 20, 15,
               "-inf", true),
      fillCase("fill_padding inplace none", DType::F32, {7, 5}, 0, 8, 1, "zero",
               true),
      fillCase("fill_padding bf16", DType::BF16, {8, 33}, 1, 50, 30, "-inf",
               false),
      fillCase("fill_padding bf16 inplace", DType::BF16, {8, 33}, 0, 13, 10,
               "zero", true),
      fillCase("fill_padding f16", DType::F16, {8, 33}, 1, 50, 30, "zero",
               false),
      fillCase("fill_padding f16 inplace", DType::F16, {5, 6, 7}, 2, 10, 6,
               "-inf", true),

      // softmax: row lengths 1, 7, 33, 1000, 4096, every axis.
      softmaxCase("softmax n1", DType::F32, {7, 1}, 1),
      softmaxCase("softmax n7", DType::F32, {5, 7}, 1),
      softmaxCase("softmax n33 many rows", DType::F32, {2048, 33}, 1),
      softmaxCase("softmax n1000", DType::F32, {16, 1000}, 1),
      softmaxCase("softmax n1025", DType::F32, {5, 1025}, 1),
      softmaxCase("softmax n4096", DType::F32, {8, 4096}, 1),
      softmaxCase("softmax vocab", DType::F32, {3, 50000}, 1),
      softmaxCase("softmax axis0", DType::F32, {33, 7}, 0),
      softmaxCase("softmax r3 axis0", DType::F32, {4, 5, 6}, 0),
      softmaxCase("softmax r3 axis1", DType::F32, {4, 5, 6}, 1),
      softmaxCase("softmax r3 axis2", DType::F32, {4, 5, 6}, 2),
      softmaxCase("softmax r4 axis2 long", DType::F32, {2, 3, 1500, 4}, 2),
      softmaxCase("softmax trailing size1", DType::F32, {6, 40, 1}, 1),
      softmaxCase("softmax rank1", DType::F32, {1}, 0),
      softmaxCase("softmax rank1 long", DType::F32, {3000}, 0),
      softmaxCase("softmax attention", DType::F32, {2, 4, 64, 64}, 3),
      softmaxCase("softmax bf16", DType::BF16, {8, 4096}, 1),
      softmaxCase("softmax bf16 axis0", DType::BF16, {100, 9}, 0),
      softmaxCase("softmax f16", DType::F16, {16, 1000}, 1),
      softmaxCase("softmax f16 r3", DType::F16, {3, 33, 7}, 1),

      softmaxGradCase("softmax_grad n1", DType::F32, {7, 1}, 1),
      softmaxGradCase("softmax_grad n7", DType::F32, {5, 7}, 1),
      softmaxGradCase("softmax_grad n33 many rows", DType::F32, {2048, 33}, 1),
      softmaxGradCase("softmax_grad n1000", DType::F32, {16, 1000}, 1),
      softmaxGradCase("softmax_grad n4096", DType::F32, {8, 4096}, 1),
      softmaxGradCase("softmax_grad axis0", DType::F32, {33, 7}, 0),
      softmaxGradCase("softmax_grad r3 axis0", DType::F32, {4, 5, 6}, 0),
      softmaxGradCase("softmax_grad r3 axis1", DType::F32, {4, 5, 6}, 1),
      softmaxGradCase("softmax_grad r3 axis2", DType::F32, {4, 5, 6}, 2),
      softmaxGradCase("softmax_grad r4 axis2 long", DType::F32, {2, 3, 1500, 4},
                      2),
      softmaxGradCase("softmax_grad rank1", DType::F32, {3000}, 0),
      softmaxGradCase("softmax_grad bf16", DType::BF16, {8, 4096}, 1),
      softmaxGradCase("softmax_grad bf16 axis0", DType::BF16, {100, 9}, 0),
      softmaxGradCase("softmax_grad f16", DType::F16, {16, 1000}, 1),
  };
  return v;
}

AddKernelCases cases(layoutCases());

} // namespace
} // namespace dtc::test
