// The higher layer includes the lower one: allowed.
#pragma once

#include "quire/low/low_detail.h"
