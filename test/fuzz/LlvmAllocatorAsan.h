//===- LlvmAllocatorAsan.h - force-included by the fuzz build's compiler
//---===//
//
// Under ASan, LLVM's header-only BumpPtrAllocator poisons its slabs and
// unpoisons each allocation. libMLIR.so is not built with ASan: it allocates
// from the same allocators (attribute and type storage) without
// unpoisoning, so memory handed out by uninstrumented code looks poisoned to
// instrumented code, a false "use-after-poison". The instrumented dtc code
// therefore leaves LLVM's allocators unpoisoned, like libMLIR does; ASan
// still checks every malloc/new of dtc and MLIR.
//
//===----------------------------------------------------------------------===//
#ifndef DTC_FUZZ_LLVMALLOCATORASAN_H
#define DTC_FUZZ_LLVMALLOCATORASAN_H
#if defined(__has_include) && __has_include(<sanitizer/asan_interface.h>)
#include <sanitizer/asan_interface.h>
#endif
#define __asan_poison_memory_region(p, size) ((void)(p), (void)(size))
#define __asan_unpoison_memory_region(p, size) ((void)(p), (void)(size))
#endif
