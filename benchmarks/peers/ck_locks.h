/* SPDX-License-Identifier: MIT */
/* Concurrency Kit's MCS and ticket spinlocks behind plain C functions: ck's headers
 * are C, so ck_locks.c includes them and C++ sees only these declarations. The lock
 * lives in caller-owned storage (64 bytes, one cache line). The showdown builds
 * with link-time optimisation where the toolchain has it, so the calls can inline. */
#ifndef HOTPATH_BENCH_CK_LOCKS_H
#define HOTPATH_BENCH_CK_LOCKS_H

#ifdef __cplusplus
extern "C" {
#endif

typedef struct hotpath_ck_storage {
  unsigned long long words[8];
} hotpath_ck_storage;

void hotpath_ck_ticket_init(hotpath_ck_storage* s);
void hotpath_ck_ticket_lock(hotpath_ck_storage* s);
void hotpath_ck_ticket_unlock(hotpath_ck_storage* s);

/* One queue node per thread: a thread may hold one ck MCS lock at a time. */
void hotpath_ck_mcs_init(hotpath_ck_storage* s);
void hotpath_ck_mcs_lock(hotpath_ck_storage* s);
void hotpath_ck_mcs_unlock(hotpath_ck_storage* s);

#ifdef __cplusplus
}
#endif

#endif
