// SPDX-License-Identifier: MIT
// All of hotpath.
#pragma once

#include "hotpath/bucket_table.hpp"
#include "hotpath/keyed_hash.hpp"
#include "hotpath/mcs_lock.hpp"
#include "hotpath/percpu.hpp"
#include "hotpath/percpu_counter.hpp"
#include "hotpath/priority_lock.hpp"
#include "hotpath/queued_lock.hpp"
#include "hotpath/rcu.hpp"
#include "hotpath/rcu_cell.hpp"
#include "hotpath/ticket_lock.hpp"
