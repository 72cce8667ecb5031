/* SPDX-License-Identifier: MIT */
#include "ck_locks.h"

#include <ck_spinlock.h>

_Static_assert(sizeof(ck_spinlock_ticket_t) <= sizeof(hotpath_ck_storage), "ticket fits");
_Static_assert(sizeof(ck_spinlock_mcs_t) <= sizeof(hotpath_ck_storage), "mcs fits");

static _Thread_local struct ck_spinlock_mcs hotpath_ck_node;

void hotpath_ck_ticket_init(hotpath_ck_storage* s) {
  ck_spinlock_ticket_init((ck_spinlock_ticket_t*)s);
}
void hotpath_ck_ticket_lock(hotpath_ck_storage* s) {
  ck_spinlock_ticket_lock((ck_spinlock_ticket_t*)s);
}
void hotpath_ck_ticket_unlock(hotpath_ck_storage* s) {
  ck_spinlock_ticket_unlock((ck_spinlock_ticket_t*)s);
}

void hotpath_ck_mcs_init(hotpath_ck_storage* s) {
  ck_spinlock_mcs_init((ck_spinlock_mcs_t*)s);
}
void hotpath_ck_mcs_lock(hotpath_ck_storage* s) {
  ck_spinlock_mcs_lock((ck_spinlock_mcs_t*)s, &hotpath_ck_node);
}
void hotpath_ck_mcs_unlock(hotpath_ck_storage* s) {
  ck_spinlock_mcs_unlock((ck_spinlock_mcs_t*)s, &hotpath_ck_node);
}
