// The lower layer: its one include of the higher layer must be reported.
#pragma once

#include "quire/high/high.h"
#include "quire/low/low_detail.h"

// #include "quire/high/high.h" in a comment is no include.
