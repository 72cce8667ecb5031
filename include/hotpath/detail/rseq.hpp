// SPDX-License-Identifier: MIT
// Restartable sequences (rseq): the per-cpu fast path.
//
// glibc >= 2.35 registers a `struct rseq` area for every thread it creates and
// exports where it lives: __rseq_offset (from the thread pointer) and __rseq_size
// (0 when registration is off, e.g. GLIBC_TUNABLES=glibc.pthread.rseq=0). We
// declare both weak, so a binary built here still loads on an older glibc (the
// addresses are then null) and no <sys/rseq.h> is needed. The area's layout is
// kernel ABI (include/uapi/linux/rseq.h):
//
//   offset 0  u32 cpu_id_start
//   offset 4  s32 cpu_id        >= 0 when registered; -1 uninitialised, -2 failed
//   offset 8  u64 rseq_cs       the critical section the thread is in, or 0
//
// A critical section: store the address of its descriptor (start_ip, length,
// abort_ip) into rseq_cs, read cpu_id, compute, and end with ONE committing store.
// If the kernel preempts the thread, migrates it or delivers a signal while the
// instruction pointer is inside [start_ip, start_ip + length), it resumes the thread
// at abort_ip instead, and the commit never happened. So a plain load-add-store on
// the current cpu's slot is atomic against every other thread on that cpu, without
// a locked instruction. It is NOT atomic against a thread on another cpu: a slot
// written by rseq must never be written any other way (see percpu_counter.hpp:
// every slot has a second word for the portable path).
//
// The kernel checks that the 4 bytes before abort_ip equal the signature glibc
// registered (RSEQ_SIG, 0x53053053 on x86); we emit them as the operand of a ud1
// instruction, as the kernel selftests do, so a stray jump there traps.
//
// rseq_cs is left pointing at the last descriptor after a sequence ends; the kernel
// clears it at the thread's next preemption or signal, when it reads the descriptor
// and finds the instruction pointer outside it. So a shared library that ran these
// sequences must not be unloaded while a thread that ran them may not yet have been
// preempted: the kernel would read an unmapped (or reused) descriptor and kill the
// thread with SIGSEGV. Link such a library with -Wl,-z,nodelete (or dlopen it with
// RTLD_NODELETE). Clearing rseq_cs after each commit would cost one more %fs store
// on the fast path; measured at +1-4% per add (percpu_counter_add 0.515x -> 0.522x
// of an uncontended fetch_add, percpu_stats 0.381x -> 0.397x), and not done.
//
// Only x86-64 Linux has the assembly. ThreadSanitizer cannot see inside it (it
// would miss the stores and report races against the readers), and AddressSanitizer
// does not instrument it, so sanitizer builds compile the portable path only:
// HOTPATH_RSEQ is 0 there.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>

#include "hotpath/detail/config.hpp"

// HOTPATH_RSEQ (and HOTPATH_ASAN) are decided in detail/config.hpp, which checks
// that every translation unit of a program agrees.

#if defined(__linux__) && defined(__GLIBC__)
extern "C" {
// Defined by glibc >= 2.35; null addresses on older ones.
extern const std::ptrdiff_t __rseq_offset __attribute__((weak));
extern const unsigned int __rseq_size __attribute__((weak));
}
#define HOTPATH_HAVE_RSEQ_AREA 1
#else
#define HOTPATH_HAVE_RSEQ_AREA 0
#endif

HOTPATH_VISIBILITY_BEGIN
namespace hotpath::detail {

#if HOTPATH_HAVE_RSEQ_AREA
inline void* thread_pointer() noexcept {
#if defined(__x86_64__)
  void* tp;
  asm("mov %%fs:0, %0" : "=r"(tp));
  return tp;
#else
  return __builtin_thread_pointer();
#endif
}
#endif

// The calling thread's cpu from its rseq area, or -1 if it has none registered.
inline int rseq_cpu_id() noexcept {
#if HOTPATH_HAVE_RSEQ_AREA
  if (&__rseq_size == nullptr || __rseq_size == 0) return -1;
  // The kernel writes this word on every return to user space; volatile, so each
  // call reads it again.
  const auto* cpu = reinterpret_cast<const volatile std::int32_t*>(
      static_cast<char*>(thread_pointer()) + __rseq_offset + 4);
  return *cpu;
#else
  return -1;
#endif
}

#if HOTPATH_RSEQ
// A stand-in rseq area whose cpu_id is always negative: a thread whose fast path is
// off points its sequences here, and they bail out at their first check, so the
// fast path needs no branch of its own for "off". Thread-local, so the store of the
// descriptor address into it races with nobody.
struct alignas(32) fake_rseq_area {
  std::uint32_t cpu_id_start = 0;
  std::int32_t cpu_id = -1;
  std::uint64_t rseq_cs = 0;
  std::uint32_t flags = 0;
};
inline thread_local fake_rseq_area fake_area;

// Per thread: the offset of the rseq area the sequences use, from the thread
// pointer; 0 until first use. Constant-initialised, so reading it is one
// %fs-relative load with no TLS wrapper call.
inline thread_local std::ptrdiff_t rseq_area_offset = 0;

inline std::ptrdiff_t fake_area_offset() noexcept {
  return static_cast<std::ptrdiff_t>(reinterpret_cast<std::uintptr_t>(&fake_area) -
                                     reinterpret_cast<std::uintptr_t>(thread_pointer()));
}

[[gnu::noinline, gnu::cold]] inline std::ptrdiff_t init_rseq_area_offset() noexcept {
  const bool real = &__rseq_offset != nullptr && &__rseq_size != nullptr && __rseq_size != 0;
  rseq_area_offset = real ? __rseq_offset : fake_area_offset();
  return rseq_area_offset;
}

inline std::ptrdiff_t rseq_area() noexcept {
  const std::ptrdiff_t off = rseq_area_offset;
  return __builtin_expect(off != 0, 1) ? off : init_rseq_area_offset();
}

// set_rseq_fast_path() in percpu.hpp.
inline void enable_rseq(bool on) noexcept {
  rseq_area_offset = on ? 0 : fake_area_offset();
}
inline bool rseq_enabled() noexcept {
  return rseq_area_offset != fake_area_offset();
}

// Outcomes of a per-cpu critical section.
enum class rseq_status { done, unavailable, over_limit };

// The descriptor and the abort handler of one critical section spanning labels 1
// (start) to 2 (just after the commit); 4 is the abort entry. Numeric labels are
// local to the asm text, so the compiler may duplicate it freely. The "?" flag puts
// both sections in the section group (COMDAT) of the function the asm lands in:
// when the linker drops a duplicate out-of-line copy of an inline function from a
// second translation unit, it drops that copy's descriptor with it; without the
// flag the descriptor would point into the discarded text and the link fails.
#define HOTPATH_RSEQ_PROLOGUE                                                    \
  ".pushsection __rseq_cs, \"aw?\"\n\t"                                          \
  ".balign 32\n\t"                                                               \
  "3:\n\t"                                                                       \
  ".long 0x0, 0x0\n\t"          /* version, flags */                             \
  ".quad 1f, (2f - 1f), 4f\n\t" /* start_ip, post_commit_offset, abort_ip */     \
  ".popsection\n\t"                                                              \
  ".pushsection __rseq_failure, \"ax?\"\n\t"                                     \
  ".byte 0x0f, 0xb9, 0x3d\n\t" /* ud1 <sig>(%rip), %edi: traps if jumped into */ \
  ".long 0x53053053\n\t"       /* RSEQ_SIG, the 4 bytes before abort_ip */       \
  "4:\n\t"                                                                       \
  "jmp %l[retry]\n\t"                                                            \
  ".popsection\n\t"                                                              \
  "leaq 3b(%%rip), %%rax\n\t"                                                    \
  "movq %%rax, %%fs:8(%[area])\n\t" /* rseq->rseq_cs = &descriptor */            \
  "1:\n\t"                                                                       \
  "movl %%fs:4(%[area]), %%ecx\n\t" /* cpu_id; negative if unregistered */       \
  "cmpl %k[slots], %%ecx\n\t"                                                    \
  "jae %l[unavailable]\n\t" /* unsigned: also catches cpu_id < 0 */              \
  "shlq %[shift], %%rcx\n\t"                                                     \
  "addq %[base], %%rcx\n\t" /* rcx = &word of this cpu */

// word(cpu) = base + cpu * Stride (a power of two). *word(cpu) += v on the current cpu.
template <std::size_t Stride>
requires(std::has_single_bit(Stride)) inline rseq_status
    rseq_add(void* base, unsigned slots, std::int64_t v) noexcept {
  const std::ptrdiff_t area = rseq_area();
retry:  // the abort handler lands here: preempted, migrated or signalled
  asm goto(HOTPATH_RSEQ_PROLOGUE
           "addq %[v], (%%rcx)\n\t" /* commit: one non-locked read-modify-write */
           "2:\n\t"
           :
           : [area] "r"(area), [slots] "r"(slots), [shift] "i"(std::countr_zero(Stride)),
             [base] "r"(base), [v] "r"(v)
           : "rax", "rcx", "memory", "cc"
           : retry, unavailable);
  return rseq_status::done;
unavailable:
  return rseq_status::unavailable;
}

// As rseq_add, but commits only if the result stays within (-limit, limit), where
// limit_m1 = limit - 1 and span = 2 * limit_m1; otherwise leaves the word alone.
template <std::size_t Stride>
requires(std::has_single_bit(Stride)) inline rseq_status
    rseq_add_below(void* base, unsigned slots, std::int64_t v, std::int64_t limit_m1,
                   std::uint64_t span) noexcept {
  const std::ptrdiff_t area = rseq_area();
retry:  // the abort handler lands here: preempted, migrated or signalled
  asm goto(HOTPATH_RSEQ_PROLOGUE
           "movq (%%rcx), %%rdx\n\t"
           "addq %[v], %%rdx\n\t"
           "leaq (%%rdx, %[lm1]), %%rax\n\t" /* |n| < limit <=> n + limit-1 <= span (unsigned) */
           "cmpq %[span], %%rax\n\t"
           "ja %l[over]\n\t"
           "movq %%rdx, (%%rcx)\n\t" /* commit */
           "2:\n\t"
           :
           : [area] "r"(area), [slots] "r"(slots), [shift] "i"(std::countr_zero(Stride)),
             [base] "r"(base), [v] "r"(v), [lm1] "r"(limit_m1), [span] "r"(span)
           : "rax", "rcx", "rdx", "memory", "cc"
           : retry, unavailable, over);
  return rseq_status::done;
unavailable:
  return rseq_status::unavailable;
over:
  return rseq_status::over_limit;
}

// *out = *word(cpu); *word(cpu) = 0 on the current cpu.
template <std::size_t Stride>
requires(std::has_single_bit(Stride)) inline rseq_status
    rseq_take(void* base, unsigned slots, std::int64_t* out) noexcept {
  const std::ptrdiff_t area = rseq_area();
retry:  // the abort handler lands here: preempted, migrated or signalled
  asm goto(HOTPATH_RSEQ_PROLOGUE
           "movq (%%rcx), %%rdx\n\t"
           "movq %%rdx, (%[out])\n\t" /* harmless if we restart: written again */
           "movq $0, (%%rcx)\n\t"     /* commit */
           "2:\n\t"
           :
           : [area] "r"(area), [slots] "r"(slots), [shift] "i"(std::countr_zero(Stride)),
             [base] "r"(base), [out] "r"(out)
           : "rax", "rcx", "rdx", "memory", "cc"
           : retry, unavailable);
  return rseq_status::done;
unavailable:
  return rseq_status::unavailable;
}

#undef HOTPATH_RSEQ_PROLOGUE
#endif  // HOTPATH_RSEQ

}  // namespace hotpath::detail
HOTPATH_VISIBILITY_END
