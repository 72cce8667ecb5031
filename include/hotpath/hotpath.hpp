// SPDX-License-Identifier: MIT
// All of hotpath.
#pragma once

#include "hotpath/mcs_lock.hpp"
#include "hotpath/priority_lock.hpp"
#include "hotpath/queued_lock.hpp"
#include "hotpath/ticket_lock.hpp"
