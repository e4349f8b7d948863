// Test code links every layer, so it may include any of them.
#include "quire/high/high.h"
#include "quire/low/low.h"
