// SPDX-License-Identifier: Apache-2.0
// Everything public in dcp.
#pragma once

#include "dcp/baselines.h"
#include "dcp/batch.h"
#include "dcp/blocks.h"
#include "dcp/mask.h"
#include "dcp/partition.h"
#include "dcp/plan.h"
#include "dcp/planner.h"
#include "dcp/runtime.h"
#include "dcp/schedule.h"
#include "dcp/sim.h"
#include "dcp/status.h"
