// SPDX-License-Identifier: MIT
// All of hotpath.
#pragma once

#include "hotpath/mcs_lock.hpp"
#include "hotpath/rcu.hpp"
#include "hotpath/rcu_cell.hpp"
#include "hotpath/ticket_lock.hpp"
